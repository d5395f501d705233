//! Outbound HTTP for native servlets (ABI v1 addition): `http_send` sends a
//! request described as text and waits for the whole response;
//! `http_response_get` copies its parts out. Same rules as components'
//! `outgoing-handler` (`servlet::outbound`): denied unless the route
//! allows the destination.
//!
//! The request text is `METHOD URL\n`, header lines `name: value\n`, an
//! empty line, then the body. `http_send` returns the response status, or
//! a negative error code ([`SendError`]).

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Full};
use wasmtime::{Caller, Linker};

use super::host::{Fetched, Host};
use super::memory::{copy_out, memory, read_bytes};

/// Parts for `http_response_get`.
const PART_HEADERS: i32 = 0;
const PART_BODY: i32 = 1;

/// Why `http_send` failed, as the guest sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
enum SendError {
    /// No `allowed_outbound_hosts` rule allows the destination.
    Denied = -1,
    /// The name resolved only to addresses the route may not reach.
    AddressProhibited = -2,
    /// Name lookup, connection or TLS failed.
    ConnectFailed = -3,
    /// A timeout passed (connect, first byte, total).
    Timeout = -4,
    /// Too many outbound requests in flight.
    TooManyInFlight = -5,
    /// The request text is malformed.
    BadRequest = -6,
    /// The response body is larger than `max_response_bytes`.
    ResponseTooLarge = -7,
    /// Anything else (a protocol error upstream).
    Failed = -8,
}

pub(crate) fn add_to_linker(linker: &mut Linker<Host>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "swan",
        "http_send",
        |caller: Caller<'_, Host>, (ptr, len): (i32, i32)| Box::new(http_send(caller, ptr, len)),
    )?;
    linker.func_wrap("swan", "http_response_get", http_response_get)?;
    Ok(())
}

async fn http_send(mut caller: Caller<'_, Host>, ptr: i32, len: i32) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let text = Bytes::copy_from_slice(read_bytes(memory.data(&caller), ptr, len)?);
    let host = caller.data_mut();
    host.fetched = Fetched::default();
    let Some(request) = parse(&text) else {
        return Ok(SendError::BadRequest as i32);
    };
    let outbound = host.outbound.clone();
    let limit = host.info.limits.max_response_bytes;
    let result = async {
        let (response, io) = outbound.send(request, None).await.map_err(classify)?;
        let io = tokio::spawn(io);
        let (parts, mut body) = response.into_parts();
        let mut collected = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(classify)?;
            if let Ok(data) = frame.into_data() {
                if (collected.len() + data.len()) as u64 > limit {
                    io.abort();
                    return Err(SendError::ResponseTooLarge);
                }
                collected.extend_from_slice(&data);
            }
        }
        let mut headers = BytesMut::new();
        for (name, value) in &parts.headers {
            headers.extend_from_slice(name.as_str().as_bytes());
            headers.extend_from_slice(b": ");
            headers.extend_from_slice(value.as_bytes());
            headers.extend_from_slice(b"\n");
        }
        Ok((
            parts.status.as_u16(),
            Fetched {
                headers: headers.freeze(),
                body: collected.freeze(),
            },
        ))
    }
    .await;
    Ok(match result {
        Ok((status, fetched)) => {
            caller.data_mut().fetched = fetched;
            i32::from(status)
        }
        Err(e) => e as i32,
    })
}

fn http_response_get(
    mut caller: Caller<'_, Host>,
    part: i32,
    buf_ptr: i32,
    buf_len: i32,
) -> wasmtime::Result<i32> {
    let memory = memory(&mut caller)?;
    let (mem, host) = memory.data_and_store_mut(&mut caller);
    let src = match part {
        PART_HEADERS => host.fetched.headers.clone(),
        PART_BODY => host.fetched.body.clone(),
        _ => return Ok(-1),
    };
    Ok(copy_out(mem, &src, buf_ptr, buf_len)?)
}

/// `METHOD URL\n` headers `\n\n` body, into a request with an absolute URI
/// and a Host header.
fn parse(text: &Bytes) -> Option<Request<Full<Bytes>>> {
    let head_end = text
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|i| (i, i + 2))
        .unwrap_or((text.len(), text.len()));
    let head = std::str::from_utf8(&text[..head_end.0]).ok()?;
    let body = text.slice(head_end.1.min(text.len())..);
    let mut lines = head.split('\n');
    let (method, url) = lines.next()?.trim_end_matches('\r').split_once(' ')?;
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let uri: Uri = url.trim().parse().ok()?;
    let authority = uri.authority()?.clone();
    let mut req = Request::builder().method(method).uri(uri);
    let mut has_host = false;
    for line in lines {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once(':')?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
        let value = HeaderValue::from_str(value.trim()).ok()?;
        has_host |= name == http::header::HOST;
        req = req.header(name, value);
    }
    if !has_host {
        req = req.header(http::header::HOST, authority.as_str());
    }
    req.body(Full::new(body)).ok()
}

fn classify(e: wasmtime_wasi_http::Error) -> SendError {
    use wasmtime_wasi_http::Error as E;
    match e {
        E::HttpRequestDenied | E::HttpRequestUriInvalid => SendError::Denied,
        E::DestinationIpProhibited | E::DestinationIpUnroutable => SendError::AddressProhibited,
        E::ConnectionLimitReached => SendError::TooManyInFlight,
        E::ConnectionTimeout
        | E::ConnectionReadTimeout
        | E::DnsTimeout
        | E::HttpResponseTimeout => SendError::Timeout,
        E::Connect(_)
        | E::Tls(_)
        | E::DnsError { .. }
        | E::ConnectionRefused
        | E::DestinationNotFound
        | E::DestinationUnavailable => SendError::ConnectFailed,
        _ => SendError::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_text_parses_into_a_request_with_a_host() {
        let text = Bytes::from_static(b"POST http://127.0.0.1:8080/x?y=1\nx-a: b\n\nbody");
        let req = parse(&text).expect("parses");
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri().path(), "/x");
        assert_eq!(req.headers()["x-a"], "b");
        assert_eq!(req.headers()["host"], "127.0.0.1:8080");
        let bare = parse(&Bytes::from_static(b"GET https://example.com/")).expect("parses");
        assert_eq!(bare.headers()["host"], "example.com");
        for bad in [
            &b"GET"[..],
            b"GET /relative",
            b"BAD METHOD http://x/",
            b"GET http://x/\nno colon\n\n",
        ] {
            assert!(
                parse(&Bytes::copy_from_slice(bad)).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
