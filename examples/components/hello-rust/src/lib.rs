//! `hello-rust`: a small `wasi:http/proxy` 0.2 component.
//!
//! It answers like its JavaScript and Python siblings (`../hello-js`,
//! `../hello-python`), so swan's tests can treat all three alike. Every
//! response carries `x-guest-lang: rust`.
//!
//! | request | response |
//! |---|---|
//! | `GET …?name=X` | 200 `text/plain`, `Hello, X! (rust)` (`name` defaults to `world`) |
//! | `POST` with `{"a": 1, "b": 2}` | 200 `application/json`, `{"sum":3}`; 400 on bad JSON |
//! | `… /headers` | 200, `x-test=<value of the request's x-test header>` |
//! | `… /env` | 200, the value of the environment variable `GREETING` (swan passes route settings as environment) |
//! | `… /stream?n=N` | 200, N chunks (default 1000) of 1 KiB, written one by one to the body stream |

use wasi::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};
use wasi::io::streams::StreamError;

const LANG: &str = "rust";
const TEXT: &str = "text/plain; charset=utf-8";

struct Hello;

impl wasi::exports::http::incoming_handler::Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path_with_query = request.path_with_query().unwrap_or_default();
        let (path, query) = path_with_query
            .split_once('?')
            .unwrap_or((&path_with_query, ""));

        if path.ends_with("/stream") {
            let n = query_param(query, "n")
                .and_then(|n| n.parse().ok())
                .unwrap_or(1000);
            return stream(out, n);
        }
        let (status, content_type, body) = if path.ends_with("/headers") {
            let value = request.headers().get("x-test").into_iter().next();
            let value = String::from_utf8_lossy(&value.unwrap_or_default()).into_owned();
            (200, TEXT, format!("x-test={value}"))
        } else if path.ends_with("/env") {
            (200, TEXT, std::env::var("GREETING").unwrap_or_default())
        } else if matches!(request.method(), Method::Post) {
            sum(&read_body(&request))
        } else {
            let name = query_param(query, "name").unwrap_or_else(|| "world".into());
            (200, TEXT, format!("Hello, {name}! ({LANG})"))
        };
        respond(out, status, content_type, body.as_bytes());
    }
}

wasi::http::proxy::export!(Hello);

/// `{"a": <int>, "b": <int>}` → `{"sum": a+b}`, or a 400 with a short text.
fn sum(body: &[u8]) -> (u16, &'static str, String) {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return (400, TEXT, "invalid JSON".into());
    };
    match (json["a"].as_i64(), json["b"].as_i64()) {
        (Some(a), Some(b)) => (
            200,
            "application/json",
            format!("{{\"sum\":{}}}", i128::from(a) + i128::from(b)),
        ),
        _ => (400, TEXT, "expected {\"a\": <int>, \"b\": <int>}".into()),
    }
}

/// Starts a response with our headers; the caller writes and finishes the body.
fn start(out: ResponseOutparam, status: u16, content_type: &str) -> Option<OutgoingBody> {
    let headers = Fields::from_list(&[
        ("content-type".to_owned(), content_type.as_bytes().to_vec()),
        ("x-guest-lang".to_owned(), LANG.as_bytes().to_vec()),
    ])
    .ok()?;
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).ok()?;
    let body = response.body().ok()?;
    ResponseOutparam::set(out, Ok(response));
    Some(body)
}

fn respond(out: ResponseOutparam, status: u16, content_type: &str, bytes: &[u8]) {
    let Some(body) = start(out, status, content_type) else {
        return;
    };
    if let Ok(stream) = body.write() {
        // blocking_write_and_flush takes at most 4096 bytes at a time.
        for chunk in bytes.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                return;
            }
        }
    }
    let _ = OutgoingBody::finish(body, None);
}

/// Writes `n` chunks of 1 KiB one at a time, so the host can send each on as
/// it comes (and push back when the client is slow) instead of a whole body.
fn stream(out: ResponseOutparam, n: u32) {
    let Some(body) = start(out, 200, TEXT) else {
        return;
    };
    let mut chunk = vec![b'x'; 1024];
    chunk[1023] = b'\n';
    {
        let Ok(stream) = body.write() else { return };
        for _ in 0..n {
            if stream.blocking_write_and_flush(&chunk).is_err() {
                return; // the client went away; dropping the body aborts the response
            }
        }
    } // the output stream must be dropped before the body is finished
    let _ = OutgoingBody::finish(body, None);
}

/// Reads the whole request body (the echo bodies are small).
fn read_body(request: &IncomingRequest) -> Vec<u8> {
    let mut bytes = Vec::new();
    let Ok(body) = request.consume() else {
        return bytes;
    };
    if let Ok(stream) = body.stream() {
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(_)) => break,
            }
        }
    }
    bytes
}

/// The first value of `key` in a query string, with `+` and `%XX` decoded.
fn query_param(query: &str, key: &str) -> Option<String> {
    let raw = query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((k, v)) if k == key => Some(v),
            None if pair == key => Some(""),
            _ => None,
        })?;
    let mut out = Vec::with_capacity(raw.len());
    let mut bytes = raw.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex: Vec<u8> = bytes.clone().take(2).collect();
                match std::str::from_utf8(&hex)
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(v) if hex.len() == 2 => {
                        out.push(v);
                        bytes.nth(1);
                    }
                    _ => out.push(b'%'),
                }
            }
            _ => out.push(b),
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}
