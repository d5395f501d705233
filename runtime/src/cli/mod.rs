//! The `swan` binary's commands (not part of the library): `serve.rs`,
//! `check.rs` and `new.rs`, with what they share (and `systemd.rs`, what
//! `serve` tells a service manager; `pid_file.rs`, the file naming it).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) mod check;
pub(crate) mod new;
mod pid_file;
pub(crate) mod serve;
mod systemd;

/// A duration as `swan.toml` writes it: `0s`, `250ms`, `10s`, `1.5s`.
pub(crate) fn human_duration(d: std::time::Duration) -> String {
    if d.is_zero() {
        "0s".to_owned()
    } else {
        format!("{d:?}")
    }
}

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

/// Set once stdout's reader has gone away.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes one line of a command's output to stdout (`err`: stderr).
///
/// `println!` panics when the reader has gone away: `swan check | head -1`
/// ended in a panic message. Here a failed write only ends that stream's
/// output; the command still runs to its end and exits with its own status.
pub(crate) fn write_line(err: bool, line: std::fmt::Arguments<'_>) {
    let result = if err {
        writeln!(std::io::stderr().lock(), "{line}")
    } else if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    } else {
        writeln!(std::io::stdout().lock(), "{line}")
    };
    if result.is_err() && !err {
        STDOUT_GONE.store(true, Ordering::Relaxed);
    }
}

/// `println!` that survives a reader going away (see [`write_line`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_line(false, format_args!($($arg)*))
    };
}

/// `eprintln!` that survives a closed stderr (see [`write_line`]).
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::write_line(true, format_args!($($arg)*))
    };
}

pub(crate) use {errln, outln};
