#!/usr/bin/env bash
# Runs each fuzz target for a bounded time: `scripts/fuzz.sh [seconds per target] [target…]`
# (default 60 s each; targets edge, config, names, template). Not part of the test command:
# it needs the nightly toolchain (`rustup toolchain install nightly` where one is missing) and
# cargo-fuzz, which it installs when missing. Findings land in fuzz/artifacts/<target>/; each
# one fixed becomes a regression test in the main suite.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(edge config names template)

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo +nightly fuzz build

status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "== $t: ${seconds}s"
  # New inputs go to corpus/ (kept between runs, not committed); seeds/ is read only.
  if ! cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 \
      2> "corpus/$t.log"; then
    echo "   $t found a crash: see fuzz/corpus/$t.log and fuzz/artifacts/$t/"
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "corpus/$t.log" | sed 's/^/   /' || true
done
exit $status
