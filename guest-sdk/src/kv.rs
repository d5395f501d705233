//! Key-value stores (`[[store]]` in swan.toml), for the routes that list
//! them in `stores`. The same operations work on every backend: an embedded
//! database on the machine, or Redis shared by several swan processes.
//!
//! ```no_run
//! use swan_guest::kv::Store;
//!
//! let store = Store::open("default")?;
//! let visits = store.increment("visits", 1)?;
//! store.set("last-visitor", b"Ada", None)?;
//! # Ok::<(), swan_guest::kv::Error>(())
//! ```

use std::time::Duration;

/// Why a store call failed (the ABI's error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The route may not open this store, or no store has that name.
    Denied,
    /// The store cannot be reached now (Redis down): try again later. A
    /// servlet that fails after this gives the client 503.
    Unavailable,
    /// A key, value or list, or this request's operation count, is over a
    /// limit.
    Limit,
    /// Increment on a value that is not a whole number.
    NotANumber,
    /// Anything else.
    Other,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Error {}

fn check(code: i32) -> Result<i32, Error> {
    match code {
        c if c >= 0 => Ok(c),
        -2 => Err(Error::Denied),
        -3 => Err(Error::Unavailable),
        -4 => Err(Error::Limit),
        -5 => Err(Error::NotANumber),
        _ => Err(Error::Other),
    }
}

/// An open store.
#[derive(Debug, Clone, Copy)]
pub struct Store(i32);

/// A page of keys from [`Store::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    /// The keys.
    pub keys: Vec<String>,
    /// Pass this to the next call for the next page; `None` at the end.
    pub cursor: Option<u64>,
}

impl Store {
    /// Opens a store the route lists in `stores`.
    pub fn open(name: &str) -> Result<Store, Error> {
        check(crate::ffi::kv_open(name.as_bytes())).map(Store)
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        let mut buf = vec![0u8; 256];
        let n = crate::ffi::kv_get(self.0, key.as_bytes(), &mut buf);
        if n == -1 {
            return Ok(None);
        }
        let n = check(n)? as usize;
        if n > buf.len() {
            buf = vec![0u8; n];
            let again = crate::ffi::kv_get(self.0, key.as_bytes(), &mut buf);
            if again == -1 {
                return Ok(None);
            }
            let again = check(again)? as usize;
            buf.truncate(again.min(n));
            return Ok(Some(buf));
        }
        buf.truncate(n);
        Ok(Some(buf))
    }

    /// Sets `key`; with `ttl`, it expires after that long.
    pub fn set(&self, key: &str, value: &[u8], ttl: Option<Duration>) -> Result<(), Error> {
        let ttl = ttl.map_or(0, |t| {
            i64::try_from(t.as_millis().max(1)).unwrap_or(i64::MAX)
        });
        check(crate::ffi::kv_set(self.0, key.as_bytes(), value, ttl)).map(|_| ())
    }

    /// Deletes `key`; whether it existed.
    pub fn delete(&self, key: &str) -> Result<bool, Error> {
        check(crate::ffi::kv_delete(self.0, key.as_bytes())).map(|n| n == 1)
    }

    /// Whether `key` exists.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        check(crate::ffi::kv_exists(self.0, key.as_bytes())).map(|n| n == 1)
    }

    /// Adds `delta` to the whole number at `key` (0 when absent),
    /// atomically; the new value.
    pub fn increment(&self, key: &str, delta: i64) -> Result<i64, Error> {
        let mut out = [0u8; 8];
        check(crate::ffi::kv_increment(
            self.0,
            key.as_bytes(),
            delta,
            &mut out,
        ))?;
        Ok(i64::from_le_bytes(out))
    }

    /// Sets `key` to `new` only if its value is `expected` (`None`: absent);
    /// whether it was set.
    pub fn compare_and_swap(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<bool, Error> {
        check(crate::ffi::kv_cas(self.0, key.as_bytes(), expected, new)).map(|n| n == 1)
    }

    /// Keys starting with `prefix`, a page at a time (`cursor`: `None` for
    /// the first page, then the one returned).
    pub fn list(&self, prefix: &str, cursor: Option<u64>) -> Result<Keys, Error> {
        let cursor = cursor.map_or(0, |c| i64::try_from(c).unwrap_or(i64::MAX));
        let mut buf = vec![0u8; 4096];
        let mut n = check(crate::ffi::kv_list(
            self.0,
            prefix.as_bytes(),
            cursor,
            &mut buf,
        ))? as usize;
        if n > buf.len() {
            buf = vec![0u8; n];
            n = check(crate::ffi::kv_list(
                self.0,
                prefix.as_bytes(),
                cursor,
                &mut buf,
            ))? as usize;
        }
        buf.truncate(n.min(buf.len()));
        let text = buf;
        let text = String::from_utf8_lossy(&text);
        let mut lines = text.lines();
        let cursor = lines.next().and_then(|c| c.parse().ok());
        Ok(Keys {
            keys: lines.map(str::to_owned).collect(),
            cursor,
        })
    }
}
