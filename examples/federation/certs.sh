#!/usr/bin/env bash
# Makes the certificates of examples/federation in DIR (default: a new temporary folder, whose
# path is printed): one CA for the federation, a server certificate per gateway (localhost and
# 127.0.0.1), the client certificates the gateways present to their peers (CN gateway-a,
# gateway-b), and a stranger: a certificate named gateway-a from a CA nobody trusts.
set -euo pipefail
dir="${1:-$(mktemp -d)}"
mkdir -p "$dir"
cd "$dir"
ca() {
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days 30 \
    -subj "/CN=$1" 2>/dev/null
}
signed() { # CA NAME CN EXTENSIONS
  printf '%b' "$4" > "$2.ext"
  openssl req -newkey rsa:2048 -nodes -keyout "$2.key" -out "$2.csr" -subj "/CN=$3" 2>/dev/null
  openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" -CAcreateserial -out "$2.pem" \
    -days 30 -extfile "$2.ext" 2>/dev/null
  rm -f "$2.csr" "$2.ext"
}
server='subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n'
client='basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n'
ca federation-ca
for g in a b c; do signed federation-ca "server-$g" localhost "$server"; done
signed federation-ca gateway-a gateway-a "$client"
signed federation-ca gateway-b gateway-b "$client"
ca stranger-ca
signed stranger-ca stranger gateway-a "$client"
echo "$dir"
