//! The admin listener (`[admin] listen`, loopback by default): a small
//! HTTP/1.1 server on a thread of its own, away from the public port and
//! its workers, so probes and scrapes answer even when the workers are
//! saturated.
//!
//! - `/livez`: 200 while the process answers;
//! - `/readyz`: 200 when it should get traffic; 503 while starting, while
//!   draining after SIGTERM, and while a store some route needs does not
//!   answer;
//! - `/metrics`: Prometheus text format (`metrics`);
//! - `/` and `/status.json`: the status page (`status`).

mod host;
mod metrics;
mod status;

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::app::App;
use crate::observe::Readiness;

/// Connections the admin listener keeps at once. Probes and scrapes need
/// few. Past it a new connection is still accepted, and the oldest is
/// closed: connections held open (idle, or a flood) can never keep a
/// liveness or readiness probe waiting.
const MAX_CONNECTIONS: usize = 1024;
/// How long a connection may take to send a request's head, and stay
/// idle between requests: probes and scrapers send theirs at once.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest a connection may last.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Time a store has to answer a readiness check: well inside a
/// balancer's check timeout (HAProxy's defaults to its interval, a
/// Kubernetes probe's to 1 s), so a slow store fails the check with a
/// reason, not the probe with a timeout.
const STORE_CHECK: Duration = Duration::from_millis(400);

