//! `swan serve`: load, bind, print the banner, serve until a signal.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};

use swan::config::RuntimeModel;
use swan::reload::{ConfigSource, Reloader};
use swan::server::handover::{Handover, Inherited, ReadyReport};
use swan::site::Sites;
use swan::{App, Config, Overrides};

use super::{errln, human_bytes, outln, pid_file, systemd};

pub(crate) fn serve(config: Config, overrides: Overrides) -> anyhow::Result<()> {
    let started = Instant::now();
    // Resolved now: after an upgrade replaced the file, this path names the
    // new binary (while /proc/self/exe still names the old one).
    let program = started_as().context("cannot tell where the swan binary is")?;
    // Where hints point: the configuration file actually read.
    let file = config
        .file
        .as_deref()
        .map_or_else(|| "swan.toml".to_owned(), |f| f.display().to_string());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    // Before loading, which can take minutes (source builds): a SIGHUP,
    // SIGUSR1 or SIGUSR2 sent meanwhile (a log rotation, a reload) must not
    // meet the default action, which ends the process. They take effect
    // once serving. SIGTERM and SIGINT end a server that is still loading
    // at once (nothing is served yet), with exit 0 as after a drain.
    let mut signals = {
        let _context = runtime.enter();
        Signals::register()
    };
    let loading_stop = stop_while_loading();
    if let Some(warning) = swan::server::listener::descriptor_warning(config.server.max_connections)
    {
        tracing::warn!("{warning}");
    }
    // Started by an upgrade: the old process's sockets, not a second bind.
    // Taken before loading, which marks them close-on-exec: a source build
    // must not inherit them (or the pipe that says this process is ready).
    let mut inherited = Inherited::from_env().context("cannot take over from the old process")?;
    // The admin listener answers while the sites load (which can take
    // minutes): `/livez` 200, `/readyz` 503 "starting". Not in an upgrade:
    // the old process answers on the same socket until this one is ready,
    // and a probe must not meet a "starting" meanwhile.
    let loading = swan::admin::Loading::default();
    let mut admin_socket = config
        .admin
        .as_ref()
        .and_then(|a| inherited.as_mut().and_then(|h| h.take_admin(a.listen)));
    let start_admin = |socket| match &config.admin {
        Some(a) => swan::admin::start(loading.clone(), a.listen, &a.hosts, socket)
            .with_context(|| format!("pick another address with `listen` in [admin] of {file}"))
            .map(Some),
        None => Ok(None),
    };
    let mut admin = match admin_socket {
        None => start_admin(None)?,
        Some(_) => None,
    };
    let opening = match &inherited {
        Some(from) => swan::store::Opening::Upgrade {
            held: from.store_files().to_vec(),
        },
        None => swan::store::Opening::Alone,
    };
    let mut app = App::load_as(&config, &opening).context("cannot load the sites")?;
    app.start_access_log(&config.log)
        .with_context(|| format!("check `access` in [log] of {file}"))?;
    let per_addr = match config.server.runtime {
        RuntimeModel::PerCore => config.server.workers,
        RuntimeModel::Shared => 1,
    };
    let mut listeners = Vec::new();
    for (i, l) in config.server.listen.iter().enumerate() {
        let group = match inherited.as_mut().and_then(|h| h.take_group(i, l.addr)) {
            Some(g) => g,
            None => swan::server::listener::bind_group(l.addr, per_addr).map_err(|e| {
                let hint = if e.is_addr_in_use() {
                    format!("another process is using this address: pick a free one with --listen ADDR or `listen` in [server] of {file} (to replace a running swan without downtime, send it SIGUSR2)")
                } else if e.is_permission_denied() {
                    format!("ports below 1024 need root or the CAP_NET_BIND_SERVICE capability (`setcap cap_net_bind_service=+ep` on the binary, or `AmbientCapabilities=CAP_NET_BIND_SERVICE` in a systemd unit); or pick a port from 1024 with --listen ADDR or `listen` in [server] of {file}")
                } else {
                    format!("check the address given with --listen or `listen` in [server] of {file}")
                };
                anyhow::Error::new(e).context(hint)
            })?,
        };
        listeners.push(group);
    }
    let bound: Vec<_> = listeners
        .iter()
        .filter_map(|g| g.first().and_then(|s| s.local_addr().ok()))
        .collect();
    // Port 0 picked a port: the app (redirects to HTTPS) needs the real one.
    for (listener, addr) in app.server.listen.iter_mut().zip(&bound) {
        listener.addr = *addr;
    }
    let app = Arc::new(app);
    let _ = loading.set(app.clone());
    if let Some(socket) = admin_socket.take() {
        admin = start_admin(Some(socket))?;
    }
    let ready_report = inherited.as_mut().and_then(Inherited::take_ready);
    if let Some(unused) = inherited
        .as_ref()
        .map(Inherited::unused)
        .filter(|u| !u.is_empty())
    {
        tracing::info!(
            ?unused,
            "upgrade: closing inherited sockets this configuration does not listen on"
        );
    }
    drop(inherited);
    let handover = Handover::new(
        &listeners,
        admin.as_ref().map(|a| &a.socket),
        program,
        std::env::args_os().skip(1).collect(),
        app.loader
            .as_ref()
            .map(|l| l.stores().embedded_files())
            .unwrap_or_default(),
    )
    .context("cannot keep the listening sockets for upgrades")?;
    // Before the banner: a signal sent once the banner is out must not meet
    // the default action, which ends the process without a drain.
    let mut stop = {
        let _context = runtime.enter();
        Stop::register()
    };
    // From here a stop drains.
    drop(loading_stop);
    // Watching before the banner: a change made once the banner is out
    // (a deploy script waiting for it) is never missed.
    let reloader = Reloader::start(
        app.clone(),
        ConfigSource {
            file: config.file.clone(),
            overrides,
        },
    );
    let reloader = match reloader {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            tracing::warn!("{e}; hot reload is off");
            None
        }
    };
    print_banner(&config, &app.sites.load(), &bound, started);
    if let Some(admin) = &admin {
        say(
            &config,
            &format!("admin: http://{}/ (/livez, /readyz, /metrics)", admin.addr),
        );
    }
    let grace = config.server.drain_grace;
    let pid_path = config.server.pid_file.clone();
    let access_log = app.observe.access_log.clone();
    let served = runtime.block_on(async {
        // Stopped when a stop or an upgrade begins: a reload then would
        // tell systemd READY=1 after STOPPING=1, or speak for a process
        // that no longer is the service's.
        let reloading = match (reloader.clone(), signals.hup.take()) {
            (Some(r), Some(hup)) => Some(tokio::spawn(reload_on_sighup(r, hup)).abort_handle()),
            _ => None,
        };
        if let (Some(log), Some(usr1)) = (app.observe.access_log.clone(), signals.usr1.take()) {
            tokio::spawn(reopen_on_sigusr1(log, usr1));
        }
        tokio::spawn(when_ready(
            app.observe.clone(),
            ready_report,
            config.server.pid_file.clone(),
        ));
        let observe = app.observe.clone();
        let shutdown = async move {
            let stopped = tokio::select! {
                () = stop.recv() => true,
                () = upgrade_on_sigusr2(handover, signals.usr2, pid_path.clone()) => false,
            };
            if let Some(reloading) = &reloading {
                reloading.abort();
            }
            if stopped {
                systemd::stopping();
                drain_grace(&observe, grace, &mut stop).await;
            } else if let Some(admin) = admin.as_mut() {
                // The successor accepts on the same sockets (admin
                // included): stop at once, no grace needed.
                admin.stop_accepting();
            }
            // One more stop signal while in-flight requests finish ends
            // the process without waiting for them (as a second Ctrl-C).
            let log = observe.access_log.clone();
            tokio::spawn(async move {
                stop.recv().await;
                tracing::warn!("stop signal during the drain: exiting now; requests still in flight are cut off");
                // The lines of requests already answered are written
                // (at once, unless the log cannot be written: 5 s at most).
                if let Some(log) = log {
                    log.close();
                }
                if let Some(path) = &pid_path {
                    pid_file::remove_if_ours(path);
                }
                std::process::exit(1);
            });
        };
        swan::serve(app, listeners, shutdown).await
    });
    // Every request has been answered: write the lines still waiting.
    if let Some(log) = access_log {
        log.close();
    }
    // Its SIGHUP task holds a handle until the runtime goes: stop it now.
    if let Some(reloader) = &reloader {
        reloader.stop();
    }
    drop(reloader);
    if let Some(path) = &config.server.pid_file {
        pid_file::remove_if_ours(path);
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// The path this binary was started by, which an upgrade starts again: a
/// symlink stays a link (a versioned install flips it to the new
/// version), and a bare name is looked up on `PATH` as the shell did.
/// `current_exe` (`/proc/self/exe`) would name the file the link pointed
/// to at start, the old version.
/// The name is used only if it names, now, the very file running (a
/// wrapper may set any name, `exec -a`): else it falls back to that.
fn started_as() -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let running = std::env::current_exe()?;
    let identity = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let by_name = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| match p.components().count() {
            1 => p.to_str().and_then(swan::toolchain::on_path),
            _ => Some(p),
        })
        .and_then(|p| std::path::absolute(p).ok())
        .filter(|p| identity(p).is_some() && identity(p) == identity(&running));
    Ok(by_name.unwrap_or(running))
}

