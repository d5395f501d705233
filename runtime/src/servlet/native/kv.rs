//! Key-value stores for native servlets (ABI v1 additions, `guest-sdk/
//! ABI.md`): `kv_open` a store the route lists in `stores`, then get, set
//! (with a time-to-live), delete, exists, increment, compare-and-swap and
//! list by prefix on its handle. Every call copies its arguments out of
//! guest memory before it waits, so the guest's memory is never borrowed
//! across an await.
//!
//! Return values: `>= 0` success (a length, a boolean, a handle), `-1`
//! absent (`kv_get` only), and the errors of [`code`].

use bytes::Bytes;
use wasmtime::{Caller, Linker};

use super::host::Host;
use super::memory::{copy_out, memory, range, read_bytes};
use crate::store::{Store, StoreError};
use std::sync::Arc;

/// Error codes.
pub(crate) mod code {
    /// `kv_get`: the key is absent.
    pub(crate) const ABSENT: i32 = -1;
    /// The route may not open the store, or no store has that name.
    pub(crate) const DENIED: i32 = -2;
    /// The store cannot be reached now (Redis down); try again later.
    pub(crate) const UNAVAILABLE: i32 = -3;
    /// A key, value or list, or the request's operation count, is over a
    /// limit.
    pub(crate) const LIMIT: i32 = -4;
    /// `kv_increment` on a value that is not a whole number.
    pub(crate) const NOT_A_NUMBER: i32 = -5;
    /// Anything else the store reported.
    pub(crate) const OTHER: i32 = -6;
    /// The handle is not one `kv_open` returned in this instance.
    pub(crate) const BAD_HANDLE: i32 = -7;
}

fn error_code(e: &StoreError) -> i32 {
    match e {
        StoreError::AccessDenied | StoreError::NoSuchStore => code::DENIED,
        StoreError::Unavailable(_) => code::UNAVAILABLE,
        StoreError::Limit(_) => code::LIMIT,
        StoreError::NotANumber => code::NOT_A_NUMBER,
        StoreError::Other(_) | StoreError::InUse(_) => code::OTHER,
    }
}

pub(crate) fn add_to_linker(linker: &mut Linker<Host>) -> wasmtime::Result<()> {
    host_fn!(linker, "kv_open", kv_open, (name: i32, name_len: i32))?;
    host_fn_async!(linker, "kv_get", kv_get, (h: i32, k: i32, kl: i32, buf: i32, bl: i32))?;
    host_fn_async!(linker, "kv_set", kv_set, (h: i32, k: i32, kl: i32, v: i32, vl: i32, ttl: i64))?;
    host_fn_async!(linker, "kv_delete", kv_delete, (h: i32, k: i32, kl: i32))?;
    host_fn_async!(linker, "kv_exists", kv_exists, (h: i32, k: i32, kl: i32))?;
    host_fn_async!(linker, "kv_increment", kv_increment, (h: i32, k: i32, kl: i32, delta: i64, out: i32))?;
    host_fn_async!(linker, "kv_cas", kv_cas, (h: i32, k: i32, kl: i32, e: i32, el: i32, n: i32, nl: i32))?;
    host_fn_async!(linker, "kv_list", kv_list, (h: i32, p: i32, pl: i32, cursor: i64, buf: i32, bl: i32))?;
    Ok(())
}

/// Names the `swan` module provides for stores, for import checks.
pub(crate) const FUNCTIONS: &[&str] = &[
    "kv_open",
    "kv_get",
    "kv_set",
    "kv_delete",
    "kv_exists",
    "kv_increment",
    "kv_cas",
    "kv_list",
];

fn kv_open(mut caller: Caller<'_, Host>, name: i32, name_len: i32) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let name =
        String::from_utf8_lossy(read_bytes(memory.data(&caller), name, name_len)?).into_owned();
    let host = caller.data_mut();
    match host.kv.open(&name) {
        Ok(store) => {
            if let Some(i) = host.kv_open.iter().position(|s| Arc::ptr_eq(s, &store)) {
                return Ok(i as i32);
            }
            host.kv_open.push(store);
            Ok((host.kv_open.len() - 1) as i32)
        }
        Err(e) => Ok(error_code(&e)),
    }
}

