// warmslot configuration: YAML turned into one immutable, validated snapshot.
//
// This module is the only place that sees yaml-cpp. A loaded `config` is never modified; a reload
// builds a new one. Plain data, safe to share between threads once built.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace warmslot::config {

using millis = std::chrono::milliseconds;

struct listen_address {
    std::string host = "127.0.0.1";
    std::uint16_t port = 8080;
};

// When warmslot starts a supervised backend (one with a `command`).
enum class start_mode {
    always,     // at startup, and again after it exits
    on_demand,  // on the first request that needs it
};

// The key warmslot gives the process it runs for a command backend and sends on every call to
// it: made anew for each start of the process (never parsed, never logged). The one mutable
// part of a snapshot: every snapshot that has the backend shares it (a reload keeps it), the
// supervisor sets it before a start, requests read it. Thread-safe.
class child_secret {
  public:
    std::string key() const {
        const std::lock_guard lock(mu_);
        return key_;
    }
    void set(std::string key) {
        const std::lock_guard lock(mu_);
        key_ = std::move(key);
    }

  private:
    mutable std::mutex mu_;
    std::string key_;
};

// One llama-server process, reached over plain HTTP. Either an existing server (`url`) or one
// warmslot starts and supervises itself (`command`); exactly one of the two is configured.
struct backend {
    std::string name;        // unique (also ignoring case), safe as a directory name
    std::string url;         // as written, e.g. "http://127.0.0.1:8081"; "" for a command backend
    std::string host;        // parsed from url; for a command backend the path of the UNIX
                             // socket it listens on (a host that begins with '/'), or
                             // "127.0.0.1" where there are none (Windows)
    std::uint16_t port = 0;  // parsed from url (default 80); 0 for a command backend on a UNIX
                             // socket; else the loopback port picked when warmslot starts
    std::vector<std::string> models;  // names requests may use for this backend's model
    // A url backend's --ctx-checkpoints as its owner states it (llama-server does not show it):
    // 0 on a hybrid model means a rollback recomputes the prefix. std::nullopt: not stated.
    // A command backend's is read from its command (routing::ctx_checkpoints_of).
    std::optional<long> ctx_checkpoints;
    // A url backend's --sleep-idle-seconds as its owner states it (0 = it never sleeps): warmslot
    // then lets it sleep and knows its slots empty once it does. A command backend's is read
    // from its command (routing::sleep_idle_of); sleep_after() gives either.
    millis sleep_idle{0};
    // A model of a llama-server in router mode (`router: true`): the router's model id, sent with
    // every call as `model` (and `?model=` on reads); "" for a plain llama-server. The config
    // entry of a router becomes one backend per model it lists, named "<entry>.<model>", each
    // with its own slots, identity and files; `router` is the entry's name, shared by them.
    std::string router_model;
    std::string router;
    // A router's: a model warmslot loaded keeps its place this long while it is used (or
    // awaited) before warmslot unloads it for another (service/router_room.cpp).
    millis min_residency{30'000};
    std::string slot_save_path;  // the directory given to its --slot-save-path, as seen
                                 // from warmslot ("" = no disk tier for this backend). For a
                                 // command backend it defaults to <cache.dir>/slots/<name>.

    // Supervision; only a command backend has these (url backends keep the defaults).
    std::vector<std::string> command;  // argv: program first, never a shell string. warmslot
                                       // adds --host, --port and --slot-save-path itself.
    start_mode start = start_mode::always;
    millis idle_stop{0};                 // stop after this long without requests; 0 = never
                                         // (a swap group's home is never stopped for idling)
    millis start_timeout{120'000};       // how long requests wait for it to start and turn healthy
    millis restart_backoff_max{30'000};  // longest pause between restarts after it exits
    // Variables set for the process on top of the allow-listed ones it gets from warmslot's
    // environment (app/supervised_argv.hpp), in file order; a value may be secret: never log.
    std::vector<std::pair<std::string, std::string>> env;
    // The key of the process warmslot starts (set with its address when warmslot starts or a
    // reload adds the backend; a fresh key for each start of the process). Null for a url
    // backend.
    std::shared_ptr<child_secret> child_key;

    bool retired = false;  // removed by a reload: takes no new requests, drains
                           // (never set by the parser; see config/reload.hpp)

    bool supervised() const noexcept { return !command.empty(); }
    // The key to send to its process now: "" for a url backend.
    std::string current_child_key() const { return child_key ? child_key->key() : ""; }
    // A variable as a command backend's process sees it: its `env` entry, else warmslot's own
    // environment. std::nullopt when unset, and always for a url backend.
    std::optional<std::string> env_value(const std::string& variable) const;
};

// Command backends that share a device (or a memory budget) and may not all run at once
// (see docs/config.md, "swap_groups"). Members are named, not indexed: a reload may append
// backends, and the supervisor finds each member by name in the snapshot it runs on.
struct swap_group {
    std::string name;
    std::vector<std::string> backends;  // at least two command backends, each in one group only
    std::size_t max_running = 1;        // how many members may run together (below the count)
    millis min_residency{30'000};       // a started member is kept this long while it is used
    std::string home;                   // "" or a member: started with warmslot, and the one
                                        // the group returns to when the others are idle
    millis home_after{300'000};         // how long the others are idle before it returns
    // The sets of members that may run together (each a list of member names); empty: any
    // `max_running` of them. When given, max_running is the size of the largest set.
    std::vector<std::vector<std::string>> allow;
    millis drain_grace{60'000};  // how long a drained member's requests in flight may take
};

struct limits {
    std::size_t max_header_bytes = 16 * 1024;
    std::size_t max_header_count = 100;  // header fields in one request
    std::size_t max_body_bytes = 64 * 1024 * 1024;
    std::size_t max_connections = 1024;
    // A client that does not take a chunk of its answer within this (a reader that stopped
    // reading) loses the request, and its slot with it; what a backend may stay silent is
    // timeouts.stream_idle.
    millis stalled_reader{30'000};
};

// Limits per tenant (the `tenant` of api_keys entries; one value for each tenant): what one
// tenant may take of warmslot at once, so that it cannot crowd the others out.
struct tenant_limit_settings {
    std::size_t concurrent_requests = 0;  // model API requests in flight at once; 0: no limit
    // Swap group members a tenant's requests may make warmslot start within any minute
    // (a start that drains another member is a swap); 0: no limit.
    std::size_t swaps_per_minute = 0;
};

struct tenant_settings {
    tenant_limit_settings limits;
};

struct timeouts {
    millis header_read{10'000};  // client must send its request headers within this
    millis body_read{60'000};    // and its body within this
    millis connect{5'000};       // TCP connect to a backend
    // backend's response headers (prefill of long prompts is slow)
    millis upstream_response{3'600'000};
    millis stream_idle{1'800'000};  // silence allowed between two chunks of a response
    // A stream's keep-alive while warmslot's own work runs before the backend answers
    millis stream_keepalive{10'000};
    millis client_idle{60'000};     // keep-alive: idle client connection is closed after this
    millis shutdown_grace{10'000};  // on stop: how long in-flight requests may finish
};

// How requests are placed on backends and slots (see docs/config.md, "routing").
struct routing_settings {
    bool enabled = true;                        // false: pass through, llama-server picks slots
    std::uint64_t short_request_tokens = 1000;  // below this, with no long segment: a one-off
    std::uint64_t long_segment_tokens = 512;    // a message this long makes a request valuable
    bool scratch_slot = true;                   // keep one slot per backend for one-offs...
    std::uint64_t scratch_min_slots = 3;        // ...when it has at least this many slots
    millis max_wait{600'000};                   // longest wait for a busy slot holding a prefix
    millis reconcile_interval{1'000};           // how often GET /slots is compared with beliefs
};

// What one tenant's requests may take from what another's left (docs/security.md,
// "Strict isolation"): `shared` lets any tenant reuse the slots and files another's requests
// filled (its own text, sent again); `tenant` makes the tenant part of every slot file key and
// gives a tenant's request no slot state another tenant's request left.
enum class isolation_mode { shared, tenant };

// The disk tier: prefixes kept as slot files (see docs/config.md, "cache").
struct cache_settings {
    bool enabled = true;
    // warmslot's state directory (absolute): default slot directories of command backends live
    // in <dir>/slots/<name>. Default: $STATE_DIRECTORY, else $XDG_CACHE_HOME/warmslot/state,
    // else $HOME/.cache/warmslot/state; "" when none of them is set (then every command backend
    // needs an explicit slot_save_path).
    std::string dir;
    std::uint64_t max_disk = 50ull * 1024 * 1024 * 1024;  // bytes of slot files per directory
    std::uint64_t min_prefix_tokens = 2048;  // shorter stable prefixes are not snapshotted
    std::uint64_t snapshot_after_uses = 1;   // snapshot a prefix on its Nth use
    // A streamed request pinned on a full-attention model runs at once and its prefix's file is
    // saved after the answer (tier/disk_after.cpp); false: primed and saved before it.
    bool save_after_answer = true;
    // A conversation's own file: on a full-attention model, a streamed request's whole prompt is
    // saved after its answer once it has grown past the longest file holding its start by a
    // quarter of min_prefix_tokens and a quarter of that file (tier/disk_after.cpp). Its next
    // request, evicted from its slot meanwhile or after a restart, restores it.
    bool conversation_files = true;
    millis slot_call_timeout{120'000};  // one slot save or restore call to llama-server
    // On a miss, bring the prefix's file from another backend's slot directory with the same
    // identity (a replica): hard link, or copy across file systems.
    bool replica_files = true;
    // The shared tier (docs/scaling.md, "Slot files shared between hosts"): a directory on a
    // file system other warmslots see too (NFS, CephFS, GlusterFS). Saved prefixes are
    // published there; a miss looks there before priming. "" (the default): none.
    std::string shared_dir;
    std::uint64_t shared_max_disk = 50ull * 1024 * 1024 * 1024;  // bytes, over all warmslots
    // How long looking a prefix up there may take; a copy from there takes at most what
    // computing the prefix would (its manifest says), within slot_call_timeout.
    millis shared_timeout{2'000};
    // false: a tenant restores from the shared tier only what its own requests published
    // (entries are named by the prefix and the tenant); true: any tenant's, as the slot
    // directories do.
    bool shared_across_tenants = false;
    isolation_mode isolation = isolation_mode::shared;
    bool isolated() const noexcept { return isolation == isolation_mode::tenant; }
    // Per-tenant budgets (cache.tenant_max_disk), per directory like max_disk: a tenant's files
    // over its budget are evicted, none of another tenant's. By tenant name, "" the default
    // tenant; "*" is every tenant not named. Tenants without one have only max_disk.
    std::vector<std::pair<std::string, std::uint64_t>> tenant_max_disk;
    std::optional<std::uint64_t> max_disk_of(std::string_view tenant) const;
};

// Request rewriting (see docs/rewriting.md and docs/config.md, "rewrite").
enum class edit_mode { reprocess, append };

struct document_delimiter {
    std::string begin;  // RE2 regex: where a document starts (the match is part of it)
    std::string end;    // RE2 regex: where it ends (the match is part of it)
};

// The rules for one model. Everything off by default: rewriting changes the model's input.
struct rewrite_rules {
    bool system_to_front = false;                // late system messages join the leading ones
    std::vector<std::string> volatile_presets;   // names, see volatile_preset()
    std::vector<std::string> volatile_patterns;  // RE2 regexes, searched in each line
    bool volatile_mark = true;                   // moved lines go inside a <context> block
    std::uint64_t document_min_bytes = 2048;     // a message or text part this long is a document
    std::vector<document_delimiter> document_delimiters;
    bool document_order = false;  // cached documents first, in cached order
    edit_mode edits = edit_mode::reprocess;
    double edit_similarity = 0.8;         // share of a document's chunks left unchanged
    std::string edit_id;                  // regex with one capture group: a document id
    std::uint64_t max_note_bytes = 4096;  // a longer revision note: send the new text
};

struct rewrite_settings {
    rewrite_rules defaults;
    std::vector<std::pair<std::string, rewrite_rules>> models;  // by request "model" name
    std::uint64_t memory = 64ull * 1024 * 1024;                 // bytes of remembered documents
    const rewrite_rules& for_model(std::string_view model) const;
};

// The regex a volatile-line preset stands for; std::nullopt for an unknown name.
std::optional<std::string_view> volatile_preset(std::string_view name);
std::vector<std::string_view> volatile_preset_names();

struct log_settings {
    std::string level = "info";  // trace, debug, info, warn, error, off
    bool access = true;          // one access line per request
};

// The dashboard page (GET /warmslot/) and its JSON (GET /warmslot/status).
struct dashboard_settings {
    bool enabled = true;   // false: both answer 404
    bool previews = true;  // keep and show the first characters of what each slot holds
};

// What a key may do (docs/security.md, "Keys, roles and tenants").
enum class key_role {
    client,    // the model API and explain; its tenant's part of /warmslot/status
    observer,  // /metrics and its tenant's part of /warmslot/status; sends no requests
    admin,     // everything: /admin/*, GET /slots, every tenant's status
};

// Who holds a key: its role and the tenant whose rewrite memory, previews and request list it
// shares. Keys without a tenant share the default tenant (""). A plain key (a string) is an
// admin; a map without `role` is a client (config/access.cpp).
struct key_grant {
    key_role role = key_role::admin;
    std::string tenant;
};

// What browsers and other HTTP clients may do beyond the keys (docs/security.md).
struct http_settings {
    // Host header values (a name or address, without the port) requests may carry; a request
    // naming another host gets 421. Unset: the loopback names when listening on loopback
    // (localhost, 127.0.0.1, ::1), any host otherwise. ["*"]: any host.
    std::vector<std::string> allowed_hosts;
    bool allowed_hosts_set = false;
    // Origins ("https://app.example") whose pages may call warmslot: they get
    // Access-Control-Allow-Origin and answered preflights. Empty: no CORS answer at all.
    std::vector<std::string> cors_origins;
};

// TLS on the listener (docs/security.md, "TLS"): off unless both files are set. The files are
// read at start and again on every reload; the key file's content is never logged.
struct tls_settings {
    std::string cert_file;  // absolute path: PEM, the certificate first, then intermediates
    std::string key_file;   // absolute path: PEM, its unencrypted private key
    bool enabled() const noexcept { return !cert_file.empty(); }
};

// Whether this build can serve TLS (the CMake option WARMSLOT_TLS; off on Windows).
bool tls_built() noexcept;

struct config {
    listen_address listen;
    tls_settings tls;
    std::vector<backend> backends;
    std::vector<swap_group> swap_groups;
    std::vector<std::string> api_keys;  // resolved secrets; empty = no key required. Never log.
    std::vector<key_grant> key_grants;  // one per api_keys entry, in the same order
    http_settings http;
    // Qualified: a member named like its type would otherwise change the meaning of the name.
    ::warmslot::config::limits limits;
    ::warmslot::config::timeouts timeouts;
    routing_settings routing;
    cache_settings cache;
    rewrite_settings rewrite;
    log_settings log;
    dashboard_settings dashboard;
    tenant_settings tenants;
};

// A config that cannot be used. `what()` reads "<source>:<line>: <key path>: <problem>",
// e.g. "warmslot.yaml:7: backends[1].url: must start with http://". List indexes in key paths
// count from 0. Without a line (unreadable file) it reads "<source>: <problem>"; without a key
// path (YAML syntax error) "<source>:<line>: <problem>". Never contains an API key.
class config_error : public std::runtime_error {
  public:
    config_error(std::string source, int line, std::string key_path, std::string problem);
    const std::string& key_path() const noexcept { return key_path_; }
    int line() const noexcept { return line_; }  // 1-based, 0 when unknown
    const std::string& problem() const noexcept { return problem_; }

  private:
    std::string key_path_;
    int line_;
    std::string problem_;
};

// Reads an environment variable; std::nullopt when unset. Injected so tests need no real env.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;
env_lookup process_env();

// Parses and validates YAML text. `source` names the text in error messages (usually its path).
// Throws config_error on the first problem found.
config parse(std::string_view yaml_text, std::string_view source, const env_lookup& env);

// Reads the file and parses it. Throws config_error (also for an unreadable file).
config load_file(const std::string& path, const env_lookup& env = process_env());

// One line per api_keys entry, as `warmslot check-config` prints them: its path, role and
// tenant ("api_keys[1]: client of tenant team-a"), never the key.
std::vector<std::string> describe_keys(const config& c);

}  // namespace warmslot::config
