#!/usr/bin/env bash
# README's test command: install the third-party MCP peers the tests drive, then run the whole
# Rust test suite. Extra arguments go to `cargo test`.
# - tests/node (pinned by its package-lock.json): the official conformance suite,
#   server-everything, the TypeScript SDK (handshake-era `@modelcontextprotocol/sdk`,
#   stateless-era `@modelcontextprotocol/client`) and Node 22 to run them;
# - tests/clients/python/.venv: the official Python SDK (`mcp`, pinned in requirements.txt);
# - Debian's chromium and chromium-driver, which the console test drives headless, and
#   redis-server and postgresql, which the cluster tests start on loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "scripts/test.sh: npm is required (Node.js 20+)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "scripts/test.sh: python3 (3.10+) is required" >&2; exit 1; }
# Debian packages the tests start themselves, installed when missing (as root, or via sudo).
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ] || missing+=(redis-server)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    command -v apt-get >/dev/null || { echo "scripts/test.sh: install ${missing[*]} (the console and cluster tests start them)" >&2; exit 1; }
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
venv=tests/clients/python/.venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/clients/python/requirements.txt
cargo test --workspace "$@"
