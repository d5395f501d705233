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
/// Time an outbound request may take to connect (and, for HTTPS, finish
/// its handshake).
pub const DEFAULT_OUTBOUND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time an outbound request may wait for the response head.
pub const DEFAULT_OUTBOUND_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an outbound request may take in all, body included.
pub const DEFAULT_OUTBOUND_TIMEOUT: Duration = Duration::from_secs(60);
/// Outbound requests one servlet may have in flight.
pub const DEFAULT_OUTBOUND_CONCURRENCY: u64 = 16;
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

/// Largest key a store accepts, in bytes.
pub const DEFAULT_STORE_MAX_KEY_BYTES: u64 = 1 << 10;
/// Largest value a store accepts, in bytes.
pub const DEFAULT_STORE_MAX_VALUE_BYTES: u64 = 1 << 20;
/// Store operations one request may make.
pub const DEFAULT_STORE_MAX_OPS_PER_REQUEST: u64 = 1000;
/// Keys one list call returns at most.
pub const DEFAULT_STORE_MAX_LIST_KEYS: u64 = 1000;
/// Name of the store routes get when no `[[store]]` is configured.
pub const DEFAULT_STORE_NAME: &str = "default";
/// Connections to a Redis store.
pub const DEFAULT_REDIS_CONNECTIONS: u32 = 2;
/// Time a Redis command or connection attempt may take.
pub const DEFAULT_REDIS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

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
}

/// `[[store]]`: a key-value store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The name servlets open it by, and routes list in `stores`.
    pub name: String,
    /// Where the data lives.
    pub kind: StoreKind,
    /// Limits on what servlets may do with it.
    pub limits: StoreLimits,
}

/// A store's backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// A crash-safe database file (redb) on this machine.
    Embedded {
        /// The file.
        path: PathBuf,
    },
    /// A Redis server, shared by every swan process that names it; keys are
    /// namespaced `swan:NAME:`.
    Redis {
        /// `redis://[user:password@]host[:port][/db]`.
        url: String,
        /// Connections kept to Redis (`connections`), each multiplexing
        /// many calls; calls are spread over them. Default: 2.
        connections: u32,
        /// Time a command, or connecting, may take before the call fails
        /// as unavailable (`timeout`). Default: 1 s.
        timeout: std::time::Duration,
    },
}

/// Limits of a store, each with a documented default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Largest key, in bytes. Default: 1 KiB.
    pub max_key_bytes: u64,
    /// Largest value, in bytes. Default: 1 MiB.
    pub max_value_bytes: u64,
    /// Operations one request may make. Default: 1000.
    pub max_ops_per_request: u64,
    /// Keys one list call returns at most. Default: 1000.
    pub max_list_keys: u64,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_key_bytes: DEFAULT_STORE_MAX_KEY_BYTES,
            max_value_bytes: DEFAULT_STORE_MAX_VALUE_BYTES,
            max_ops_per_request: DEFAULT_STORE_MAX_OPS_PER_REQUEST,
            max_list_keys: DEFAULT_STORE_MAX_LIST_KEYS,
        }
    }
}

impl StoreKind {
    /// "embedded PATH" or "redis URL", with any password in the URL
    /// replaced by `***`: fit for logs and `swan check`.
    pub fn describe(&self) -> String {
        match self {
            StoreKind::Embedded { path } => format!("embedded {}", path.display()),
            StoreKind::Redis {
                url,
                connections,
                timeout,
            } => format!(
                "redis {} ({connections} connection{}, timeout {timeout:?})",
                redact_url(url),
                if *connections == 1 { "" } else { "s" }
            ),
        }
    }
}

/// `url` with the password of its user information replaced by `***`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl StoreConfig {
    /// The store every configuration has when it declares none: embedded,
    /// in `data/default.redb` under `base` (the configuration's folder).
    pub fn implicit_default(base: &std::path::Path) -> StoreConfig {
        StoreConfig {
            name: DEFAULT_STORE_NAME.to_owned(),
            kind: StoreKind::Embedded {
                path: base.join("data").join("default.redb"),
            },
            limits: StoreLimits::default(),
        }
    }
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
        }
    }

    /// The default site.
    pub fn default_site(&self) -> Option<&SiteConfig> {
        self.sites.iter().find(|s| s.default)
    }

    /// The names of the stores some route lists.
    pub fn stores_used(&self) -> Vec<String> {
        let mut used: Vec<String> = self
            .sites
            .iter()
            .flat_map(|s| {
                std::iter::once(&s.servlet_limits.stores)
                    .chain(s.routes.iter().map(|r| &r.limits.stores))
            })
            .flatten()
            .cloned()
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
}

