//! One connection: the hyper builders, the service every connection runs,
//! and serving one accepted connection under its watchdog (`watchdog`)
//! until it closes, times out, or the server drains. HTTP/1 on plain TCP
//! goes through `parking`, which comes back here for HTTP/2.

use std::convert::Infallible;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;

use http::HeaderValue;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::client_gone::ClientGone;
use super::places::Slot;
use super::sendfile::Handed;
use super::sent_body::{FileGate, SentBody};
use super::stream::{SocketStamp, WatchedIo};
use super::watchdog::{ConnState, Handling, Limits, Sending, Verdict, watch};
use crate::app::App;
use crate::body::Body;
use crate::config::ServerConfig;
use crate::observe::access_log::{Entry, RequestText};
use crate::observe::{Observe, REFUSED_STATUSES};
use crate::request::checks::header_list_size;
use crate::request::{Peer, RequestBody};
use crate::static_files::FILE_BUDGET;

/// Streams one HTTP/2 connection may open at once (NGINX: 128).
const MAX_CONCURRENT_STREAMS: u32 = 128;

/// Response bytes an HTTP/2 stream may hold waiting for the client's flow
/// control and socket. hyper's default, 400 KiB, let a client that opens
/// every stream and reads nothing hold about 160 MiB per connection.
const H2_SEND_BUFFER: usize = 64 << 10;

/// HTTP/2: files read at once for one connection's streams (see
/// [`FileGate`]). Each holds a read chunk and up to [`H2_SEND_BUFFER`]
/// while its client reads; a client that opened every stream and read
/// nothing held 160 MiB per connection, about 6 MiB since (BENCHMARKS.md).
/// Further files wait, their heads already sent, until one ends or is
/// reset: a client that stops reading this many file streams, without
/// resetting them, holds up its others.
const H2_FILES_AT_ONCE: usize = 16;

/// HTTP/2: streamed files one connection's streams may hold open, those
/// being read and those waiting for a place among them. A stream past it
/// gets 503 with `Retry-After` before its file is opened: 165 clients
/// opening 128 streams each for a large file held the process's 20,000
/// descriptors.
const H2_FILES_OPEN: usize = 2 * H2_FILES_AT_ONCE;

/// On shutdown, how long a connection stays open for one more request
/// before it is closed. Closing an idle keep-alive connection races with a
/// client that is sending on it (the request is lost in flight); answering
/// that next request with `Connection: close` does not. Busy connections
/// close after their next response; only those idle for this long are
/// closed under a client's feet.
const DRAIN_LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// The hyper connection builders for these limits.
pub(crate) struct Builders {
    /// HTTP/1.1 (with pipelining) and HTTP/2 with prior knowledge on the
    /// same port, told apart by the first bytes.
    pub(crate) auto: auto::Builder<TokioExecutor>,
    /// HTTP/2 alone, for TLS clients that chose `h2` by ALPN: HTTP/1 bytes
    /// after that choice are a protocol error, not a request.
    pub(crate) h2: auto::Builder<TokioExecutor>,
    /// HTTP/1.1 alone, for connections that are parked between requests.
    pub(crate) http1: http1::Builder,
}

/// The HTTP/1 settings both builders share (their builder types differ,
/// their methods do not).
macro_rules! http1_settings {
    ($builder:expr, $config:expr) => {
        $builder
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .keep_alive(true)
            // Copy bodies into the head's buffer and send both with one
            // write(2) rather than a writev of several slices: measured
            // 17-24% more requests/s at 100 and 1,000 connections
            // (BENCHMARKS.md).
            .writev(false)
            .max_buf_size($config.max_header_bytes)
            // pipeline_flush(true) would batch pipelined responses, but
            // hyper 1.x then never flushes its automatic 400/431 for a bad
            // head.
            .pipeline_flush(false)
            // A client that ends its side after sending a request (as
            // `nc -N` and some HTTP/1.0 tools do) still gets the answer:
            // a static file's; a servlet's only if it comes within a
            // quarter of a second (`client_gone`: past that, as for
            // NGINX's proxied requests, the client counts as gone).
            .half_close(true)
    };
}

