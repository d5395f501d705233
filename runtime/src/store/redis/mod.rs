//! The Redis backend: keys `swan:NAME:KEY`, through the redis crate's
//! `ConnectionManager`, which reconnects by itself. The manager is made on
//! first use (so swan starts while Redis is down) and runs on a thread of
//! its own, away from the request workers. Calls made while Redis cannot
//! be reached fail quickly with [`StoreError::Unavailable`]:
//! - a whole call (connecting included) takes at most the store's
//!   `timeout`;
//! - one request at a time tries to connect a connection; the others wait
//!   for its outcome (within `timeout`) instead of trying in turn, and a
//!   failed attempt is not tried again for [`RETRY_CONNECT`];
//! - a call whose reconnection Redis refused (down after it was up) fails
//!   the calls of the next [`RETRY_CONNECT`] at once too; a connection
//!   reset while Redis is up costs only the calls that were on it;
//! - calls on one key always take the same connection, so Redis applies
//!   them in the order they were made: a write that timed out (and may
//!   still be applied) can never land after a later write to its key;
//! - a connection left unused for [`IDLE_CHECK_MS`] is checked with a PING
//!   before the call: Redis's own `timeout`, a proxy or a NAT may have
//!   closed it meanwhile, and the manager learns that only from a failed
//!   command, which must not be the call (an increment cannot simply be
//!   sent again). The manager then reconnects, and the call goes on the
//!   new connection;
//! - a connection whose handshake Redis refused (a password now required
//!   or changed, a database it will not select) is forgotten: the manager
//!   would keep that error for good, as it reconnects only after I/O
//!   errors. The next call after [`RETRY_CONNECT`] makes a new one.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Client, RedisError, Script};

use super::{KeyPage, StoreError};

mod cursor;
mod errors;
use cursor::{ListCursor, escape_glob};
use errors::{classify, refused_handshake};

/// The most slots one SCAN step looks at.
const SCAN_COUNT: usize = 1_000;

/// Sets `KEYS[1]` to `ARGV[3]` if its value is `ARGV[2]` (or, with
/// `ARGV[1] == "1"`, if it is absent); 1 when set.
const CAS: &str = r#"
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current then return 0 end
elseif (not current) or current ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[3])
return 1
"#;

/// How long a failed attempt to connect answers for the next ones: calls
/// in that time fail at once.
const RETRY_CONNECT: Duration = Duration::from_secs(1);

/// A connection unused this long (ms) is checked with a PING before a call.
const IDLE_CHECK_MS: u64 = 1000;

/// Twice the longest an idle check waits for its PING (half the store's
/// `timeout` if that is shorter).
const PING_WAIT: Duration = Duration::from_millis(500);

/// INCRBY `KEYS[1]` by `ARGV[1]`, refused (as INCR refuses text) when the
/// value stored is negative: wasi:keyvalue's counters are unsigned. The
/// new value, as text.
const INCR_UNSIGNED: &str = r#"
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 1) == '-' then
  return redis.error_reply('ERR value is not an integer or out of range')
end
redis.call('INCRBY', KEYS[1], ARGV[1])
return redis.call('GET', KEYS[1])
"#;

/// One connection to Redis, made on first use.
#[derive(Default)]
struct Connection {
    manager: ArcSwapOption<ConnectionManager>,
    connecting: tokio::sync::Mutex<()>,
    /// When the last attempt to connect failed, and why.
    failed: Mutex<Option<(Instant, String)>>,
    /// When a call last took this connection (coarse-clock ms).
    used_ms: AtomicU64,
}

/// An attempt to connect in progress: if its caller stops waiting (its
/// call's `timeout`), the attempt stops too and counts as failed.
struct Attempt<'a> {
    slot: &'a Connection,
    task: tokio::task::AbortHandle,
    timeout: Duration,
    settled: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.settled {
            self.task.abort();
            self.slot.failed_now(&StoreError::Unavailable(format!(
                "could not connect within {} ms",
                self.timeout.as_millis()
            )));
        }
    }
}

