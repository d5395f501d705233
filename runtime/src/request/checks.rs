//! The checks every request's head passes before it is routed: one
//! well-formed Host that agrees with the target, and one reading of its
//! body's length.

use http::{Request, header};

use super::RequestError;

/// RFC 9112 §6.3: a request with `Transfer-Encoding` on several lines is
/// refused (as NGINX does): two readings of one body are how requests get
/// smuggled past a proxy that picked the other. So is one line that
/// names `chunked` twice (§7: never applied twice). A coding other than
/// `chunked` (`gzip, chunked`) gets 501 (§6.1): hyper would hand its
/// coded bytes on as the body. hyper settles the other cases itself: two
/// different `Content-Length`s are its own 400, two equal ones are read
/// as one (RFC 9110 §8.6), and with both headers it reads the body as
/// chunked and closes the connection after the answer.
pub(crate) fn framing(headers: &http::HeaderMap) -> Result<(), RequestError> {
    let mut values = headers.get_all(header::TRANSFER_ENCODING).iter();
    let Some(value) = values.next() else {
        return Ok(());
    };
    if values.next().is_some() {
        return Err(RequestError::AmbiguousFraming(
            "more than one Transfer-Encoding",
        ));
    }
    let mut chunked = 0;
    for coding in value.as_bytes().split(|&b| b == b',') {
        let coding = coding.trim_ascii();
        if coding.eq_ignore_ascii_case(b"chunked") {
            chunked += 1;
        } else if !coding.is_empty() {
            return Err(RequestError::TransferCoding);
        }
    }
    if chunked > 1 {
        return Err(RequestError::AmbiguousFraming("chunked applied twice"));
    }
    Ok(())
}

/// RFC 9113 §8.2.1: an HTTP/2 field value that starts or ends with a
/// space or tab makes the request malformed (HTTP/1's parser trims them;
/// the h2 layer passes them on, and a servlet would see ` value`).
pub(crate) fn h2_field_values(headers: &http::HeaderMap) -> Result<(), RequestError> {
    let padded = |v: &[u8]| {
        matches!(v.first(), Some(b' ' | b'\t')) || matches!(v.last(), Some(b' ' | b'\t'))
    };
    if headers.values().any(|v| padded(v.as_bytes())) {
        return Err(RequestError::BadRequest(
            "a header value starts or ends with whitespace",
        ));
    }
    Ok(())
}

/// RFC 9113 §6.5.2: the size of an HTTP/2 request's header list as the
/// h2 layer counts it against `SETTINGS_MAX_HEADER_LIST_SIZE`: each
/// field's name and value plus 32 octets, pseudo-headers included.
pub(crate) fn header_list_size<B>(req: &Request<B>) -> usize {
    let field = |name: usize, value: usize| name + value + 32;
    let uri = req.uri();
    let mut size = field(":method".len(), req.method().as_str().len());
    if let Some(scheme) = uri.scheme_str() {
        size += field(":scheme".len(), scheme.len());
    }
    if let Some(authority) = uri.authority() {
        size += field(":authority".len(), authority.as_str().len());
    }
    if let Some(path) = uri.path_and_query() {
        size += field(":path".len(), path.as_str().len());
    }
    size + req
        .headers()
        .iter()
        .map(|(name, value)| field(name.as_str().len(), value.len()))
        .sum::<usize>()
}

