//! The per-connection watchdog: header-read, keep-alive and send timeouts.
//!
//! hyper's own `header_read_timeout` starts when it begins waiting for the
//! next request head, so it cannot tell a slow head from an idle keep-alive
//! connection, and it knows nothing of slow readers. swan stamps reads and
//! writes instead (with the coarse clock, an atomic store), counts requests
//! being handled and responses being sent, and a per-connection watchdog
//! decides:
//! - a response being sent that makes no write progress for
//!   `send_timeout` (a client that stopped reading): dropped. A response
//!   that keeps moving completes however long it takes;
//! - HTTP/1: bytes of a new head arrived but no request yet after
//!   `header_read_timeout`: dropped (slowloris);
//! - nothing in flight and nothing exchanged for `keepalive_timeout` (or
//!   `header_read_timeout` before the first request): closed gracefully
//!   (HTTP/2: GOAWAY). For HTTP/2 only requests count as activity, so PING
//!   or SETTINGS traffic cannot keep an idle connection open;
//! - a graceful close with nothing in flight that does not finish within
//!   `header_read_timeout`: dropped;
//! - HTTP/1 on plain TCP (`park`): nothing in flight for [`PARK_AFTER_MS`]:
//!   parked, its hyper connection (and buffers) released until the client
//!   sends again (see `parking`).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::Poll;

use super::sendfile::Handoff;
use crate::clock;
use crate::config::ServerConfig;

/// How long an HTTP/1 connection on plain TCP stays idle before it is
/// parked. Short enough that idle connections hold no buffers; long enough
/// that a busy keep-alive connection never pays for a new hyper connection.
pub(crate) const PARK_AFTER_MS: u64 = 500;

/// Timeouts a watchdog enforces, in coarse-clock milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read_ms: u64,
    pub(crate) keepalive_ms: u64,
    pub(crate) send_ms: u64,
}

impl Limits {
    pub(crate) fn from_config(config: &ServerConfig) -> Limits {
        Limits {
            header_read_ms: config.header_read_timeout.as_millis() as u64,
            keepalive_ms: config.keepalive_timeout.as_millis() as u64,
            send_ms: config.send_timeout.as_millis() as u64,
        }
    }
}

pub(crate) enum Verdict {
    /// Close gracefully.
    Idle,
    /// Idle for [`PARK_AFTER_MS`]: release the hyper connection.
    Park,
    /// Drop the connection now.
    Drop,
}

/// Sleeps until one of the connection's deadlines passes. `closing`: a
/// graceful close is under way since then (coarse-clock ms); `park`: the
/// connection may be parked when idle.
pub(crate) async fn watch(
    state: Arc<ConnState>,
    limits: Limits,
    closing: Option<u64>,
    park: bool,
) -> Verdict {
    let recheck = limits
        .header_read_ms
        .min(limits.keepalive_ms)
        .min(limits.send_ms);
    // A parkable connection is parked 0.5 s after its last request, which
    // can be much sooner than the deadline computed while a request ran:
    // after finding one running, look again in 0.5 s, then back off (1,
    // 2, 4... s up to `recheck`) while the connection stays that busy, so
    // a busy connection costs no more wake-ups than before. These wakes
    // are also when an HTTP/1 connection looks for a client that left
    // (`client_gone`), parkable or not (TLS).
    let mut busy_recheck = PARK_AFTER_MS.min(recheck);
    loop {
        let now = clock::now_ms();
        let (deadline, verdict) = state.deadline(limits, closing, park);
        if now >= deadline {
            return verdict;
        }
        // State changes (a new head starting, a request ending) can bring a
        // deadline forward; waking at least every `recheck` ms bounds how
        // late that is noticed.
        let mut next = recheck;
        if state.in_flight() {
            next = busy_recheck;
            busy_recheck = (busy_recheck * 2).min(recheck);
        } else {
            busy_recheck = PARK_AFTER_MS.min(recheck);
        }
        let wake = deadline.min(now + next) + clock::TICK.as_millis() as u64;
        tokio::time::sleep_until(clock::instant_at(wake).into()).await;
    }
}

