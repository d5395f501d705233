//! What a validated configuration is: the types, their defaults and units.
//!
//! Every default is a documented `DEFAULT_*` constant, and `docs/config.md`
//! names the same value. Zero is refused wherever it would make swan serve
//! nothing (connections, instances, concurrency, reuse, timeouts); where
//! zero has a meaning it is documented on the field (`prewarm = 0`: no
//! instance made ahead; `drain_timeout = "0s"`: stop at once;
//! `max_file_size = 0`: stream every file).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::ops::{AdminConfig, ListenerConfig, LogConfig, ProxyConfig, TlsConfig};
use super::outbound::OutboundConfig;
use super::store::StoreConfig;

/// Address served when neither the config file nor `--listen` names one.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Config file looked for in the current folder when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "swan.toml";
/// Site root used when neither the config file nor `--root` names one.
pub const DEFAULT_ROOT: &str = "www";

/// The servlets folder the built-in defaults serve when it exists (where
/// `swan new` puts servlets when there is no configuration).
pub const DEFAULT_SERVLETS: &str = "servlets";
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
/// Time a response being sent may go without any write progress (a client
/// that stopped reading) before the connection is dropped.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a request body gets before the minimum rate counts.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes per second a request body must keep up after `body_timeout`.
pub const DEFAULT_BODY_MIN_RATE: u64 = 1 << 10;
/// Time in-flight requests get to finish after a shutdown signal.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest file kept in memory; larger ones are streamed from disk.
pub const DEFAULT_CACHE_MAX_FILE_SIZE: u64 = 1 << 20;
/// Memory all cached bodies of a site may use, compressed variants included.
pub const DEFAULT_CACHE_BUDGET: u64 = 256 << 20;
/// Time a servlet source build may take before it is killed.
pub const DEFAULT_BUILD_TIMEOUT: Duration = Duration::from_secs(300);
/// Disk space for compiled servlet code.
pub const DEFAULT_MAX_CODE_CACHE_BYTES: u64 = 1 << 30;
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
pub(crate) const MAX_SERVLET_MEMORY: u64 = 4 << 30;
/// Smallest `max_header_bytes` accepted: hyper reads heads into a buffer of
/// at least 8 KiB.
pub(crate) const MIN_MAX_HEADER_BYTES: u64 = 8 << 10;
/// Largest `max_header_bytes` accepted.
pub(crate) const MAX_MAX_HEADER_BYTES: u64 = 1 << 20;

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
    /// Key-value stores servlets may open (`[[store]]`); without any, an
    /// embedded `default` store next to the configuration.
    pub stores: Vec<StoreConfig>,
    /// `[admin]`: the operations listener. Default: none.
    pub admin: Option<AdminConfig>,
    /// `[log]`: the access log. Default: off.
    pub log: LogConfig,
}

impl Config {
    /// The configuration used when there is no file: `./www` on
    /// 127.0.0.1:8080.
    pub fn defaults() -> Config {
        Config {
            file: None,
            server: ServerConfig::defaults(),
            sites: vec![SiteConfig::new("default", PathBuf::from(DEFAULT_ROOT))],
            stores: vec![StoreConfig::implicit_default(std::path::Path::new("."))],
            admin: None,
            log: LogConfig::default(),
        }
    }

    /// The default site.
    pub fn default_site(&self) -> Option<&SiteConfig> {
        self.sites.iter().find(|s| s.default)
    }

    /// The names of the stores a start opens: those some site's servlets
    /// or route list, in a configuration with servlets (without, none is).
    pub fn stores_used(&self) -> Vec<String> {
        if !self.wants_servlets() {
            return Vec::new();
        }
        let mut used: Vec<String> = self
            .sites
            .iter()
            .flat_map(SiteConfig::stores_listed)
            .map(str::to_owned)
            .collect();
        used.sort();
        used.dedup();
        used
    }

    /// Whether any site can have servlets (and so needs the wasm engine).
    pub fn wants_servlets(&self) -> bool {
        self.sites.iter().any(SiteConfig::wants_servlets)
    }
}

