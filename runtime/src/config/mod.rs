//! Configuration: `swan.toml` read into a validated [`Config`].
//!
//! The file is read key by key (see `reader`), so one run reports every
//! problem with its line, column and a hint. Command-line flags are applied
//! on top as [`Overrides`] and validated the same way. Nothing is bound or
//! loaded until the whole configuration is known to be good.

mod error;
mod reader;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::DeTable;

pub use error::{ConfigError, Problem};
use reader::{Diagnostics, TableReader};

/// Address served when neither the config file nor `--listen` names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Config file looked for in the current folder when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "swan.toml";
/// Site root used when neither the config file nor `--root` names one.
pub const DEFAULT_ROOT: &str = "www";
/// Largest request head (request line and headers), in bytes.
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 16 << 10;
/// Largest request body accepted, in bytes.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 8 << 20;
/// Time a client has to deliver a complete request head.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time an idle keep-alive connection is kept open.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(75);
/// Connections served at once; more wait in the kernel's accept queue.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 16_384;
/// Time in-flight requests get to finish after a shutdown signal.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest file kept in memory; larger ones are streamed from disk.
pub const DEFAULT_CACHE_MAX_FILE_SIZE: u64 = 1 << 20;
/// Memory all cached bodies of a site may use, compressed variants included.
pub const DEFAULT_CACHE_BUDGET: u64 = 256 << 20;

/// Servlet instances that may exist at once in the whole process (running,
/// pre-instantiated or kept for reuse); sizes the pooling allocator.
pub const DEFAULT_MAX_INSTANCES: u64 = 1000;
/// Linear memory a servlet instance may use.
pub const DEFAULT_SERVLET_MAX_MEMORY: u64 = 64 << 20;
/// Time a servlet may run for one request before it is stopped (504).
pub const DEFAULT_SERVLET_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response body a servlet may produce.
pub const DEFAULT_SERVLET_MAX_RESPONSE_BYTES: u64 = 16 << 20;
/// Largest request body passed to a servlet.
pub const DEFAULT_SERVLET_MAX_BODY_BYTES: u64 = 1 << 20;
/// Requests one servlet may run at once.
pub const DEFAULT_SERVLET_MAX_CONCURRENCY: u64 = 64;
/// Time a request waits for a free instance before 503.
pub const DEFAULT_SERVLET_QUEUE_TIMEOUT: Duration = Duration::from_secs(1);
/// Instances of each servlet kept instantiated ahead of requests.
pub const DEFAULT_SERVLET_PREWARM: u64 = 4;
/// Largest linear memory a servlet may be allowed (wasm32's 4 GiB).
const MAX_SERVLET_MEMORY: u64 = 4 << 30;

/// Smallest `max_header_bytes` accepted: hyper reads heads into a buffer of
/// at least 8 KiB.
const MIN_MAX_HEADER_BYTES: u64 = 8 << 10;
/// Largest `max_header_bytes` accepted.
const MAX_MAX_HEADER_BYTES: u64 = 1 << 20;

/// How connections are spread over threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeModel {
    /// One single-threaded runtime per worker thread, each accepting on its
    /// own `SO_REUSEPORT` socket: no work stealing, no cross-core wakeups.
    PerCore,
    /// One work-stealing runtime shared by all worker threads.
    Shared,
}

impl RuntimeModel {
    /// The name used in `swan.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeModel::PerCore => "per-core",
            RuntimeModel::Shared => "shared",
        }
    }
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it was read from, if any.
    pub file: Option<PathBuf>,
    /// Process-wide settings.
    pub server: ServerConfig,
    /// Virtual hosts; exactly one is the default.
    pub sites: Vec<SiteConfig>,
}

/// `[server]`: listeners, threads and connection limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Addresses to listen on. Default: `127.0.0.1:8080`.
    pub listen: Vec<SocketAddr>,
    /// Worker threads. Default: one per core.
    pub workers: usize,
    /// How connections are spread over workers. Default: per-core.
    pub runtime: RuntimeModel,
    /// Largest request head in bytes. Default: 16 KiB.
    pub max_header_bytes: usize,
    /// Largest request body in bytes. Default: 8 MiB.
    pub max_body_bytes: u64,
    /// Time to deliver a complete request head. Default: 10 s.
    pub header_read_timeout: Duration,
    /// Idle time before a keep-alive connection is closed. Default: 75 s.
    pub keepalive_timeout: Duration,
    /// Connections served at once. Default: 16384.
    pub max_connections: usize,
    /// Time in-flight requests get after a shutdown signal. Default: 10 s.
    pub drain_timeout: Duration,
    /// Servlet instances that may exist at once. Default: 1000.
    pub max_instances: u32,
    /// Development mode: a servlet whose source fails to build answers with
    /// the compiler's output. Default: false (production).
    pub development: bool,
}

