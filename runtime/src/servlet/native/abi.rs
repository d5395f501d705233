//! The host side of swan's native ABI (version 1), specified in
//! `guest-sdk/ABI.md`: functions in the `swan` import module that copy
//! request parts into guest buffers and append to a host-side response.
//!
//! Every pointer and length from the guest is bounds-checked against its
//! memory; a bad one traps the call (the client gets 500), never touches
//! host memory.

use http::StatusCode;
use http::header::{HeaderName, HeaderValue};
use wasmtime::{Caller, Linker};

use super::host::Host;
use super::memory::{AbiFault, copy_out, memory, read_bytes};
use crate::servlet::guest::HEADER_SET_LIMIT;
use crate::servlet::output::{LINE_COST, OUTPUT_CAPTURE_BYTES, guest_span, log_lines};

/// The ABI version this host implements.
pub const ABI_VERSION: i32 = 1;

/// Request parts for `request_get`.
pub(crate) mod part {
    pub(crate) const METHOD: i32 = 0;
    pub(crate) const PATH: i32 = 1;
    pub(crate) const QUERY: i32 = 2;
    pub(crate) const PATH_INFO: i32 = 3;
    pub(crate) const HEADERS: i32 = 4;
    pub(crate) const BODY: i32 = 5;
    pub(crate) const REMOTE_ADDR: i32 = 6;
    pub(crate) const REQUEST_ID: i32 = 7;
}

/// Names the `swan` module provides, for import checks at load.
pub(crate) const FUNCTIONS: &[&str] = &[
    "request_get",
    "request_header",
    "setting",
    "response_status",
    "response_header",
    "response_write",
    "log",
    "http_send",
    "http_response_get",
];

/// Return value: the part, header or setting does not exist.
const ABSENT: i32 = -1;
/// Return value: the argument is not valid (bad header name, status...).
const INVALID: i32 = -1;
/// Return value: the header may not be set by a servlet.
const FORBIDDEN: i32 = -2;

/// Adds the `swan` module to a linker.
pub(crate) fn add_to_linker(linker: &mut Linker<Host>) -> wasmtime::Result<()> {
    host_fn!(linker, "request_get", request_get, (which: i32, ptr: i32, len: i32))?;
    host_fn!(linker, "request_header", request_header, (np: i32, nl: i32, bp: i32, bl: i32))?;
    host_fn!(linker, "setting", setting, (kp: i32, kl: i32, bp: i32, bl: i32))?;
    linker.func_wrap("swan", "response_status", response_status)?;
    host_fn!(linker, "response_header", response_header, (np: i32, nl: i32, vp: i32, vl: i32))?;
    host_fn!(linker, "response_write", response_write, (ptr: i32, len: i32))?;
    host_fn!(linker, "log", log, (level: i32, ptr: i32, len: i32))?;
    Ok(())
}

fn request_get(
    mut caller: Caller<'_, Host>,
    which: i32,
    buf_ptr: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let req = &mut host.request;
    let src: &[u8] = match which {
        part::METHOD => req.method.as_bytes(),
        part::PATH => req.path.as_bytes(),
        part::QUERY => req.query.as_bytes(),
        part::PATH_INFO => req.path_info.as_bytes(),
        part::HEADERS => {
            if req.headers_text.is_none() {
                let mut text = Vec::new();
                for (name, value) in &req.headers {
                    text.extend_from_slice(name.as_str().as_bytes());
                    text.extend_from_slice(b": ");
                    text.extend_from_slice(value.as_bytes());
                    text.push(b'\n');
                }
                req.headers_text = Some(text.into());
            }
            req.headers_text.as_deref().unwrap_or_default()
        }
        part::BODY => &req.body,
        part::REMOTE_ADDR => req.remote_addr.as_bytes(),
        part::REQUEST_ID => req.request_id.as_bytes(),
        other => return Err(AbiFault::UnknownPart(other).into()),
    };
    Ok(copy_out(mem, src, buf_ptr, buf_len)?)
}

fn request_header(
    mut caller: Caller<'_, Host>,
    name_ptr: i32,
    name_len: i32,
    buf_ptr: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let name = read_bytes(mem, name_ptr, name_len)?;
    let Ok(name) = HeaderName::from_bytes(name) else {
        return Ok(ABSENT);
    };
    let Some(value) = host.request.headers.get(&name) else {
        return Ok(ABSENT);
    };
    let value = value.as_bytes().to_vec();
    Ok(copy_out(mem, &value, buf_ptr, buf_len)?)
}

