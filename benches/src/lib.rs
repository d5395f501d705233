//! Shared helpers for swan benchmarks (the benchmarks live in `benches/`).