/// `[server]`: listeners, threads and connection limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// Addresses to listen on, and what each speaks. Default:
    /// `127.0.0.1:8080`, plain HTTP.
    pub listen: Vec<ListenerConfig>,
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
    /// Time a response may make no write progress before the connection is
    /// dropped. Default: 60 s.
    pub send_timeout: Duration,
    /// Request bodies: time allowed before the minimum rate counts; the
    /// whole body must arrive within `body_timeout + bytes / body_min_rate`.
    /// Default: 10 s.
    pub body_timeout: Duration,
    /// Request bodies: bytes per second they must keep up; 0 makes
    /// `body_timeout` a limit on the whole body. Default: 1 KiB.
    pub body_min_rate: u64,
    /// Connections served at once. Default: 16384.
    pub max_connections: usize,
    /// Time in-flight requests get after a shutdown signal; zero stops at
    /// once. Default: 10 s.
    pub drain_timeout: Duration,
    /// After a shutdown signal, time `/readyz` fails while the listeners
    /// still accept, so load balancers stop sending first. Default: 0 s.
    pub drain_grace: Duration,
    /// `[server.tls]`: the certificate of TLS listeners. Default: none.
    pub tls: Option<TlsConfig>,
    /// `[server.proxy]`: trusted proxies. Default: none.
    pub proxy: ProxyConfig,
    /// Servlet instances that may exist at once. Default: 1000.
    pub max_instances: u32,
    /// Development mode: a servlet whose source fails to build answers with
    /// the compiler's output. Default: false (production).
    pub development: bool,
    /// Whether responses carry the request id as `x-request-id`.
    /// Default: true.
    pub request_id_header: bool,
    /// Whether servlet source folders are built by swan (which runs native
    /// toolchains, and a Rust crate's build scripts, with swan's rights).
    /// `None`: in development mode only. Default: `None`.
    pub build_sources: Option<bool>,
    /// Time one source build may take before it is killed. Default: 5 min.
    pub build_timeout: Duration,
    /// Disk space for compiled servlet code (mapped, not copied, into
    /// memory); the least recently used artifacts go first. Zero compiles
    /// in memory on every start. Default: 1 GiB.
    pub max_code_cache_bytes: u64,
    /// File that holds the serving process's id, written once it serves
    /// and removed when it stops. Default: none.
    pub pid_file: Option<PathBuf>,
}

impl ServerConfig {
    /// Built-in defaults.
    pub fn defaults() -> ServerConfig {
        ServerConfig {
            listen: vec![ListenerConfig::plain(SocketAddr::from((
                [127, 0, 0, 1],
                8080,
            )))],
            workers: available_cores(),
            runtime: RuntimeModel::PerCore,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES as usize,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            drain_grace: Duration::ZERO,
            tls: None,
            proxy: ProxyConfig::default(),
            max_instances: DEFAULT_MAX_INSTANCES as u32,
            development: false,
            request_id_header: true,
            build_sources: None,
            build_timeout: DEFAULT_BUILD_TIMEOUT,
            max_code_cache_bytes: DEFAULT_MAX_CODE_CACHE_BYTES,
            pid_file: None,
        }
    }

    /// Whether servlet source folders are built: `build_sources` if set,
    /// else only in development mode.
    pub fn builds_sources(&self) -> bool {
        self.build_sources.unwrap_or(self.development)
    }
}

/// Cores this process may run on (one worker each by default).
pub(crate) fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
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
    /// Largest response body, in bytes. Default: 16 MiB for native
    /// servlets, which hold their response in memory.
    pub max_response_bytes: u64,
    /// Whether `max_response_bytes` was set in the configuration:
    /// components stream their bodies with backpressure, so only a set
    /// limit holds them (a 1 GiB download needs no memory).
    pub max_response_bytes_set: bool,
    /// Largest request body, in bytes. Default: 1 MiB.
    pub max_body_bytes: u64,
    /// Requests running at once. Default: 64.
    pub max_concurrency: u32,
    /// Wait for a free instance before answering 503. Default: 1 s.
    pub queue_timeout: Duration,
    /// Requests one instance may serve; 1 means a fresh instance for every
    /// request (nothing leaks between requests). Default: 1.
    pub reuse: u32,
    /// Instances kept instantiated ahead of requests; 0 makes each one when
    /// a request needs it. Default: 4.
    pub prewarm: u32,
    /// Outbound HTTP: where the servlet may send requests. Default: nowhere.
    pub outbound: OutboundConfig,
    /// Key-value stores the servlet may open (`stores`). Default: none.
    pub stores: Vec<String>,
    /// Whether wasi:http 0.3 (p3) components may load (`wasi_http_p3`):
    /// wasmtime 48 calls its p3 host experimental. Default: false.
    pub wasi_http_p3: bool,
}