/// What the watchdog knows of a connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Last read and last write, in coarse-clock ms.
    read_ms: AtomicU64,
    /// TLS: the last raw socket read (a record may still be arriving);
    /// only for [`ConnState::idle_for_room`], never for the timeouts: a
    /// client trickling ciphertext must not keep a connection alive.
    socket_read_ms: AtomicU64,
    write_ms: AtomicU64,
    /// When a request last started, began sending, or ended.
    exchange_ms: AtomicU64,
    /// HTTP/1: when the first bytes of a not-yet-parsed head arrived (0:
    /// none).
    head_started_ms: AtomicU64,
    /// Requests whose handler is running.
    handling: AtomicU32,
    /// Responses whose body is being sent.
    sending: AtomicU32,
    /// Requests answered so far.
    served: AtomicU32,
    /// Requests whose handler started so far.
    started: AtomicU32,
    /// A request on this connection had a body: its bytes may be read
    /// after its handler returned (hyper drains what a handler left, a
    /// component answers before reading all of it).
    had_body: AtomicBool,
    /// Whether the connection speaks HTTP/2.
    pub(super) h2: AtomicBool,
    /// The server is draining: HTTP/1 responses say `Connection: close`.
    draining: AtomicBool,
    /// The hyper connection should end at the next request boundary
    /// (to park the connection, or to close it when idle).
    pub(super) release: AtomicBool,
    /// HTTP/1: the bytes read so far end inside a head (not at a blank
    /// line): the start of a next request may already be in hyper's buffer.
    pub(super) partial_tail: AtomicBool,
    /// The request being handled came without a body: when it ends, a
    /// partial tail is the next request's head.
    bodyless: AtomicBool,
    /// hyper's 431 went out as a 414 (the request line never ended).
    pub(crate) uri_too_long: AtomicBool,
    /// HTTP/1: a response body failed part-way (a servlet trapped, a file
    /// shrank): the connection must end as an abort, never with TLS's
    /// close_notify, which would make a close-delimited body look whole.
    aborted: AtomicBool,
    /// Files the service leaves for the stream to send itself; also
    /// whether everything written has been flushed.
    pub(crate) sendfile: Handoff,
    /// HTTP/2: the files being read for this connection's streams at once
    /// (made on the first).
    h2_files: std::sync::OnceLock<Arc<tokio::sync::Semaphore>>,
    /// HTTP/2: the files this connection's streams may hold open at once
    /// (made on the first request).
    h2_open: std::sync::OnceLock<Arc<tokio::sync::Semaphore>>,
    /// HTTP/2: each response being sent, its last progress (coarse ms; 0
    /// while it waits its turn to read its file). The connection is
    /// dropped when one makes none for `send_timeout`: another stream's
    /// progress, a new request or a PING does not keep a stalled one alive.
    h2_progress: std::sync::Mutex<Vec<std::sync::Weak<AtomicU64>>>,
    /// Whether the request being handled went to a servlet.
    pub(crate) servlet: crate::request::ServletMark,
}

/// The semaphore in `cell`, made with `places` on first use.
fn made_once(
    cell: &std::sync::OnceLock<Arc<tokio::sync::Semaphore>>,
    places: usize,
) -> Arc<tokio::sync::Semaphore> {
    cell.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(places)))
        .clone()
}

impl ConnState {
    pub(crate) fn new() -> ConnState {
        let now = clock::now_ms();
        ConnState {
            read_ms: AtomicU64::new(now),
            socket_read_ms: AtomicU64::new(now),
            write_ms: AtomicU64::new(now),
            exchange_ms: AtomicU64::new(now),
            head_started_ms: AtomicU64::new(0),
            handling: AtomicU32::new(0),
            sending: AtomicU32::new(0),
            served: AtomicU32::new(0),
            started: AtomicU32::new(0),
            had_body: AtomicBool::new(false),
            h2: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            release: AtomicBool::new(false),
            partial_tail: AtomicBool::new(false),
            bodyless: AtomicBool::new(false),
            uri_too_long: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            sendfile: Handoff::default(),
            h2_files: std::sync::OnceLock::new(),
            h2_open: std::sync::OnceLock::new(),
            h2_progress: std::sync::Mutex::new(Vec::new()),
            servlet: crate::request::ServletMark::default(),
        }
    }