/// Builds both builders with the same HTTP/1 settings.
pub(crate) fn builders(config: &ServerConfig) -> Builders {
    let mut auto = auto::Builder::new(TokioExecutor::new());
    http1_settings!(auto.http1(), config);
    auto.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_send_buf_size(H2_SEND_BUFFER)
        // Twice `max_header_bytes`: heads between the two are refused by
        // `service`, which logs and counts them; past that, the h2 layer
        // stops decoding (memory stays bounded) and answers 431 itself.
        .max_header_list_size(
            u32::try_from(config.max_header_bytes.saturating_mul(2)).unwrap_or(u32::MAX),
        );
    let mut http1 = http1::Builder::new();
    http1_settings!(http1, config);
    // The buffer's limit alone lets a head through past it by up to a
    // read (a 140 KB head passed a 128 KiB limit): this one is exact.
    // hyper-util's automatic builder has no such setting.
    http1.max_header_size(config.max_header_bytes);
    let h2 = auto.clone().http2_only();
    Builders { auto, h2, http1 }
}

/// The service answering one connection's requests: the app, with the
/// connection's state kept current (handling, sending, draining).
pub(crate) fn service(
    app: Arc<App>,
    state: Arc<ConnState>,
    peer: Peer,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<SentBody>,
    Error = Infallible,
    Future = impl std::future::Future<Output = Result<hyper::Response<SentBody>, Infallible>>
             + Send
             + 'static,
> + Send
+ 'static {
    service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let app = app.clone();
        let version = req.version();
        let req = req.map(|body| RequestBody::new(body, version));
        let bodyless = http_body::Body::is_end_stream(req.body());
        let handling = Handling::start(state.clone(), bodyless);
        async move {
            let http1 = req.version() < http::Version::HTTP_2;
            let http10 = req.version() == http::Version::HTTP_10;
            // Answers hyper sends no body for: never handed to the stream.
            let keep_with_hyper =
                req.method() == http::Method::HEAD || req.method() == http::Method::CONNECT;
            if !http1 && header_list_size(&req) > app.server.max_header_bytes {
                return Ok(headers_too_large(&app, peer, handling.into_sending()));
            }
            let handled = app.handle(req, peer, handling.servlet_mark());
            let (mut res, exchange) = if http1 {
                handled.await
            } else {
                let budget = handling.h2_open_files(H2_FILES_OPEN);
                FILE_BUDGET.scope(budget, handled).await
            };
            if http1 {
                // HTTP/1.0 has no chunks: a body of unknown length ends
                // with the connection, which must not be offered for reuse
                // (hyper would say `keep-alive`, then close).
                let unframed = http10 && http_body::Body::size_hint(res.body()).exact().is_none();
                // Draining (from the signal on, its grace included): the
                // client is told to reconnect, not to send its next
                // request on a connection that is about to close.
                let draining = handling.draining()
                    || app.observe.readiness() == crate::observe::Readiness::Draining;
                if draining || unframed {
                    res.headers_mut()
                        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
                    // To an HTTP/1.0 client hyper adds `keep-alive` to an
                    // HTTP/1.1 response's `close` (`close, keep-alive` on
                    // the wire); one marked 1.0 it leaves alone.
                    if http10 {
                        *res.version_mut() = http::Version::HTTP_10;
                    }
                }
                // Only a body hyper will send right after its head: never
                // for 1xx, 204 or 304, whose bodies hyper drops (the stream
                // would wait for bytes hyper never counts).
                let bodyless = keep_with_hyper || crate::body::status_has_no_body(res.status());
                if !bodyless && handling.offer_body(res.body_mut()) == Handed::File {
                    app.observe.sendfile_responses.add(1);
                }
            }
            let gate = (!http1 && res.body().is_unread_file())
                .then(|| Box::new(FileGate::new(handling.h2_files(H2_FILES_AT_ONCE))));
            // The exchange lasts until the body is sent, not until the
            // handler returns: a slow download is in flight, not idle.
            let sending = handling.into_sending();
            // Finishing needs the app: the clone made for this request goes
            // with the body.
            let exchange = exchange.map(|e| (e, app));
            Ok::<_, Infallible>(
                res.map(|body| SentBody::new(body, sending, exchange, gate, !http1)),
            )
        }
    })
}

/// HTTP/2's answer to a header list over `max_header_bytes`, refused
/// before any site sees it, as HTTP/1's is. The h2 layer's own limit is
/// twice as high (see [`builders`]): its 431 would go out unseen, neither
/// logged nor counted.
fn headers_too_large(app: &App, peer: Peer, sending: Sending) -> hyper::Response<SentBody> {
    refused(&app.observe, peer, http::Version::HTTP_2, 431);
    let mut res = hyper::Response::new(SentBody::new(Body::empty(), sending, None, None, true));
    *res.status_mut() = http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
    res.headers_mut()
        .insert(http::header::SERVER, crate::app::SERVER_NAME);
    res
}

