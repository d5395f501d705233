//! hyper's own answer to a request head it refused (400, 414 or 431 for a
//! malformed head or one over `max_header_bytes`), made to look like every
//! other answer of swan's: it gets the `Server` header, and a 431 for a
//! request line that never ended becomes 414 (RFC 9112 §3: the precise
//! answer when the target alone is too long).

/// What every refused head's answer starts with (hyper answers in
/// HTTP/1.1 whatever the request said).
const REFUSAL: &[u8] = b"HTTP/1.1 4";
const STATUS_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\n";
const STATUS_414: &[u8] = b"HTTP/1.1 414 URI Too Long\r\n";
const SERVER: &[u8] = b"server: swan\r\n";

/// How hyper's answer was rewritten.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Rewritten {
    pub(super) bytes: Vec<u8>,
    /// The 431 became a 414.
    pub(super) uri_too_long: bool,
}

/// `data`, a write hyper makes, rewritten if it is hyper's own answer to a
/// refused head: a 4xx whose head has no `Server` (swan's own answers
/// always have one). `line_done`: whether the refused head's request line
/// had ended.
pub(super) fn rewrite(data: &[u8], line_done: bool) -> Option<Rewritten> {
    if !data.starts_with(REFUSAL) {
        return None;
    }
    let head_end = data.windows(4).position(|w| w == b"\r\n\r\n")? + 2;
    let status_end = data.iter().position(|&b| b == b'\n')? + 1;
    let has_server = data[..head_end]
        .split(|&b| b == b'\n')
        .any(|line| line.len() >= 7 && line[..7].eq_ignore_ascii_case(b"server:"));
    if has_server {
        return None;
    }
    let uri_too_long = !line_done && data.starts_with(STATUS_431);
    let status = if uri_too_long {
        STATUS_414
    } else {
        &data[..status_end]
    };
    let mut bytes = Vec::with_capacity(data.len() + SERVER.len());
    bytes.extend_from_slice(status);
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
        let bad = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
        let r = rewrite(bad, false).expect("rewritten");
        assert!(!r.uri_too_long, "only a 431 becomes a 414");
        assert!(
            r.bytes
                .starts_with(b"HTTP/1.1 400 Bad Request\r\nserver: swan\r\n")
        );
    }

    #[test]
    fn swan_answers_and_anything_else_are_left_alone() {
        for data in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nserver: swan\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\nServer: swan\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.0 404 Not Found\r\nserver: swan\r\n\r\n",
            // Part of a body that happens to start like a status line,
            // or a head not whole in this write.
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
