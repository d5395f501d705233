//! The raw `swan` imports (see `guest-sdk/ABI.md`) behind safe functions.
//! This is the only module with `unsafe`: each call passes pointers to
//! live Rust slices, which the host only reads or writes within the given
//! lengths.

#![allow(unsafe_code)]

#[cfg(target_family = "wasm")]
mod raw {
    #[link(wasm_import_module = "swan")]
    unsafe extern "C" {
        pub(super) fn request_get(part: i32, buf: *mut u8, buf_len: i32) -> i32;
        pub(super) fn setting(key: *const u8, key_len: i32, buf: *mut u8, buf_len: i32) -> i32;
        pub(super) fn response_status(status: i32) -> i32;
        pub(super) fn response_header(
            name: *const u8,
            name_len: i32,
            value: *const u8,
            value_len: i32,
        ) -> i32;
        pub(super) fn response_write(ptr: *const u8, len: i32) -> i32;
        pub(super) fn log(level: i32, ptr: *const u8, len: i32);
        pub(super) fn http_send(ptr: *const u8, len: i32) -> i32;
        pub(super) fn kv_open(name: *const u8, name_len: i32) -> i32;
        pub(super) fn kv_get(
            h: i32,
            key: *const u8,
            key_len: i32,
            buf: *mut u8,
            buf_len: i32,
        ) -> i32;
        pub(super) fn kv_set(
            h: i32,
            key: *const u8,
            key_len: i32,
            value: *const u8,
            value_len: i32,
            ttl_ms: i64,
        ) -> i32;
        pub(super) fn kv_delete(h: i32, key: *const u8, key_len: i32) -> i32;
        pub(super) fn kv_exists(h: i32, key: *const u8, key_len: i32) -> i32;
        pub(super) fn kv_increment(
            h: i32,
            key: *const u8,
            key_len: i32,
            delta: i64,
            out: *mut u8,
        ) -> i32;
        pub(super) fn kv_cas(
            h: i32,
            key: *const u8,
            key_len: i32,
            expected: *const u8,
            expected_len: i32,
            new: *const u8,
            new_len: i32,
        ) -> i32;
        pub(super) fn kv_list(
            h: i32,
            prefix: *const u8,
            prefix_len: i32,
            cursor: i64,
            buf: *mut u8,
            buf_len: i32,
        ) -> i32;
        pub(super) fn http_response_get(part: i32, buf: *mut u8, buf_len: i32) -> i32;
    }
}

#[cfg(target_family = "wasm")]
fn len(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Calls `f` with a buffer, growing it once if the value is larger; `None`
/// when the host says the value is absent.
pub(crate) fn read_with(mut f: impl FnMut(&mut [u8]) -> i32) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 512];
    let n = f(&mut buf);
    if n < 0 {
        return None;
    }
    let n = n as usize;
    if n > buf.len() {
        buf = vec![0u8; n];
        f(&mut buf);
    }
    buf.truncate(n);
    Some(buf)
}

