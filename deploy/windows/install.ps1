# Installs (or upgrades) warmslot as a Windows service. Run in an elevated PowerShell:
#
#   .\install.ps1 -Exe .\warmslot.exe [-Config .\warmslot.yaml] [-Account 'NT AUTHORITY\LocalService']
#
# Copies warmslot.exe to %ProgramFiles%\warmslot, the config (if given and none is there yet) to
# %ProgramData%\warmslot\warmslot.yaml, lets the service account write %ProgramData%\warmslot
# (logs, slot index), registers the service with New-Service (automatic start, restart on
# failure) and the event log source, and starts it. Re-running it upgrades the exe in place.
param(
    [Parameter(Mandatory = $true)][string]$Exe,
    [string]$Config = '',
    [string]$Account = 'NT AUTHORITY\LocalService'
)
$ErrorActionPreference = 'Stop'
$name = 'warmslot'
$programDir = Join-Path $env:ProgramFiles 'warmslot'
$dataDir = Join-Path $env:ProgramData 'warmslot'
$logDir = Join-Path $dataDir 'logs'
$configPath = Join-Path $dataDir 'warmslot.yaml'

if (Get-Service -Name $name -ErrorAction SilentlyContinue) {
    Stop-Service -Name $name -ErrorAction SilentlyContinue   # graceful: saves slots, drains
}
New-Item -ItemType Directory -Force -Path $programDir, $dataDir, $logDir | Out-Null
Copy-Item -Force $Exe (Join-Path $programDir 'warmslot.exe')
if ($Config -and -not (Test-Path $configPath)) { Copy-Item $Config $configPath }
if (-not (Test-Path $configPath)) { throw "no config at $configPath: pass -Config FILE" }
& (Join-Path $programDir 'warmslot.exe') check-config $configPath
if ($LASTEXITCODE -ne 0) { throw "the config at $configPath is not valid" }

# The service account writes logs and the slot index; the config stays read-only to it.
icacls $dataDir /grant "${Account}:(OI)(CI)M" | Out-Null

if (-not (Get-Service -Name $name -ErrorAction SilentlyContinue)) {
    $bin = '"{0}" service run --config "{1}" --log "{2}"' -f `
        (Join-Path $programDir 'warmslot.exe'), $configPath, (Join-Path $logDir 'warmslot.log')
    $params = @{
        Name = $name; BinaryPathName = $bin; DisplayName = 'warmslot'
        Description = 'Caching reverse proxy for llama-server'; StartupType = 'Automatic'
    }
    if ($Account -ne 'LocalSystem') {
        # Built-in service accounts take an empty password.
        $params.Credential = New-Object System.Management.Automation.PSCredential(
            $Account, (New-Object System.Security.SecureString))
    }
    New-Service @params | Out-Null
    # Restart after 5 s, then after 30 s twice; forget failures after a day.
    sc.exe failure $name reset= 86400 actions= restart/5000/restart/30000/restart/30000 | Out-Null
    # Also recover when warmslot stops with an error (a bad config after a reboot), not only
    # when the process dies.
    sc.exe failureflag $name 1 | Out-Null
    if (-not [System.Diagnostics.EventLog]::SourceExists($name)) {
        New-EventLog -LogName Application -Source $name
    }
}
Start-Service -Name $name
Get-Service -Name $name