/// How long a new binary may take to be ready on upgrade (it loads and
/// compiles every servlet first; the compile cache makes that quick).
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// On SIGUSR2: starts the binary again (a new version if the file was
/// replaced) with this process's listening sockets, and returns once it is
/// ready. A new process that fails changes nothing: this one keeps serving
/// and waits for the next SIGUSR2.
async fn upgrade_on_sigusr2(
    handover: Handover,
    usr2: Option<Signal>,
    pid_path: Option<std::path::PathBuf>,
) {
    let Some(mut usr2) = usr2 else {
        return std::future::pending().await;
    };
    while usr2.recv().await.is_some() {
        tracing::info!("SIGUSR2 received: starting the new binary with the listening sockets");
        let upgrade = handover.start_successor(UPGRADE_TIMEOUT);
        tokio::pin!(upgrade);
        let started = loop {
            tokio::select! {
                started = &mut upgrade => break started,
                Some(()) = usr2.recv() => tracing::warn!(
                    "SIGUSR2 received while an upgrade is under way: ignored (send it again once this one has finished or failed)"
                ),
            }
        };
        match started {
            Ok(successor) => {
                systemd::handed_over(successor.pid);
                tracing::info!(
                    pid = successor.pid,
                    "upgrade: new process {} is ready; this one stops accepting and drains",
                    successor.pid
                );
                return;
            }
            Err(e) => {
                tracing::error!(
                    error = %format!("{:#}", anyhow::Error::new(e)),
                    "upgrade failed; this process keeps serving"
                );
                // The new process may have written its id before it was
                // stopped: the file names this one again.
                if let Some(path) = &pid_path {
                    write_pid_file(path);
                }
            }
        }
    }
    std::future::pending().await
}