impl Connection {
    fn failed_now(&self, e: &StoreError) {
        // The reason alone: `recently_failed` says "unavailable" again.
        let why = match e {
            StoreError::Unavailable(why) => why.clone(),
            other => other.to_string(),
        };
        if let Ok(mut failed) = self.failed.lock() {
            *failed = Some((Instant::now(), why));
        }
    }

    /// Why the last attempt failed, if it did within [`RETRY_CONNECT`].
    fn recently_failed(&self) -> Option<StoreError> {
        let failed = self.failed.lock().ok()?;
        let (at, why) = failed.as_ref()?;
        (at.elapsed() < RETRY_CONNECT).then(|| StoreError::Unavailable(why.clone()))
    }

    /// A call on this connection failed with `e`: the store's error for
    /// it. A refused handshake makes the manager useless for good, so it
    /// is forgotten and made again (after [`RETRY_CONNECT`]).
    ///
    /// A dropped connection is left to the manager, which reconnects on
    /// the next call: a connection reset while Redis is up (Redis
    /// restarted, a client killed, a proxy recycling connections) costs
    /// only the calls that were on it. A call that fails because the
    /// manager's reconnection was refused (nothing listens: Redis is down)
    /// makes the slot's calls of the next [`RETRY_CONNECT`] fail at once,
    /// as a failed first connect does, instead of each waiting for a
    /// reconnection of its own (about 140 ms apiece). The manager is kept,
    /// so calls on a key still go through one connection in order.
    fn failed(&self, e: RedisError) -> StoreError {
        let refused = refused_handshake(&e);
        let unreachable = e.is_connection_refusal();
        let error = classify(e);
        if refused {
            self.manager.store(None);
            self.failed_now(&error);
        } else if unreachable {
            self.failed_now(&error);
        }
        error
    }
}

pub(super) struct RedisStore {
    client: Client,
    name: String,
    prefix: String,
    /// `connections` managers, made on first use; calls take turns.
    managers: Vec<Connection>,
    next: std::sync::atomic::AtomicUsize,
    timeout: Duration,
    cas: Script,
    incr_unsigned: Script,
}

/// The thread Redis connections are driven on.
fn redis_runtime() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Handle>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            let handle = runtime.handle().clone();
            std::thread::Builder::new()
                .name("swan-redis".to_owned())
                .spawn(move || runtime.block_on(std::future::pending::<()>()))
                .ok()?;
            Some(handle)
        })
        .as_ref()
}

impl RedisStore {
    pub(super) fn new(
        url: &str,
        name: &str,
        connections: u32,
        timeout: Duration,
    ) -> Result<RedisStore, StoreError> {
        let client = Client::open(url)
            .map_err(|e| StoreError::Other(format!("{}: {e}", crate::config::redact_url(url))))?;
        Ok(RedisStore {
            client,
            name: name.to_owned(),
            prefix: format!("swan:{name}:"),
            managers: (0..connections.max(1))
                .map(|_| Connection::default())
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
            timeout,
            cas: Script::new(CAS),
            incr_unsigned: Script::new(INCR_UNSIGNED),
        })
    }

