//! The embedded backend: one redb file per store.
//!
//! redb commits are durable when `commit` returns (fsync), so a write a
//! servlet saw succeed survives `kill -9`. Reads run on the caller's thread
//! (an MVCC read transaction, microseconds from the page cache); writes go
//! to a writer thread that applies everything waiting in one transaction,
//! so many concurrent writers share each fsync. Values carry their expiry;
//! an index of expiries lets the writer drop expired keys in order.
//!
//! A disk that fails (full, an I/O error) fails the writes it hit as
//! "unavailable" (nothing of a failed transaction is applied), makes the
//! store not ready, and the writer closes and reopens the file until it
//! works again: redb refuses every later transaction on a database that
//! saw an I/O error. A file deleted while open fails writes the same way
//! (they would go to a file nobody can open again) until it is back.
//!
//! In a SIGUSR2 upgrade the new process takes the file over from the old
//! one as soon as that one exits (`handoff`).

mod file;
mod handoff;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};
use tokio::sync::oneshot;

use super::{KeyPage, StoreError, parse_number};
use file::{RETRY_OPEN, Shared, open_file, other};
use handoff::Handoff;

/// key → expiry (ms since the epoch, 0: none, 8 bytes big-endian) + value.
const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
/// (expiry, key) for keys that expire.
const EXPIRY: TableDefinition<(u64, &str), ()> = TableDefinition::new("expiry");
/// One entry, rewritten by the writer while the disk fails: a commit that
/// writes data, as a store's writes do (an empty one succeeds on a full
/// disk, and would call the store well).
const PROBE: TableDefinition<&str, &[u8]> = TableDefinition::new("swan-probe");
const PROBE_BYTES: usize = 64 << 10;
/// Writes applied in one transaction at most.
const MAX_BATCH: usize = 512;
/// How often expired keys are swept when nothing else is written.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