/// The store behind `handle` and the key at `key..key+key_len`, with the
/// operation counted; or the code to return.
fn prepare(
    caller: &mut Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
) -> wasmtime::Result<Result<(Arc<Store>, String), i32>> {
    let memory = memory(caller)?;
    let key =
        String::from_utf8_lossy(read_bytes(memory.data(&*caller), key, key_len)?).into_owned();
    let host = caller.data_mut();
    let Some(store) = usize::try_from(handle)
        .ok()
        .and_then(|h| host.kv_open.get(h))
        .cloned()
    else {
        return Ok(Err(code::BAD_HANDLE));
    };
    if let Err(e) = host.kv.count(&store) {
        return Ok(Err(error_code(&e)));
    }
    Ok(Ok((store, key)))
}

/// Records a result's unavailability and turns it into a code.
fn finish<T>(caller: &mut Caller<'_, Host>, result: Result<T, StoreError>) -> Result<T, i32> {
    caller
        .data_mut()
        .kv
        .note(result)
        .map_err(|e| error_code(&e))
}

async fn kv_get(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
    buf: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let result = store.get(&key).await;
    match finish(&mut caller, result) {
        Ok(Some(value)) => {
            let memory = memory(&mut caller)?;
            Ok(copy_out(
                memory.data_mut(&mut caller),
                &value,
                buf,
                buf_len,
            )?)
        }
        Ok(None) => Ok(code::ABSENT),
        Err(code) => Ok(code),
    }
}

async fn kv_set(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
    value: i32,
    value_len: i32,
    ttl_ms: i64,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let value = Bytes::copy_from_slice(read_bytes(memory.data(&caller), value, value_len)?);
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let ttl = (ttl_ms > 0).then(|| std::time::Duration::from_millis(ttl_ms as u64));
    let result = store.set(&key, value, ttl).await;
    Ok(finish(&mut caller, result).map_or_else(|c| c, |()| 0))
}

async fn kv_delete(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
) -> wasmtime::Result<i32> {
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let result = store.delete(&key).await;
    Ok(finish(&mut caller, result).map_or_else(|c| c, i32::from))
}

async fn kv_exists(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
) -> wasmtime::Result<i32> {
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let result = store.exists(&key).await;
    Ok(finish(&mut caller, result).map_or_else(|c| c, i32::from))
}

async fn kv_increment(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
    delta: i64,
    out: i32,
) -> wasmtime::Result<i32> {
    // Where the new value goes is checked first: a request that traps on
    // it must not have counted.
    let size = memory(&mut caller)?.data_size(&caller);
    range(out, 8, size)?;
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let result = store.increment(&key, delta).await;
    match finish(&mut caller, result) {
        Ok(n) => {
            let memory = memory(&mut caller)?;
            copy_out(memory.data_mut(&mut caller), &n.to_le_bytes(), out, 8)?;
            Ok(0)
        }
        Err(code) => Ok(code),
    }
}

#[expect(clippy::too_many_arguments, reason = "one per ABI parameter")]
async fn kv_cas(
    mut caller: Caller<'_, Host>,
    handle: i32,
    key: i32,
    key_len: i32,
    expected: i32,
    expected_len: i32,
    new: i32,
    new_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let expected = if expected_len < 0 {
        None
    } else {
        Some(Bytes::copy_from_slice(read_bytes(
            memory.data(&caller),
            expected,
            expected_len,
        )?))
    };
    let new = Bytes::copy_from_slice(read_bytes(memory.data(&caller), new, new_len)?);
    let (store, key) = match prepare(&mut caller, handle, key, key_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let result = store.compare_and_swap(&key, expected, new).await;
    Ok(finish(&mut caller, result).map_or_else(|c| c, i32::from))
}

async fn kv_list(
    mut caller: Caller<'_, Host>,
    handle: i32,
    prefix: i32,
    prefix_len: i32,
    cursor: i64,
    buf: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let (store, prefix) = match prepare(&mut caller, handle, prefix, prefix_len)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let cursor = u64::try_from(cursor).ok().filter(|c| *c > 0);
    let limit = store.limits().max_list_keys;
    let result = store.list(&prefix, cursor, limit).await;
    match finish(&mut caller, result) {
        Ok(page) => {
            // The next cursor on the first line (empty at the end), then a
            // key per line.
            let mut text = page.cursor.map(|c| c.to_string()).unwrap_or_default();
            text.push('\n');
            for key in page.keys {
                text.push_str(&key);
                text.push('\n');
            }
            let memory = memory(&mut caller)?;
            Ok(copy_out(
                memory.data_mut(&mut caller),
                text.as_bytes(),
                buf,
                buf_len,
            )?)
        }
        Err(code) => Ok(code),
    }
}
