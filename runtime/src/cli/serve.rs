//! `swan serve`: load, bind, print the banner, serve until a signal.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use swan::config::RuntimeModel;
use swan::reload::{ConfigSource, Reloader};
use swan::site::Sites;
use swan::{App, Config, Overrides};

use super::human_bytes;

pub(crate) fn serve(config: Config, overrides: Overrides) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut app = App::load(&config).context("cannot load the sites")?;
    app.start_access_log(&config.log)
        .context("check `access` in [log] of swan.toml")?;
    let per_addr = match config.server.runtime {
        RuntimeModel::PerCore => config.server.workers,
        RuntimeModel::Shared => 1,
    };
    let addrs: Vec<std::net::SocketAddr> = config.server.listen.iter().map(|l| l.addr).collect();
    let listeners = swan::bind(&addrs, per_addr).map_err(|e| {
        let hint = if e.is_addr_in_use() {
            "another process is using this address: pick a free one with --listen ADDR or `listen` in [server] of swan.toml"
        } else {
            "check the address given with --listen or `listen` in [server] of swan.toml"
        };
        anyhow::Error::new(e).context(hint)
    })?;
    let bound: Vec<_> = listeners
        .iter()
        .filter_map(|g| g.first().and_then(|s| s.local_addr().ok()))
        .collect();
    // Port 0 picked a port: the app (redirects to HTTPS) needs the real one.
    for (listener, addr) in app.server.listen.iter_mut().zip(&bound) {
        listener.addr = *addr;
    }
    let app = Arc::new(app);
    let admin = match &config.admin {
        Some(a) => Some(
            swan::admin::start(app.clone(), a.listen)
                .context("pick another address with `listen` in [admin] of swan.toml")?,
        ),
        None => None,
    };
    print_banner(&config, &app.sites.load(), &bound, started);
    if let Some(admin) = &admin {
        println!("admin: http://{}/ (/livez, /readyz, /metrics)", admin.addr);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
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
    let grace = config.server.drain_grace;
    runtime.block_on(async {
        if let Some(r) = reloader.clone() {
            tokio::spawn(reload_on_sighup(r));
        }
        if let Some(log) = app.observe.access_log.clone() {
            tokio::spawn(reopen_on_sigusr1(log));
        }
        let observe = app.observe.clone();
        let shutdown = async move {
            shutdown_signal().await;
            drain_grace(&observe, grace).await;
        };
        swan::serve(app, listeners, shutdown).await
    })?;
    drop(reloader);
    tracing::info!("stopped");
    Ok(())
}

async fn reload_on_sighup(reloader: Arc<Reloader>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!(
            "cannot listen for SIGHUP; configuration reloads only when the file changes"
        );
        return;
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP received: reading the configuration again");
        reloader.reload_config();
    }
}

/// After a shutdown signal: `/readyz` fails at once, and for `grace` the
/// listeners keep accepting, so that load balancers see the process
/// leaving before connections are refused. A second signal ends the grace
/// early.
async fn drain_grace(observe: &swan::observe::Observe, grace: std::time::Duration) {
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
        _ = shutdown_signal() => tracing::info!("second signal: ending the grace period"),
    }
}

async fn reopen_on_sigusr1(log: swan::observe::access_log::AccessLog) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        tracing::warn!("cannot listen for SIGUSR1; the access log is not reopened on rotation");
        return;
    };
    while usr1.recv().await.is_some() {
        tracing::info!("SIGUSR1 received: reopening the access log");
        log.reopen();
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for signals; stop swan with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

fn print_banner(config: &Config, sites: &Sites, bound: &[std::net::SocketAddr], started: Instant) {
    let mut files = 0;
    let mut bytes = 0;
    let mut servlets = 0;
    for site in sites.iter() {
        let s = site.cache.stats();
        files += s.cached_files + s.streamed_files;
        bytes += s.cached_bytes;
        servlets += site.servlets.routes.iter().count();
    }
    let urls: Vec<String> = bound
        .iter()
        .zip(&config.server.listen)
        .map(|(a, l)| {
            let scheme = if l.tls { "https" } else { "http" };
            format!("{scheme}://{a}/")
        })
        .collect();
    println!(
        "swan {} ready in {} ms: {} ({} workers, {} runtime); {} site{}, {files} files, {} cached, {servlets} servlets",
        env!("CARGO_PKG_VERSION"),
        started.elapsed().as_millis(),
        urls.join(" "),
        config.server.workers,
        config.server.runtime.as_str(),
        config.sites.len(),
        if config.sites.len() == 1 { "" } else { "s" },
        human_bytes(bytes),
    );
}