    /// Runs one call within the store's `timeout`, connecting included.
    pub(super) async fn within<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Unavailable(format!(
                    "no answer within {} ms",
                    self.timeout.as_millis()
                )))
            })
    }

    /// The connection for calls on `key` (always the same one), or the
    /// next in turn, with its slot (to report a failed call to); made now
    /// if none was made yet, checked first if it was left idle.
    async fn connection(
        &self,
        key: Option<&str>,
    ) -> Result<(&Connection, ConnectionManager), StoreError> {
        self.connection_at(&self.managers[self.slot_for(key)]).await
    }

    /// `slot`'s connection, as [`RedisStore::connection`] gives it.
    async fn connection_at<'s>(
        &self,
        slot: &'s Connection,
    ) -> Result<(&'s Connection, ConnectionManager), StoreError> {
        // Redis was found out of reach just now (a failed connect, or a
        // refused reconnection): fail at once, as `failed` says.
        if let Some(e) = slot.recently_failed() {
            return Err(e);
        }
        let mut con = self.manager(slot).await?;
        let now = crate::clock::now_ms();
        let last = slot.used_ms.swap(now, Ordering::Relaxed);
        if now.saturating_sub(last) >= IDLE_CHECK_MS {
            // A dead connection fails the PING, or leaves it unanswered (a
            // NAT that dropped it silently): within a short time of its
            // own, so the call keeps most of its `timeout`. The connection
            // is then forgotten and made anew for the call.
            let check = self.timeout.min(PING_WAIT) / 2;
            let ping = redis::cmd("PING");
            let failed = match tokio::time::timeout(check, ping.query_async::<()>(&mut con)).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) if !(e.is_connection_dropped() || e.is_io_error()) => {
                    return Err(slot.failed(e));
                }
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer to PING within {} ms", check.as_millis())),
            };
            if let Some(why) = failed {
                tracing::debug!(store = %self.name, error = %why, "an idle Redis connection was dead: connecting again");
                slot.manager.store(None);
                con = self.manager(slot).await?;
            }
        }
        Ok((slot, con))
    }

    /// `slot`'s manager, made now if there is none.
    async fn manager(&self, slot: &Connection) -> Result<ConnectionManager, StoreError> {
        if let Some(m) = slot.manager.load_full() {
            return Ok((*m).clone());
        }
        if let Some(e) = slot.recently_failed() {
            return Err(e);
        }
        // Callers wait for the one connecting (bounded by `within`), then
        // share its outcome.
        let _one_at_a_time = slot.connecting.lock().await;
        if let Some(m) = slot.manager.load_full() {
            return Ok((*m).clone());
        }
        if let Some(e) = slot.recently_failed() {
            return Err(e);
        }
        self.connect(slot).await
    }

    /// Which connection calls on `key` take: always the same for a key;
    /// in turn for calls on none.
    fn slot_for(&self, key: Option<&str>) -> usize {
        let turn = match key {
            Some(key) => BuildHasherDefault::<DefaultHasher>::default().hash_one(key) as usize,
            None => self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        turn % self.managers.len()
    }

    /// One attempt to connect `slot`, on the Redis thread; its outcome is
    /// kept in the slot, also when the caller gives up first (the attempt
    /// is then stopped).
    async fn connect(&self, slot: &Connection) -> Result<ConnectionManager, StoreError> {
        let runtime =
            redis_runtime().ok_or_else(|| StoreError::Other("no Redis thread".to_owned()))?;
        let client = self.client.clone();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let task =
            runtime.spawn(async move { ConnectionManager::new_with_config(client, config).await });
        // Every caller runs under `within`, which bounds the attempt: a
        // caller that stops waiting stops the attempt (`Attempt`).
        let mut attempt = Attempt {
            slot,
            task: task.abort_handle(),
            timeout: self.timeout,
            settled: false,
        };
        let made = task
            .await
            .map_err(|e| StoreError::Other(e.to_string()))
            .and_then(|made| made.map_err(classify));
        attempt.settled = true;
        match &made {
            Ok(m) => {
                slot.used_ms
                    .store(crate::clock::now_ms(), Ordering::Relaxed);
                slot.manager.store(Some(std::sync::Arc::new(m.clone())));
            }
            Err(e) => slot.failed_now(e),
        }
        made
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub(super) async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let (slot, mut con) = self.connection(Some(key)).await?;
        let value: Option<Vec<u8>> = con.get(self.key(key)).await.map_err(|e| slot.failed(e))?;
        Ok(value.map(Bytes::from))
    }

    pub(super) async fn set(
        &self,
        key: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let (slot, mut con) = self.connection(Some(key)).await?;
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(key)).arg(value.as_ref());
        if let Some(ttl) = ttl {
            cmd.arg("PX").arg(ttl.as_millis().max(1) as u64);
        }
        cmd.query_async::<()>(&mut con)
            .await
            .map_err(|e| slot.failed(e))
    }

    pub(super) async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let (slot, mut con) = self.connection(Some(key)).await?;
        let n: u64 = con.del(self.key(key)).await.map_err(|e| slot.failed(e))?;
        Ok(n > 0)
    }

    /// A page of at most `limit` keys under `prefix`. SCAN's COUNT is only
    /// a hint and one SCAN step can return more keys than a page holds;
    /// what does not fit is kept in Redis (`swan-cursor:NAME:ID`, for ten
    /// minutes) with the SCAN cursor after it and the prefix it lists (a
    /// cursor taken to another prefix is refused), and the page's cursor points
    /// there. So pages are never longer than `limit`, every key present for
    /// the whole listing is returned (SCAN's own guarantee), and any swan
    /// process sharing the Redis can continue a listing another began.
    pub(super) async fn list(
        &self,
        prefix: &str,
        cursor: Option<u64>,
        limit: u64,
    ) -> Result<KeyPage, StoreError> {
        // Each SCAN is bounded by the connection's response timeout; the
        // listing as a whole is not (a sparse prefix in a large keyspace
        // takes many).
        let (slot, mut con) = self.within(self.connection(None)).await?;
        let limit = usize::try_from(limit.max(1)).unwrap_or(usize::MAX);
        let mut keys: Vec<String> = Vec::new();
        let listing = (self.name.as_ref(), prefix);
        let mut scan = match ListCursor::decode(cursor, listing)? {
            ListCursor::Scan(scan) => scan,
            ListCursor::Leftover { id, offset } => {
                let state: Vec<String> = con
                    .lrange(self.cursor_key(id), 0, -1)
                    .await
                    .map_err(|e| slot.failed(e))?;
                let [next, listed, rest @ ..] = state.as_slice() else {
                    return Err(StoreError::Other(
                        "unknown or expired cursor: list again from the start".to_owned(),
                    ));
                };
                // The rest belongs to the listing it came from: taken to
                // another prefix, it would hand out keys outside it.
                if listed != prefix {
                    return Err(StoreError::Other(
                        "the cursor belongs to a listing of another prefix: list again from the start"
                            .to_owned(),
                    ));
                }
                let rest = rest.get(offset..).unwrap_or_default();
                if rest.len() > limit {
                    return Ok(KeyPage {
                        keys: rest[..limit].to_vec(),
                        cursor: Some(
                            ListCursor::Leftover {
                                id,
                                offset: offset + limit,
                            }
                            .encode(listing)?,
                        ),
                    });
                }
                keys.extend_from_slice(rest);
                let next = next
                    .parse::<u64>()
                    .map_err(|_| StoreError::Other("bad cursor state".to_owned()))?;
                if next == 0 {
                    return Ok(KeyPage { keys, cursor: None });
                }
                next
            }
        };
        let pattern = format!("{}{}*", escape_glob(&self.prefix), escape_glob(prefix));
        // COUNT is how many slots one step looks at, not how many keys it
        // returns. It starts at the room left on the page (a dense prefix
        // leaves few keys over to keep) and doubles at each step that
        // finds none, up to SCAN_COUNT: a sparse prefix in a shared
        // database must not cost a round trip per few slots.
        let mut count = (limit - keys.len()).clamp(10, SCAN_COUNT);
        loop {
            if keys.len() == limit {
                return Ok(KeyPage {
                    keys,
                    cursor: Some(ListCursor::Scan(scan).encode(listing)?),
                });
            }
            // Keys as bytes: one that is not UTF-8 (written by another
            // client) is listed with U+FFFD, as ABI.md says, instead of
            // failing every listing that meets it.
            let (after, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(scan)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(count)
                .query_async(&mut con)
                .await
                .map_err(|e| slot.failed(e))?;
            if batch.is_empty() {
                count = (count * 2).min(SCAN_COUNT);
            }
            let mut batch: Vec<String> = batch
                .iter()
                .filter_map(|k| k.strip_prefix(self.prefix.as_bytes()))
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect();
            let room = limit - keys.len();
            if batch.len() > room {
                let rest = batch.split_off(room);
                keys.extend(batch);
                let id: u64 = con
                    .incr(format!("swan-cursor:{}", self.name), 1)
                    .await
                    .map_err(|e| slot.failed(e))?;
                let id = id % (ListCursor::MAX_ID - 1) + 1;
                let state_key = self.cursor_key(id);
                redis::pipe()
                    .atomic()
                    .del(&state_key)
                    .rpush(&state_key, after.to_string())
                    .rpush(&state_key, prefix)
                    .rpush(&state_key, rest)
                    .expire(&state_key, 600)
                    .query_async::<()>(&mut con)
                    .await
                    .map_err(|e| slot.failed(e))?;
                return Ok(KeyPage {
                    keys,
                    cursor: Some(ListCursor::Leftover { id, offset: 0 }.encode(listing)?),
                });
            }
            keys.extend(batch);
            scan = after;
            if scan == 0 {
                return Ok(KeyPage { keys, cursor: None });
            }
        }
    }

    fn cursor_key(&self, id: u64) -> String {
        format!("swan-cursor:{}:{id}", self.name)
    }

    pub(super) async fn increment(
        &self,
        key: &str,
        delta: i64,
        unsigned: bool,
    ) -> Result<i64, StoreError> {
        let (slot, mut con) = self.connection(Some(key)).await?;
        if !unsigned {
            return con
                .incr(self.key(key), delta)
                .await
                .map_err(|e| slot.failed(e));
        }
        // The new value as text (a Lua number would round past 2^53).
        let sum: String = self
            .incr_unsigned
            .key(self.key(key))
            .arg(delta)
            .invoke_async(&mut con)
            .await
            .map_err(|e| slot.failed(e))?;
        sum.parse().map_err(|_| StoreError::NotANumber)
    }

    pub(super) async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Bytes>,
        new: Bytes,
    ) -> Result<bool, StoreError> {
        let (slot, mut con) = self.connection(Some(key)).await?;
        let absent = if expected.is_none() { "1" } else { "0" };
        let swapped: i64 = self
            .cas
            .key(self.key(key))
            .arg(absent)
            .arg(expected.as_deref().unwrap_or_default())
            .arg(new.as_ref())
            .invoke_async(&mut con)
            .await
            .map_err(|e| slot.failed(e))?;
        Ok(swapped == 1)
    }

    /// PINGs every connection at once: the store is well only if each
    /// answers (calls on a key always take one connection, so one broken
    /// connection fails a share of the calls; a probe of one connection in
    /// turn would flap between ready and not).
    pub(super) async fn ping(&self) -> Result<(), StoreError> {
        let pings = self.managers.iter().map(|slot| async move {
            let (slot, mut con) = self.connection_at(slot).await?;
            redis::cmd("PING")
                .query_async::<String>(&mut con)
                .await
                .map(|_| ())
                .map_err(|e| slot.failed(e))
        });
        let failed = futures_util::future::join_all(pings)
            .await
            .into_iter()
            .enumerate()
            .find_map(|(i, r)| r.err().map(|e| (i, e)));
        match failed {
            None => Ok(()),
            Some((_, e)) if self.managers.len() == 1 => Err(e),
            Some((i, e)) => {
                let which = format!("connection {} of {}", i + 1, self.managers.len());
                Err(match e {
                    StoreError::Unavailable(why) => {
                        StoreError::Unavailable(format!("{which}: {why}"))
                    }
                    StoreError::Other(why) => StoreError::Other(format!("{which}: {why}")),
                    e => e,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests;
