#!/usr/bin/env bash
# Builds the example wasi:http/proxy 0.2 components (examples/components/)
# from source, with pinned toolchains:
#   hello-rust.wasm    Rust, wasi =0.14.7 (wasip2 1.0.4+wasi-0.2.12), wasm32-wasip2
#   hello-js.wasm      JavaScript, @bytecodealliance/componentize-js 0.23.0 (npm)
#   hello-python.wasm  Python, componentize-py 0.25.1 (PyPI)
#   state-rust.wasm    Rust, wasi =0.14.7 + wit-bindgen =0.57.1: wasi:keyvalue counter + guestbook
#
#   examples/build-components.sh OUT_DIR [rust] [js] [python] [state]   (default: all four)
#
# Missing toolchains are installed on the way: npm packages from
# hello-js/package-lock.json into hello-js/node_modules, componentize-py into a
# venv under ${XDG_CACHE_HOME:-~/.cache}/swan-toolchains (outside the repository;
# SWAN_TOOLCHAINS overrides the folder). An output newer than all of its sources
# is left alone, so a second run takes well under a second. JS and Python
# components are 13-19 MB and take 20-100 s to build on 2 cores.
set -euo pipefail

COMPONENTIZE_PY_VERSION=0.25.1
COMPONENTIZE_JS_VERSION=0.23.0 # pinned by components/hello-js/package.json and its lock

me=examples/build-components.sh
here=$(cd "$(dirname "$0")" && pwd)
src=$here/components
cache=${SWAN_TOOLCHAINS:-${XDG_CACHE_HOME:-$HOME/.cache}/swan-toolchains}

usage() {
    echo "usage: $me OUT_DIR [rust] [js] [python] [state]" >&2
    exit 2
}
# fail WHAT HINT: says what failed and how to fix it, then stops.
fail() {
    echo "$me: $1" >&2
    echo "  hint: $2" >&2
    exit 1
}

[ $# -ge 1 ] || usage
out=$1
shift
langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(rust js python state)
for lang in "${langs[@]}"; do
    case $lang in rust | js | python | state) ;; *) echo "$me: unknown language '$lang'" >&2 && usage ;; esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

# fresh OUTPUT SOURCE...: true if OUTPUT exists and no source file is newer.
fresh() {
    local output=$1
    shift
    [ -f "$output" ] || return 1
    local newer
    newer=$(find "$@" \( -name node_modules -o -name target -o -name __pycache__ \) -prune \
        -o -type f -newer "$output" -print -quit) || return 1
    [ -z "$newer" ]
}

# build LANG: builds hello-LANG.wasm into a temporary file, then moves it into
# place, so a failed build never leaves a fresh-looking output behind.
build() {
    local lang=$1 name=hello-$1 start=$SECONDS
    [ "$lang" = state ] && name=state-rust
    local output=$out/$name.wasm
    local sources=("$here/build-components.sh" "$src/$name")
    case $lang in rust | state) sources+=("$here/../rust-toolchain.toml") ;; *) sources+=("$src/wit") ;; esac
    if fresh "$output" "${sources[@]}"; then
        echo "$me: $name.wasm is up to date" >&2
        return
    fi
    echo "$me: building $name.wasm ..." >&2
    tmp=$out/.$name.wasm.tmp
    rm -f "$tmp"
    "build_$lang" "$tmp"
    mv -f "$tmp" "$output"
    echo "$me: built $output ($(wc -c <"$output") bytes, $((SECONDS - start)) s)" >&2
}
trap 'rm -f "${tmp:-}"' EXIT

# cargo_component CRATE OUT: builds the Rust component in components/CRATE.
cargo_component() {
    local crate=$1
    command -v cargo >/dev/null || fail "cargo is missing" "install Rust with rustup; rust-toolchain.toml pins 1.95.0"
    # Run from inside the repository so that rust-toolchain.toml (with the
    # wasm32-wasip2 target) applies; --locked keeps the pinned versions.
    (cd "$src/$crate" && cargo build --quiet --release --locked --target wasm32-wasip2 \
        --target-dir "$src/$crate/target") ||
        fail "the Rust component $crate did not build" "see the errors above; a missing target is fixed by: rustup target add wasm32-wasip2"
    cp "$src/$crate/target/wasm32-wasip2/release/${crate//-/_}.wasm" "$2"
}

build_rust() { cargo_component hello-rust "$1"; }
build_state() { cargo_component state-rust "$1"; }

build_js() {
    local dir=$src/hello-js pkg=$src/hello-js/node_modules/@bytecodealliance/componentize-js/package.json
    command -v node >/dev/null && command -v npm >/dev/null ||
        fail "node and npm are missing" "apt-get install -y nodejs npm (node 20 works)"
    if ! grep -q "\"version\": \"$COMPONENTIZE_JS_VERSION\"" "$pkg" 2>/dev/null ||
        [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
        echo "$me: npm ci in $dir (componentize-js $COMPONENTIZE_JS_VERSION, about 30 s)" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
            fail "npm ci failed in $dir" "check that the npm registry is reachable, then run: (cd $dir && npm ci)"
    fi
    node "$dir/build.mjs" "$1" ||
        fail "the JavaScript component did not build" "see the errors above; to retry by hand: (cd $dir && node build.mjs /tmp/hello-js.wasm)"
}

build_python() {
    local venv=$cache/componentize-py-$COMPONENTIZE_PY_VERSION
    local cpy=$venv/bin/componentize-py
    if [ "$("$cpy" --version 2>/dev/null)" != "componentize-py $COMPONENTIZE_PY_VERSION" ]; then
        command -v python3 >/dev/null || fail "python3 is missing" "apt-get install -y python3 python3-venv"
        echo "$me: installing componentize-py $COMPONENTIZE_PY_VERSION into $venv (about 10 s)" >&2
        mkdir -p "$cache"
        python3 -m venv --clear "$venv" &&
            "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" ||
            fail "could not install componentize-py" "apt-get install -y python3-venv, and check that PyPI is reachable"
    fi
    # Run with a clean environment for the app: pre-initialisation must not pick
    # up this shell's virtualenv, and no bytecode lands in the source folder.
    (cd "$src/hello-python" && env -u VIRTUAL_ENV PYTHONDONTWRITEBYTECODE=1 \
        "$cpy" -d "$src/wit" -w servlet componentize -p "$src/hello-python" app -o "$1" >/dev/null) ||
        fail "the Python component did not build" "see the errors above; to retry by hand: (cd $src/hello-python && $cpy -d ../wit -w servlet componentize app -o /tmp/hello-python.wasm)"
}

for lang in "${langs[@]}"; do
    build "$lang"
done
