//! The front end: worker threads, accept loops, connection limits and the
//! graceful drain.
//!
//! Two runtime models (see `RuntimeModel`): one current-thread tokio
//! runtime per worker, each accepting on its own `SO_REUSEPORT` socket
//! (default), or one shared work-stealing runtime. Both drain the same way:
//! on shutdown, accepting stops, every connection is asked to close after
//! its in-flight requests, and whatever is left at the drain deadline is
//! dropped.

mod client_gone;
mod conn;
pub mod handover;
pub mod listener;
mod parking;
mod places;
mod proxy_protocol;
mod refused_head;
mod sendfile;
mod sent_body;
mod stream;
pub mod tls;
mod watchdog;

use std::future::Future;
use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use crate::app::App;
use crate::clock;
use crate::config::RuntimeModel;
use crate::observe::throttle::Throttle;
use crate::request::Peer;
use watchdog::Limits;

/// Pause after an accept error such as running out of file descriptors.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A worker runtime or thread could not be started.
    #[error("cannot start worker threads")]
    Runtime(#[source] io::Error),
    /// No listening socket was given.
    #[error("no listening socket")]
    NoListener,
    /// TLS listeners are configured and the certificate cannot be served.
    #[error("cannot start TLS")]
    Tls(#[source] tls::TlsError),
}

/// What connections to one listening socket speak.
#[derive(Clone)]
struct Kind {
    tls: Option<TlsAcceptor>,
    proxy_protocol: bool,
}

/// Serves `app` on already bound sockets until `shutdown` completes, then
/// drains for at most the configured drain deadline.
///
/// `listeners` holds one group per address of `app.server.listen`, in the
/// same order; a group has one socket per worker (from [`listener::bind`])
/// or a single socket that all workers share.
pub async fn serve(
    app: Arc<App>,
    listeners: Vec<Vec<TcpListener>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    if listeners.iter().all(Vec::is_empty) {
        return Err(ServeError::NoListener);
    }
    clock::start();
    let acceptor = match &app.server.tls {
        Some(t) if app.server.listen.iter().any(|l| l.tls) => {
            Some(tls::acceptor(t).map_err(ServeError::Tls)?)
        }
        _ => None,
    };
    let kinds: Vec<Kind> = (0..listeners.len())
        .map(|i| {
            let l = app.server.listen.get(i);
            Kind {
                tls: l.filter(|l| l.tls).and(acceptor.clone()),
                proxy_protocol: l.is_some_and(|l| l.proxy_protocol),
            }
        })
        .collect();
    let (tx, rx) = watch::channel(false);
    let connections = places::Places::new(app.server.max_connections);
    let workers = app.server.workers.max(1);
    let mut done = Vec::new();
    match app.server.runtime {
        RuntimeModel::PerCore => {
            for w in 0..workers {
                let sockets =
                    sockets_for(&listeners, &kinds, w, workers).map_err(ServeError::Runtime)?;
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(ServeError::Runtime)?;
                let work = worker(app.clone(), sockets, rx.clone(), connections.clone());
                done.push(run_on_thread(format!("swan-worker-{w}"), runtime, work)?);
            }
            // Every worker has its own descriptors of the sockets it
            // accepts on. Kept here, these would hold the sockets listening
            // after the workers stop accepting: the kernel would go on
            // queueing connections that nobody answers until exit.
            drop(listeners);
        }
        RuntimeModel::Shared => {
            let sockets: Vec<(TcpListener, Kind)> = listeners
                .into_iter()
                .zip(kinds)
                .flat_map(|(group, kind)| group.into_iter().map(move |s| (s, kind.clone())))
                .collect();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name("swan-worker")
                .enable_all()
                .build()
                .map_err(ServeError::Runtime)?;
            let work = worker(app.clone(), sockets, rx, connections);
            done.push(run_on_thread("swan-main".to_owned(), runtime, work)?);
        }
    }
    app.observe.set_readiness(crate::observe::Readiness::Ready);
    shutdown.await;
    app.observe
        .set_readiness(crate::observe::Readiness::Draining);
    tracing::info!("shutting down: no new connections, draining");
    let _ = tx.send(true);
    for d in done {
        let _ = d.await;
    }
    Ok(())
}

/// Runs `work` to completion on `runtime` in a thread of its own; the
/// receiver fires when the runtime (and every task left on it) is gone.
fn run_on_thread(
    name: String,
    runtime: tokio::runtime::Runtime,
    work: impl Future<Output = ()> + Send + 'static,
) -> Result<oneshot::Receiver<()>, ServeError> {
    let (done_tx, done_rx) = oneshot::channel();
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            runtime.block_on(work);
            drop(runtime);
            let _ = done_tx.send(());
        })
        .map_err(ServeError::Runtime)?;
    Ok(done_rx)
}