/// A TLS connection and its state, whose socket writes are stamped there
/// (`SocketStamp`).
pub(crate) struct Tls<S: std::os::fd::AsFd> {
    pub(crate) stream: tokio_rustls::server::TlsStream<SocketStamp<S>>,
    pub(crate) state: Arc<ConnState>,
}

/// Serves one accepted TLS connection until it closes, times out, or the
/// server shuts down (then gracefully). A client that negotiated
/// `http/1.1` by ALPN gets hyper's HTTP/1 connection alone, with its exact
/// `max_header_size`; one that negotiated `h2` gets HTTP/2 alone; one that
/// negotiated nothing (prior knowledge) gets the connection that tells the
/// protocols apart by their first bytes. Plain TCP goes through `parking`.
pub(crate) async fn serve<S>(
    conn: Tls<S>,
    peer: Peer,
    app: Arc<App>,
    builders: Arc<Builders>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
    slot: Slot,
) where
    S: AsyncRead + AsyncWrite + AsRawFd + std::os::fd::AsFd + Unpin + Send + 'static,
{
    let Tls { stream, state } = conn;
    let protocol = match stream.get_ref().1.alpn_protocol() {
        Some(b"http/1.1" | b"http/1.0") => {
            #[allow(
                unsafe_code,
                reason = "polled only beside the connection, which owns the socket"
            )]
            // SAFETY: `drive` polls `gone` only beside the hyper connection
            // that owns the TLS stream, and so the socket.
            let gone = unsafe { ClientGone::new(stream.get_ref().0, state.clone()) };
            Protocol::Http1(&builders.http1, gone)
        }
        Some(b"h2") => Protocol::Detect(&builders.h2),
        _ => Protocol::Detect(&builders.auto),
    };
    let io = WatchedIo::new(stream, state.clone()).writes_stamped_below();
    let observe = app.observe.clone();
    let service = service(app, state.clone(), peer);
    let watched = Watch {
        state: state.clone(),
        shutdown,
        limits,
        slot: &slot,
    };
    let ended = drive(io, service, peer.addr, protocol, watched).await;
    ended_with(ended, &state, &observe, peer);
}

