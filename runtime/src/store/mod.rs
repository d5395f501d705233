//! Key-value stores servlets keep state in, the same operations on every
//! backend:
//! - `embedded`: a redb file on this machine (crash-safe: a write a servlet
//!   saw succeed survives `kill -9`), reads on the caller's thread, writes
//!   grouped into transactions on a writer thread of its own;
//! - `redis`: a Redis server shared by several swan processes, through the
//!   redis crate's reconnecting connection manager; keys namespaced
//!   `swan:NAME:`. Redis down makes calls fail with [`StoreError::Unavailable`]
//!   until it is back, without a restart.
//!
//! Access is per route (`stores = [...]`), counted per request
//! ([`StoreAccess`]); sizes are checked against the store's limits before
//! anything is sent.

mod embedded;
mod redis;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;

use crate::config::{StoreConfig, StoreKind, StoreLimits};
use crate::observe::counters::Counter;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The route may not open this store.
    #[error("access denied")]
    AccessDenied,
    /// No store has this name.
    #[error("no such store")]
    NoSuchStore,
    /// The backend cannot be reached (Redis down); try again later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A key, value, list or the request's operation count is over a limit.
    #[error("limit exceeded: {0}")]
    Limit(&'static str),
    /// Increment on a value that is not a whole number.
    #[error("not a number")]
    NotANumber,
    /// An embedded store's file is open in another process.
    #[error(
        "{0} is open in another process; an embedded store belongs to one swan process: give each its own file, or share state through a Redis store"
    )]
    InUse(String),
    /// Anything else the backend reported.
    #[error("store error: {0}")]
    Other(String),
}

/// A page of keys.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyPage {
    /// The keys, in the backend's order.
    pub keys: Vec<String>,
    /// Where the next page starts; `None` at the end.
    pub cursor: Option<u64>,
}

/// One store.
pub struct Store {
    /// What it was opened with: its name and limits (a reload compares
    /// against it).
    config: StoreConfig,
    backend: Backend,
    stats: StoreStats,
    /// Whether the configuration in force has it (a reload may remove
    /// it: open, unused, until a restart).
    configured: AtomicBool,
}

/// What a store has done, for metrics.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// Operations asked of it.
    pub operations: Counter,
    /// Operations that found the backend unreachable.
    pub unavailable: Counter,
    /// Operations over a limit.
    pub limited: Counter,
    /// Other failures (not a number, backend errors).
    pub failed: Counter,
    /// Whether the last operation found the backend unreachable: the log
    /// says when that starts and when it ends, once each.
    down: AtomicBool,
}