fn write_pid_file(path: &std::path::Path) {
    if let Err(e) = pid_file::write(path) {
        tracing::error!(
            pid_file = %path.display(),
            error = %e,
            "cannot write the pid file; serving without it"
        );
    }
}

/// Once this process serves: writes the pid file, tells systemd, and the
/// process this one replaces (`report`, in an upgrade).
async fn when_ready(
    observe: Arc<swan::observe::Observe>,
    report: Option<ReadyReport>,
    pid_path: Option<std::path::PathBuf>,
) {
    while observe.readiness() != swan::observe::Readiness::Ready {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Before systemd hears READY=1: a unit's `PIDFile=` is read then.
    // Written here, not on a blocking thread: a stop that ends the runtime
    // meanwhile must find the file written (and remove it), never have it
    // renamed into place after the removal.
    if let Some(path) = &pid_path {
        write_pid_file(path);
    }
    systemd::ready();
    if let Some(report) = report {
        report.send();
        tracing::info!("upgrade: took over the listening sockets; the old process drains");
    }
}

async fn reload_on_sighup(reloader: Arc<Reloader>, mut hup: Signal) {
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP received: reading the configuration again");
        systemd::reloading();
        // Ready again once the configuration is read (applied or refused).
        let _ = reloader.reload_config_reported().await;
        systemd::ready();
    }
}

/// After a shutdown signal: `/readyz` fails at once, and for `grace` the
/// listeners keep accepting, so that load balancers see the process
/// leaving before connections are refused. A second signal ends the grace
/// early.
async fn drain_grace(
    observe: &swan::observe::Observe,
    grace: std::time::Duration,
    stop: &mut Stop,
) {
    observe.set_readiness(swan::observe::Readiness::Draining);
    if grace.is_zero() {
        return;
    }
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "draining: /readyz fails; still accepting during the grace period"
    );
    tokio::select! {
        _ = tokio::time::sleep(grace) => {}
        () = stop.recv() => tracing::info!("second signal: ending the grace period"),
    }
}

async fn reopen_on_sigusr1(log: swan::observe::access_log::AccessLog, mut usr1: Signal) {
    while usr1.recv().await.is_some() {
        tracing::info!("SIGUSR1 received: reopening the access log");
        log.reopen();
    }
}

/// Listens for `kind`; `None`, with a warning saying what is lost
/// (`without`), when it cannot. Needs a tokio runtime's context.
fn listen(kind: SignalKind, without: &str) -> Option<Signal> {
    match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for a signal; {without}");
            None
        }
    }
}