impl ServletLimits {
    /// The response body size a servlet is held to: native servlets
    /// always (they hold their response in memory); components, which
    /// stream with backpressure, only where `max_response_bytes` is set.
    pub fn response_limit(&self, component: bool) -> Option<u64> {
        (!component || self.max_response_bytes_set).then_some(self.max_response_bytes)
    }
}

impl Default for ServletLimits {
    fn default() -> Self {
        ServletLimits {
            max_memory: DEFAULT_SERVLET_MAX_MEMORY,
            timeout: DEFAULT_SERVLET_TIMEOUT,
            max_response_bytes: DEFAULT_SERVLET_MAX_RESPONSE_BYTES,
            max_response_bytes_set: false,
            max_body_bytes: DEFAULT_SERVLET_MAX_BODY_BYTES,
            max_concurrency: DEFAULT_SERVLET_MAX_CONCURRENCY as u32,
            queue_timeout: DEFAULT_SERVLET_QUEUE_TIMEOUT,
            reuse: 1,
            prewarm: DEFAULT_SERVLET_PREWARM as u32,
            outbound: OutboundConfig::default(),
            stores: Vec::new(),
            wasi_http_p3: false,
        }
    }
}

/// Which request paths a route answers. Paths are normalised and
/// percent-decoded, like the request paths they are matched against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RoutePath {
    /// Exactly this path.
    Exact(String),
    /// This prefix (without the trailing `/*`): the prefix itself and every
    /// path below `prefix/`. `""` is the whole site (`/*`).
    Prefix(String),
}

impl RoutePath {
    /// Parses `/x` or `/x/*`; percent-encoded characters are decoded once.
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
        // A request's path never holds these: such a route never matches.
        if base.contains(['?', '#']) {
            return Err(format!(
                "{s:?}: a route is a path; a query (`?`) or fragment (`#`) never matches (write `%3F` or `%23` for the character itself)"
            ));
        }
        // `%2e%2e` too: it would be decoded, then resolved away.
        let decoded_base = percent_encoding::percent_decode_str(base).decode_utf8_lossy();
        if base.contains("//") || decoded_base.split('/').any(|seg| seg == "." || seg == "..") {
            return Err(format!("{s:?} is not a normalised path"));
        }
        let decoded = if prefix && base.is_empty() {
            String::new()
        } else {
            crate::request::path::normalize(base)
                .map_err(|e| format!("{s:?} is not a usable path: {e}"))?
                .into_owned()
        };
        // Written raw, one is a slip (a stray escape in the TOML string),
        // and it would break the lines that show the route.
        if s.chars().any(char::is_control) {
            return Err(format!(
                "{s:?} holds a raw control character (if it is meant, write it percent-encoded, as `%0A`)"
            ));
        }
        Ok(if prefix {
            RoutePath::Prefix(decoded.trim_end_matches('/').to_owned())
        } else {
            RoutePath::Exact(decoded)
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

impl SiteConfig {
    /// The stores the site's servlets or routes list (repeats included).
    pub fn stores_listed(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.servlet_limits.stores)
            .chain(self.routes.iter().map(|r| &r.limits.stores))
            .flatten()
            .map(String::as_str)
    }

    /// A default site serving `root`, with nothing else configured.
    pub fn new(name: &str, root: PathBuf) -> SiteConfig {
        SiteConfig {
            name: name.to_owned(),
            hosts: Vec::new(),
            default: true,
            root,
            servlets: None,
            cache: CacheConfig::default(),
            cache_control: None,
            servlet_limits: ServletLimits::default(),
            routes: Vec::new(),
        }
    }

    /// Whether the site can have servlets.
    pub fn wants_servlets(&self) -> bool {
        self.servlets.is_some() || !self.routes.is_empty()
    }
}

/// `[site.cache]`: what is kept in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// Largest file kept in memory, in bytes; 0 streams every file from
    /// disk. Default: 1 MiB.
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
    /// `--dev`: development mode, as `mode = "development"`.
    pub dev: bool,
    /// `--pid-file`: replaces `server.pid_file`.
    pub pid_file: Option<PathBuf>,
    /// `swan new`: the default site's servlets folder may not exist yet
    /// (it is about to be made), and is not a configuration error.
    pub servlets_to_be_made: bool,
}