/// Limits and behaviour of a servlet (`[site.servlet]` defaults, or a
/// `[[site.route]]`'s own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServletLimits {
    /// Largest linear memory, in bytes. Default: 64 MiB.
    pub max_memory: u64,
    /// Run time allowed per request; past it the servlet is stopped and the
    /// client gets 504. Default: 5 s.
    pub timeout: Duration,
    /// Largest response body, in bytes. Default: 16 MiB.
    pub max_response_bytes: u64,
    /// Largest request body, in bytes. Default: 1 MiB.
    pub max_body_bytes: u64,
    /// Requests running at once. Default: 64.
    pub max_concurrency: u32,
    /// Wait for a free instance before answering 503. Default: 1 s.
    pub queue_timeout: Duration,
    /// Requests one instance may serve; 1 means a fresh instance for every
    /// request (nothing leaks between requests). Default: 1.
    pub reuse: u32,
    /// Instances kept instantiated ahead of requests. Default: 4.
    pub prewarm: u32,
}

impl Default for ServletLimits {
    fn default() -> Self {
        ServletLimits {
            max_memory: DEFAULT_SERVLET_MAX_MEMORY,
            timeout: DEFAULT_SERVLET_TIMEOUT,
            max_response_bytes: DEFAULT_SERVLET_MAX_RESPONSE_BYTES,
            max_body_bytes: DEFAULT_SERVLET_MAX_BODY_BYTES,
            max_concurrency: DEFAULT_SERVLET_MAX_CONCURRENCY as u32,
            queue_timeout: DEFAULT_SERVLET_QUEUE_TIMEOUT,
            reuse: 1,
            prewarm: DEFAULT_SERVLET_PREWARM as u32,
        }
    }
}

/// Which request paths a route answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutePath {
    /// Exactly this path.
    Exact(String),
    /// This prefix (without the trailing `/*`): the prefix itself and every
    /// path below `prefix/`.
    Prefix(String),
}

impl RoutePath {
    /// Parses `/x` or `/x/*`.
    pub fn parse(s: &str) -> Result<RoutePath, String> {
        if !s.starts_with('/') {
            return Err(format!("{s:?} does not start with `/`"));
        }
        let (base, prefix) = match s.strip_suffix("/*") {
            Some(b) => (b, true),
            None => (s, false),
        };
        if base.contains('*') {
            return Err(format!("{s:?}: `*` may only end a path, as in \"/api/*\""));
        }
        if base.contains("//") || base.split('/').any(|seg| seg == "." || seg == "..") {
            return Err(format!("{s:?} is not a normalised path"));
        }
        Ok(if prefix {
            RoutePath::Prefix(base.trim_end_matches('/').to_owned())
        } else {
            RoutePath::Exact(s.to_owned())
        })
    }
}

impl std::fmt::Display for RoutePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoutePath::Exact(p) => f.write_str(p),
            RoutePath::Prefix(p) => write!(f, "{p}/*"),
        }
    }
}

/// `[[site.route]]`: an explicit servlet route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// Paths answered.
    pub path: RoutePath,
    /// The `.wasm` file.
    pub servlet: PathBuf,
    /// Limits (the site's defaults, overridden by the route's own keys).
    pub limits: ServletLimits,
    /// Static settings the servlet can read (also its environment).
    pub settings: Vec<(String, String)>,
}

/// `[[site]]`: one virtual host.
#[derive(Debug, Clone)]
pub struct SiteConfig {
    /// A name for logs; defaults to the first host name, or "default".
    pub name: String,
    /// Host names, lower case, without port.
    pub hosts: Vec<String>,
    /// Whether this site answers unknown or missing Host headers.
    pub default: bool,
    /// The folder of static files.
    pub root: PathBuf,
    /// The folder of `.wasm` servlets, if any.
    pub servlets: Option<PathBuf>,
    /// In-memory cache settings.
    pub cache: CacheConfig,
    /// `Cache-Control` sent with static files, if any.
    pub cache_control: Option<String>,
    /// Limits of the site's servlets, unless a route says otherwise.
    pub servlet_limits: ServletLimits,
    /// Explicit servlet routes; they take precedence over the folder
    /// convention.
    pub routes: Vec<RouteConfig>,
}