/// Which hyper connection serves a stream.
pub(crate) enum Protocol<'a> {
    /// HTTP/1.1 or HTTP/2, told apart by the first bytes (or HTTP/2
    /// alone, with `Builders::h2`).
    Detect(&'a auto::Builder<TokioExecutor>),
    /// HTTP/1.1 alone, watched for a client that leaves while a servlet
    /// has its request.
    Http1(&'a http1::Builder, ClientGone),
}

/// The watchdog dropped a connection (a timeout).
#[derive(Debug, thiserror::Error)]
#[error("dropped by timeout")]
pub(crate) struct Dropped;

/// Reports how a connection's hyper side ended. A request head refused
/// before any site saw it is counted and logged like any other answer:
/// one hyper answered itself (a malformed head, a URI or headers past
/// `max_header_bytes`), or one cut off by `header_read_timeout`, logged
/// as a 408 (NGINX's record of it; no answer is sent, as hyper owns the
/// stream until it is dropped).
pub(crate) fn ended_with(
    ended: Result<(), Box<dyn std::error::Error + Send + Sync>>,
    state: &ConnState,
    observe: &Observe,
    peer: Peer,
) {
    let Err(e) = ended else { return };
    tracing::trace!(remote = %peer.addr, error = %e, "connection ended with an error");
    let status = if e.is::<Dropped>() {
        state.head_pending().then_some(408)
    } else {
        match e.downcast_ref::<hyper::Error>().and_then(refused_status) {
            // The stream sent hyper's 431 as a 414 (see `WatchedIo`).
            Some(431)
                if state
                    .uri_too_long
                    .load(std::sync::atomic::Ordering::Relaxed) =>
            {
                Some(414)
            }
            status => status,
        }
    };
    if let Some(status) = status {
        refused(observe, peer, http::Version::HTTP_11, status);
    }
}

/// Counts and logs a request head refused with `status` before any site
/// saw it.
pub(super) fn refused(observe: &Observe, peer: Peer, version: http::Version, status: u16) {
    if let Some(i) = REFUSED_STATUSES.iter().position(|&s| s == status) {
        observe.heads_refused[i].add(1);
    }
    if let Some(log) = &observe.access_log {
        log.log(&Entry {
            time: crate::clock::wall(),
            client: peer.client,
            method: None,
            version,
            status,
            bytes: 0,
            duration: std::time::Duration::ZERO,
            site: Arc::from("-"),
            route: None,
            id: crate::request::RequestId::next(),
            text: RequestText::default(),
        });
    }
}

/// The status hyper answered a refused request head with (its
/// `on_error`): `None` when it sent no answer.
fn refused_status(e: &hyper::Error) -> Option<u16> {
    if !e.is_parse() || e.is_parse_version_h2() || e.is_parse_status() {
        return None;
    }
    // The kinds share predicates; only the text tells them apart.
    let text = e.to_string();
    if text.starts_with("URI too long") {
        Some(414)
    } else if e.is_parse_too_large() {
        Some(431)
    } else if text.starts_with("internal error") {
        None
    } else {
        Some(400)
    }
}

/// How long, and how many bytes, a connection hyper closed is read and
/// discarded before the socket is closed (NGINX's lingering close).
pub(super) const LINGER_TIME: std::time::Duration = std::time::Duration::from_secs(2);
const LINGER_BYTES: usize = 16 << 20;

/// Closes a connection hyper is done with without losing its last answer.
/// A client still sending a body the server did not read (a 413 given on
/// the declared length, an early error) would otherwise get a reset as the
/// socket closes with unread bytes, and a reset can destroy the response
/// before the client reads it. So: end the write side (the client sees the
/// end of the response), then read and discard until the client closes,
/// for at most [`LINGER_TIME`] and [`LINGER_BYTES`].
pub(crate) async fn linger_close<S>(mut io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if io.shutdown().await.is_err() {
        return;
    }
    let discard = async {
        let mut buf = [0u8; 8192];
        let mut total = 0;
        while total < LINGER_BYTES {
            match io.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER_TIME, discard).await;
}

/// Runs one hyper connection to its end.
pub(crate) async fn drive<S, Svc>(
    io: WatchedIo<S>,
    service: Svc,
    remote: std::net::SocketAddr,
    protocol: Protocol<'_>,
    watched: Watch<'_>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    S: AsyncRead + AsyncWrite + super::sendfile::Target + Unpin + Send + 'static,
    Svc: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<SentBody>,
            Error = Infallible,
        > + Send
        + 'static,
    Svc::Future: Send + 'static,
{
    let io = TokioIo::new(io);
    match protocol {
        Protocol::Detect(builder) => {
            let conn = std::pin::pin!(builder.serve_connection(io, service));
            let graceful = |conn: Pin<&mut _>| auto::Connection::graceful_shutdown(conn);
            // HTTP/2 notices its client leaving by itself.
            let gone = ClientGone::unwatched(watched.state.clone());
            supervise(conn, graceful, remote, gone, watched)
                .await
                .map(drop)
        }
        Protocol::Http1(builder, gone) => {
            let mut conn = Box::pin(builder.serve_connection(io, service));
            let graceful = |conn: Pin<&mut _>| http1::Connection::graceful_shutdown(conn);
            let ended = supervise(conn.as_mut(), graceful, remote, gone, watched).await?;
            // hyper closed it (`Connection: close`, a bad request, an
            // answer such as 413 given before the body was read): linger,
            // as on plain TCP, so the client reads the answer.
            if ended == Ended::Closed {
                let io = Pin::into_inner(conn).into_parts().io.into_inner();
                Box::pin(linger_close(io)).await;
            }
            Ok(())
        }
    }
}

/// How a supervised connection ended without an error.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Its future completed: hyper closed it.
    Closed,
    /// Its future completed after swan asked it to close (drain, idle).
    ClosedByUs,
    /// The client left while a request was handled.
    ClientLeft,
}

/// What a connection is watched with: its state and timeouts, the
/// server's drain, and its place in `max_connections`, which it gives up
/// when idle while a new connection waits for one.
pub(crate) struct Watch<'a> {
    pub(crate) state: Arc<ConnState>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) limits: Limits,
    pub(crate) slot: &'a Slot,
}

