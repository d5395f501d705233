#!/usr/bin/env bash
# Compares swan's two runtime models on a 100-byte static file with wrk,
# alternating per-core and shared runs so machine noise hits both.
# Usage: benches/scripts/runtime_model.sh [rounds] [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}; secs=${2:-4}; port=18081
command -v wrk >/dev/null || { echo "needs wrk: apt-get install -y wrk" >&2; exit 2; }
cargo build --release -p swan >&2
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/www"; head -c 100 /dev/zero | tr '\0' a > "$work/www/100.html"
for model in per-core shared; do
  printf '[server]\nruntime = "%s"\n[[site]]\nroot = "www"\n' "$model" > "$work/$model.toml"
done
run() {
  ./target/release/swan serve --config "$work/$1.toml" --listen 127.0.0.1:$port >/dev/null 2>&1 &
  local pid=$!; sleep 0.5
  local threads=$(( $2 < 2 ? 1 : 2 ))
  wrk -t$threads -c"$2" -d"${secs}s" http://127.0.0.1:$port/100.html 2>&1 | awk '/Requests\/sec/ {print $2}'
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
echo "connections,round,per-core,shared"
for c in 1 100 1000; do
  for r in $(seq "$rounds"); do
    echo "$c,$r,$(run per-core "$c"),$(run shared "$c")"
  done
done
