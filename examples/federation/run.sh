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
# Each gateway prints one line once its upstreams are ready (or have failed): C, then B, then A.
start() {
  "$fedgate" serve -c "$1.toml" > "$1.out" 2> "$1.log" &
  until grep -q "fedgate ready" "$1.out"; do
    kill -0 $! 2>/dev/null || { echo "gateway $1 failed:" >&2; cat "$1.log" >&2; exit 1; }
    sleep 0.2
  done
}
start c
start b
start a
echo "federation in $dir: A at http://127.0.0.1:8961/mcp (tools b__flows__report, b__flows__wait, b__flows__publish)"
wait
