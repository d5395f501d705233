//! Outbound HTTP from servlets, for both guest kinds (wasi:http's
//! `outgoing-handler` and the native ABI's `http_send`): denied unless a
//! route allows the destination.
//!
//! - **Allow-list**: `allowed_outbound_hosts` entries `scheme://host[:port]`,
//!   with `*` for any scheme, host or port and `*.example.com` for
//!   subdomains; no port means the scheme's default.
//! - **Addresses**: the name is resolved here and every address checked;
//!   the connection goes to a checked address (no second lookup, so no DNS
//!   rebinding). Loopback, private, link-local and other non-global
//!   addresses are refused unless the rule names that address literally
//!   (`http://127.0.0.1:8080`) or the route sets `outbound_private = true`.
//! - **Limits**: connect, first-byte and total timeouts (a guest may ask
//!   for shorter ones, never longer), and a cap on requests in flight.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use crate::config::{OutboundRule, canonical_host};
use crate::observe::throttle::Throttle;
use crate::servlet::ServletInfo;
use crate::servlet::public_address::is_global;
use crate::servlet::stats::ServletStats;

/// What one servlet may reach, and how.
#[derive(Debug)]
pub(crate) struct Outbound {
    /// The servlet's name, for the log.
    servlet: String,
    /// Refusals (one per reason: a frequent one must not hide a rare one)
    /// and failures are logged at most once a second each (a client may
    /// make a servlet fetch what it likes, once per request).
    refusals: [Throttle; 4],
    failures: Throttle,
    rules: Vec<OutboundRule>,
    allow_private: bool,
    connect_timeout: Duration,
    first_byte_timeout: Duration,
    total_timeout: Duration,
    in_flight: Arc<Semaphore>,
    /// Where refusals and failures are counted.
    stats: Arc<ServletStats>,
}

/// The cap on outbound requests in flight of the servlet compiled from
/// `file`, shared by every version of it that still runs: after a hot
/// reload the requests of the old version (finishing in flight) and of the
/// new one count against one `max_outbound_concurrency`, not one each. A
/// changed cap starts afresh.
fn shared_cap(file: &std::path::Path, max: usize) -> Arc<Semaphore> {
    type Caps = std::collections::HashMap<(std::path::PathBuf, usize), std::sync::Weak<Semaphore>>;
    static CAPS: std::sync::LazyLock<std::sync::Mutex<Caps>> =
        std::sync::LazyLock::new(Default::default);
    let Ok(mut caps) = CAPS.lock() else {
        return Arc::new(Semaphore::new(max));
    };
    caps.retain(|_, cap| cap.strong_count() > 0);
    let key = (file.to_path_buf(), max);
    if let Some(cap) = caps.get(&key).and_then(std::sync::Weak::upgrade) {
        return cap;
    }
    let cap = Arc::new(Semaphore::new(max));
    caps.insert(key, Arc::downgrade(&cap));
    cap
}

/// A destination checked against the rules.
#[derive(Debug, Clone)]
struct Destination {
    tls: bool,
    host: String,
    port: u16,
    /// The rule names this exact address.
    literal: Option<IpAddr>,
}

impl Destination {
    /// `host[:port]` as the Host header gives it: an IPv6 address in
    /// brackets, the port only when it is not the scheme's default.
    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.tls, self.port) {
            (true, 443) | (false, 80) => host,
            (_, port) => format!("{host}:{port}"),
        }
    }
}

impl Outbound {
    /// The rules and limits of `servlet`.
    pub(crate) fn new(servlet: &ServletInfo, stats: Arc<ServletStats>) -> Outbound {
        let (limits, file) = (&servlet.limits, &servlet.file);
        Outbound {
            servlet: servlet.name.clone(),
            refusals: [const { Throttle::new(Duration::from_secs(1)) }; 4],
            failures: Throttle::new(Duration::from_secs(1)),
            rules: limits.outbound.allowed_hosts.clone(),
            allow_private: limits.outbound.allow_private,
            connect_timeout: limits.outbound.connect_timeout,
            first_byte_timeout: limits.outbound.first_byte_timeout,
            total_timeout: limits.outbound.timeout,
            in_flight: shared_cap(file, limits.outbound.max_concurrency as usize),
            stats,
        }
    }