/// Runs `conn` under its watchdog and the server's drain: `graceful` asks
/// it to finish its current exchange and close.
async fn supervise<C, E>(
    mut conn: Pin<&mut C>,
    graceful: impl Fn(Pin<&mut C>),
    remote: std::net::SocketAddr,
    mut gone: ClientGone,
    watched: Watch<'_>,
) -> Result<Ended, Box<dyn std::error::Error + Send + Sync>>
where
    C: std::future::Future<Output = Result<(), E>>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Watch {
        state,
        mut shutdown,
        limits,
        slot,
    } = watched;
    let room = slot.supervised(&state);
    // Since when a graceful close is under way: a later ask for room
    // brings its deadline forward, never back.
    let mut closing: Option<u64> = None;
    let mut watchdog = Box::pin(watch(state.clone(), limits, None, false));
    let mut linger = Linger::default();
    loop {
        tokio::select! {
            // Bytes first: a request already sent is read (and stamped)
            // before a request for room is looked at.
            biased;
            result = conn.as_mut() => {
                // A close swan asked for (drain, idle) needs no linger.
                let ended = if closing.is_some() { Ended::ClosedByUs } else { Ended::Closed };
                return result.map(|()| ended).map_err(Into::into);
            }
            () = &mut gone => {
                // Dropping the connection drops the handler: its request
                // is logged and counted as 499.
                tracing::debug!(%remote, "the client left while its request was handled");
                return Ok(Ended::ClientLeft);
            }
            _ = shutdown.changed(), if closing.is_none() && !linger.started() => linger.start(&state),
            () = linger.wait(), if closing.is_none() => {
                graceful(conn.as_mut());
                closing = Some(crate::clock::now_ms());
                watchdog = Box::pin(watch(state.clone(), limits, closing, false));
            }
            // A connection waiting for a place asked this one, idle, to
            // make room (see `places`): HTTP/2 closes with a GOAWAY (a
            // stream opened meanwhile is served or refused unprocessed).
            // One already closing (idle, drain) is asked too: it gets the
            // shorter deadline below.
            () = room.asked() => {
                let now = crate::clock::now_ms();
                if state.idle_for_room(now).is_some() {
                    let since = match closing {
                        Some(since) => since,
                        None => {
                            tracing::debug!(%remote, "max_connections reached: an idle keep-alive connection closes to make room");
                            graceful(conn.as_mut());
                            closing = Some(now);
                            now
                        }
                    };
                    // Someone waits for this place: a client that does not
                    // answer the GOAWAY's PING (or stopped reading) has
                    // ROOM_CLOSE_MS, not a whole `header_read_timeout`
                    // (nor more than was left of it, if already closing).
                    // A request in flight keeps its own deadlines.
                    let room_limits = Limits {
                        header_read_ms: limits.header_read_ms.min((now + ROOM_CLOSE_MS).saturating_sub(since)),
                        ..limits
                    };
                    watchdog = Box::pin(watch(state.clone(), room_limits, closing, false));
                } else {
                    room.not_now();
                }
            }
            verdict = &mut watchdog => match verdict {
                Verdict::Idle if closing.is_none() => {
                    tracing::debug!(%remote, "idle: closing gracefully");
                    graceful(conn.as_mut());
                    closing = Some(crate::clock::now_ms());
                    watchdog = Box::pin(watch(state.clone(), limits, closing, false));
                }
                Verdict::Idle | Verdict::Drop | Verdict::Park => {
                    tracing::debug!(%remote, "connection dropped by timeout");
                    // A response cut off (`send_timeout`, the drain's
                    // end) ends with a reset, as on plain TCP.
                    state.abort_if_in_flight();
                    return Err(Box::new(Dropped));
                }
            },
        }
    }
}

/// How long a connection asked to make room (see `places`) has to finish
/// closing, when nothing is in flight: an HTTP/2 client answers the
/// GOAWAY's PING within a round trip.
const ROOM_CLOSE_MS: u64 = 1000;

/// On shutdown: the wait for one more request on a connection (see
/// [`DRAIN_LINGER`]). Armed only once the server drains: no timer per
/// connection before.
#[derive(Default)]
pub(crate) struct Linger(Option<Pin<Box<tokio::time::Sleep>>>);

impl Linger {
    /// The server drains: responses from now on close their connection.
    pub(crate) fn start(&mut self, state: &ConnState) {
        state.start_draining();
        self.0 = Some(Box::pin(tokio::time::sleep(DRAIN_LINGER)));
    }

    pub(crate) fn started(&self) -> bool {
        self.0.is_some()
    }

    /// Completes when the linger has passed; never before the drain.
    pub(crate) async fn wait(&mut self) {
        match self.0.as_mut() {
            Some(sleep) => sleep.await,
            None => std::future::pending().await,
        }
    }
}
