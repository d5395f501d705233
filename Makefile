# swan's everyday commands. `make run` and `make test` work on a fresh
# machine: `setup` installs what is missing (idempotent, quick when done).

CARGO ?= cargo

.PHONY: run test setup lint bench check examples

## Serve www/ on http://127.0.0.1:8080/ with the example servlets live.
run: setup examples
	$(CARGO) run --release -p swan -- serve

## Build the example servlets (Rust, C, AssemblyScript) into servlets/.
examples: setup
	examples/build.sh servlets

## Every test: unit, end-to-end (real server, real HTTP), CLI.
test: setup
	$(CARGO) test --workspace

## Formatting and lints, as CI runs them.
lint: setup
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## Validate swan.toml and print what would be served.
check: setup examples
	$(CARGO) run --release -p swan -- check

## Criterion micro-benchmarks (see BENCHMARKS.md for the load comparison).
bench: setup
	$(CARGO) bench -p swan-benches

setup:
	@scripts/setup
