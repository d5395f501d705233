//! hyper's own answer to a request head it refused (400, 414 or 431 for a
//! malformed head or one over `max_header_bytes`), made to look like every
//! other answer of swan's: it gets the `Server` header, and a 431 for a
//! request line that never ended becomes 414 (RFC 9112 §3: the precise
//! answer when the target alone is too long).

const STATUS_431: &[u8] = b" 431 Request Header Fields Too Large\r\n";
const STATUS_414: &[u8] = b" 414 URI Too Long\r\n";
const SERVER: &[u8] = b"server: swan\r\n";

/// How hyper's answer was rewritten.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Rewritten {
    pub(super) bytes: Vec<u8>,
    /// The 431 became a 414.
    pub(super) uri_too_long: bool,
}

/// `data`, a write hyper makes while no request is in flight, rewritten if
/// it is exactly hyper's own answer to a refused head: a 400, 414 or 431
/// status line (HTTP/1.1, or HTTP/1.0 on a connection whose last request
/// was 1.0) and nothing but its empty-body headers (`connection: close`,
/// `content-length: 0`, `date`), ending with the write. Anything else,
/// such as a response body's chunk that happens to look like a head, is
/// left alone: it would carry more, or other, bytes. `line_done`: whether
/// the refused head's request line had ended.
pub(super) fn rewrite(data: &[u8], line_done: bool) -> Option<Rewritten> {
    let head = data.strip_suffix(b"\r\n\r\n")?;
    let mut lines = head.split(|&b| b == b'\n');
    let status = lines.next()?;
    let refusal = [b"400 ", b"414 ", b"431 "]
        .iter()
        .any(|code| status.get(9..13) == Some(&code[..]));
    if !(status.starts_with(b"HTTP/1.1 ") || status.starts_with(b"HTTP/1.0 ")) || !refusal {
        return None;
    }
    let (mut length, mut date) = (false, false);
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        match line {
            b"connection: close" => {}
            b"content-length: 0" => length = true,
            _ if line.starts_with(b"date: ") => date = true,
            _ => return None,
        }
    }
    if !(length && date) {
        return None;
    }
    let status_end = status.len() + 1;
    // "HTTP/1.x" then the status.
    let (version, status) = data[..status_end].split_at(8);
    let uri_too_long = !line_done && status == STATUS_431;
    let mut bytes = Vec::with_capacity(data.len() + SERVER.len());
    bytes.extend_from_slice(version);
    bytes.extend_from_slice(if uri_too_long { STATUS_414 } else { status });
    bytes.extend_from_slice(SERVER);
    bytes.extend_from_slice(&data[status_end..]);
    Some(Rewritten {
        bytes,
        uri_too_long,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYPER_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 22:31:40 GMT\r\n\r\n";

    #[test]
    fn hyper_refusals_get_the_server_header_and_414_when_the_line_never_ended() {
        let r = rewrite(HYPER_431, true).expect("rewritten");
        assert!(!r.uri_too_long);
        assert_eq!(
            r.bytes,
            b"HTTP/1.1 431 Request Header Fields Too Large\r\nserver: swan\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 22:31:40 GMT\r\n\r\n"
        );
        let r = rewrite(HYPER_431, false).expect("rewritten");
        assert!(r.uri_too_long);
        assert!(
            r.bytes
                .starts_with(b"HTTP/1.1 414 URI Too Long\r\nserver: swan\r\nconnection: close\r\n")
        );
        let bad = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 22:31:40 GMT\r\n\r\n";
        let r = rewrite(bad, false).expect("rewritten");
        assert!(!r.uri_too_long, "only a 431 becomes a 414");
        assert!(
            r.bytes
                .starts_with(b"HTTP/1.1 400 Bad Request\r\nserver: swan\r\n")
        );
    }

    #[test]
    fn an_http10_431_for_a_line_becomes_414_too() {
        let big =
            b"HTTP/1.0 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let r = rewrite(big, false).expect("rewritten");
        assert!(r.uri_too_long);
        assert!(
            r.bytes
                .starts_with(b"HTTP/1.0 414 URI Too Long\r\nserver: swan\r\n")
        );
    }

    #[test]
    fn an_http10_refusal_gets_the_header_too() {
        let bad = b"HTTP/1.0 400 Bad Request\r\ncontent-length: 0\r\ndate: Wed, 02 Dec 2026 22:31:40 GMT\r\n\r\n";
        let r = rewrite(bad, true).expect("rewritten");
        assert!(
            r.bytes
                .starts_with(b"HTTP/1.0 400 Bad Request\r\nserver: swan\r\ncontent-length: 0\r\n")
        );
    }

    #[test]
    fn swan_answers_and_anything_else_are_left_alone() {
        for data in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nserver: swan\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\nServer: swan\r\ncontent-length: 0\r\ndate: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\ndate: x\r\n\r\n",
            // Other 4xx: never hyper's.
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\ndate: x\r\n\r\n",
            // A body chunk that looks like a head: other headers, bytes
            // after the blank line, a length that is not 0, or no date.
            b"HTTP/1.1 404 Not Found\r\nX: 1\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nx-a: b\r\ncontent-length: 0\r\ndate: x\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\nmore",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 10\r\ndate: x\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 4",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n",
        ] {
            assert_eq!(
                rewrite(data, false),
                None,
                "{}",
                String::from_utf8_lossy(data)
            );
        }
    }
}