    /// HTTP/2: what a stream's file body waits on before it is read, one
    /// of `places` for the connection (made on the first).
    pub(crate) fn h2_files(&self, places: usize) -> Arc<tokio::sync::Semaphore> {
        made_once(&self.h2_files, places)
    }

    /// HTTP/2: the budget of files open at once for this connection's
    /// streams, `places` in all (made on the first).
    pub(crate) fn h2_open_files(&self, places: usize) -> Arc<tokio::sync::Semaphore> {
        made_once(&self.h2_open, places)
    }

    /// Asks the hyper connection to end at the next request boundary: its
    /// next read that would wait reads end of stream instead.
    pub(crate) fn release(&self) {
        self.release.store(true, Ordering::Relaxed);
    }

    /// A parked connection has bytes to read: activity, so its idle time
    /// starts again.
    pub(crate) fn resumed(&self) {
        self.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
    }

    /// HTTP/2: the last progress of the response that has gone longest
    /// without any (`None` for HTTP/1, or when none is being sent).
    fn h2_stalled_since(&self) -> Option<u64> {
        if !self.h2.load(Ordering::Relaxed) {
            return None;
        }
        let streams = self
            .h2_progress
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        streams
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .map(|p| p.load(Ordering::Relaxed))
            .filter(|&ms| ms != 0)
            .min()
    }

    /// A response is cut off part-way: on HTTP/1 the connection ends as
    /// an abort (see `aborted`); HTTP/2 resets the stream alone.
    fn abort(&self) {
        if !self.h2.load(Ordering::Relaxed) {
            self.aborted.store(true, Ordering::Relaxed);
        }
    }

    /// The watchdog drops the connection: a response in flight is cut off.
    pub(crate) fn abort_if_in_flight(&self) {
        if self.in_flight() {
            self.abort();
        }
    }

