#!/usr/bin/env bash
# Writes scripts/startup-order.txt, the list build.rs links the release executable with: the
# functions of fedgate that start-up on the shipped gateway.toml runs, then one session with a
# few calls and ten seconds idle (valgrind's callgrind records them). Run it after a change
# that moves much of start-up; names it no longer finds only order less (see build.rs).
# Needs valgrind and curl; uses the shipped config's ports (8930, 8931).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --bin fedgate
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
valgrind --tool=callgrind --compress-strings=no --compress-pos=no --demangle=no \
  --callgrind-out-file="$out/cg.out" target/release/fedgate serve >"$out/log" 2>&1 &
for _ in $(seq 120); do
  curl -sf http://127.0.0.1:8930/readyz >/dev/null && break
  sleep 1
done
url=http://127.0.0.1:8930/mcp
h=(-H "content-type: application/json" -H "accept: application/json, text/event-stream")
sid=$(curl -s -D - "${h[@]}" "$url" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"order","version":"1"}}}' |
  awk -F': ' 'tolower($1) == "mcp-session-id" {print $2}' | tr -d '\r')
s=(-H "mcp-session-id: $sid" -H "mcp-protocol-version: 2025-11-25")
curl -s "${h[@]}" "${s[@]}" "$url" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}' >/dev/null
for i in 1 2 3; do
  curl -s "${h[@]}" "${s[@]}" "$url" \
    -d '{"jsonrpc":"2.0","id":'"$i"',"method":"tools/call","params":{"name":"notes__list_notes","arguments":{}}}' >/dev/null
done
curl -s "${h[@]}" "${s[@]}" "$url" -d '{"jsonrpc":"2.0","id":9,"method":"tools/list"}' >/dev/null
sleep 10
pkill -TERM -f "valgrind.*fedgate serve"
for _ in $(seq 60); do
  pgrep -f "valgrind.*fedgate serve" >/dev/null || break
  sleep 1
done
# Functions of the executable (not of libc), each once, as callgrind first lists them.
awk '/^ob=/ {ours = ($0 ~ /\/fedgate$/)} /^fn=/ && ours {name = substr($0, 4); if (!seen[name]++) print name}' \
  "$out/cg.out" >scripts/startup-order.txt
echo "scripts/startup-order.txt: $(wc -l <scripts/startup-order.txt) functions"