pub(super) struct Embedded {
    shared: Arc<Shared>,
    /// Set while the file is taken over from the process this one
    /// replaces.
    handoff: Option<Arc<Handoff>>,
    cursors: std::sync::Mutex<Cursors>,
    /// `None` once dropping.
    writes: Option<mpsc::Sender<Write>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Embedded {
    fn drop(&mut self) {
        // The writer ends when its channel closes; waiting for it releases
        // the file's lock before this returns, so the store can be opened
        // again at once (a configuration reload, a test).
        if let Some(handoff) = &self.handoff {
            handoff.stop();
        }
        self.writes.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

enum Op {
    Set {
        key: String,
        value: Bytes,
        expires: u64,
    },
    Delete {
        key: String,
    },
    Increment {
        key: String,
        delta: i64,
        /// A negative number stored is "not a number" (wasi:keyvalue's
        /// counters are unsigned).
        unsigned: bool,
    },
    CompareAndSwap {
        key: String,
        expected: Option<Bytes>,
        new: Bytes,
    },
}

/// What a write answers.
enum Done {
    Unit,
    Bool(bool),
    Number(i64),
}

struct Write {
    op: Op,
    reply: oneshot::Sender<Result<Done, StoreError>>,
}

/// Listing positions handed out as cursors: cursor number → the last key
/// returned, so the next page starts after that key whatever was added or
/// deleted meanwhile. Bounded: the oldest are forgotten first.
struct Cursors {
    next: u64,
    /// By id: the prefix listed, and the last key given.
    last_key: std::collections::HashMap<u64, (String, String)>,
    order: std::collections::VecDeque<u64>,
}

/// Ids start at a random point in each process: a cursor kept across a
/// restart is unknown (as documented), never another listing's.
impl Default for Cursors {
    fn default() -> Cursors {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Cursors {
            // Below 2^52: ids stay positive i64s (and exact in a double)
            // for as long as a process could hand them out.
            next: random >> 12,
            last_key: std::collections::HashMap::new(),
            order: std::collections::VecDeque::new(),
        }
    }
}

/// Cursors remembered at most (each holds one key, at most `max_key_bytes`).
const MAX_CURSORS: usize = 10_000;

impl Cursors {
    fn remember(&mut self, prefix: &str, key: String) -> u64 {
        self.next += 1;
        let id = self.next;
        self.last_key.insert(id, (prefix.to_owned(), key));
        self.order.push_back(id);
        while self.order.len() > MAX_CURSORS {
            if let Some(old) = self.order.pop_front() {
                self.last_key.remove(&old);
            }
        }
        id
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn encode(expires: u64, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + value.len());
    out.extend_from_slice(&expires.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// (expiry, value) of a stored entry, `None` when it has expired.
fn decode(stored: &[u8], now: u64) -> Option<(u64, &[u8])> {
    let (head, value) = stored.split_at_checked(8)?;
    let expires = u64::from_be_bytes(head.try_into().ok()?);
    (expires == 0 || expires > now).then_some((expires, value))
}

impl Embedded {
    /// Opens the store's file; with `take_over` (an upgrade), a file the
    /// process this one replaces still holds is taken over once it lets
    /// go, operations waiting for it meanwhile.
    pub(super) fn open(path: &Path, take_over: bool) -> Result<Embedded, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| other(format!("{}: {e}", dir.display())))?;
        }
        let db = match open_file(path) {
            Ok(db) => Some(db.0),
            Err(StoreError::InUse(_)) if take_over => None,
            Err(e) => return Err(e),
        };
        let held = db.is_none();
        let shared = Arc::new(Shared::new(path.to_owned(), db));
        let handoff = if held {
            Some(Handoff::start(&shared)?)
        } else {
            None
        };
        let (writes, rx) = mpsc::channel();
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("swan-store".to_owned())
            .spawn(move || write_loop(&writer_shared, &rx))
            .map_err(other)?;
        Ok(Embedded {
            shared,
            handoff,
            cursors: std::sync::Mutex::default(),
            writes: Some(writes),
            writer: Some(writer),
        })
    }

    /// Waits, in an upgrade, for the file the process this one replaces
    /// still holds (see `handoff`); at once otherwise.
    pub(super) async fn ready(&self) -> Result<(), StoreError> {
        match &self.handoff {
            Some(h) => h.wait(&self.shared.path).await,
            None => Ok(()),
        }
    }

    async fn write(&self, op: Op) -> Result<Done, StoreError> {
        self.ready().await?;
        let (reply, done) = oneshot::channel();
        self.writes
            .as_ref()
            .ok_or_else(|| other("the store is closing"))?
            .send(Write { op, reply })
            .map_err(|_| other("the store's writer stopped"))?;
        done.await
            .map_err(|_| other("the store's writer stopped"))?
    }

    /// Whether the store works (its file is there, its disk did not fail).
    pub(super) fn health(&self) -> Result<(), StoreError> {
        if let Some(h) = &self.handoff {
            h.health(&self.shared.path)?;
        }
        self.shared.health()
    }

    /// Runs `read` on the key table, in a read transaction of its own;
    /// `empty` if the table was never made.
    fn read<T>(
        &self,
        empty: T,
        read: impl FnOnce(&redb::ReadOnlyTable<&str, &[u8]>) -> Result<T, redb::Error>,
    ) -> Result<T, StoreError> {
        let shared = &self.shared;
        let db = shared.for_read()?;
        let Some(db) = db.as_ref() else {
            return Err(shared.unavailable());
        };
        let txn = db.begin_read().map_err(|e| shared.failed(e))?;
        match txn.open_table(KV) {
            Ok(table) => read(&table).map_err(|e| shared.failed(e)),
            Err(TableError::TableDoesNotExist(_)) => Ok(empty),
            Err(e) => Err(shared.failed(e)),
        }
    }

    pub(super) fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        self.read(None, |table| {
            let Some(stored) = table.get(key)? else {
                return Ok(None);
            };
            Ok(decode(stored.value(), now_ms()).map(|(_, v)| Bytes::copy_from_slice(v)))
        })
    }

    pub(super) fn list(
        &self,
        prefix: &str,
        cursor: Option<u64>,
        limit: u64,
    ) -> Result<KeyPage, StoreError> {
        use std::ops::Bound;
        let after = match cursor.filter(|c| *c > 0) {
            None => None,
            Some(c) => Some(
                self.cursors
                    .lock()
                    .map_err(|_| other("cursor table poisoned"))?
                    .last_key
                    .get(&c)
                    .cloned()
                    .ok_or_else(|| other("unknown or expired cursor: list again from the start"))?,
            ),
        };
        // A cursor continues the listing it came from: taken to another
        // prefix it would skip keys, or end that listing early.
        let after = match after {
            Some((listed, _)) if listed != prefix => {
                return Err(other(
                    "the cursor belongs to a listing of another prefix: list again from the start",
                ));
            }
            Some((_, last)) => Some(last),
            None => None,
        };
        let now = now_ms();
        let start = match after.as_deref() {
            Some(last) if last >= prefix => Bound::Excluded(last),
            _ => Bound::Included(prefix),
        };
        let (keys, more) = self.read((Vec::new(), false), |table| {
            let mut keys = Vec::new();
            for entry in table.range::<&str>((start, Bound::Unbounded))? {
                let (k, v) = entry?;
                let key = k.value();
                if !key.starts_with(prefix) {
                    break;
                }
                if decode(v.value(), now).is_none() {
                    continue;
                }
                if keys.len() as u64 >= limit {
                    return Ok((keys, true));
                }
                keys.push(key.to_owned());
            }
            Ok((keys, false))
        })?;
        let next = match (more, keys.last()) {
            (true, Some(last)) => Some(
                self.cursors
                    .lock()
                    .map_err(|_| other("cursor table poisoned"))?
                    .remember(prefix, last.clone()),
            ),
            _ => None,
        };
        Ok(KeyPage { keys, cursor: next })
    }

    pub(super) async fn set(
        &self,
        key: &str,
        value: Bytes,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        let expires = ttl.map_or(0, |t| now_ms().saturating_add(t.as_millis().max(1) as u64));
        self.write(Op::Set {
            key: key.to_owned(),
            value,
            expires,
        })
        .await
        .map(|_| ())
    }

    pub(super) async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        match self
            .write(Op::Delete {
                key: key.to_owned(),
            })
            .await?
        {
            Done::Bool(b) => Ok(b),
            _ => Ok(false),
        }
    }

    pub(super) async fn increment(
        &self,
        key: &str,
        delta: i64,
        unsigned: bool,
    ) -> Result<i64, StoreError> {
        match self
            .write(Op::Increment {
                key: key.to_owned(),
                delta,
                unsigned,
            })
            .await?
        {
            Done::Number(n) => Ok(n),
            _ => Err(other("unexpected answer")),
        }
    }

    pub(super) async fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<Bytes>,
        new: Bytes,
    ) -> Result<bool, StoreError> {
        match self
            .write(Op::CompareAndSwap {
                key: key.to_owned(),
                expected,
                new,
            })
            .await?
        {
            Done::Bool(b) => Ok(b),
            _ => Err(other("unexpected answer")),
        }
    }
}

