#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/kubernetes/ offline:
#
# 1. every resource in every *.yaml (extras/ too) against the Kubernetes
#    OpenAPI schemas of the versions in K8S_VERSIONS, strictly (an unknown
#    or misspelt field is an error), with kubernetes-validate, whose wheel
#    carries the schemas: nothing is fetched while validating;
# 2. kustomization.yaml (no schema exists for it): parses, every listed
#    file exists, every top-level manifest is listed;
# 3. consistency that no schema can see: grace period vs preStop +
#    drain_grace + drain_timeout (read from the ConfigMap's swan.toml),
#    probes on the admin port, ports and selectors that line up, the
#    security settings, the Containerfile's user id.
#
# Usage: deploy/validate.sh [DIR]   (DIR defaults to deploy/kubernetes)
# Exit status: 0 all good, 1 a check failed, 2 the tools could not be set up.
#
# Set SWAN_BIN to a built swan binary to also run `swan check` on the
# ConfigMap's swan.toml and on deploy/container/swan.toml.
#
# Needs python3 >= 3.11 (tomllib) with venv and pip. The first run installs
# the pinned tools into a venv under ${XDG_CACHE_HOME:-~/.cache}/swan-toolchains
# (from PyPI); later runs reuse it and need no network.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${1:-$here/kubernetes}

# Kubernetes versions to validate against: the oldest this deployment
# supports (the preStop `sleep` handler is on by default from 1.30) and the
# newest that kubernetes-validate 1.37.0 ships schemas for.
K8S_VERSIONS=${K8S_VERSIONS:-"1.30.0 1.37.0"}

# Pinned: kubernetes-validate and everything it pulls in, installed with
# --no-deps so that nothing else is resolved.
requirements="
kubernetes-validate==1.37.0
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
referencing==0.37.0
rpds-py==2026.9.1
attrs==26.1.0
PyYAML==6.0.4
typing_extensions==4.16.0
importlib_resources==7.1.0
packaging==26.4
"

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "validate: $python >= 3.11 is needed (tomllib)" >&2
    exit 2
fi

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$(printf '%s\n%s\n' "$pyver" "$requirements" | sha256sum | cut -c1-12)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/swan-toolchains
venv=$cache/kubernetes-validate-1.37.0-py$pyver-$key
mkdir -p "$cache"

if [ ! -f "$venv/.complete" ]; then
    # One installer at a time (tests may run this in parallel); build in a
    # temporary folder and rename, so a half-made venv is never used.
    exec 9>"$cache/.kubernetes-validate.lock"
    command -v flock >/dev/null && flock 9
    if [ ! -f "$venv/.complete" ]; then
        echo "validate: installing kubernetes-validate 1.37.0 into $venv" >&2
        tmp=$(mktemp -d "$cache/.venv.XXXXXX")
        if ! { "$python" -m venv "$tmp" \
            && printf '%s\n' $requirements >"$tmp/requirements.txt" \
            && "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check \
                --no-deps -r "$tmp/requirements.txt"; } >&2; then
            rm -rf "$tmp"
            echo "validate: could not install the validator" >&2
            exit 2
        fi
        touch "$tmp/.complete"
        rm -rf "$venv"
        mv "$tmp" "$venv"
    fi
    exec 9>&-
fi

# The venv's python by path (its bin/ scripts carry the temporary folder's
# name in their #! lines; `python -m` does not care).
export K8S_VERSIONS SWAN_BIN="${SWAN_BIN:-}" SWAN_REPO="$repo"
exec "$venv/bin/python" "$here/check_manifests.py" "$dir"