/// A running admin listener.
#[derive(Debug)]
pub struct Admin {
    /// Where it listens.
    pub addr: SocketAddr,
    /// A duplicate of the listening socket (to hand over on upgrade).
    pub socket: TcpListener,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Admin {
    /// Stops accepting (after an upgrade: the successor answers from now
    /// on, on the same socket).
    pub fn stop_accepting(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The admin listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for [admin]")]
pub struct AdminError {
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: io::Error,
}

/// The app the admin listener reports on, set once its sites are loaded.
/// Until then `/livez` answers 200 and everything else 503 "not ready:
/// starting".
pub type Loading = Arc<std::sync::OnceLock<Arc<App>>>;

/// Binds `addr` (exclusively: no port sharing), or takes `inherited` (a
/// socket handed over by the process this one replaces), and serves the
/// admin endpoints for `app` (from before it is loaded) until the process
/// exits or [`Admin::stop_accepting`].
pub fn start(
    app: Loading,
    addr: SocketAddr,
    hosts: &[String],
    inherited: Option<TcpListener>,
) -> Result<Admin, AdminError> {
    let hosts: Arc<[String]> = hosts.into();
    let error = |source| AdminError { addr, source };
    let listener = match inherited {
        Some(l) => l,
        None => crate::server::listener::bind_single(addr).map_err(error)?,
    };
    listener.set_nonblocking(true).map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    let socket = listener.try_clone().map_err(error)?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(error)?;
    std::thread::Builder::new()
        .name("swan-admin".to_owned())
        .spawn(move || {
            runtime.block_on(async {
                tokio::select! {
                    () = serve(app, hosts, listener) => {}
                    Ok(()) = stopped => {}
                }
            });
        })
        .map_err(error)?;
    Ok(Admin {
        addr: bound,
        socket,
        stop: Some(stop),
    })
}

async fn serve(app: Loading, hosts: Arc<[String]>, listener: TcpListener) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        tracing::error!("cannot register the admin listener");
        return;
    };
    let mut open: std::collections::VecDeque<tokio::task::AbortHandle> =
        std::collections::VecDeque::new();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        open.retain(|task| !task.is_finished());
        if open.len() >= MAX_CONNECTIONS
            && let Some(oldest) = open.pop_front()
        {
            oldest.abort();
        }
        let (app, hosts) = (app.clone(), hosts.clone());
        let task = tokio::spawn(async move {
            let service = service_fn(move |req| {
                let (app, hosts) = (app.clone(), hosts.clone());
                async move {
                    let mut res = answer(&app, &hosts, req).await;
                    res.headers_mut()
                        .insert(header::SERVER, crate::app::SERVER_NAME);
                    Ok::<_, Infallible>(res)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
        open.push_back(task.abort_handle());
    }
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    h.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    res
}

/// Readiness with its reason: `Ok(())` ready, `Err(why)` not. `known`:
/// the stores' states when the caller has them (the status pages ping
/// every store); else the stores readiness needs are pinged now.
async fn readiness(app: &App, known: Option<&[StoreState]>) -> Result<(), String> {
    match app.observe.readiness() {
        Readiness::Starting => return Err("starting".to_owned()),
        Readiness::Draining => return Err("draining".to_owned()),
        Readiness::Ready => {}
    }
    if !app.admin.as_ref().is_none_or(|a| a.ready_needs_stores) {
        return Ok(());
    }
    // The stores some route lists now: one a reload left unlisted holds
    // up no request.
    let sites = app.sites.load();
    let listed = |name: &str| {
        sites
            .iter()
            .any(|s| s.config.stores_listed().any(|l| l == name))
    };
    let pinged;
    let states = match known {
        Some(states) => states,
        None => {
            pinged = store_states(app, &listed).await;
            &pinged
        }
    };
    match states
        .iter()
        .find(|(name, problem)| problem.is_some() && listed(name))
    {
        Some((name, Some(why))) => Err(format!("store {name}: {why}")),
        _ => Ok(()),
    }
}

/// A store's name, and `None` when it answers a ping within
/// [`STORE_CHECK`], else why not.
type StoreState = (String, Option<String>);

/// The states of the opened stores `which` accepts, pinged at once. The
/// status page and `swan_store_up` show every store, listed by a route or
/// not, whatever `ready_needs_stores` says: an outage readiness is told to
/// ignore still shows.
async fn store_states(app: &App, which: impl Fn(&str) -> bool + Sync) -> Vec<StoreState> {
    let Some(loader) = &app.loader else {
        return Vec::new();
    };
    let checks = loader
        .stores()
        .in_force()
        .filter(|store| which(store.name()))
        .map(|store| async move {
            let problem = match tokio::time::timeout(STORE_CHECK, store.ping()).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!(
                    "unreachable: no answer in {} ms",
                    STORE_CHECK.as_millis()
                )),
            };
            (store.name().to_owned(), problem)
        });
    futures_util::future::join_all(checks).await
}

/// What the admin listener answers.
#[derive(Clone, Copy)]
enum Page {
    Live,
    Ready,
    Metrics,
    StatusJson,
    Status,
}

/// The admin listener's paths, in the order its 404 lists them.
const PAGES: [(&str, Page); 5] = [
    ("/livez", Page::Live),
    ("/readyz", Page::Ready),
    ("/metrics", Page::Metrics),
    ("/status.json", Page::StatusJson),
    ("/", Page::Status),
];

async fn answer(app: &Loading, hosts: &[String], req: Request<Incoming>) -> Response<Full<Bytes>> {
    // The Host is checked as on the public port (RFC 9112 §3.2: HTTP/1.1
    // needs one, and no request two or a malformed one).
    if let Err(e) = crate::request::checks::host(&req) {
        return reply(StatusCode::BAD_REQUEST, "text/plain", format!("{e}\n"));
    }
    if !host::allowed(crate::app::host_of(&req), hosts) {
        return reply(
            StatusCode::MISDIRECTED_REQUEST,
            "text/plain",
            "misdirected: the admin listener answers IP addresses, localhost and the names [admin] hosts lists\n",
        );
    }
    let page = PAGES
        .iter()
        .find(|(path, _)| *path == req.uri().path())
        .map(|&(_, page)| page);
    let Some(page) = page else {
        // 404 for any other path, whatever the method.
        let paths: Vec<&str> = PAGES.iter().map(|(path, _)| *path).collect();
        return reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            format!("not found: try {}\n", paths.join(", ")),
        );
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return method_not_allowed();
    }
    // While the sites load (source builds, compiles: it can take minutes)
    // the process answers, and is not ready.
    let Some(app) = app.get() else {
        return match page {
            Page::Live => reply(StatusCode::OK, "text/plain", "ok\n"),
            _ => {
                let mut res = reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    "not ready: starting\n",
                );
                res.headers_mut()
                    .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
                res
            }
        };
    };
    answer_page(app, page).await
}

fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut res = reply(
        StatusCode::METHOD_NOT_ALLOWED,
        "text/plain",
        "GET or HEAD\n",
    );
    res.headers_mut()
        .insert(header::ALLOW, http::HeaderValue::from_static("GET, HEAD"));
    res
}

async fn answer_page(app: &Arc<App>, page: Page) -> Response<Full<Bytes>> {
    match page {
        Page::Live => reply(StatusCode::OK, "text/plain", "ok\n"),
        Page::Ready => match readiness(app, None).await {
            Ok(()) => reply(StatusCode::OK, "text/plain", "ready\n"),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        Page::Metrics => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics::render(app, store_states(app, |_| true).await),
        ),
        Page::StatusJson => {
            let stores = store_states(app, |_| true).await;
            let ready = readiness_word(app, &stores).await;
            reply(
                StatusCode::OK,
                "application/json",
                status::json(app, &ready, &stores).to_string(),
            )
        }
        Page::Status => {
            let stores = store_states(app, |_| true).await;
            let ready = readiness_word(app, &stores).await;
            let mut res = reply(
                StatusCode::OK,
                "text/html; charset=utf-8",
                status::html(&status::json(app, &ready, &stores)),
            );
            // The page has its own styles and nothing else: no script, no
            // other origin, not framed.
            res.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                http::HeaderValue::from_static(
                    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
                ),
            );
            res
        }
    }
}

async fn readiness_word(app: &App, stores: &[StoreState]) -> String {
    match readiness(app, Some(stores)).await {
        Ok(()) => "ready".to_owned(),
        Err(why) => why,
    }
}
