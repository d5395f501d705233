//! A response body as the connection sends it: in flight (for the
//! watchdog) until sent, its exchange (access log line, streamed bytes)
//! finished then; HTTP/2 file bodies wait for a place among the files
//! their connection reads at once, and HTTP/2 data goes to hyper in pieces.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::OwnedSemaphorePermit;

use super::sendfile::Chunk;
use super::watchdog::Sending;
use crate::app::{App, Exchange};
use crate::body::Body;

/// A response body that marks its response in flight until it is sent
/// (or dropped), and finishes its exchange (access log line, streamed
/// bytes) then.
pub(crate) struct SentBody {
    inner: Body,
    /// The response is in flight (for the watchdog) until this goes.
    sending: Option<Sending>,
    exchange: Option<(Exchange, Arc<App>)>,
    bytes: u64,
    /// HTTP/2 file bodies: the place this one waits for before it is read.
    gate: Option<Box<FileGate>>,
    /// HTTP/2: data goes to hyper in pieces of at most [`H2_PIECE`], which
    /// it takes as the client's flow-control window lets it send them, so
    /// the bytes counted are those sent (within the stream's send buffer),
    /// not a whole cached body handed over at once to a client that never
    /// reads it.
    in_pieces: bool,
    /// The rest of a data frame not handed over yet.
    rest: Bytes,
}

/// The largest piece of an HTTP/2 body handed to hyper at once: its
/// default frame size.
const H2_PIECE: usize = 16 << 10;

impl SentBody {
    pub(crate) fn new(
        inner: Body,
        sending: Sending,
        exchange: Option<(Exchange, Arc<App>)>,
        gate: Option<Box<FileGate>>,
        h2: bool,
    ) -> SentBody {
        if gate.is_some() {
            sending.waiting();
        }
        SentBody {
            inner,
            sending: Some(sending),
            exchange,
            bytes: 0,
            gate,
            in_pieces: h2,
            rest: Bytes::new(),
        }
    }
}

/// An HTTP/2 file body's place among the files its connection reads at
/// once, waited for on its first poll and held until it is sent.
pub(crate) struct FileGate {
    places: tokio_util::sync::PollSemaphore,
    held: Option<OwnedSemaphorePermit>,
}

impl FileGate {
    pub(crate) fn new(places: Arc<tokio::sync::Semaphore>) -> FileGate {
        FileGate {
            places: tokio_util::sync::PollSemaphore::new(places),
            held: None,
        }
    }

    /// Ready once this body holds its place.
    fn poll_enter(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.held.is_none() {
            // The semaphore is never closed: `None` cannot happen, and
            // would only let the body through.
            self.held = ready!(self.places.poll_acquire(cx));
        }
        Poll::Ready(())
    }
}

impl Drop for SentBody {
    fn drop(&mut self) {
        let ending = Ending {
            _sending: self.sending.take(),
            exchange: self.exchange.take(),
            bytes: self.bytes,
            pacer: self.inner.pacer().cloned(),
        };
        // hyper is done with a body the connection sends itself once it
        // has counted the last chunk, which the stream may still owe: the
        // response stays in flight (send timeout, drain) and its log line
        // waits until the stream is done.
        if let Some(pacer) = &ending.pacer
            && pacer.owed() > 0
        {
            pacer.clone().hold(Box::new(ending));
        }
    }
}

/// A response's end: no longer in flight, its exchange finished with the
/// bytes the client was sent.
struct Ending {
    _sending: Option<Sending>,
    exchange: Option<(Exchange, Arc<App>)>,
    /// Bytes the body yielded.
    bytes: u64,
    /// A body sent by the connection: what it still owed is not sent.
    pacer: Option<Arc<crate::body::Pacer>>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        if let Some((exchange, app)) = self.exchange.take() {
            let unsent = self.pacer.as_ref().map_or(0, |p| p.owed());
            exchange.finish(&app.observe, self.bytes.saturating_sub(unsent));
        }
    }
}

impl http_body::Body for SentBody {
    /// Bytes, or a placeholder hyper counts and the stream sends from a
    /// file (see `sendfile`).
    type Data = Chunk;
    type Error = std::io::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Chunk>, std::io::Error>>> {
        let this = self.get_mut();
        if let Some(gate) = this.gate.as_mut() {
            let waited = gate.held.is_none();
            ready!(gate.poll_enter(cx));
            if waited && let Some(sending) = &this.sending {
                // Its turn: the send timeout runs from now.
                sending.progressed();
            }
        }
        let polled = if this.rest.is_empty() {
            ready!(Pin::new(&mut this.inner).poll_frame(cx))
        } else {
            Some(Ok(Frame::data(std::mem::take(&mut this.rest))))
        };
        let polled = match polled {
            Some(Ok(frame)) if this.in_pieces => Some(Ok(match frame.into_data() {
                Ok(mut data) => {
                    if data.len() > H2_PIECE {
                        this.rest = data.split_off(H2_PIECE);
                    }
                    Frame::data(data)
                }
                Err(frame) => frame,
            })),
            other => other,
        };
        if let Some(Err(_)) = &polled
            && let Some(sending) = &this.sending
        {
            sending.failed();
        }
        if let Some(Ok(frame)) = &polled
            && let Some(data) = frame.data_ref()
        {
            if this.in_pieces
                && let Some(sending) = &this.sending
            {
                sending.progressed();
            }
            this.bytes += data.len() as u64;
        }
        Poll::Ready(polled.map(|frame| frame.map(|f| f.map_data(Chunk::new))))
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        if !self.rest.is_empty() {
            // The upper bound first: a lower one past it panics.
            let rest = self.rest.len() as u64;
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper + rest);
            }
            hint.set_lower(hint.lower() + rest);
        }
        hint
    }
}
