//! A request's body as the server hands it on: hyper's, and on HTTP/2 what
//! becomes of the part nobody read.
//!
//! An HTTP/2 stream whose body is dropped unread is reset by `h2` with
//! `RST_STREAM(NO_ERROR)` (RFC 9113 §8.1) while the client may still be
//! sending it. Clients take that badly: curl 7.88 reports "stream was
//! reset" (exit 92) instead of an early 413 it had already received.
//! So an HTTP/2 body dropped before its end is read on and thrown away,
//! in a task of its own, up to [`DRAIN_BYTES`] or [`DRAIN_TIME`] (as
//! HTTP/1's lingering close does for the whole connection); then the
//! stream ends normally, or is reset as before. HTTP/1 needs none of this:
//! hyper closes a connection whose body was left unread.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;

/// How long, and how many bytes, an HTTP/2 body left unread is read on.
const DRAIN_TIME: Duration = Duration::from_secs(2);
const DRAIN_BYTES: usize = 16 << 20;

/// The body of a request being answered.
#[derive(Debug)]
pub struct RequestBody {
    /// `None` only once dropped.
    inner: Option<Incoming>,
    /// Read on when dropped early (HTTP/2).
    drain: bool,
}

impl RequestBody {
    /// `body` of a request that came over `version`.
    pub fn new(body: Incoming, version: http::Version) -> RequestBody {
        RequestBody {
            inner: Some(body),
            drain: version >= http::Version::HTTP_2,
        }
    }
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.inner.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        if !self.drain {
            return;
        }
        let Some(body) = self.inner.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        // Outside a runtime (never on the request path) the stream is
        // reset at once, as it was before.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body));
        }
    }
}

/// Reads `body` to its end, for at most [`DRAIN_TIME`] and
/// [`DRAIN_BYTES`], and throws it away.
async fn drain(mut body: Incoming) {
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    let mut left = DRAIN_BYTES;
    while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
        if let Some(data) = frame.data_ref() {
            left = left.saturating_sub(data.len());
            if left == 0 {
                return;
            }
        }
    }
}
