//! The `swan` binary's commands (not part of the library): `serve.rs`,
//! `check.rs` and `new.rs`, with what they share.

pub(crate) mod check;
pub(crate) mod new;
pub(crate) mod serve;

/// `n` bytes for people: "512 B", "1.5 MiB".
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
