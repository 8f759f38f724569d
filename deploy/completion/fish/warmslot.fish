# fish completion for warmslot(1). Installed as
# /usr/share/fish/vendor_completions.d/warmslot.fish.
set -l commands check-config warm
complete -c warmslot -f
complete -c warmslot -n "not __fish_seen_subcommand_from $commands" -a check-config -d 'Check a configuration file and exit'
complete -c warmslot -n "not __fish_seen_subcommand_from $commands" -a warm -d 'Prefill a system prompt and documents and save them to disk'
complete -c warmslot -n "not __fish_seen_subcommand_from $commands" -l config -r -F -d 'Run the proxy with a configuration file'
complete -c warmslot -n "not __fish_seen_subcommand_from $commands" -l version -d 'Print the version'
complete -c warmslot -n "not __fish_seen_subcommand_from $commands" -l help -d 'Print a usage summary'
complete -c warmslot -n "__fish_seen_subcommand_from check-config" -F
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l model -x -d 'Model name the later requests send'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l system -r -F -d 'File with the system prompt'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l doc -r -F -d 'Document file, one user message each'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l url -x -a http://127.0.0.1:8080 -d 'Where warmslot listens'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l api-key-env -x -a '(set -xn)' -d 'Environment variable with the API key'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l quiet -d 'Print no progress and no summary'
complete -c warmslot -n "__fish_seen_subcommand_from warm" -l json -d 'Print the JSON report instead of progress'