/// `[site.cache]`: what is kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Largest file kept in memory, in bytes. Default: 1 MiB.
    pub max_file_size: u64,
    /// Memory for all cached bodies of the site, in bytes. Default: 256 MiB.
    pub budget: u64,
    /// Whether compressible files are gzip- and brotli-compressed at load
    /// time when no `.gz`/`.br` sibling exists. Default: true.
    pub compress: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_file_size: DEFAULT_CACHE_MAX_FILE_SIZE,
            budget: DEFAULT_CACHE_BUDGET,
            compress: true,
        }
    }
}

/// Command-line flags that override the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--listen`, repeatable: replaces `server.listen`.
    pub listen: Vec<String>,
    /// `--root`: replaces the default site's root.
    pub root: Option<PathBuf>,
    /// `--servlets`: replaces the default site's servlets folder.
    pub servlets: Option<PathBuf>,
}

impl Config {
    /// Loads the configuration: `file` if given, else `swan.toml` in the
    /// current folder if present, else the built-in defaults; then applies
    /// the overrides and validates the result.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let file = match file {
            Some(f) => Some(f.to_path_buf()),
            None => {
                let default = PathBuf::from(DEFAULT_CONFIG_FILE);
                default.is_file().then_some(default)
            }
        };
        let mut config = match &file {
            Some(path) => {
                let source = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::single(
                        path,
                        "(file)",
                        format!("cannot read the configuration file: {e}"),
                        Some("check the path given to --config".to_owned()),
                    )
                })?;
                let base = path.parent().unwrap_or(Path::new("."));
                let base = if base.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    base
                };
                Config::parse(&source, path, base)?
            }
            None => Config::defaults(),
        };
        config.apply(overrides)?;
        Ok(config)
    }

    /// The configuration used when there is no file: `./www` on
    /// 127.0.0.1:8080.
    pub fn defaults() -> Config {
        Config {
            file: None,
            server: ServerConfig::defaults(),
            sites: vec![SiteConfig {
                name: "default".to_owned(),
                hosts: Vec::new(),
                default: true,
                root: PathBuf::from(DEFAULT_ROOT),
                servlets: None,
                cache: CacheConfig::default(),
                cache_control: None,
                servlet_limits: ServletLimits::default(),
                routes: Vec::new(),
            }],
        }
    }

    /// Parses and validates `source`, read from `file`; relative paths in it
    /// are resolved against `base`.
    pub fn parse(source: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        let mut diag = Diagnostics::new(file, source);
        let document = match DeTable::parse(source) {
            Ok(d) => d,
            Err(e) => {
                let span = e.span().unwrap_or(0..0);
                diag.error(
                    span,
                    "(syntax)",
                    e.message().trim().to_owned(),
                    Some("this is not valid TOML; see https://toml.io".to_owned()),
                );
                return Err(diag
                    .into_result()
                    .err()
                    .unwrap_or_else(|| ConfigError::new(Vec::new())));
            }
        };
        let mut root = TableReader::new("", document.span(), document.get_ref());
        let server = match root.table(&mut diag, "server") {
            Some(mut t) => {
                let s = ServerConfig::read(&mut t, &mut diag);
                t.finish(&mut diag, ServerConfig::KEYS);
                s
            }
            None => ServerConfig::defaults(),
        };
        let site_tables = root.tables(&mut diag, "site");
        let root_span = root.span();
        root.finish(&mut diag, &["server", "site"]);

        let mut sites = Vec::new();
        let mut site_spans = Vec::new();
        for mut t in site_tables {
            let site = SiteConfig::read(&mut t, &mut diag, base);
            let span = t.span();
            t.finish(&mut diag, SiteConfig::KEYS);
            if let Some(site) = site {
                sites.push(site);
                site_spans.push(span);
            }
        }
        if sites.is_empty() && !diag.has_errors() {
            diag.error(
                root_span,
                "site",
                "no site is configured",
                Some("add a [[site]] table with at least `root = \"www\"`".to_owned()),
            );
        }
        diag.into_result()?;
        let mut config = Config {
            file: Some(file.to_path_buf()),
            server,
            sites,
        };
        if config.sites.len() == 1 {
            config.sites[0].default = true;
        }
        if let Err(e) = config.check_sites() {
            // Point cross-site problems at the site they name.
            let mut diag = Diagnostics::new(file, source);
            let located: Vec<Problem> = e
                .problems()
                .iter()
                .cloned()
                .map(|mut p| {
                    let index = p
                        .key
                        .strip_prefix("site[")
                        .and_then(|k| k.split(']').next())
                        .and_then(|n| n.parse::<usize>().ok());
                    if let Some(span) = index.and_then(|i| site_spans.get(i)) {
                        (p.line, p.column) = diag.locate(span.start);
                    }
                    p
                })
                .collect();
            diag.extend(located);
            diag.into_result()?;
        }
        Ok(config)
    }

    /// Applies command-line overrides, then re-checks what they touch.
    pub fn apply(&mut self, overrides: &Overrides) -> Result<(), ConfigError> {
        let origin = PathBuf::from("(command line)");
        if !overrides.listen.is_empty() {
            let mut problems = Vec::new();
            let mut listen = Vec::new();
            for value in &overrides.listen {
                match parse_listen(value) {
                    Ok(addr) => listen.push(addr),
                    Err((message, hint)) => problems.push(Problem {
                        file: origin.clone(),
                        line: 0,
                        column: 0,
                        key: "--listen".to_owned(),
                        message,
                        hint: Some(hint),
                    }),
                }
            }
            if !problems.is_empty() {
                return Err(ConfigError::new(problems));
            }
            self.server.listen = listen;
        }
        if let Some(site) = self.sites.iter_mut().find(|s| s.default) {
            if let Some(root) = &overrides.root {
                site.root = root.clone();
            }
            if let Some(servlets) = &overrides.servlets {
                site.servlets = Some(servlets.clone());
            }
        }
        self.check_sites()
    }

    /// Checks what involves several sites or the filesystem.
    fn check_sites(&self) -> Result<(), ConfigError> {
        let file = self
            .file
            .clone()
            .unwrap_or_else(|| PathBuf::from("(defaults)"));
        let mut problems = Vec::new();
        let mut problem = |key: String, message: String, hint: String| {
            problems.push(Problem {
                file: file.clone(),
                line: 0,
                column: 0,
                key,
                message,
                hint: Some(hint),
            })
        };
        let defaults: Vec<&SiteConfig> = self.sites.iter().filter(|s| s.default).collect();
        match defaults.len() {
            1 => {}
            0 => problem(
                "site[0].default".to_owned(),
                format!(
                    "{} sites are configured and none is the default",
                    self.sites.len()
                ),
                "set `default = true` on the site that answers unknown or missing Host headers"
                    .to_owned(),
            ),
            _ => problem(
                format!(
                    "site[{}].default",
                    self.sites
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.default)
                        .nth(1)
                        .map_or(0, |(i, _)| i)
                ),
                format!(
                    "{} sites are marked default: {}",
                    defaults.len(),
                    defaults
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "exactly one site may have `default = true`".to_owned(),
            ),
        }
        let mut seen: Vec<(&str, &str)> = Vec::new();
        for (i, site) in self.sites.iter().enumerate() {
            for host in &site.hosts {
                if let Some((_, other)) = seen.iter().find(|(h, _)| h == host) {
                    problem(
                        format!("site[{i}].hosts"),
                        format!("host {host:?} is also served by site {other:?}"),
                        "each host name may belong to one site only".to_owned(),
                    );
                }
                seen.push((host, &site.name));
            }
            if !site.root.is_dir() {
                problem(
                    format!("site[{i}].root"),
                    format!("{} is not a folder", site.root.display()),
                    "create it, or point `root` (or --root) at the folder of static files"
                        .to_owned(),
                );
            }
            if let Some(servlets) = &site.servlets
                && !servlets.is_dir()
            {
                problem(
                        format!("site[{i}].servlets"),

                        format!("{} is not a folder", servlets.display()),
                        "create it, or point `servlets` (or --servlets) at the folder of .wasm servlets".to_owned(),
                    );
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::new(problems))
        }
    }

    /// The default site.
    pub fn default_site(&self) -> Option<&SiteConfig> {
        self.sites.iter().find(|s| s.default)
    }
}

