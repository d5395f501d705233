//! Guest stdout and stderr: captured per request (up to
//! [`OUTPUT_CAPTURE_BYTES`] of each; more is dropped and counted, never an
//! error the guest sees), then logged line by line with the servlet and
//! the request id.
//!
//! A capture that filled up stays usable: a reused instance starts every
//! request with an empty one, and a guest whose writes never fail cannot
//! be broken by its own logging (Rust's `println!` panics on a write error).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// Bytes of stdout and of stderr kept per request for the log.
pub(crate) const OUTPUT_CAPTURE_BYTES: usize = 64 << 10;

/// What a log line costs against [`OUTPUT_CAPTURE_BYTES`] beyond its own
/// text (the log's own fields): at most 1,024 lines a request however
/// short, not 65,536 of one byte.
pub(crate) const LINE_COST: usize = 64;

/// The lines of a guest's `text` as they may be logged: the empty ones
/// left out, control characters (CR, NUL, ESC...) escaped, so that a guest
/// can neither forge a line of the server's log nor hide one.
pub(crate) fn log_lines(text: &[u8]) -> impl Iterator<Item = String> + '_ {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        (!line.is_empty()).then(|| escape_controls(line))
    })
}

/// `text` with its control characters but tab escaped (`\u{a}`): it
/// cannot end a log line or start one. So are the line and paragraph
/// separators (U+2028, U+2029) that some log viewers break lines at, and
/// the bidirectional overrides (U+202A–U+202E, U+2066–U+2069) that would
/// make a viewer show the line's text in another order.
pub(crate) fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\t') || crate::observe::one_line::breaks_or_reorders(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The span a guest's own lines are logged in: the servlet and the
/// request id come first on each line (`guest{servlet=… request_id=…}:`),
/// before the text, which may itself say `request_id=…`.
pub(crate) fn guest_span(servlet: &str, request_id: &str, stream: &str) -> tracing::Span {
    tracing::error_span!("guest", %servlet, %request_id, %stream)
}

/// One output stream of a guest instance.
#[derive(Clone, Default)]
pub(crate) struct GuestOutput(Arc<Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    bytes: BytesMut,
    dropped: usize,
}

impl GuestOutput {
    fn lock(&self) -> MutexGuard<'_, Captured> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, data: &[u8]) {
        let mut c = self.lock();
        let keep = data.len().min(OUTPUT_CAPTURE_BYTES - c.bytes.len());
        c.bytes.extend_from_slice(&data[..keep]);
        c.dropped += data.len() - keep;
    }

    /// What was written since the last call, and how many bytes past the
    /// cap were dropped; the capture starts empty again.
    pub(crate) fn take(&self) -> (Bytes, usize) {
        let mut c = self.lock();
        let dropped = std::mem::take(&mut c.dropped);
        (c.bytes.split().freeze(), dropped)
    }

    /// Logs what was written since the last call, a line per event.
    pub(crate) fn log(&self, servlet: &str, request_id: &str, stream: &'static str) {
        let (text, mut dropped) = self.take();
        if text.is_empty() && dropped == 0 {
            return;
        }
        let _span = guest_span(servlet, request_id, stream).entered();
        let mut spent = 0;
        for line in log_lines(&text) {
            spent += line.len() + LINE_COST;
            if spent > OUTPUT_CAPTURE_BYTES {
                dropped += line.len();
                continue;
            }
            if stream == "stderr" {
                tracing::warn!("{line}");
            } else {
                tracing::info!("{line}");
            }
        }
        if dropped > 0 {
            tracing::warn!(dropped, "guest output past the per-request cap was dropped");
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always room: what does not fit the cap is dropped, not refused.
        Ok(OUTPUT_CAPTURE_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_capture_drops_and_counts_and_starts_empty_again() {
        let mut out = GuestOutput::default();
        for _ in 0..3 {
            assert!(out.write(Bytes::from(vec![b'x'; 40 << 10])).is_ok());
            assert!(out.check_write().is_ok_and(|n| n > 0));
            let (text, dropped) = out.take();
            assert_eq!(text.len(), 40 << 10);
            assert_eq!(dropped, 0);
        }
        assert!(out.write(Bytes::from(vec![b'y'; 100 << 10])).is_ok());
        let (text, dropped) = out.take();
        assert_eq!(text.len(), OUTPUT_CAPTURE_BYTES);
        assert_eq!(dropped, (100 << 10) - OUTPUT_CAPTURE_BYTES);
        assert_eq!(out.take().0.len(), 0);
    }
}
