//! The `swan` command line: `swan serve` and `swan check`.
//!
//! Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use swan::config::RuntimeModel;
use swan::reload::{ConfigSource, Reloader};
use swan::site::Sites;
use swan::{App, Config, ConfigError, Overrides};

/// swan: static files from memory and WebAssembly servlets, sandboxed.
#[derive(Debug, Parser)]
#[command(name = "swan", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the configured sites (default: ./www on 127.0.0.1:8080).
    Serve(ConfigArgs),
    /// Validate the configuration and print what would be served.
    Check(ConfigArgs),
}

#[derive(Debug, Args)]
struct ConfigArgs {
    /// Configuration file [default: ./swan.toml if present].
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, such as 127.0.0.1:8080; repeat for several.
    /// Replaces `listen` in [server].
    #[arg(long, short = 'l', value_name = "ADDR")]
    listen: Vec<String>,
    /// Folder of static files of the default site. Replaces its `root`.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Folder of .wasm servlets of the default site. Replaces its `servlets`.
    #[arg(long, value_name = "DIR")]
    servlets: Option<PathBuf>,
}

impl ConfigArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen.clone(),
            root: self.root.clone(),
            servlets: self.servlets.clone(),
        }
    }

    fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.config.as_deref(), &self.overrides())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    // Panics go to the log like everything else; the request layer turns a
    // panic in one request into a 500 for that request only.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!(
            thread = std::thread::current().name().unwrap_or("?"),
            "panic: {info}"
        );
    }));
    let args = match &cli.command {
        Command::Serve(a) | Command::Check(a) => a,
    };
    let overrides = args.overrides();
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Serve(_) => serve(config, overrides),
        Command::Check(_) => check(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal, and never with NO_COLOR set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

fn serve(config: Config, overrides: Overrides) -> anyhow::Result<()> {
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

fn check(config: &Config) -> anyhow::Result<()> {
    // Stores that cannot be opened are reported below, not fatal here: an
    // embedded store held by the running server is expected.
    let (stores, unopened) = if config.wants_servlets() {
        swan::store::Stores::open_each(&config.stores, &config.stores_used())
    } else {
        Default::default()
    };
    let app = App::load_with(config, stores).context("cannot load the sites")?;
    let sites = app.sites.load();
    let s = &config.server;
    match &config.file {
        Some(f) => println!("configuration: {} (valid)", f.display()),
        None => println!("configuration: built-in defaults (no swan.toml)"),
    }
    println!("listeners:");
    for addr in &s.listen {
        println!("  http://{addr}/");
    }
    println!("server:");
    println!(
        "  workers             {} ({} runtime)",
        s.workers,
        s.runtime.as_str()
    );
    println!("  max_connections     {}", s.max_connections);
    println!(
        "  max_header_bytes    {}",
        human_bytes(s.max_header_bytes as u64)
    );
    println!("  max_body_bytes      {}", human_bytes(s.max_body_bytes));
    println!("  header_read_timeout {:?}", s.header_read_timeout);
    println!("  keepalive_timeout   {:?}", s.keepalive_timeout);
    println!("  drain_timeout       {:?}", s.drain_timeout);
    println!("  max_instances       {}", s.max_instances);
    let mut problems = check_stores(config, &app, &unopened);
    for site in sites.iter() {
        let c = &site.config;
        let stats = site.cache.stats();
        println!(
            "site {}{}:",
            c.name,
            if c.default { " (default)" } else { "" }
        );
        if !c.hosts.is_empty() {
            println!("  hosts         {}", c.hosts.join(", "));
        }
        println!("  root          {}", c.root.display());
        if let Some(dir) = &c.servlets {
            println!("  servlets      {}", dir.display());
        }
        println!(
            "  cache         {} files in memory ({}, {} compressed variants), {} streamed; max file {}, budget {}",
            stats.cached_files,
            human_bytes(stats.cached_bytes),
            stats.compressed_variants,
            stats.streamed_files,
            human_bytes(c.cache.max_file_size),
            human_bytes(c.cache.budget)
        );
        if let Some(cc) = &c.cache_control {
            println!("  cache_control {cc}");
        }
        for route in site.servlets.routes.iter() {
            let swan::servlet::Target::Servlet(servlet) = &route.target else {
                println!("  servlet {:<16} (build failed)", route.path.to_string());
                continue;
            };
            let info = servlet.info();
            let l = &info.limits;
            println!(
                "  servlet {:<16} {} ({:?}, {}): memory {}, timeout {:?}, body {}, response {}, concurrency {}, reuse {}",
                route.path.to_string(),
                info.file.display(),
                route.origin,
                servlet.kind(),
                human_bytes(l.max_memory),
                l.timeout,
                human_bytes(l.max_body_bytes),
                human_bytes(l.max_response_bytes),
                l.max_concurrency,
                l.reuse,
            );
            if !l.stores.is_empty() {
                println!("    stores   {}", l.stores.join(", "));
            }
            if !l.outbound.allowed_hosts.is_empty() {
                let rules: Vec<String> = l
                    .outbound
                    .allowed_hosts
                    .iter()
                    .map(|r| r.to_string())
                    .collect();
                println!(
                    "    outbound {}{}",
                    rules.join(", "),
                    if l.outbound.allow_private {
                        " (private addresses allowed)"
                    } else {
                        ""
                    }
                );
            }
        }
        for refused in &site.servlets.refused {
            problems += 1;
            eprintln!("error: servlet refused: {}", refused.error);
        }
    }
    if problems > 0 {
        anyhow::bail!(
            "{problems} servlet{} or store{} not ready",
            if problems == 1 { "" } else { "s" },
            if problems == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Prints every store, its limits, which sites' servlets may open it, and
/// whether it answers (Redis: a PING within 3 s). Returns the number of
/// stores that do not.
fn check_stores(config: &Config, app: &App, unopened: &[swan::store::OpenError]) -> usize {
    if config.stores.is_empty() {
        return 0;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let mut problems = 0;
    println!("stores:");
    for store in &config.stores {
        let l = &store.limits;
        println!(
            "  {:<12} {}; key {}, value {}, {} operations per request, list {} keys",
            store.name,
            store.kind.describe(),
            human_bytes(l.max_key_bytes),
            human_bytes(l.max_value_bytes),
            l.max_ops_per_request,
            l.max_list_keys,
        );
        let users: Vec<String> = config
            .sites
            .iter()
            .flat_map(|site| {
                let all = site
                    .servlet_limits
                    .stores
                    .contains(&store.name)
                    .then(|| format!("site {} (every servlet)", site.name));
                let routes = site
                    .routes
                    .iter()
                    .filter(|r| r.limits.stores.contains(&store.name))
                    .map(move |r| format!("site {} route {}", site.name, r.path));
                all.into_iter().chain(routes)
            })
            .collect();
        if users.is_empty() {
            println!("    opened by    nothing (no route lists it; not opened)");
            continue;
        }
        println!("    opened by    {}", users.join(", "));
        match unopened
            .iter()
            .find(|e| e.name == store.name)
            .map(|e| &e.error)
        {
            Some(swan::store::StoreError::InUse(_)) => {
                println!("    reachable    in use by another process (a running swan?)");
                continue;
            }
            Some(e) => {
                problems += 1;
                println!("    reachable    NO");
                eprintln!("error: store {} cannot be opened: {e}", store.name);
                continue;
            }
            None => {}
        }
        let Some(open) = app
            .loader
            .as_ref()
            .and_then(|l| l.stores().get(&store.name))
        else {
            continue;
        };
        let answer = match &runtime {
            Ok(rt) => rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(3), open.ping())
                    .await
                    .unwrap_or_else(|_| {
                        Err(swan::store::StoreError::Unavailable(
                            "no answer in 3 s".to_owned(),
                        ))
                    })
            }),
            Err(e) => Err(swan::store::StoreError::Other(e.to_string())),
        };
        match answer {
            Ok(()) => println!("    reachable    yes"),
            Err(e) => {
                problems += 1;
                println!("    reachable    NO");
                eprintln!("error: store {} does not answer: {e}", store.name);
            }
        }
    }
    problems
}

fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