/// The writer thread: everything waiting goes into one transaction.
fn write_loop(shared: &Shared, rx: &mpsc::Receiver<Write>) {
    loop {
        // In trouble, an empty batch every second tries the disk again.
        let wait = if shared.troubled() {
            RETRY_OPEN
        } else {
            SWEEP_EVERY
        };
        let first = match rx.recv_timeout(wait) {
            Ok(w) => Some(w),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        };
        let mut batch: Vec<Write> = first.into_iter().collect();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(w) => batch.push(w),
                Err(_) => break,
            }
        }
        // A failed transaction applied nothing: its writes all fail.
        let troubled = shared.troubled();
        // Nothing to write while the store is in trouble: the probe's.
        let probe = batch.is_empty() && troubled;
        let results = shared.for_write().and_then(|db| {
            let applied = apply(&db, &batch, probe);
            // Let go before a reopen, which waits for every user of the
            // file to let go of it (this one would keep it waiting, with
            // reads refused meanwhile, then keep the failed handle).
            drop(db);
            applied.map_err(|e| {
                let e = shared.failed(e);
                // The commit failed: reopened at once, so reads go on.
                shared.after_failure();
                e
            })
        });
        match results {
            Ok(results) => {
                if probe || !batch.is_empty() {
                    shared.committed();
                }
                for (w, r) in batch.into_iter().zip(results) {
                    let _ = w.reply.send(r);
                }
            }
            Err(e) => {
                // Once, not for every batch while the store is in trouble.
                if !batch.is_empty() && !troubled {
                    tracing::warn!(error = %e, writes = batch.len(), "store writes failed");
                }
                for w in batch {
                    let _ = w.reply.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Applies a batch (and the expiry sweep) in one committed transaction.
/// The outer error is redb's (the transaction failed: nothing applied);
/// the inner ones are each write's own (not a number).
fn apply(
    db: &Database,
    batch: &[Write],
    probe: bool,
) -> Result<Vec<Result<Done, StoreError>>, redb::Error> {
    let txn = db.begin_write()?;
    if probe {
        txn.open_table(PROBE)?
            .insert("probe", &[0u8; PROBE_BYTES][..])?;
    }
    let now = now_ms();
    let mut results = Vec::with_capacity(batch.len());
    {
        let mut kv = txn.open_table(KV)?;
        let mut expiry = txn.open_table(EXPIRY)?;
        // Expired keys go first, in expiry order.
        let expired: Vec<(u64, String)> = expiry
            .range((0u64, "")..(now, ""))?
            .filter_map(Result::ok)
            .map(|(k, _)| {
                let (at, key) = k.value();
                (at, key.to_owned())
            })
            .collect();
        for (at, key) in expired {
            expiry.remove((at, key.as_str()))?;
            let stale = kv
                .get(key.as_str())?
                .is_some_and(|v| decode(v.value(), now).is_none());
            if stale {
                kv.remove(key.as_str())?;
            }
        }
        for w in batch {
            // The current entry: its expiry (to unindex) and live value.
            let key = match &w.op {
                Op::Set { key, .. }
                | Op::Delete { key }
                | Op::Increment { key, .. }
                | Op::CompareAndSwap { key, .. } => key.as_str(),
            };
            let (old_expiry, old_value) = match kv.get(key)? {
                Some(v) => {
                    let stored = v.value();
                    let expires = stored
                        .get(..8)
                        .and_then(|h| h.try_into().ok())
                        .map_or(0, u64::from_be_bytes);
                    (expires, decode(stored, now).map(|(_, v)| v.to_vec()))
                }
                None => (0, None),
            };
            let put = |kv: &mut redb::Table<&str, &[u8]>,
                       expiry: &mut redb::Table<(u64, &str), ()>,
                       expires: u64,
                       value: &[u8]|
             -> Result<(), redb::StorageError> {
                if old_expiry != 0 {
                    expiry.remove((old_expiry, key))?;
                }
                kv.insert(key, encode(expires, value).as_slice())?;
                if expires != 0 {
                    expiry.insert((expires, key), ())?;
                }
                Ok(())
            };
            let result = match &w.op {
                Op::Set { value, expires, .. } => {
                    put(&mut kv, &mut expiry, *expires, value)?;
                    Ok(Done::Unit)
                }
                Op::Delete { .. } => {
                    if old_expiry != 0 {
                        expiry.remove((old_expiry, key))?;
                    }
                    kv.remove(key)?;
                    Ok(Done::Bool(old_value.is_some()))
                }
                Op::Increment {
                    delta, unsigned, ..
                } => {
                    let sum = parse_number(old_value.as_deref())
                        .and_then(|n| {
                            if *unsigned && n < 0 {
                                Err(StoreError::NotANumber)
                            } else {
                                Ok(n)
                            }
                        })
                        .and_then(|n| n.checked_add(*delta).ok_or(StoreError::NotANumber));
                    match sum {
                        Ok(sum) => {
                            let keep = if old_value.is_some() { old_expiry } else { 0 };
                            put(&mut kv, &mut expiry, keep, sum.to_string().as_bytes())?;
                            Ok(Done::Number(sum))
                        }
                        Err(e) => Err(e),
                    }
                }
                Op::CompareAndSwap { expected, new, .. } => {
                    let swap = old_value.as_deref() == expected.as_deref();
                    if swap {
                        put(&mut kv, &mut expiry, 0, new)?;
                    }
                    Ok(Done::Bool(swap))
                }
            };
            results.push(result);
        }
    }
    txn.commit()?;
    Ok(results)
}