impl ServerConfig {
    const KEYS: &'static [&'static str] = &[
        "listen",
        "workers",
        "runtime",
        "max_header_bytes",
        "max_body_bytes",
        "header_read_timeout",
        "keepalive_timeout",
        "max_connections",
        "drain_timeout",
        "max_instances",
        "mode",
    ];

    /// Built-in defaults.
    pub fn defaults() -> ServerConfig {
        ServerConfig {
            listen: vec![
                DEFAULT_LISTEN
                    .parse()
                    .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
            ],
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            runtime: RuntimeModel::PerCore,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES as usize,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            max_instances: DEFAULT_MAX_INSTANCES as u32,
            development: false,
        }
    }

    fn read(t: &mut TableReader<'_, '_>, diag: &mut Diagnostics<'_>) -> ServerConfig {
        let mut s = ServerConfig::defaults();
        if let Some(values) = t.strings(diag, "listen") {
            let mut listen = Vec::new();
            for (n, v) in values.iter().enumerate() {
                match parse_listen(v.get_ref()) {
                    Ok(addr) => listen.push(addr),
                    Err((message, hint)) => diag.error(
                        v.span(),
                        &format!("server.listen[{n}]"),
                        message,
                        Some(hint),
                    ),
                }
            }
            if values.is_empty() {
                diag.error(
                    t.span(),
                    "server.listen",
                    "no listen address",
                    Some(format!("give at least one, such as [\"{DEFAULT_LISTEN}\"]")),
                );
            }
            s.listen = listen;
        }
        if let Some(n) = t.uint(diag, "workers", 1024)
            && *n.get_ref() > 0
        {
            s.workers = *n.get_ref() as usize;
        }
        if let Some(v) = t.string(diag, "runtime") {
            match v.get_ref().as_str() {
                "per-core" => s.runtime = RuntimeModel::PerCore,
                "shared" => s.runtime = RuntimeModel::Shared,
                other => diag.error(
                    v.span(),
                    "server.runtime",
                    format!("unknown runtime model {other:?}"),
                    Some("use \"per-core\" (default) or \"shared\"".to_owned()),
                ),
            }
        }
        if let Some(n) = t.size(diag, "max_header_bytes") {
            let value = *n.get_ref();
            if (MIN_MAX_HEADER_BYTES..=MAX_MAX_HEADER_BYTES).contains(&value) {
                s.max_header_bytes = value as usize;
            } else {
                diag.error(
                    n.span(),
                    "server.max_header_bytes",
                    format!("{value} bytes is out of range"),
                    Some("use a size from 8 KiB to 1 MiB; the default is 16 KiB".to_owned()),
                );
            }
        }
        if let Some(n) = t.size(diag, "max_body_bytes") {
            s.max_body_bytes = *n.get_ref();
        }
        for (key, slot) in [
            ("header_read_timeout", &mut s.header_read_timeout),
            ("keepalive_timeout", &mut s.keepalive_timeout),
            ("drain_timeout", &mut s.drain_timeout),
        ] {
            if let Some(d) = t.duration(diag, key) {
                if d.get_ref().is_zero() && key != "drain_timeout" {
                    diag.error(
                        d.span(),
                        &format!("server.{key}"),
                        "a zero timeout would close every connection at once",
                        Some("use a positive duration such as \"10s\"".to_owned()),
                    );
                } else {
                    *slot = *d.get_ref();
                }
            }
        }
        if let Some(n) = t.uint(diag, "max_connections", 1 << 24) {
            if *n.get_ref() == 0 {
                diag.error(
                    n.span(),
                    "server.max_connections",
                    "0 connections would serve nobody",
                    Some(format!(
                        "use a positive number; the default is {DEFAULT_MAX_CONNECTIONS}"
                    )),
                );
            } else {
                s.max_connections = *n.get_ref() as usize;
            }
        }
        if let Some(v) = t.string(diag, "mode") {
            match v.get_ref().as_str() {
                "production" => s.development = false,
                "development" => s.development = true,
                other => diag.error(
                    v.span(),
                    "server.mode",
                    format!("unknown mode {other:?}"),
                    Some("use \"production\" (default) or \"development\"".to_owned()),
                ),
            }
        }
        if let Some(n) = t.uint(diag, "max_instances", 100_000) {
            if *n.get_ref() == 0 {
                diag.error(
                    n.span(),
                    "server.max_instances",
                    "0 instances would run no servlet",
                    Some(format!(
                        "use a positive number; the default is {DEFAULT_MAX_INSTANCES}"
                    )),
                );
            } else {
                s.max_instances = *n.get_ref() as u32;
            }
        }
        s
    }
}

