#!/usr/bin/env bash
# Runs the three gateways of examples/federation on loopback: certificates into a temporary
# folder, the configs beside them, then C, B and A (Ctrl-C stops all three).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
fedgate="${FEDGATE:-fedgate}"
dir="$("$here/certs.sh")"
cp "$here"/{a,b,c}.toml "$dir/"
cp -r "$here/flows-b" "$dir/"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/state-b.key"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/admin-b.token"
cd "$dir"
trap 'kill 0' EXIT
"$fedgate" serve -c c.toml &
"$fedgate" serve -c b.toml &
"$fedgate" serve -c a.toml &
echo "federation in $dir: A at http://127.0.0.1:8961/mcp (tools b.flows.report, b.flows.wait)"
wait