    fn check(&self, uri: &http::Uri) -> Result<Destination, Error> {
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(Error::HttpRequestUriInvalid),
        };
        let host = uri
            .host()
            .ok_or(Error::HttpRequestUriInvalid)?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        let host = canonical_host(host);
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let scheme = if tls { "https" } else { "http" };
        let mut matching = self
            .rules
            .iter()
            .filter(|r| r.matches(scheme, &host, port))
            .peekable();
        if matching.peek().is_none() {
            return Err(Error::HttpRequestDenied);
        }
        // Any matching rule that names the address allows it, wherever it
        // stands in the list.
        let literal = host
            .parse::<IpAddr>()
            .ok()
            .filter(|ip| matching.any(|rule| rule.host == ip.to_string()));
        Ok(Destination {
            tls,
            host,
            port,
            literal,
        })
    }

    /// Resolves and connects to an allowed destination.
    async fn connect(
        &self,
        dest: &Destination,
        timeout: Duration,
    ) -> Result<Box<dyn Stream>, Error> {
        let addrs: Vec<SocketAddr> = match dest.host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, dest.port)],
            Err(_) => tokio::time::timeout(
                timeout,
                tokio::net::lookup_host((dest.host.as_str(), dest.port)),
            )
            .await
            .map_err(|_| Error::DnsTimeout)?
            .map_err(|e| Error::DnsError {
                rcode: Some(e.to_string()),
                info_code: None,
            })?
            .collect(),
        };
        let allowed: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| self.allow_private || dest.literal == Some(a.ip()) || is_global(a.ip()))
            .collect();
        if allowed.is_empty() {
            return Err(Error::DestinationIpProhibited);
        }
        let tcp = tokio::time::timeout(timeout, async {
            let mut last = None;
            for addr in &allowed {
                match tokio::net::TcpStream::connect(addr).await {
                    Ok(s) => return Ok(s),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| io::Error::other("no address")))
        })
        .await
        .map_err(|_| Error::ConnectionTimeout)?
        .map_err(|e| match e.kind() {
            io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
            _ => Error::Connect(e),
        })?;
        let _ = tcp.set_nodelay(true);
        if !dest.tls {
            return Ok(Box::new(tcp));
        }
        let name = rustls::pki_types::ServerName::try_from(dest.host.clone())
            .map_err(|_| Error::HttpRequestUriInvalid)?;
        let tls = tokio::time::timeout(timeout, tls_connector().connect(name, tcp))
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(tls_error)?;
        Ok(Box::new(tls))
    }

    /// Sends `req` as [`Outbound::send_checked`] does, and logs why when
    /// it is refused or fails before its response head: a refusal (the
    /// rules, a private address, the cap) as a warning an operator acts on,
    /// an upstream that failed as information, each at most once a second
    /// per servlet. The destination is logged as scheme, host and port,
    /// never its path or query (which may carry secrets).
    pub(crate) async fn send<B>(
        self: &Arc<Self>,
        req: Request<B>,
        options: Option<RequestOptions>,
        request_id: &str,
    ) -> Result<
        (
            Response<OutboundBody>,
            impl Future<Output = Result<(), Error>> + Send + use<B>,
        ),
        Error,
    >
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let uri = req.uri();
        let to = format!(
            "{}://{}:{}",
            uri.scheme_str().unwrap_or("?"),
            uri.host().unwrap_or("?"),
            uri.port_u16()
                .unwrap_or(if uri.scheme_str() == Some("https") {
                    443
                } else {
                    80
                })
        );
        let sent = self.send_checked(req, options).await;
        if let Err(e) = &sent {
            self.log_failure(e, &to, request_id);
        }
        sent
    }

    /// Logs why a request to `to` failed before its response head, at
    /// most once a second for refusals and once for failures (with how
    /// many more there were since the last line).
    fn log_failure(&self, e: &Error, to: &str, request_id: &str) {
        let servlet = &self.servlet;
        let (kind, why) = match e {
            Error::HttpRequestUriInvalid => (
                0,
                "the URL is not an absolute http or https URL with a host",
            ),
            Error::HttpRequestDenied => {
                (1, "no rule of the route's allowed_outbound_hosts allows it")
            }
            Error::DestinationIpProhibited => (
                2,
                "the destination is a loopback, private or link-local address (allow it with a rule naming the address, or outbound_private = true)",
            ),
            Error::ConnectionLimitReached => {
                (3, "max_outbound_concurrency requests already in flight")
            }
            e => {
                self.stats.outbound_failed.add(1);
                if let Some(more) = self.failures.allow() {
                    tracing::info!(%servlet, request_id, %to, error = %e, more, "outbound request failed");
                }
                return;
            }
        };
        self.stats.outbound_refused[kind].add(1);
        if let Some(more) = self.refusals[kind].allow() {
            tracing::warn!(%servlet, request_id, %to, more, "outbound request refused: {why}");
        }
    }

    /// Sends `req` (an absolute URI) if the rules allow it. The response
    /// body ends with an error past the total timeout; the returned future
    /// drives the connection and must be polled while the body is read.
    async fn send_checked<B>(
        self: &Arc<Self>,
        mut req: Request<B>,
        options: Option<RequestOptions>,
    ) -> Result<
        (
            Response<OutboundBody>,
            impl Future<Output = Result<(), Error>> + Send + use<B>,
        ),
        Error,
    >
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let started = Instant::now();
        let dest = self.check(req.uri())?;
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| Error::ConnectionLimitReached)?;
        let shorter = |asked: Option<Duration>, ours: Duration| asked.map_or(ours, |a| a.min(ours));
        let connect = shorter(
            options.and_then(|o| o.connect_timeout),
            self.connect_timeout,
        );
        let first_byte = shorter(
            options.and_then(|o| o.first_byte_timeout),
            self.first_byte_timeout,
        );
        // The total timeout holds the whole exchange, the head included;
        // the connect timeout holds resolving, connecting and the TLS and
        // HTTP handshakes together.
        let deadline = started + self.total_timeout;
        let connect_by = (Instant::now() + connect).min(deadline);
        let stream = tokio::time::timeout_at(connect_by, self.connect(&dest, connect))
            .await
            .map_err(|_| Error::ConnectionTimeout)??;
        let (mut sender, conn) = tokio::time::timeout_at(
            connect_by,
            hyper::client::conn::http1::Builder::new()
                .handshake(hyper_util::rt::TokioIo::new(stream)),
        )
        .await
        .map_err(|_| Error::ConnectionTimeout)??;
        let first_byte = first_byte.min(deadline.saturating_duration_since(Instant::now()));
        // On the wire the target is origin-form; the Host header carries
        // the destination as checked, in canonical form: never a user-info
        // part (`user@host`), and never a spelling the rules would not
        // accept (`[127.0.0.1]`, `:+80`, `:080`) that an upstream might
        // route to another site.
        if let Ok(host) = http::HeaderValue::from_str(&dest.authority()) {
            req.headers_mut().insert(http::header::HOST, host);
        }
        let path = match req.uri().path_and_query().map(|p| p.as_str()) {
            // `http://host?q`: the path is empty, the target `/?q`.
            Some(p) if p.starts_with('?') => format!("/{p}"),
            Some(p) if !p.is_empty() => p.to_owned(),
            _ => "/".to_owned(),
        };
        *req.uri_mut() = http::Uri::try_from(path).map_err(|_| Error::HttpRequestUriInvalid)?;
        let req = req.map(|b| b.map_err(|e| Error::InternalError(Some(e.into().to_string()))));
        let mut conn = Box::pin(conn);
        let mut send = Box::pin(tokio::time::timeout(first_byte, sender.send_request(req)));
        // Wait for the head while driving the connection.
        let mut conn_done = false;
        let res = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = send.as_mut().poll(cx) {
                return Poll::Ready(
                    r.map_err(|_| Error::ConnectionReadTimeout)?
                        .map_err(Error::from),
                );
            }
            if !conn_done {
                match ready!(conn.as_mut().poll(cx)) {
                    Ok(()) => conn_done = true,
                    Err(e) => return Poll::Ready(Err(Error::from(e))),
                }
            }
            Poll::Pending
        })
        .await?;
        // The guest's own wait between body bytes, when it set one (under
        // the total timeout, which always holds).
        let between = options
            .and_then(|o| o.between_bytes_timeout)
            .filter(|&b| b < self.total_timeout)
            .map(|b| (Box::pin(tokio::time::sleep(b)), b));
        let res = res.map(|incoming| OutboundBody {
            inner: incoming,
            deadline: Box::pin(tokio::time::sleep_until(deadline)),
            between,
            _permit: permit,
        });
        let io = async move {
            if conn_done {
                return Ok(());
            }
            conn.await.map_err(Error::from)
        };
        Ok((res, io))
    }
}