impl ServletLimits {
    const KEYS: &'static [&'static str] = &[
        "max_memory",
        "timeout",
        "max_response_bytes",
        "max_body_bytes",
        "max_concurrency",
        "queue_timeout",
        "reuse",
        "prewarm",
    ];

    /// Reads the limit keys present in `t` over `base`.
    fn read(
        t: &mut TableReader<'_, '_>,
        diag: &mut Diagnostics<'_>,
        base: &ServletLimits,
    ) -> ServletLimits {
        let mut l = base.clone();
        if let Some(n) = t.size(diag, "max_memory") {
            let v = *n.get_ref();
            if !(64 << 10..=MAX_SERVLET_MEMORY).contains(&v) {
                diag.error(
                    n.span(),
                    &t.key_path("max_memory"),
                    format!("{v} bytes is out of range"),
                    Some("use a size from 64 KiB (one wasm page) to 4 GiB".to_owned()),
                );
            } else {
                l.max_memory = v;
            }
        }
        for (key, slot) in [
            ("timeout", &mut l.timeout),
            ("queue_timeout", &mut l.queue_timeout),
        ] {
            if let Some(d) = t.duration(diag, key) {
                if d.get_ref().is_zero() {
                    diag.error(
                        d.span(),
                        &t.key_path(key),
                        "a zero duration would fail every request",
                        Some("use a positive duration such as \"5s\"".to_owned()),
                    );
                } else {
                    *slot = *d.get_ref();
                }
            }
        }
        if let Some(n) = t.size(diag, "max_response_bytes") {
            l.max_response_bytes = *n.get_ref();
        }
        if let Some(n) = t.size(diag, "max_body_bytes") {
            l.max_body_bytes = *n.get_ref();
        }
        for (key, slot, min) in [
            ("max_concurrency", &mut l.max_concurrency, 1),
            ("reuse", &mut l.reuse, 1),
            ("prewarm", &mut l.prewarm, 0),
        ] {
            if let Some(n) = t.uint(diag, key, 1_000_000) {
                if *n.get_ref() < min {
                    diag.error(
                        n.span(),
                        &t.key_path(key),
                        format!("must be at least {min}"),
                        Some(match key {
                            "reuse" => "1 means a fresh instance for every request".to_owned(),
                            _ => format!("use a number of {min} or more"),
                        }),
                    );
                } else {
                    *slot = *n.get_ref() as u32;
                }
            }
        }
        l
    }
}

