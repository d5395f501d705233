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
    let app = App::load(&config).context("cannot load the sites")?;
    let per_addr = match config.server.runtime {
        RuntimeModel::PerCore => config.server.workers,
        RuntimeModel::Shared => 1,
    };
    let listeners = swan::bind(&config.server.listen, per_addr).map_err(|e| {
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
    print_banner(&config, &app.sites.load(), &bound, started);
    let app = Arc::new(app);
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
    runtime.block_on(async {
        if let Some(r) = reloader.clone() {
            tokio::spawn(reload_on_sighup(r));
        }
        swan::serve(app, listeners, shutdown_signal()).await
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
    let urls: Vec<String> = bound.iter().map(|a| format!("http://{a}/")).collect();
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