/// RFC 9112 §3.2: an HTTP/1.1 request needs exactly one Host, and no
/// request may carry several or a malformed one. A Host that disagrees
/// with an absolute-form target (or HTTP/2's `:authority`) is refused
/// too: two names for one request is how caches get poisoned. A target
/// whose authority carries user information (`http://a@b/`, RFC 9110
/// §4.2.4) is refused: the site is chosen from the name checked here, and
/// `a:80@b` must not read as `a` to one and `b` to another.
pub(crate) fn host<B>(req: &Request<B>) -> Result<(), RequestError> {
    if let Some(authority) = req.uri().authority() {
        let value = authority.as_str().as_bytes();
        if value.contains(&b'@') {
            return Err(RequestError::BadRequest(
                "user information in the request target",
            ));
        }
        if !well_formed(value) {
            return Err(RequestError::BadRequest("malformed request target"));
        }
    }
    let mut values = req.headers().get_all(header::HOST).iter();
    let host = values.next();
    if values.next().is_some() {
        return Err(RequestError::BadRequest("more than one Host header"));
    }
    let Some(host) = host else {
        // HTTP/2 without `:authority` needs a Host (RFC 9113 §8.3.1).
        return match req.version() {
            http::Version::HTTP_11 => {
                Err(RequestError::BadRequest("HTTP/1.1 request without Host"))
            }
            http::Version::HTTP_2 if req.uri().authority().is_none() => Err(
                RequestError::BadRequest("HTTP/2 request without :authority or Host"),
            ),
            _ => Ok(()),
        };
    };
    let value = host.as_bytes();
    if !value.is_empty() && !well_formed(value) {
        return Err(RequestError::BadRequest("malformed Host"));
    }
    if let Some(authority) = req.uri().authority() {
        let (name, port) = split_port(value);
        let same_name = name.eq_ignore_ascii_case(authority.host().as_bytes());
        let same_port = match (port, authority.port_u16()) {
            (Some(p), Some(q)) if !p.is_empty() => p == q.to_string().as_bytes(),
            _ => true,
        };
        if !same_name || !same_port {
            return Err(RequestError::BadRequest(
                "Host disagrees with the request target",
            ));
        }
    }
    Ok(())
}

/// `host[:port]` as RFC 3986 writes an authority without user
/// information: a name (or IPv4 address) of authority bytes with no `:`,
/// `[`, `]` or `@`, or an IPv6 literal in brackets; then an optional
/// port of at most five digits, at most 65535 (or empty, which RFC 3986
/// allows and means the scheme's default).
fn well_formed(value: &[u8]) -> bool {
    let (name, port) = split_port(value);
    let name_ok = match name.strip_prefix(b"[") {
        Some(literal) => literal
            .strip_suffix(b"]")
            .and_then(|l| std::str::from_utf8(l).ok())
            .is_some_and(|l| l.parse::<std::net::Ipv6Addr>().is_ok()),
        None => {
            !name.is_empty()
                && name
                    .iter()
                    .all(|&b| is_authority_byte(b) && !matches!(b, b':' | b'[' | b']'))
        }
    };
    let port_ok = port.is_none_or(|p| {
        p.len() <= 5
            && p.iter().all(u8::is_ascii_digit)
            && (p.is_empty() || std::str::from_utf8(p).is_ok_and(|p| p.parse::<u16>().is_ok()))
    });
    name_ok && port_ok
}

/// Bytes an RFC 3986 authority (host and port, no userinfo) may hold.
fn is_authority_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
        )
}

/// `name:port` → (`name`, `port`); IPv6 literals keep their brackets.
fn split_port(host: &[u8]) -> (&[u8], Option<&[u8]>) {
    let after_literal = host.iter().position(|&b| b == b']').map_or(0, |i| i + 1);
    match host[after_literal..].iter().position(|&b| b == b':') {
        Some(i) => (
            &host[..after_literal + i],
            Some(&host[after_literal + i + 1..]),
        ),
        None => (host, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_ports_split_after_ipv6_literals() {
        assert_eq!(
            split_port(b"a.example:80"),
            (&b"a.example"[..], Some(&b"80"[..]))
        );
        assert_eq!(split_port(b"a.example"), (&b"a.example"[..], None));
        assert_eq!(
            split_port(b"[::1]:8080"),
            (&b"[::1]"[..], Some(&b"8080"[..]))
        );
        assert_eq!(split_port(b"[::1]"), (&b"[::1]"[..], None));
    }

    #[test]
    fn authorities_are_host_and_a_port_of_digits() {
        for good in [
            &b"a.example"[..],
            b"a.example:80",
            b"a.example:",
            b"127.0.0.1:65535",
            b"[::1]",
            b"[::1]:8080",
            b"[2001:db8::1]",
            b"xn--bcher-kva.example",
        ] {
            assert!(well_formed(good), "{}", String::from_utf8_lossy(good));
        }
        for bad in [
            &b""[..],
            b":80",
            b"a.example:abc",
            b"a.example:99999",
            b"a.example:123456",
            b"a.example:-1",
            b"a:b:c",
            b"::1",
            b"[::1",
            b"::1]",
            b"[::1]x",
            b"[::1]:x",
            b"[a.example]",
            b"[]",
            b"a]b",
            b"a[b",
            b"user@a",
            b"a/b",
        ] {
            assert!(!well_formed(bad), "{}", String::from_utf8_lossy(bad));
        }
    }
}