impl RouteConfig {
    fn read(
        t: &mut TableReader<'_, '_>,
        diag: &mut Diagnostics<'_>,
        base: &Path,
        defaults: &ServletLimits,
    ) -> Option<RouteConfig> {
        let path = match t.string(diag, "path") {
            Some(p) => match RoutePath::parse(p.get_ref()) {
                Ok(path) => Some(path),
                Err(message) => {
                    diag.error(
                        p.span(),
                        &t.key_path("path"),
                        message,
                        Some("use an exact path (\"/login\") or a prefix (\"/api/*\")".to_owned()),
                    );
                    None
                }
            },
            None => {
                diag.error(
                    t.span(),
                    &t.key_path("path"),
                    "missing key `path`",
                    Some("every route needs `path = \"/api/*\"` (or an exact path)".to_owned()),
                );
                None
            }
        };
        let servlet = match t.string(diag, "servlet") {
            Some(s) => {
                let file = base.join(s.get_ref());
                if file.extension().is_none_or(|e| e != "wasm") || !file.is_file() {
                    diag.error(
                        s.span(),
                        &t.key_path("servlet"),
                        format!("{} is not a .wasm file", file.display()),
                        Some("point `servlet` at a compiled module, relative to the config file's folder".to_owned()),
                    );
                }
                Some(file)
            }
            None => {
                diag.error(
                    t.span(),
                    &t.key_path("servlet"),
                    "missing key `servlet`",
                    Some("every route needs `servlet = \"servlets/api.wasm\"`".to_owned()),
                );
                None
            }
        };
        let limits = ServletLimits::read(t, diag, defaults);
        let mut settings = Vec::new();
        if let Some(mut s) = t.table(diag, "settings") {
            let keys: Vec<String> = s.keys().map(str::to_owned).collect();
            for key in &keys {
                if let Some(v) = s.string(diag, key) {
                    settings.push((key.clone(), v.into_inner()));
                }
            }
            s.finish(diag, &[]);
        }
        Some(RouteConfig {
            path: path?,
            servlet: servlet?,
            limits,
            settings,
        })
    }
}