    /// Whether an HTTP/1 response body failed part-way (see `aborted`).
    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }

    /// Marks the connection draining (the server shuts down).
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// The next deadline, and what happens when it passes.
    fn deadline(&self, limits: Limits, closing_since: Option<u64>, park: bool) -> (u64, Verdict) {
        let now = clock::now_ms();
        if self.sending.load(Ordering::Relaxed) > 0 {
            let progress = match self.h2_stalled_since() {
                Some(since) => since,
                None => self
                    .write_ms
                    .load(Ordering::Relaxed)
                    .max(self.exchange_ms.load(Ordering::Relaxed)),
            };
            return (progress + limits.send_ms, Verdict::Drop);
        }
        if self.handling.load(Ordering::Relaxed) > 0 {
            // A handler is running; it has deadlines of its own.
            return (now + limits.keepalive_ms, Verdict::Idle);
        }
        if let Some(since) = closing_since {
            return (since + limits.header_read_ms, Verdict::Drop);
        }
        let h2 = self.h2.load(Ordering::Relaxed);
        let head_started = self.head_started_ms.load(Ordering::Relaxed);
        if !h2 && head_started != 0 {
            return (head_started + limits.header_read_ms, Verdict::Drop);
        }
        let idle_limit = if self.served.load(Ordering::Relaxed) == 0 {
            limits.header_read_ms
        } else {
            limits.keepalive_ms
        };
        let mut idle_since = self.exchange_ms.load(Ordering::Relaxed);
        if !h2 {
            idle_since = idle_since
                .max(self.read_ms.load(Ordering::Relaxed))
                .max(self.write_ms.load(Ordering::Relaxed));
        }
        if park && !h2 && !self.release.load(Ordering::Relaxed) {
            return (idle_since + PARK_AFTER_MS.min(idle_limit), Verdict::Park);
        }
        (idle_since + idle_limit, Verdict::Idle)
    }

    /// Whether an HTTP/1 request head has started to arrive and no
    /// request is being handled: what a timeout then cuts off is a head.
    pub(crate) fn head_pending(&self) -> bool {
        !self.in_flight()
            && !self.h2.load(Ordering::Relaxed)
            && self.head_started_ms.load(Ordering::Relaxed) != 0
    }

    /// HTTP/1: a request with a body is being handled (what is read now
    /// is its body, or a head pipelined behind it).
    pub(super) fn reading_body(&self) -> bool {
        self.handling.load(Ordering::Relaxed) > 0 && !self.bodyless.load(Ordering::Relaxed)
    }

    /// How long the request being handled has been with a servlet (ms,
    /// from its head; 0 when no handler runs or it is not a servlet's).
    pub(super) fn servlet_running_ms(&self) -> u64 {
        if self.handling.load(Ordering::Relaxed) == 0 || !self.servlet.is_set() {
            return 0;
        }
        clock::now_ms().saturating_sub(self.exchange_ms.load(Ordering::Relaxed))
    }

    /// Requests whose handler started so far (wrapping).
    pub(super) fn started(&self) -> u32 {
        self.started.load(Ordering::Relaxed)
    }

    /// Whether a request on this connection had a body.
    pub(super) fn had_body(&self) -> bool {
        self.had_body.load(Ordering::Relaxed)
    }

    /// When the connection last saw activity, if it may close to make
    /// room at `max_connections`: it has answered a request, has none in
    /// flight, no next HTTP/1 head has started, and nothing came or went
    /// for [`PARK_AFTER_MS`] (on TLS, raw socket reads count: a record
    /// still arriving is a request on its way), as long as a plain
    /// HTTP/1 connection waits before it parks.
    pub(super) fn idle_for_room(&self, now: u64) -> Option<u64> {
        let last = self
            .read_ms
            .load(Ordering::Relaxed)
            .max(self.socket_read_ms.load(Ordering::Relaxed))
            .max(self.write_ms.load(Ordering::Relaxed))
            .max(self.exchange_ms.load(Ordering::Relaxed));
        let idle = self.served.load(Ordering::Relaxed) > 0
            && !self.in_flight()
            && (self.h2.load(Ordering::Relaxed)
                || self.head_started_ms.load(Ordering::Relaxed) == 0)
            && now.saturating_sub(last) >= PARK_AFTER_MS;
        idle.then_some(last)
    }

    /// Bytes came in on the raw socket (under TLS, before a whole record
    /// can be decrypted).
    pub(super) fn touched_socket(&self) {
        self.socket_read_ms
            .store(clock::now_ms(), Ordering::Relaxed);
    }

    pub(super) fn in_flight(&self) -> bool {
        self.handling.load(Ordering::Relaxed) > 0 || self.sending.load(Ordering::Relaxed) > 0
    }

    pub(super) fn touch_write(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result
            && *n > 0
        {
            self.wrote();
        }
    }

    /// Stamps write progress: HTTP/1's socket writes. On HTTP/2 a write
    /// may be the answer to a client's PING or SETTINGS, which would keep
    /// a stream the client never reads alive past `send_timeout`: there,
    /// progress is a stream's data taken by hyper ([`Sending::progressed`]),
    /// which it takes only as the client's window lets it send.
    pub(super) fn wrote(&self) {
        if !self.h2.load(Ordering::Relaxed) {
            self.write_ms.store(clock::now_ms(), Ordering::Relaxed);
        }
    }

    /// Stamps a read; true when it starts a new HTTP/1 head.
    pub(super) fn touch_read(&self) -> bool {
        let now = clock::now_ms().max(1);
        self.read_ms.store(now, Ordering::Relaxed);
        if !self.in_flight() && self.head_started_ms.load(Ordering::Relaxed) == 0 {
            self.head_started_ms.store(now, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Marks a request's handler running for as long as it lives.
pub(crate) struct Handling(Arc<ConnState>);

impl Handling {
    /// A request's handler starts; `bodyless`: the request has no body.
    pub(crate) fn start(state: Arc<ConnState>, bodyless: bool) -> Handling {
        state.handling.fetch_add(1, Ordering::Relaxed);
        state.started.fetch_add(1, Ordering::Relaxed);
        if !bodyless {
            state.had_body.store(true, Ordering::Relaxed);
        }
        state.servlet.clear();
        state.head_started_ms.store(0, Ordering::Relaxed);
        state.bodyless.store(bodyless, Ordering::Relaxed);
        state.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
        Handling(state)
    }

    /// Marked when the request is handed to a servlet.
    pub(crate) fn servlet_mark(&self) -> &crate::request::ServletMark {
        &self.0.servlet
    }

    /// Whether the server is draining this connection.
    pub(crate) fn draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }

    /// HTTP/2: what the response's file waits on before it is read (see
    /// [`ConnState::h2_files`]).
    pub(crate) fn h2_files(&self, places: usize) -> Arc<tokio::sync::Semaphore> {
        self.0.h2_files(places)
    }

    /// HTTP/2: the files the connection's streams may hold open (see
    /// [`ConnState::h2_open_files`]).
    pub(crate) fn h2_open_files(&self, places: usize) -> Arc<tokio::sync::Semaphore> {
        self.0.h2_open_files(places)
    }

    /// Hands the response's file, or large in-memory body, to the stream
    /// to send itself (see [`Handoff::offer`]).
    pub(crate) fn offer_body(&self, body: &mut crate::body::Body) -> super::sendfile::Handed {
        self.0.sendfile.offer(body)
    }

    /// The handler returned a response: its body is being sent until the
    /// returned guard is dropped (with the body).
    pub(crate) fn into_sending(self) -> Sending {
        let state = self.0.clone();
        state.sending.fetch_add(1, Ordering::Relaxed);
        drop(self);
        let progress = state.h2.load(Ordering::Relaxed).then(|| {
            let progress = Arc::new(AtomicU64::new(clock::now_ms().max(1)));
            let mut streams = state
                .h2_progress
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            streams.retain(|p| p.strong_count() > 0);
            streams.push(Arc::downgrade(&progress));
            progress
        });
        Sending(state, progress)
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::Relaxed);
        self.0.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
    }
}

/// Marks a response body being sent for as long as it lives.
pub(crate) struct Sending(Arc<ConnState>, Option<Arc<AtomicU64>>);

impl Sending {
    /// The response's body failed part-way (see `ConnState::abort`).
    pub(crate) fn failed(&self) {
        self.0.abort();
    }

    /// HTTP/2: the response's data was taken by hyper (which takes it as
    /// the client's window lets it send): progress.
    pub(crate) fn progressed(&self) {
        if let Some(progress) = &self.1 {
            progress.store(clock::now_ms().max(1), Ordering::Relaxed);
        }
    }

    /// HTTP/2: the response waits its turn to read its file, which is not
    /// a stall (see `FileGate`); [`Sending::progressed`] ends the wait.
    pub(crate) fn waiting(&self) {
        if let Some(progress) = &self.1 {
            progress.store(0, Ordering::Relaxed);
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        let state = &self.0;
        state.sending.fetch_sub(1, Ordering::Relaxed);
        state.served.fetch_add(1, Ordering::Relaxed);
        let now = clock::now_ms();
        state.exchange_ms.store(now, Ordering::Relaxed);
        // A bodyless request read together with part of the next head
        // (one read, pipelined): that head started already, and its
        // `header_read_timeout` runs from now, not from a later read.
        if !state.in_flight()
            && state.bodyless.load(Ordering::Relaxed)
            && state.partial_tail.load(Ordering::Relaxed)
        {
            state.head_started_ms.store(now.max(1), Ordering::Relaxed);
        }
    }
}
