//! {{name}}: a swan servlet as a `wasi:http/proxy` 0.2 component in Rust.
//!
//! Try it:
//!   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//!   -> Hello, Ada! GET /{{name}}

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Servlet;

impl Guest for Servlet {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let path_with_query = request.path_with_query().unwrap_or_default();
        let (path, query) = path_with_query
            .split_once('?')
            .unwrap_or((&path_with_query, ""));
        let name = query_param(query, "name").unwrap_or_else(|| "world".into());
        let body = format!("Hello, {name}! {} {path}", method(&request.method()));
        respond(out, 200, body.as_bytes());
    }
}

wasip2::http::proxy::export!(Servlet);

fn method(method: &Method) -> &str {
    match method {
        Method::Get => "GET",
        Method::Head => "HEAD",
        Method::Post => "POST",
        Method::Put => "PUT",
        Method::Delete => "DELETE",
        Method::Connect => "CONNECT",
        Method::Options => "OPTIONS",
        Method::Trace => "TRACE",
        Method::Patch => "PATCH",
        Method::Other(other) => other,
    }
}

/// Sends a whole `text/plain` response.
fn respond(out: ResponseOutparam, status: u16, bytes: &[u8]) {
    let headers = Fields::from_list(&[(
        "content-type".to_owned(),
        b"text/plain; charset=utf-8".to_vec(),
    )])
    .expect("valid header");
    let response = OutgoingResponse::new(headers);
    response.set_status_code(status).expect("valid status");
    let body = response.body().expect("body taken once");
    ResponseOutparam::set(out, Ok(response));
    {
        let stream = body.write().expect("stream taken once");
        // blocking_write_and_flush takes at most 4096 bytes at a time.
        for chunk in bytes.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                return; // the client went away
            }
        }
    } // the stream must be dropped before the body is finished
    let _ = OutgoingBody::finish(body, None);
}

/// The first value of `key` in a query string, with `+` and `%XX` decoded.
fn query_param(query: &str, key: &str) -> Option<String> {
    let raw = query.split('&').find_map(|pair| match pair.split_once('=') {
        Some((k, v)) if k == key => Some(v),
        None if pair == key => Some(""),
        _ => None,
    })?;
    let hex = |b: u8| (b as char).to_digit(16);
    let (bytes, mut out, mut i) = (raw.as_bytes(), Vec::with_capacity(raw.len()), 0);
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}