impl SiteConfig {
    const KEYS: &'static [&'static str] = &[
        "name",
        "hosts",
        "default",
        "root",
        "servlets",
        "cache",
        "cache_control",
        "servlet",
        "route",
    ];

    fn read(
        t: &mut TableReader<'_, '_>,
        diag: &mut Diagnostics<'_>,
        base: &Path,
    ) -> Option<SiteConfig> {
        let site_key = t.key_path("");
        let site_key = site_key.trim_end_matches('.');
        let hosts: Vec<String> = t
            .strings(diag, "hosts")
            .unwrap_or_default()
            .into_iter()
            .filter_map(|h| {
                let host = h.get_ref().trim().to_ascii_lowercase();
                if host.is_empty() || host.contains(['/', ' ', ':']) {
                    diag.error(
                        h.span(),
                        &format!("{site_key}.hosts"),
                        format!("{:?} is not a host name", h.get_ref()),
                        Some(
                            "write the bare name, such as \"example.com\", without scheme or port"
                                .to_owned(),
                        ),
                    );
                    None
                } else {
                    Some(host)
                }
            })
            .collect();
        let name = t
            .string(diag, "name")
            .map(|n| n.into_inner())
            .or_else(|| hosts.first().cloned())
            .unwrap_or_else(|| "default".to_owned());
        let default = t.bool(diag, "default").unwrap_or(false);
        let root = match t.string(diag, "root") {
            Some(r) => {
                let path = base.join(r.get_ref());
                if !path.is_dir() {
                    diag.error(
                        r.span(),
                        &format!("{site_key}.root"),
                        format!("{} is not a folder", path.display()),
                        Some("create it, or point `root` at the folder of static files (relative paths start at the config file's folder)".to_owned()),
                    );
                }
                Some(path)
            }
            None => {
                diag.error(
                    t.span(),
                    &format!("{site_key}.root"),
                    "missing key `root`",
                    Some(
                        "every site needs `root = \"www\"`: the folder of its static files"
                            .to_owned(),
                    ),
                );
                None
            }
        };
        let servlets = t.string(diag, "servlets").map(|s| {
            let path = base.join(s.get_ref());
            if !path.is_dir() {
                diag.error(
                    s.span(),
                    &format!("{site_key}.servlets"),
                    format!("{} is not a folder", path.display()),
                    Some(
                        "create it, or point `servlets` at the folder of .wasm servlets".to_owned(),
                    ),
                );
            }
            path
        });
        let mut cache = CacheConfig::default();
        if let Some(mut c) = t.table(diag, "cache") {
            if let Some(n) = c.size(diag, "max_file_size") {
                cache.max_file_size = *n.get_ref();
            }
            if let Some(n) = c.size(diag, "budget") {
                if *n.get_ref() == 0 {
                    diag.error(
                        n.span(),
                        &c.key_path("budget"),
                        "a zero budget leaves no room for any file",
                        Some("use a positive size such as \"256 MiB\"; set max_file_size = 0 to stream every file from disk".to_owned()),
                    );
                } else {
                    cache.budget = *n.get_ref();
                }
            }
            if let Some(b) = c.bool(diag, "compress") {
                cache.compress = b;
            }
            c.finish(diag, &["max_file_size", "budget", "compress"]);
        }
        let cache_control = t.string(diag, "cache_control").and_then(|v| {
            if http::HeaderValue::from_str(v.get_ref()).is_ok() {
                Some(v.into_inner())
            } else {
                diag.error(
                    v.span(),
                    &format!("{site_key}.cache_control"),
                    "not a valid header value",
                    Some("use visible ASCII, such as \"public, max-age=3600\"".to_owned()),
                );
                None
            }
        });
        let servlet_limits = match t.table(diag, "servlet") {
            Some(mut s) => {
                let limits = ServletLimits::read(&mut s, diag, &ServletLimits::default());
                s.finish(diag, ServletLimits::KEYS);
                limits
            }
            None => ServletLimits::default(),
        };
        let mut routes = Vec::new();
        for mut r in t.tables(diag, "route") {
            if let Some(route) = RouteConfig::read(&mut r, diag, base, &servlet_limits) {
                routes.push(route);
            }
            let mut known = vec!["path", "servlet", "settings"];
            known.extend_from_slice(ServletLimits::KEYS);
            r.finish(diag, &known);
        }
        Some(SiteConfig {
            name,
            hosts,
            default,
            root: root?,
            servlets,
            cache,
            cache_control,
            servlet_limits,
            routes,
        })
    }
}

