#!/usr/bin/env bash
# Builds every example servlet from source into one folder (default:
# servlets/ at the repository root), named for the path it answers:
#   hello.wasm  json-api.wasm  (Rust, wasm32-wasip1, guest SDK)
#   visits.wasm guestbook.wasm (Rust, guest SDK, a key-value store)
#   hello-c.wasm               (C, Debian clang + wasi-libc, swan.h)
#   hello-as.wasm              (AssemblyScript, no WASI)
# Needs what scripts/setup installs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../servlets}
mkdir -p "$out"
out=$(cd "$out" && pwd)

hint() { echo "examples/build.sh: $1 (run scripts/setup to install the toolchains)" >&2; exit 1; }

# Rust: the examples' own workspace, built from the repository root so that
# rust-toolchain.toml (with the wasm targets) applies.
(cd "$here/.." && cargo build --quiet --release --target wasm32-wasip1 --manifest-path examples/Cargo.toml) \
    || hint "the Rust examples did not build"
cp "$here/target/wasm32-wasip1/release/hello.wasm" "$out/hello.wasm"
cp "$here/target/wasm32-wasip1/release/json_api.wasm" "$out/json-api.wasm"
cp "$here/target/wasm32-wasip1/release/visits.wasm" "$out/visits.wasm"
cp "$here/target/wasm32-wasip1/release/guestbook.wasm" "$out/guestbook.wasm"

# C
command -v clang >/dev/null || hint "clang is missing"
clang --target=wasm32-wasi -O2 -mexec-model=reactor -I "$here/../guest-sdk/c" \
    -o "$out/hello-c.wasm" "$here/hello-c/hello.c" || hint "the C example did not build"

# AssemblyScript
[ -x "$here/hello-as/node_modules/.bin/asc" ] || hint "AssemblyScript is not installed in examples/hello-as"
(cd "$here/hello-as" && node_modules/.bin/asc assembly/index.ts --outFile "$out/hello-as.wasm" \
    --optimize --runtime stub --use abort=assembly/index/abort) || hint "the AssemblyScript example did not build"

echo "examples/build.sh: built $(ls "$out"/*.wasm | wc -l) servlets into $out" >&2
