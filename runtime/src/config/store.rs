//! `[[store]]`: key-value stores servlets keep state in, their limits and
//! defaults.

use std::path::PathBuf;

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
/// The user information runs to the last `@`: a password with an
/// unencoded `/`, `?` or `#` in it must not end it early and show.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    let odd = |s: &str| s.contains(['/', '?', '#']);
    match userinfo.split_once(':') {
        Some((user, _password)) if !odd(user) => format!("{scheme}://{user}:***@{host}"),
        Some(_) => format!("{scheme}://***@{host}"),
        None if odd(userinfo) => format!("{scheme}://***@{host}"),
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
            (
                "redis://:s3cr/et@127.0.0.1:6379/0",
                "redis://:***@127.0.0.1:6379/0",
            ),
            ("redis://app:s3c?ret@h/0", "redis://app:***@h/0"),
            ("redis://s3cret#x@h", "redis://***@h"),
            ("redis://a/b:s3cret@h", "redis://***@h"),
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