impl ServerConfig {
    /// Built-in defaults.
    pub fn defaults() -> ServerConfig {
        ServerConfig {
            listen: vec![SocketAddr::from(([127, 0, 0, 1], 8080))],
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
            max_instances: DEFAULT_MAX_INSTANCES as u32,
            development: false,
            request_id_header: true,
            build_sources: None,
            build_timeout: DEFAULT_BUILD_TIMEOUT,
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
    /// Instances kept instantiated ahead of requests; 0 makes each one when
    /// a request needs it. Default: 4.
    pub prewarm: u32,
    /// Outbound HTTP: where the servlet may send requests. Default: nowhere.
    pub outbound: OutboundConfig,
    /// Key-value stores the servlet may open (`stores`). Default: none.
    pub stores: Vec<String>,
}

/// What a servlet may reach over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundConfig {
    /// Allowed destinations (`allowed_outbound_hosts`). Default: none.
    pub allowed_hosts: Vec<OutboundRule>,
    /// Whether names may resolve to loopback, private or link-local
    /// addresses (`outbound_private`). Default: false.
    pub allow_private: bool,
    /// Connect (and TLS handshake) time limit. Default: 5 s.
    pub connect_timeout: Duration,
    /// Time to the response head. Default: 30 s.
    pub first_byte_timeout: Duration,
    /// Time for the whole exchange. Default: 60 s.
    pub timeout: Duration,
    /// Requests in flight at once. Default: 16.
    pub max_concurrency: u32,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            allowed_hosts: Vec::new(),
            allow_private: false,
            connect_timeout: DEFAULT_OUTBOUND_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_OUTBOUND_FIRST_BYTE_TIMEOUT,
            timeout: DEFAULT_OUTBOUND_TIMEOUT,
            max_concurrency: DEFAULT_OUTBOUND_CONCURRENCY as u32,
        }
    }
}

/// One `allowed_outbound_hosts` entry: `scheme://host[:port]`. `*` stands
/// for any scheme, host or port; `*.example.com` for any subdomain; no
/// port means the scheme's default one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRule {
    /// `http`, `https`, or `*`.
    pub scheme: String,
    /// A lower-case name, an IP address, `*.suffix`, or `*`.
    pub host: String,
    /// A port; `None` for `*`, or the scheme's default when not written.
    pub port: Option<u16>,
    /// Whether the port was left out (the scheme's default applies).
    pub default_port: bool,
}

impl std::fmt::Display for OutboundRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.port, self.default_port) {
            (Some(p), _) => write!(f, "{}://{host}:{p}", self.scheme),
            (None, true) => write!(f, "{}://{host}", self.scheme),
            (None, false) => write!(f, "{}://{host}:*", self.scheme),
        }
    }
}

impl OutboundRule {
    /// Parses `scheme://host[:port]`.
    pub fn parse(s: &str) -> Result<OutboundRule, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("{s:?} has no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "*") {
            return Err(format!("{s:?}: the scheme must be http, https or *"));
        }
        let rest = rest.trim_end_matches('/');
        if rest.contains(['/', '?', '#', '@']) || rest.is_empty() {
            return Err(format!("{s:?}: write only scheme://host[:port]"));
        }
        let (host, port) = match rest.strip_prefix('[') {
            // [IPv6]:port
            Some(v6) => {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{s:?}: unclosed `[`"))?;
                match after {
                    "" => (host, None),
                    _ => (
                        host,
                        Some(
                            after
                                .strip_prefix(':')
                                .ok_or_else(|| format!("{s:?}: expected `:port` after `]`"))?,
                        ),
                    ),
                }
            }
            None => match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            },
        };
        let host = host.to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("{s:?} has no host"));
        }
        let wildcard_ok = host == "*" || host.strip_prefix("*.").is_some_and(|h| !h.contains('*'));
        if host.contains('*') && !wildcard_ok {
            return Err(format!(
                "{s:?}: `*` may only be the whole host or its first label (*.example.com)"
            ));
        }
        let (port, default_port) = match port {
            None => (None, true),
            Some("*") => (None, false),
            Some(p) => (
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("{s:?}: {p:?} is not a port"))?,
                ),
                false,
            ),
        };
        Ok(OutboundRule {
            scheme,
            host,
            port,
            default_port,
        })
    }

    /// Whether a request to `scheme://host:port` matches this rule.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme_ok = self.scheme == "*" || self.scheme == scheme;
        let host_ok = self.host == "*"
            || self.host == host
            || self.host.strip_prefix("*.").is_some_and(|suffix| {
                host.strip_suffix(suffix)
                    .is_some_and(|h| h.ends_with('.') && h.len() > 1)
            });
        let port_ok = match (self.port, self.default_port) {
            (Some(p), _) => p == port,
            (None, true) => port == if scheme == "https" { 443 } else { 80 },
            (None, false) => true,
        };
        scheme_ok && host_ok && port_ok
    }
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
            outbound: OutboundConfig::default(),
            stores: Vec::new(),
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
        if base.contains("//") || base.split('/').any(|seg| seg == "." || seg == "..") {
            return Err(format!("{s:?} is not a normalised path"));
        }
        let decoded = if prefix && base.is_empty() {
            String::new()
        } else {
            crate::request::path::normalize(base)
                .map_err(|e| format!("{s:?} is not a usable path: {e}"))?
                .into_owned()
        };
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_passwords_never_show() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
            ("redis://:s3cret@host:1/2", "redis://:***@host:1/2"),
            ("redis://app:s3cret@host", "redis://app:***@host"),
            (
                "rediss://app:p@ss:w@rd@host/0?x=1",
                "rediss://app:***@host/0?x=1",
            ),
            ("redis://user@host", "redis://user@host"),
            ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ] {
            let kind = StoreKind::Redis {
                url: url.to_owned(),
                connections: 1,
                timeout: std::time::Duration::from_secs(1),
            };
            assert!(
                kind.describe().starts_with(&format!("redis {shown} (")),
                "{}",
                kind.describe()
            );
            assert!(!kind.describe().contains("s3cret"));
        }
    }
}
