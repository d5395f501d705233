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
    host_fn_async!(linker, "http_send", http_send, (ptr: i32, len: i32))?;
    host_fn!(linker, "http_response_get", http_response_get, (part: i32, ptr: i32, len: i32))?;
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
    let request_id = host.request.request_id.clone();
    let limit = host.info.limits.max_response_bytes;
    let result = async {
        let (response, io) = outbound
            .send(request, None, &request_id)
            .await
            .map_err(classify)?;
        let io = tokio::spawn(io);
        let (parts, mut body) = response.into_parts();
        // The ABI promises 100-599; anything else upstream is a protocol
        // error (known before the body is read).
        if !(100..=599).contains(&parts.status.as_u16()) {
            io.abort();
            return Err(SendError::Failed);
        }
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

/// `METHOD URL` headers, an empty line, body, into a request with an
/// absolute URI and a Host header. Lines end with `\n` or `\r\n`; the
/// head ends at the first empty line either way. The headers a component
/// may not set (`wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS`: framing,
/// hop-by-hop, proxy credentials) are refused, and so is a Host that is
/// not the URL's own authority: the allow-list checks the URL, so the
/// Host cannot name another site behind an allowed address.
fn parse(text: &Bytes) -> Option<Request<Full<Bytes>>> {
    let mut lines = Vec::new();
    let mut body_start = text.len();
    let mut at = 0;
    while at < text.len() {
        let (line, next) = match text[at..].iter().position(|&b| b == b'\n') {
            Some(i) => (&text[at..at + i], at + i + 1),
            None => (&text[at..], text.len()),
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            body_start = next;
            break;
        }
        lines.push(std::str::from_utf8(line).ok()?);
        at = next;
    }
    let mut lines = lines.into_iter();
    let (method, url) = lines.next()?.split_once(' ')?;
    let method = Method::from_bytes(method.as_bytes()).ok()?;
    let uri: Uri = url.trim().parse().ok()?;
    let authority = uri.authority()?.clone();
    // The Host names the host the URL does, never its user information.
    let own_host = authority
        .as_str()
        .rsplit_once('@')
        .map_or(authority.as_str(), |(_, host)| host)
        .to_owned();
    let mut req = Request::builder().method(method).uri(uri);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let name = HeaderName::from_bytes(name.trim().as_bytes()).ok()?;
        let value = HeaderValue::from_str(value.trim()).ok()?;
        if name == http::header::HOST {
            if !value.as_bytes().eq_ignore_ascii_case(own_host.as_bytes()) {
                return None;
            }
            continue;
        }
        // swan frames the body (its length); `TE` is hop-by-hop.
        if wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(&name)
            || name == http::header::TE
            || name == http::header::CONTENT_LENGTH
                && value.to_str().ok().and_then(|v| v.parse::<usize>().ok())
                    != Some(text.len() - body_start)
        {
            return None;
        }
        req = req.header(name, value);
    }
    req = req.header(http::header::HOST, own_host);
    req.body(Full::new(text.slice(body_start..))).ok()
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
        | E::TlsCertificateError
        | E::TlsAlertReceived { .. }
        | E::TlsProtocolError
        | E::DnsError { .. }
        | E::ConnectionRefused
        | E::DestinationNotFound
        | E::DestinationUnavailable => SendError::ConnectFailed,
        _ => SendError::Failed,
    }
}

#[cfg(test)]
mod tests {
    use hyper::body::Body as _;

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
        // CRLF lines: the head ends at the first empty line, and what
        // follows is the body, never more headers.
        let crlf = Bytes::from_static(b"POST http://u@x.test/e\r\nx-a: b\r\n\r\nkey: value");
        let req = parse(&crlf).expect("parses");
        assert_eq!(req.headers().len(), 2, "{:?}", req.headers());
        assert_eq!(req.headers()["host"], "x.test");
        assert_eq!(req.body().size_hint().exact(), Some(10));
        // A length that is the body's is kept.
        assert!(
            parse(&Bytes::from_static(
                b"POST http://x/\nContent-Length: 3\n\nabc"
            ))
            .is_some()
        );
        // A Host that is the URL's own is kept (once).
        let same = parse(&Bytes::from_static(
            b"GET http://X.test:81/\nHost: x.TEST:81\n\n",
        ))
        .expect("parses");
        assert_eq!(same.headers().get_all("host").iter().count(), 1);
        for bad in [
            &b"GET"[..],
            b"GET /relative",
            b"BAD METHOD http://x/",
            b"GET http://x/\nno colon\n\n",
            b"\nGET http://x/\n\n",
            // Another site behind the same address, or two Hosts.
            b"GET http://x/\nHost: admin.internal\n\n",
            b"GET http://x/\nHost: x\nHost: admin.internal\n\n",
            b"GET http://x:80/\nHost: x\n\n",
            // What components may not set either.
            b"GET http://x/\nConnection: close\n\n",
            b"GET http://x/\nUpgrade: websocket\n\n",
            b"POST http://x/\nTransfer-Encoding: chunked\n\n",
            b"GET http://x/\nProxy-Authorization: Basic eA==\n\n",
            b"GET http://x/\nKeep-Alive: 5\n\n",
            b"GET http://x/\nx-a: b\rx-b: c\n\n",
            b"GET http://x/\nTE: trailers\n\n",
            // A length that is not the body's.
            b"POST http://x/\nContent-Length: 5\n\nabc",
            b"POST http://x/\nContent-Length: 1\n\nabc",
        ] {
            assert!(
                parse(&Bytes::copy_from_slice(bad)).is_none(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