/// The sockets worker `w` of `workers` accepts on: its own socket of each
/// group (several when a group has more sockets than there are workers, as
/// one inherited from a process with more workers may), or a duplicate of
/// one shared with other workers when it has fewer.
fn sockets_for(
    listeners: &[Vec<TcpListener>],
    kinds: &[Kind],
    w: usize,
    workers: usize,
) -> io::Result<Vec<(TcpListener, Kind)>> {
    let mut mine = Vec::new();
    for (g, kind) in listeners.iter().zip(kinds).filter(|(g, _)| !g.is_empty()) {
        if g.len() <= workers {
            mine.push((g[w % g.len()].try_clone()?, kind.clone()));
        } else {
            for s in g.iter().skip(w).step_by(workers) {
                mine.push((s.try_clone()?, kind.clone()));
            }
        }
    }
    Ok(mine)
}

/// One runtime's share of the work: accept loops, then the drain.
async fn worker(
    app: Arc<App>,
    sockets: Vec<(TcpListener, Kind)>,
    shutdown: watch::Receiver<bool>,
    connections: Arc<places::Places>,
) {
    let tracker = TaskTracker::new();
    let builder = Arc::new(conn::builders(&app.server));
    let limits = Limits::from_config(&app.server);
    // Connections wait on a channel of this worker's own, relayed from the
    // process-wide one: every wake-up of a connection polls its shutdown
    // future, and the channel's lock then stays on this thread.
    // Measured: +5% requests/s at 1,000 connections, +3.5% at 10,000.
    let shutdown = {
        let (local_tx, local_rx) = watch::channel(*shutdown.borrow());
        let mut global = shutdown;
        tokio::spawn(async move {
            while !*global.borrow_and_update() {
                if global.changed().await.is_err() {
                    break;
                }
            }
            let _ = local_tx.send(true);
        });
        local_rx
    };
    let mut accepting = Vec::new();
    for (socket, kind) in sockets {
        let listener = match tokio::net::TcpListener::from_std(socket) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "cannot register listener");
                continue;
            }
        };
        accepting.push(tokio::spawn(accept_loop(
            listener,
            kind,
            app.clone(),
            builder.clone(),
            shutdown.clone(),
            connections.clone(),
            tracker.clone(),
            limits,
        )));
    }
    for a in accepting {
        let _ = a.await;
    }
    tracker.close();
    if tokio::time::timeout(app.server.drain_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            left = tracker.len(),
            "drain deadline passed; closing remaining connections"
        );
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the worker's shared parts, once per socket"
)]
async fn accept_loop(
    listener: tokio::net::TcpListener,
    kind: Kind,
    app: Arc<App>,
    builder: Arc<conn::Builders>,
    mut shutdown: watch::Receiver<bool>,
    connections: Arc<places::Places>,
    tracker: TaskTracker,
    limits: Limits,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        // Accepted first, then given a place: a loop waiting for a place
        // before accepting would hold one idle (every listener of every
        // worker has its own loop), and connections would queue while
        // places were free. At the limit, each loop holds at most one
        // accepted connection until a place frees.
        let (stream, remote) = tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    if !is_transient(&e) {
                        tracing::warn!(error = %e, "accept failed; backing off");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                    continue;
                }
            },
        };
        let slot = match connections.try_take(&app) {
            Some(slot) => slot,
            None => tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                slot = connections.take(&app) => slot,
            },
        };
        let _ = stream.set_nodelay(true);
        let (app, builder, shutdown) = (app.clone(), builder.clone(), shutdown.clone());
        if kind.tls.is_none() && !kind.proxy_protocol {
            let peer = Peer::direct(remote, false);
            tracker.spawn(parking::serve(
                stream, peer, app, builder, shutdown, limits, slot,
            ));
        } else {
            tracker.spawn(handshake(
                stream,
                remote,
                kind.clone(),
                app,
                builder,
                shutdown,
                limits,
                slot,
            ));
        }
    }
}

