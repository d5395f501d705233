//! A guest's failure as the log shows it: one line, naming the host
//! function it failed in and where in the guest it was.
//!
//! wasmtime's own text spreads a backtrace over several lines and prints
//! the names of a module's name section as they are, so a guest could
//! start a line of its own in the server's log (a function named
//! "\n2026-01-01T00:00:00Z  INFO ..."). Here every frame goes on the one
//! line and control characters are escaped.

use std::fmt::{self, Write as _};

use super::output::escape_controls;

/// The host function a guest called when it failed: added to the error by
/// the native ABI's linker wrappers, so the log says which call was wrong.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostCall(pub(crate) &'static str);

impl fmt::Display for HostCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "in swan::{}", self.0)
    }
}

/// Guest frames named in a line, innermost first.
const FRAMES: usize = 6;

/// How wasmtime's backtrace context starts its text.
const BACKTRACE: &str = "error while executing at wasm backtrace";

/// `e` on one line: what happened, the host function it happened in (if
/// any), then the guest's frames, innermost first.
pub(crate) fn fault_line(e: &wasmtime::Error) -> String {
    let call = e.downcast_ref::<HostCall>().map(ToString::to_string);
    // The error and its contexts, outermost first, but the backtrace
    // (written out below) and the host call (said after the cause).
    let mut line = e
        .chain()
        .map(|cause| cause.to_string())
        .filter(|text| !text.starts_with(BACKTRACE) && Some(text) != call.as_ref())
        .collect::<Vec<_>>()
        .join(": ");
    if e.is::<wasmtime::Trap>() {
        line.insert_str(0, "trap: ");
    }
    if let Some(call) = call {
        let _ = write!(line, " {call}");
    }
    if let Some(trace) = e.downcast_ref::<wasmtime::WasmBacktrace>() {
        let frames = trace.frames();
        for (i, frame) in frames.iter().take(FRAMES).enumerate() {
            line.push_str(if i == 0 { " at " } else { " < " });
            match frame.func_name() {
                Some(name) => line.push_str(name),
                None => {
                    let _ = write!(line, "func[{}]", frame.func_index());
                }
            }
            if let Some(offset) = frame.module_offset() {
                let _ = write!(line, " ({offset:#x})");
            }
        }
        if frames.len() > FRAMES {
            let _ = write!(line, " < {} more", frames.len() - FRAMES);
        }
    }
    escape_controls(&line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_error_names_its_call_and_stays_on_one_line() {
        let e = wasmtime::format_err!("buffer outside memory\nforged line")
            .context(HostCall("request_get"));
        let line = fault_line(&e);
        assert_eq!(
            line,
            "buffer outside memory\\u{a}forged line in swan::request_get"
        );
    }
}
