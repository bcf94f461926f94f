#!/usr/bin/env bash
# Run the MCP Inspector's command line (@modelcontextprotocol/inspector, --cli) with the given
# arguments, installing it first from the npm registry into .cache/inspector/ (git-ignored).
#
#   scripts/inspector.sh --format json -q --method tools/list --strict  python -m colabhive_mcp stdio --sandbox
#   scripts/inspector.sh http://127.0.0.1:8765/mcp --header "Authorization: Bearer KEY" --method tools/list
#
# Exit codes are the Inspector's: 0 ok, 1 usage, 3 auth required, 4 unreachable, 5 tool error
# (isError), 6 a tool schema that is not portable (--strict).
set -euo pipefail
case "${1:-}" in  # this help, before anything is installed
    -h|--help) printf 'usage: scripts/inspector.sh INSPECTOR-CLI-ARGS...\n'; sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
VERSION=2.12.0
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$ROOT/.cache/inspector"
if [ "$(cat "$DIR/.stamp" 2>/dev/null)" != "$VERSION" ]; then
  mkdir -p "$DIR"
  echo "inspector.sh: installing @modelcontextprotocol/inspector@$VERSION into .cache/inspector" >&2
  (cd "$DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error --cache "$DIR/npm-cache" \
      "@modelcontextprotocol/inspector@$VERSION" </dev/null >&2)
  echo "$VERSION" > "$DIR/.stamp"
fi
# A server started as `python -m colabhive_mcp …` or `colabhive-mcp …` is this project's, from its
# virtualenv (README: python3 -m venv .venv && .venv/bin/pip install -e .), active or not.
if [ -x "$ROOT/.venv/bin/python" ]; then
  export PATH="$ROOT/.venv/bin:$PATH"
fi
case " $* " in
  *" python -m colabhive_mcp "*|*" python3 -m colabhive_mcp "*)
    if ! problem="$(python -c 'import colabhive_mcp.cli' 2>&1)"; then
      echo "inspector.sh: python cannot start the server (${problem##*$'\n'}): install the project first," \
           "python3 -m venv .venv && .venv/bin/pip install -e ." >&2
      exit 1
    fi ;;
esac
# The Inspector keeps a catalog under $HOME: give it a scratch one.
export HOME="$DIR/home"
mkdir -p "$HOME"
exec "$DIR/node_modules/.bin/inspector" --cli "$@" </dev/null
