//! `swan check`: validate the configuration, load everything it names, and
//! print what would be served; exit 1 if a servlet or store is not ready.

use anyhow::Context;

use swan::{App, Config};

use super::{errln, human_bytes, human_duration, outln};

pub(crate) fn check(config: &Config) -> anyhow::Result<()> {
    // Stores that cannot be opened are reported below, not fatal here: an
    // embedded store held by the running server is expected. One whose
    // file does not exist yet is left for `serve` to make: a check writes
    // nothing.
    let new_files: Vec<&str> = config
        .stores
        .iter()
        .filter(|s| {
            matches!(&s.kind, swan::config::StoreKind::Embedded { path }
                if path.metadata().is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound))
        })
        .map(|s| s.name.as_str())
        .collect();
    let mut used = config.stores_used();
    used.retain(|name| !new_files.contains(&name.as_str()));
    let (stores, unopened) = if config.wants_servlets() {
        swan::store::Stores::open_each(&config.stores, &used, &swan::store::Opening::Alone)
    } else {
        Default::default()
    };
    let app = App::load_with(config, stores).context("cannot load the sites")?;
    let sites = app.sites.load();
    let s = &config.server;
    match &config.file {
        Some(f) => outln!("configuration: {} (valid)", f.display()),
        None => outln!("configuration: built-in defaults (no swan.toml)"),
    }
    outln!("listeners:");
    for addr in &s.listen {
        outln!("  {addr}");
    }
    // The configuration check loaded the pair: here, when it is valid.
    if let Some(tls) = &s.tls
        && let Ok(key) = swan::certs::load(&tls.cert, &tls.key)
    {
        match swan::certs::validity(&key) {
            Some(swan::certs::Validity {
                problem: Some(problem),
                ..
            }) => errln!(
                "warning: the TLS certificate {} {problem}: clients will refuse it",
                tls.cert.display()
            ),
            Some(v) => outln!("tls: {} (expires {})", tls.cert.display(), v.expires),
            None => outln!("tls: {}", tls.cert.display()),
        }
        outln!(
            "  redirect_http {}, hsts {}",
            if tls.redirect_http { "on" } else { "off" },
            tls.hsts.as_deref().unwrap_or("off")
        );
    }
    match &config.admin {
        Some(admin) => {
            outln!(
                "admin: http://{}/ (/livez, /readyz, /metrics)",
                admin.listen
            );
            if !admin.hosts.is_empty() {
                outln!("  answers for: {}", admin.hosts.join(", "));
            }
            if !admin.listen.ip().is_loopback() {
                errln!(
                    "warning: the admin listener {} is not on loopback: its status page shows paths, errors and file names; keep it off the public network (firewall it, or listen on 127.0.0.1)",
                    admin.listen
                );
            }
        }
        None => outln!("admin: off"),
    }
    let format = match config.log.format {
        swan::config::AccessLogFormat::Combined => "combined",
        swan::config::AccessLogFormat::Json => "json",
    };
    match &config.log.access {
        swan::config::AccessLogTarget::Off => outln!("access log: off"),
        swan::config::AccessLogTarget::Stdout => outln!("access log: stdout ({format})"),
        swan::config::AccessLogTarget::File(path) => {
            outln!("access log: {} ({format})", path.display())
        }
    }
    outln!("server:");
    outln!(
        "  workers             {} ({} runtime)",
        s.workers,
        s.runtime.as_str()
    );
    outln!("  max_connections     {}", s.max_connections);
    if let Some(warning) = swan::server::listener::descriptor_warning(s.max_connections) {
        outln!("  warning: {warning}");
    }
    outln!(
        "  max_header_bytes    {}",
        human_bytes(s.max_header_bytes as u64)
    );
    outln!("  max_body_bytes      {}", human_bytes(s.max_body_bytes));
    outln!(
        "  header_read_timeout {}",
        human_duration(s.header_read_timeout)
    );
    outln!(
        "  keepalive_timeout   {}",
        human_duration(s.keepalive_timeout)
    );
    outln!("  drain_grace         {}", human_duration(s.drain_grace));
    outln!("  drain_timeout       {}", human_duration(s.drain_timeout));
    outln!("  send_timeout        {}", human_duration(s.send_timeout));
    outln!(
        "  body_timeout        {} (then at least {}/s)",
        human_duration(s.body_timeout),
        human_bytes(s.body_min_rate)
    );
    outln!(
        "  mode                {}",
        if s.development {
            "development"
        } else {
            "production"
        }
    );
    outln!(
        "  request_id_header   {}",
        if s.request_id_header {
            "on (x-request-id)"
        } else {
            "off"
        }
    );
    outln!("  max_instances       {}", s.max_instances);
    if let Some(path) = &s.pid_file {
        outln!("  pid_file            {}", path.display());
    }
    let mut problems = check_stores(config, &app, &unopened, &new_files);
    for site in sites.iter() {
        let c = &site.config;
        let stats = site.cache.stats();
        outln!(
            "site {}{}:",
            c.name,
            if c.default { " (default)" } else { "" }
        );
        if !c.hosts.is_empty() {
            outln!("  hosts         {}", c.hosts.join(", "));
        }
        outln!("  root          {}", c.root.display());
        if let Some(dir) = &c.servlets {
            outln!("  servlets      {}", dir.display());
        }
        outln!(
            "  cache         {} files in memory ({}, {} compressed variants), {} streamed; max file {}, budget {}",
            stats.cached_files,
            human_bytes(stats.cached_bytes),
            stats.compressed_variants,
            stats.streamed_files,
            human_bytes(c.cache.max_file_size),
            human_bytes(c.cache.budget)
        );
        if let Some(cc) = &c.cache_control {
            outln!("  cache_control {cc}");
        }
        for route in site.servlets.routes.iter() {
            let servlet = match &route.target {
                swan::servlet::Target::Servlet(servlet) => servlet,
                swan::servlet::Target::BuildFailed(_) => {
                    outln!("  servlet {:<16} (build failed)", plain(&route.path));
                    continue;
                }
                swan::servlet::Target::Refused(_) => {
                    outln!("  servlet {:<16} (refused)", plain(&route.path));
                    continue;
                }
            };
            let info = servlet.info();
            let l = &info.limits;
            let kind = servlet.kind();
            let response = l
                .response_limit(matches!(kind, swan::servlet::ServletKind::Component { .. }))
                .map_or_else(|| "unlimited (streamed)".to_owned(), human_bytes);
            outln!(
                "  servlet {:<16} {} ({}, {}): memory {}, timeout {}, body {}, response {}, concurrency {}, queue_timeout {}, prewarm {}, reuse {}",
                plain(&route.path),
                plain(info.file.display()),
                route.origin.as_str(),
                kind,
                human_bytes(l.max_memory),
                human_duration(l.timeout),
                human_bytes(l.max_body_bytes),
                response,
                l.max_concurrency,
                human_duration(l.queue_timeout),
                l.prewarm,
                l.reuse,
            );
            if !l.stores.is_empty() {
                outln!("    stores   {}", l.stores.join(", "));
            }
            if !l.outbound.allowed_hosts.is_empty() {
                let rules: Vec<String> = l
                    .outbound
                    .allowed_hosts
                    .iter()
                    .map(|r| r.to_string())
                    .collect();
                outln!(
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
            errln!("error: servlet refused: {}", plain(&refused.error));
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
fn check_stores(
    config: &Config,
    app: &App,
    unopened: &[swan::store::OpenError],
    new_files: &[&str],
) -> usize {
    if config.stores.is_empty() {
        return 0;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let mut problems = 0;
    outln!("stores:");
    for store in &config.stores {
        let l = &store.limits;
        outln!(
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
            outln!("    opened by    nothing (no route lists it; not opened)");
            continue;
        }
        outln!("    opened by    {}", users.join(", "));
        if new_files.contains(&store.name.as_str()) {
            outln!("    reachable    a new file, made when swan serves");
            continue;
        }
        match unopened
            .iter()
            .find(|e| e.name == store.name)
            .map(|e| &e.error)
        {
            Some(swan::store::StoreError::InUse(_)) => {
                outln!("    reachable    in use by another process (a running swan?)");
                continue;
            }
            Some(e) => {
                problems += 1;
                outln!("    reachable    NO");
                errln!("error: store {} cannot be opened: {e}", store.name);
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
            Ok(()) => outln!("    reachable    yes"),
            Err(e) => {
                problems += 1;
                outln!("    reachable    NO");
                errln!("error: store {} does not answer: {e}", store.name);
            }
        }
    }
    problems
}

/// `text` as one line a terminal shows as it is: what a file name or a
/// module's import names carry (a line feed, ESC, a bidirectional
/// override) escaped, as in the log.
fn plain(text: impl std::fmt::Display) -> String {
    let text = text.to_string();
    String::from_utf8_lossy(&swan::observe::one_line::one_line(text.as_bytes(), false)).into_owned()
}