/// The signals swan answers besides stopping, registered before loading
/// since the default action for each of them ends the process.
struct Signals {
    hup: Option<Signal>,
    usr1: Option<Signal>,
    usr2: Option<Signal>,
}

impl Signals {
    /// Needs a tokio runtime's context.
    fn register() -> Self {
        Signals {
            hup: listen(
                SignalKind::hangup(),
                "the configuration reloads only when its file changes",
            ),
            usr1: listen(
                SignalKind::user_defined1(),
                "the access log is not reopened on rotation",
            ),
            usr2: listen(SignalKind::user_defined2(), "binary upgrades are off"),
        }
    }
}

/// SIGTERM or SIGINT: the first starts the drain, a second ends its grace.
struct Stop {
    term: Option<Signal>,
    int: Option<Signal>,
}

impl Stop {
    /// Needs a tokio runtime's context.
    fn register() -> Stop {
        Stop {
            term: listen(SignalKind::terminate(), "stop swan with SIGINT or SIGKILL"),
            int: listen(SignalKind::interrupt(), "stop swan with SIGTERM or SIGKILL"),
        }
    }

    async fn recv(&mut self) {
        async fn on(signal: &mut Option<Signal>) {
            match signal {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = on(&mut self.term) => tracing::info!("SIGTERM received"),
            () = on(&mut self.int) => tracing::info!("SIGINT received"),
        }
    }
}

/// Until what it returns is dropped, SIGTERM or SIGINT ends the process at
/// once, exit 0, with a line in the log (the signal's default action would
/// end it by the signal, status 143, and say nothing). On a thread and runtime of
/// its own: loading keeps the main thread busy. `None` if that thread
/// could not start (the default action then stays).
fn stop_while_loading() -> Option<LoadingStop> {
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let (listening, ready) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("swan-loading".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                let _ = listening.send(());
                return;
            };
            runtime.block_on(async move {
                let signals = (
                    signal(SignalKind::terminate()),
                    signal(SignalKind::interrupt()),
                );
                let _ = listening.send(());
                let (Ok(mut term), Ok(mut int)) = signals else {
                    return;
                };
                // A signal that came wins over the cancel: it is handled
                // here or by the drain's handlers, never by neither.
                let name = tokio::select! {
                    biased;
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                    _ = cancelled => return,
                };
                tracing::info!("{name} received while loading: stopped (nothing was served yet)");
                std::process::exit(0);
            });
        })
        .ok()?;
    // Listening before loading starts.
    ready.recv().ok()?;
    Some(LoadingStop {
        cancel: Some(cancel),
        thread: Some(thread),
    })
}

/// [`stop_while_loading`]'s thread: dropping this ends it, and waits until
/// it has (a signal that came meanwhile has been acted on).
struct LoadingStop {
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LoadingStop {
    fn drop(&mut self) {
        drop(self.cancel.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn print_banner(config: &Config, sites: &Sites, bound: &[std::net::SocketAddr], started: Instant) {
    let mut files = 0;
    let mut bytes = 0;
    let mut servlets = 0;
    let mut refused = 0;
    for site in sites.iter() {
        let s = site.cache.stats();
        files += s.cached_files + s.streamed_files;
        bytes += s.cached_bytes;
        servlets += site
            .servlets
            .routes
            .iter()
            .filter(|r| matches!(r.target, swan::servlet::Target::Servlet(_)))
            .count();
        refused += site.servlets.refused.len();
    }
    let refused = match refused {
        0 => String::new(),
        n => format!(" ({n} refused: see the log)"),
    };
    let urls: Vec<String> = bound
        .iter()
        .zip(&config.server.listen)
        .map(|(a, l)| {
            let scheme = if l.tls { "https" } else { "http" };
            format!("{scheme}://{a}/")
        })
        .collect();
    say(
        config,
        &format!(
            "swan {} ready in {} ms: {} ({} workers, {} runtime); {} site{}, {files} files, {} cached, {servlets} servlets{refused}",
            env!("CARGO_PKG_VERSION"),
            started.elapsed().as_millis(),
            urls.join(" "),
            config.server.workers,
            config.server.runtime.as_str(),
            config.sites.len(),
            if config.sites.len() == 1 { "" } else { "s" },
            human_bytes(bytes),
        ),
    );
}

/// Prints a line for the operator: on stdout, or on stderr when the
/// access log goes to stdout (whose readers expect only log lines).
fn say(config: &Config, line: &str) {
    if config.log.access == swan::config::AccessLogTarget::Stdout {
        errln!("{line}");
    } else {
        outln!("{line}");
    }
}