#[cfg(target_family = "wasm")]
pub(crate) fn request_get(part: i32, buf: &mut [u8]) -> i32 {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
    unsafe { raw::request_get(part, buf.as_mut_ptr(), len(buf.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn setting(key: &[u8], buf: &mut [u8]) -> i32 {
    // SAFETY: `key` is readable and `buf` writable for their lengths.
    unsafe {
        raw::setting(
            key.as_ptr(),
            len(key.len()),
            buf.as_mut_ptr(),
            len(buf.len()),
        )
    }
}

#[cfg(target_family = "wasm")]
pub(crate) fn response_status(status: i32) -> i32 {
    // SAFETY: no pointers.
    unsafe { raw::response_status(status) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn response_header(name: &[u8], value: &[u8]) -> i32 {
    // SAFETY: both slices are readable for their lengths.
    unsafe {
        raw::response_header(
            name.as_ptr(),
            len(name.len()),
            value.as_ptr(),
            len(value.len()),
        )
    }
}

#[cfg(target_family = "wasm")]
pub(crate) fn response_write(data: &[u8]) -> i32 {
    // SAFETY: `data` is readable for its length.
    unsafe { raw::response_write(data.as_ptr(), len(data.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn log(level: i32, message: &[u8]) {
    // SAFETY: `message` is readable for its length.
    unsafe { raw::log(level, message.as_ptr(), len(message.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn http_send(request: &[u8]) -> i32 {
    // SAFETY: `request` is readable for its length.
    unsafe { raw::http_send(request.as_ptr(), len(request.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn http_response_get(part: i32, buf: &mut [u8]) -> i32 {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
    unsafe { raw::http_response_get(part, buf.as_mut_ptr(), len(buf.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_open(name: &[u8]) -> i32 {
    // SAFETY: `name` is readable for its length.
    unsafe { raw::kv_open(name.as_ptr(), len(name.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_get(h: i32, key: &[u8], buf: &mut [u8]) -> i32 {
    // SAFETY: `key` is readable and `buf` writable for their lengths.
    unsafe {
        raw::kv_get(
            h,
            key.as_ptr(),
            len(key.len()),
            buf.as_mut_ptr(),
            len(buf.len()),
        )
    }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_set(h: i32, key: &[u8], value: &[u8], ttl_ms: i64) -> i32 {
    // SAFETY: both slices are readable for their lengths.
    unsafe {
        raw::kv_set(
            h,
            key.as_ptr(),
            len(key.len()),
            value.as_ptr(),
            len(value.len()),
            ttl_ms,
        )
    }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_delete(h: i32, key: &[u8]) -> i32 {
    // SAFETY: `key` is readable for its length.
    unsafe { raw::kv_delete(h, key.as_ptr(), len(key.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_exists(h: i32, key: &[u8]) -> i32 {
    // SAFETY: `key` is readable for its length.
    unsafe { raw::kv_exists(h, key.as_ptr(), len(key.len())) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_increment(h: i32, key: &[u8], delta: i64, out: &mut [u8; 8]) -> i32 {
    // SAFETY: `key` is readable for its length; `out` writable for 8 bytes.
    unsafe { raw::kv_increment(h, key.as_ptr(), len(key.len()), delta, out.as_mut_ptr()) }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_cas(h: i32, key: &[u8], expected: Option<&[u8]>, new: &[u8]) -> i32 {
    let (e, el) = match expected {
        Some(e) => (e.as_ptr(), len(e.len())),
        None => (std::ptr::null(), -1),
    };
    // SAFETY: the slices are readable for their lengths; a -1 length tells
    // the host not to read `e` at all.
    unsafe {
        raw::kv_cas(
            h,
            key.as_ptr(),
            len(key.len()),
            e,
            el,
            new.as_ptr(),
            len(new.len()),
        )
    }
}

#[cfg(target_family = "wasm")]
pub(crate) fn kv_list(h: i32, prefix: &[u8], cursor: i64, buf: &mut [u8]) -> i32 {
    // SAFETY: `prefix` is readable and `buf` writable for their lengths.
    unsafe {
        raw::kv_list(
            h,
            prefix.as_ptr(),
            len(prefix.len()),
            cursor,
            buf.as_mut_ptr(),
            len(buf.len()),
        )
    }
}

// Outside wasm (unit tests of handlers, docs) there is no host: requests
// are empty, responses and logs go nowhere, outbound requests and stores
// are denied.

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_open(_name: &[u8]) -> i32 {
    -2
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_get(_h: i32, _key: &[u8], _buf: &mut [u8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_set(_h: i32, _key: &[u8], _value: &[u8], _ttl_ms: i64) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_delete(_h: i32, _key: &[u8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_exists(_h: i32, _key: &[u8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_increment(_h: i32, _key: &[u8], _delta: i64, _out: &mut [u8; 8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_cas(_h: i32, _key: &[u8], _expected: Option<&[u8]>, _new: &[u8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn kv_list(_h: i32, _prefix: &[u8], _cursor: i64, _buf: &mut [u8]) -> i32 {
    -7
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn http_send(_request: &[u8]) -> i32 {
    -1
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn http_response_get(_part: i32, _buf: &mut [u8]) -> i32 {
    -1
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn request_get(_part: i32, _buf: &mut [u8]) -> i32 {
    0
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn setting(_key: &[u8], _buf: &mut [u8]) -> i32 {
    -1
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn response_status(_status: i32) -> i32 {
    0
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn response_header(_name: &[u8], _value: &[u8]) -> i32 {
    0
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn response_write(_data: &[u8]) -> i32 {
    0
}

#[cfg(not(target_family = "wasm"))]
pub(crate) fn log(_level: i32, message: &[u8]) {
    eprintln!("{}", String::from_utf8_lossy(message));
}