fn setting(
    mut caller: Caller<'_, Host>,
    key_ptr: i32,
    key_len: i32,
    buf_ptr: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let key = read_bytes(mem, key_ptr, key_len)?;
    let info = host.info.clone();
    let Some((_, value)) = info.settings.iter().find(|(k, _)| k.as_bytes() == key) else {
        return Ok(ABSENT);
    };
    Ok(copy_out(mem, value.as_bytes(), buf_ptr, buf_len)?)
}

fn response_status(mut caller: Caller<'_, Host>, status: i32) -> i32 {
    match u16::try_from(status)
        .ok()
        .and_then(|s| StatusCode::from_u16(s).ok())
    {
        // A final status a client understands: 1xx are not answers, and
        // past 599 there are no classes.
        Some(s) if (200..=599).contains(&s.as_u16()) => {
            caller.data_mut().response.status = s;
            0
        }
        _ => INVALID,
    }
}

/// Headers a servlet may not set: swan frames the message itself, and
/// sets `Date`, `Server` and `x-request-id` on every response (a guest's
/// would be a second one, or replaced).
fn forbidden(name: &HeaderName) -> bool {
    use http::header::*;
    [
        CONNECTION,
        CONTENT_LENGTH,
        TRANSFER_ENCODING,
        TE,
        TRAILER,
        UPGRADE,
        DATE,
        SERVER,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static(crate::request::id::REQUEST_ID_HEADER),
    ]
    .contains(name)
}

fn response_header(
    mut caller: Caller<'_, Host>,
    name_ptr: i32,
    name_len: i32,
    value_ptr: i32,
    value_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let name = read_bytes(mem, name_ptr, name_len)?;
    let value = read_bytes(mem, value_ptr, value_len)?;
    // A field value has no whitespace at its ends (RFC 9110 §5.5).
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = value.iter().position(|b| !is_ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    let value = &value[start..end];
    let (Ok(name), Ok(value)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
    else {
        return Ok(INVALID);
    };
    if forbidden(&name) {
        return Ok(FORBIDDEN);
    }
    // Bounded as a component's header set is: the host copies what the
    // guest sets, outside its `max_memory`.
    let weight = name.as_str().len() + value.len() + 32;
    let limit = HEADER_SET_LIMIT;
    let response = &mut host.response;
    let too_large = || AbiFault::HeadersTooLarge { limit }.into();
    if response.header_bytes + weight > limit {
        return Err(too_large());
    }
    // One `content-type`: a second replaces the first.
    let stored = if name == http::header::CONTENT_TYPE {
        response.headers.try_insert(name, value).map(drop)
    } else {
        response.headers.try_append(name, value).map(drop)
    };
    stored.map_err(|_| too_large())?;
    response.header_bytes += weight;
    Ok(0)
}

fn response_write(mut caller: Caller<'_, Host>, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let data = read_bytes(mem, ptr, len)?;
    let limit = host.info.limits.max_response_bytes;
    if (host.response.body.len() + data.len()) as u64 > limit {
        return Err(AbiFault::ResponseTooLarge { limit }.into());
    }
    host.response.body.extend_from_slice(data);
    Ok(0)
}

fn log(mut caller: Caller<'_, Host>, level: i32, ptr: i32, len: i32) -> wasmtime::Result<()> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let bytes = read_bytes(mem, ptr, len)?;
    // Capped per request like the guest's stdout and stderr, each line
    // costing its text and `LINE_COST`; a line at a time, control
    // characters escaped.
    // The span only for a line that is logged.
    let mut span = None;
    for text in log_lines(bytes) {
        let cost = text.len() + LINE_COST;
        if host.logged + cost > OUTPUT_CAPTURE_BYTES {
            host.log_dropped += text.len();
            continue;
        }
        host.logged += cost;
        let _entered = span
            .get_or_insert_with(|| guest_span(&host.info.name, &host.request.request_id, "log"))
            .enter();
        match level {
            0 => tracing::error!("{text}"),
            1 => tracing::warn!("{text}"),
            2 => tracing::info!("{text}"),
            _ => tracing::debug!("{text}"),
        }
    }
    Ok(())
}