/// Parses a listen address, explaining what is wrong with a bad one.
fn parse_listen(value: &str) -> Result<SocketAddr, (String, String)> {
    let hint =
        || "write IP:PORT, such as \"127.0.0.1:8080\", \"0.0.0.0:80\" or \"[::1]:8080\"".to_owned();
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok(addr);
    }
    match value.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u64>() {
            Ok(p) if p > u64::from(u16::MAX) => Err((
                format!("port {p} is out of range"),
                "a port is a number from 1 to 65535 (0 picks a free one)".to_owned(),
            )),
            Ok(_) => Err((
                format!("{host:?} is not an IP address"),
                format!("{}; host names are not resolved", hint()),
            )),
            Err(_) => Err((format!("{port:?} is not a port number"), hint())),
        },
        None => Err((format!("{value:?} has no port"), hint())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir();
        Config::parse(src, Path::new("swan.toml"), &dir)
    }

    #[test]
    fn listen_errors_say_what_is_wrong() {
        assert!(parse_listen("127.0.0.1:8080").is_ok());
        assert!(parse_listen("[::1]:0").is_ok());
        assert!(
            parse_listen("127.0.0.1:70000")
                .unwrap_err()
                .0
                .contains("port 70000 is out of range")
        );
        assert!(
            parse_listen("localhost:80")
                .unwrap_err()
                .0
                .contains("not an IP address")
        );
        assert!(parse_listen("8080").unwrap_err().0.contains("has no port"));
    }

    #[test]
    fn every_problem_is_reported_with_line_and_column() {
        let err = parse(
            "[server]\nlisten = [\"127.0.0.1:70000\"]\nworkerz = 2\nmax_connections = \"many\"\n\n[[site]]\nroot = \".\"\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert_eq!(err.problems().len(), 3, "{text}");
        assert!(
            text.contains("swan.toml:2:11: server.listen[0]: port 70000 is out of range"),
            "{text}"
        );
        assert!(
            text.contains("swan.toml:3:1: server.workerz: unknown key"),
            "{text}"
        );
        assert!(text.contains("did you mean `workers`?"), "{text}");
        assert!(
            text.contains(
                "swan.toml:4:19: server.max_connections: expected a whole number, found string"
            ),
            "{text}"
        );
    }

    #[test]
    fn syntax_errors_point_at_the_place() {
        let err = parse("[server\n").unwrap_err();
        assert_eq!(err.problems()[0].line, 1);
        assert_eq!(err.problems()[0].key, "(syntax)");
    }

    #[test]
    fn a_single_site_is_the_default() {
        let config = parse("[[site]]\nroot = \".\"\n").unwrap();
        assert!(config.sites[0].default);
    }

    #[test]
    fn two_default_sites_are_refused() {
        let err = parse(
            "[[site]]\nroot = \".\"\ndefault = true\nhosts = [\"a\"]\n[[site]]\nroot = \".\"\ndefault = true\nhosts = [\"b\"]\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("2 sites are marked default"),
            "{err}"
        );
    }

    #[test]
    fn zero_budget_and_missing_root_are_refused() {
        let err = parse("[[site]]\nroot = \"does-not-exist-swan\"\n[site.cache]\nbudget = 0\n")
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("site[0].cache.budget: a zero budget"),
            "{text}"
        );
        assert!(text.contains("swan.toml:2:8: site[0].root:"), "{text}");
        assert!(text.contains("is not a folder"), "{text}");
    }
}