/// A response body from upstream, cut off at the total timeout.
pub(crate) struct OutboundBody {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<Sleep>>,
    /// The guest's `between-bytes-timeout`: the timer, restarted at each
    /// frame, and its length.
    between: Option<(Pin<Box<Sleep>>, Duration)>,
    /// The request counts against the cap until its body is done.
    _permit: OwnedSemaphorePermit,
}

impl HttpBody for OutboundBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
        }
        let polled = Pin::new(&mut self.inner)
            .poll_frame(cx)
            .map_err(Error::from);
        if let Some((gap, length)) = &mut self.between {
            if polled.is_ready() {
                gap.as_mut().reset(tokio::time::Instant::now() + *length);
            } else if gap.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(Err(Error::ConnectionReadTimeout)));
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The wasi:http hooks of a component: outbound requests go through
/// [`Outbound`].
pub(crate) struct OutboundHooks {
    outbound: Arc<Outbound>,
    /// The request being served, for the log (the instance's output lines
    /// read it here too).
    pub(crate) request_id: String,
}

impl OutboundHooks {
    pub(crate) fn new(outbound: Arc<Outbound>) -> OutboundHooks {
        OutboundHooks {
            outbound,
            request_id: String::new(),
        }
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;

/// Largest write to a component's outgoing body (response or request);
/// one more such chunk waits in its buffer. wasmtime's default, 1 MiB,
/// let a guest holding many bodies keep gigabytes on the host.
pub(crate) const OUTGOING_BODY_CHUNK: usize = 64 << 10;

impl WasiHttpHooks for OutboundHooks {
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        OUTGOING_BODY_CHUNK
    }

    fn send_request(
        &mut self,
        request: Request<WasiBody>,
        options: Option<RequestOptions>,
        _io: IoFuture,
    ) -> Box<dyn Future<Output = Result<(Response<WasiBody>, IoFuture), Error>> + Send> {
        let outbound = self.outbound.clone();
        let request_id = self.request_id.clone();
        Box::new(async move {
            let (res, io) = outbound.send(request, options, &request_id).await?;
            Ok((res.map(|b| b.boxed_unsync()), Box::new(io) as IoFuture))
        })
    }
}

/// A failed TLS handshake as wasi:http names it: a certificate the roots
/// do not vouch for (or for another name) is `TLS-certificate-error`, an
/// alert from the server `TLS-alert-received`, anything else
/// `TLS-protocol-error`.
fn tls_error(e: io::Error) -> Error {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented) => {
            Error::TlsCertificateError
        }
        Some(rustls::Error::AlertReceived(alert)) => Error::TlsAlertReceived {
            alert_id: Some(u8::from(*alert)),
            alert_message: Some(format!("{alert:?}")),
        },
        _ => Error::Tls(e),
    }
}

trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// The TLS client configuration, built once: Mozilla's roots, ring.
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .unwrap_or_else(|_| {
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth()
            });
        Arc::new(config)
    });
    tokio_rustls::TlsConnector::from(config.clone())
}
