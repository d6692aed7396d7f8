#!/usr/bin/env bash
# README's test command: install the third-party MCP peers the tests drive (pinned by
# tests/node/package-lock.json: the official conformance suite, server-everything, Node 22),
# then run the whole Rust test suite. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "scripts/test.sh: npm is required (Node.js 20+)" >&2; exit 1; }
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
cargo test "$@"