/// A connection that starts with a PROXY header, a TLS handshake, or
/// both, all within one header read timeout; then served like any other.
#[expect(clippy::too_many_arguments, reason = "one connection's parts")]
async fn handshake(
    mut stream: tokio::net::TcpStream,
    remote: std::net::SocketAddr,
    kind: Kind,
    app: Arc<App>,
    builder: Arc<conn::Builders>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
    slot: places::Slot,
) {
    let deadline = tokio::time::Instant::now() + app.server.header_read_timeout;
    let mut peer = Peer::direct(remote, kind.tls.is_some());
    if kind.proxy_protocol {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match proxy_protocol::read_header(&mut stream, remote, &app.server.proxy, left).await {
            Ok(client) => {
                peer.client = client.addr;
                peer.tls |= client.tls;
            }
            Err(proxy_protocol::ProxyError::Closed) => {
                tracing::debug!(%remote, "closed before its PROXY header (a TCP health check)");
                return;
            }
            Err(e) => {
                app.observe.proxy_refused.add(1);
                // A balancer left out of `trusted` has every connection
                // refused: worth a warning, at most one per 10 s.
                static REFUSED: Throttle = Throttle::new(Duration::from_secs(10));
                match REFUSED.allow() {
                    Some(more) => tracing::warn!(
                        %remote,
                        error = %e,
                        more,
                        "PROXY protocol header refused: connection closed (one such line per 10 s at most; `more` were refused since the last)"
                    ),
                    None => tracing::debug!(%remote, error = %e, "connection refused"),
                }
                return;
            }
        }
    }
    match kind.tls {
        None => parking::serve(stream, peer, app, builder, shutdown, limits, slot).await,
        Some(acceptor) => {
            // Plain HTTP (`http://` to an HTTPS port) gets a 400 that says
            // so, as from NGINX, not a TLS alert.
            if tokio::time::timeout_at(deadline, tls::starts_plain_http(&stream)).await == Ok(true)
            {
                // A request refused before any site saw it, not a
                // handshake that failed: counted and logged as one.
                conn::refused(&app.observe, peer, http::Version::HTTP_11, 400);
                tracing::debug!(%remote, "plain HTTP on a TLS listener: answered 400");
                tls::answer_plain_http(stream).await;
                return;
            }
            let state = Arc::new(watchdog::ConnState::new());
            let socket = stream::SocketStamp::new(stream, state.clone());
            match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
                Ok(Ok(tls)) => {
                    let conn = conn::Tls { stream: tls, state };
                    conn::serve(conn, peer, app, builder, shutdown, limits, slot).await;
                }
                Ok(Err(e)) => {
                    app.observe.tls_failed.add(1);
                    tracing::debug!(%remote, error = %e, "TLS handshake failed");
                }
                Err(_) => {
                    app.observe.tls_failed.add(1);
                    tracing::debug!(%remote, "TLS handshake timed out");
                }
            }
        }
    }
}

/// Errors that concern one connection only.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}