enum Backend {
    Embedded(embedded::Embedded),
    /// Boxed: the Redis client is large, and stores are few.
    Redis(Box<redis::RedisStore>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("name", &self.config.name)
            .field("kind", &self.kind())
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (embedded) or prepares (Redis: connected on first use) a store.
    pub fn open(config: &StoreConfig) -> Result<Store, StoreError> {
        Store::open_as(config, &Opening::Alone)
    }

    /// [`Store::open`], in a process started as `opening` says.
    pub fn open_as(config: &StoreConfig, opening: &Opening) -> Result<Store, StoreError> {
        let backend = match &config.kind {
            StoreKind::Embedded { path } => {
                Backend::Embedded(embedded::Embedded::open(path, opening.takes_over(path))?)
            }
            StoreKind::Redis {
                url,
                connections,
                timeout,
            } => Backend::Redis(Box::new(redis::RedisStore::new(
                url,
                &config.name,
                *connections,
                *timeout,
            )?)),
        };
        Ok(Store {
            config: config.clone(),
            backend,
            stats: StoreStats::default(),
            configured: AtomicBool::new(true),
        })
    }

    /// The store's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Records whether the configuration in force has it (at a reload).
    pub fn set_configured(&self, configured: bool) {
        self.configured.store(configured, Ordering::Relaxed);
    }

    /// The settings it was opened with.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// "embedded" or "redis".
    pub fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Embedded(_) => "embedded",
            Backend::Redis(_) => "redis",
        }
    }

    /// The store's limits.
    pub fn limits(&self) -> StoreLimits {
        self.config.limits
    }

    /// What it has done.
    pub fn stats(&self) -> &StoreStats {
        &self.stats
    }

    fn tally<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        use Ordering::Relaxed;
        self.stats.operations.add(1);
        let down = &self.stats.down;
        match &result {
            Err(StoreError::Unavailable(why)) => {
                self.stats.unavailable.add(1);
                if !down.load(Relaxed) && !down.swap(true, Relaxed) {
                    tracing::warn!(store = %self.name(), reason = %why, "store unavailable: its operations answer 503 until it is back");
                }
            }
            Err(StoreError::Limit(_)) => self.stats.limited.add(1),
            Err(_) => self.stats.failed.add(1),
            Ok(_) => {}
        }
        if result.is_ok() && down.load(Relaxed) && down.swap(false, Relaxed) {
            tracing::info!(store = %self.name(), "store available again");
        }
        result
    }

    /// Whether `key` (and `value`) fit the store's limits: a batch checks
    /// every entry before it writes any.
    pub fn check_sizes(&self, key: &str, value: Option<&[u8]>) -> Result<(), StoreError> {
        let checked = self
            .check_key(key)
            .and_then(|()| value.map_or(Ok(()), |v| self.check_value(v)));
        if checked.is_err() {
            // The batch call it refuses counts, as one refused operation.
            return self.tally(checked);
        }
        Ok(())
    }

    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key.len() as u64 > self.config.limits.max_key_bytes {
            return Err(StoreError::Limit("key too large"));
        }
        Ok(())
    }

    fn check_value(&self, value: &[u8]) -> Result<(), StoreError> {
        if value.len() as u64 > self.config.limits.max_value_bytes {
            return Err(StoreError::Limit("value too large"));
        }
        Ok(())
    }

    /// The value of `key`, if any (and not expired).
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let result = async {
            self.check_key(key)?;
            match &self.backend {
                Backend::Embedded(b) => b.ready().await.and_then(|()| b.get(key)),
                Backend::Redis(b) => b.within(b.get(key)).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Sets `key`, expiring after `ttl` if given.
    pub async fn set(
        &self,
        key: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let result = async {
            self.check_key(key)?;
            self.check_value(&value)?;
            if ttl.is_some_and(|t| t > MAX_TTL) {
                return Err(StoreError::Limit("time to live past a century"));
            }
            match &self.backend {
                Backend::Embedded(b) => b.set(key, value, ttl).await,
                Backend::Redis(b) => b.within(b.set(key, value, ttl)).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Deletes `key`; whether it existed.
    pub async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let result = async {
            self.check_key(key)?;
            match &self.backend {
                Backend::Embedded(b) => b.delete(key).await,
                Backend::Redis(b) => b.within(b.delete(key)).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.get(key).await?.is_some())
    }

    /// Keys starting with `prefix`, at most `limit` (capped by the store's
    /// `max_list_keys`), from `cursor` (`None`: the first page).
    pub async fn list(
        &self,
        prefix: &str,
        cursor: Option<u64>,
        limit: u64,
    ) -> Result<KeyPage, StoreError> {
        let result = async {
            self.check_key(prefix)?;
            let limit = limit.clamp(1, self.config.limits.max_list_keys);
            match &self.backend {
                Backend::Embedded(b) => {
                    b.ready().await.and_then(|()| b.list(prefix, cursor, limit))
                }
                // Many round trips on a large keyspace: each has `timeout`.
                Backend::Redis(b) => b.list(prefix, cursor, limit).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Adds `delta` to the whole number stored at `key` (0 when absent),
    /// atomically; the new value.
    pub async fn increment(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.add(key, delta, false).await
    }

    /// [`Store::increment`] for unsigned counters (wasi:keyvalue's): a
    /// negative number stored is "not a number", and stays as it was.
    pub async fn increment_unsigned(&self, key: &str, delta: u64) -> Result<u64, StoreError> {
        let delta = i64::try_from(delta).map_err(|_| StoreError::NotANumber)?;
        let sum = self.add(key, delta, true).await?;
        u64::try_from(sum).map_err(|_| StoreError::NotANumber)
    }

    async fn add(&self, key: &str, delta: i64, unsigned: bool) -> Result<i64, StoreError> {
        let result = async {
            self.check_key(key)?;
            match &self.backend {
                Backend::Embedded(b) => b.increment(key, delta, unsigned).await,
                Backend::Redis(b) => b.within(b.increment(key, delta, unsigned)).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Sets `key` to `new` only if its value is `expected` (`None`: absent);
    /// whether it was set.
    pub async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Bytes>,
        new: Bytes,
    ) -> Result<bool, StoreError> {
        let result = async {
            self.check_key(key)?;
            self.check_value(&new)?;
            match &self.backend {
                Backend::Embedded(b) => b.compare_and_swap(key, expected, new).await,
                Backend::Redis(b) => b.within(b.compare_and_swap(key, expected, new)).await,
            }
        }
        .await;
        self.tally(result)
    }

    /// Whether the backend works: a Redis PING; for embedded, its file is
    /// where it was opened and its disk has not failed since.
    pub async fn ping(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Embedded(b) => b.health(),
            Backend::Redis(b) => b.within(b.ping()).await,
        }
    }
}

/// How the process opening its stores was started.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Opening {
    /// On its own: an embedded store's file open in another process is an
    /// error ([`StoreError::InUse`]).
    #[default]
    Alone,
    /// By a SIGUSR2 upgrade from a process holding these embedded stores'
    /// files (canonical): each is taken over once that process exits,
    /// operations waiting for it meanwhile (at most 10 s, then they fail as
    /// unavailable). Any other file held elsewhere is an error, as alone.
    Upgrade {
        /// The files the old process holds.
        held: Vec<std::path::PathBuf>,
    },
}

impl Opening {
    /// Whether `path` is a file the old process holds, to take over.
    fn takes_over(&self, path: &std::path::Path) -> bool {
        match self {
            Opening::Alone => false,
            Opening::Upgrade { held } => path.canonicalize().is_ok_and(|p| held.contains(&p)),
        }
    }
}

/// Every configured store, by name.
#[derive(Debug, Default)]
pub struct Stores {
    by_name: HashMap<String, Arc<Store>>,
}

/// A store could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("store {name}: {error}")]
pub struct OpenError {
    /// The store.
    pub name: String,
    /// Why.
    pub error: StoreError,
}

impl Stores {
    /// Opens the stores servlets may use; only those some route lists (an
    /// embedded file is created only if used).
    pub fn open(
        configs: &[StoreConfig],
        used: &[String],
        opening: &Opening,
    ) -> Result<Stores, OpenError> {
        let (stores, mut failed) = Stores::open_each(configs, used, opening);
        match failed.pop() {
            Some(e) => Err(e),
            None => Ok(stores),
        }
    }

    /// Opens what it can of the stores some route lists; the rest are
    /// returned as errors (for `swan check`, which reports them all).
    pub fn open_each(
        configs: &[StoreConfig],
        used: &[String],
        opening: &Opening,
    ) -> (Stores, Vec<OpenError>) {
        let mut by_name = HashMap::new();
        let mut failed = Vec::new();
        for config in configs.iter().filter(|c| used.contains(&c.name)) {
            match Store::open_as(config, opening) {
                Ok(store) => {
                    by_name.insert(config.name.clone(), Arc::new(store));
                }
                Err(error) => failed.push(OpenError {
                    name: config.name.clone(),
                    error,
                }),
            }
        }
        (Stores { by_name }, failed)
    }

    /// The store named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Store>> {
        self.by_name.get(name)
    }

    /// Every open store.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Store>> {
        self.by_name.values()
    }

    /// The open stores the configuration in force still has (shown).
    pub fn in_force(&self) -> impl Iterator<Item = &Arc<Store>> {
        self.iter().filter(|s| s.configured.load(Ordering::Relaxed))
    }

    /// The files of the embedded stores open here (canonical): what a
    /// successor takes over in an upgrade.
    pub fn embedded_files(&self) -> Vec<std::path::PathBuf> {
        self.iter()
            .filter_map(|s| match &s.config.kind {
                StoreKind::Embedded { path } => path.canonicalize().ok(),
                StoreKind::Redis { .. } => None,
            })
            .collect()
    }
}

/// What one servlet instance may do with the stores, counted per request.
#[derive(Debug, Clone)]
pub struct StoreAccess {
    stores: Arc<Stores>,
    allowed: Arc<[String]>,
    /// Operations of this request, per store (by address; a route lists
    /// few).
    ops: Vec<(usize, u64)>,
    /// Whether a call of this request found a store unavailable (a servlet
    /// that then fails gives 503, not 500).
    pub saw_unavailable: bool,
}

impl StoreAccess {
    /// Access to the `allowed` stores of `stores`.
    pub fn new(stores: Arc<Stores>, allowed: &[String]) -> StoreAccess {
        StoreAccess {
            stores,
            allowed: allowed.into(),
            ops: Vec::new(),
            saw_unavailable: false,
        }
    }

    /// A new request starts: the counters start again.
    pub fn reset(&mut self) {
        self.ops.clear();
        self.saw_unavailable = false;
    }

    /// Opens `name` if the route lists it.
    pub fn open(&self, name: &str) -> Result<Arc<Store>, StoreError> {
        if !self.allowed.iter().any(|a| a == name) {
            return Err(StoreError::AccessDenied);
        }
        self.stores
            .get(name)
            .cloned()
            .ok_or(StoreError::NoSuchStore)
    }

    /// Counts one operation on `store` against its per-request limit.
    pub fn count(&mut self, store: &Store) -> Result<(), StoreError> {
        self.count_many(store, 1)
    }

    /// Counts `n` operations at once (a batch) against the store's own
    /// per-request limit: all of them fit, or none is counted (and the
    /// refusal is, in the store's metrics).
    pub fn count_many(&mut self, store: &Store, n: usize) -> Result<(), StoreError> {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let at = std::ptr::from_ref(store) as usize;
        let i = match self.ops.iter().position(|(s, _)| *s == at) {
            Some(i) => i,
            None => {
                self.ops.push((at, 0));
                self.ops.len() - 1
            }
        };
        let ops = &mut self.ops[i].1;
        if ops.saturating_add(n) > store.config.limits.max_ops_per_request {
            return store.tally(Err(StoreError::Limit(
                "too many store operations in this request",
            )));
        }
        *ops += n;
        Ok(())
    }

    /// Notes a result: an unavailable store is remembered for the request.
    pub fn note<T>(&mut self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Unavailable(_)) = &result {
            self.saw_unavailable = true;
        }
        result
    }
}

/// A store value as a whole number, read as Redis's INCR reads one, so a
/// servlet sees the same on either backend: decimal digits with an
/// optional `-`, no sign `+`, no spaces, no leading zeros (`0` itself
/// aside, so no `-0`), within i64.
pub(crate) fn parse_number(value: Option<&[u8]>) -> Result<i64, StoreError> {
    let Some(bytes) = value else {
        return Ok(0);
    };
    let digits = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let canonical = match digits {
        [b'0'] => digits.len() == bytes.len(),
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    std::str::from_utf8(bytes)
        .ok()
        .filter(|_| canonical)
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(StoreError::NotANumber)
}

/// The longest time to live a value may be given: a century (Redis
/// refuses expiry times past its clock's range; both backends refuse the
/// same).
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::parse_number;

    #[test]
    fn numbers_are_read_as_redis_reads_them() {
        for (text, n) in [
            ("0", 0),
            ("7", 7),
            ("-7", -7),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(parse_number(Some(text.as_bytes())), Ok(n), "{text}");
        }
        for text in [
            "",
            "-",
            "-0",
            "+5",
            " 5",
            "5 ",
            "5\n",
            "05",
            "00",
            "-05",
            "1e3",
            "0x10",
            "1.0",
            "9223372036854775808",
            "\u{0665}",
        ] {
            assert!(parse_number(Some(text.as_bytes())).is_err(), "{text:?}");
        }
        assert_eq!(parse_number(None), Ok(0));
    }
}
