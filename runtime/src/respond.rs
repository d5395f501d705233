//! Responses swan makes itself: errors and redirects, all in one place so
//! that every failure looks the same and never shows internals.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use crate::body::Body;

/// A small HTML page for `status`, with `title` as its text.
pub fn simple(status: StatusCode, title: &str) -> Response<Body> {
    let code = status.as_u16();
    html_page(
        status,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{code} {title}</title></head>\
             <body><h1>{code} {title}</h1><hr><p>swan</p></body></html>\n"
        ),
    )
}

/// An uncacheable HTML response.
fn html_page(status: StatusCode, page: String) -> Response<Body> {
    let mut res = Response::new(Body::full(Bytes::from(page)));
    *res.status_mut() = status;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// 405 for a method a static path does not support.
pub fn method_not_allowed() -> Response<Body> {
    let mut res = simple(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    res
}

/// 413 for a request body over the limit; the connection is closed so the
/// rest of the body is not read.
pub fn payload_too_large() -> Response<Body> {
    let mut res = simple(StatusCode::PAYLOAD_TOO_LARGE, "Payload Too Large");
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// 400 for a request swan cannot make sense of.
pub fn bad_request() -> Response<Body> {
    simple(StatusCode::BAD_REQUEST, "Bad Request")
}

/// 503 with `Retry-After` when a servlet has no free instance in time.
pub fn unavailable(retry_after: Duration) -> Response<Body> {
    let mut res = simple(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable");
    res.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(retry_after.as_secs().max(1)),
    );
    res
}

/// 504 when a servlet ran past its deadline.
pub fn timeout() -> Response<Body> {
    simple(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout")
}

/// 500 with a generic body: the cause goes to the log, never to the client.
pub fn internal_error() -> Response<Body> {
    simple(StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error")
}

/// 408 when a request body did not arrive in time.
pub fn request_timeout() -> Response<Body> {
    let mut res = simple(StatusCode::REQUEST_TIMEOUT, "Request Timeout");
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    res
}

/// The one mapping from servlet failures to responses: 503 with
/// `Retry-After` when no instance is free, 504 at the deadline, a plain 500
/// for everything else. Details are in the log, never in the response.
pub fn servlet_error(e: &crate::servlet::ServletError) -> Response<Body> {
    use crate::servlet::ServletError;
    match e {
        ServletError::Busy => unavailable(Duration::from_secs(1)),
        ServletError::Timeout => timeout(),
        ServletError::Fault(_) => internal_error(),
    }
}

/// Development mode only: a servlet's source failed to build; show the
/// compiler's output, escaped.
pub fn build_failed(e: &crate::servlet::build::BuildError) -> Response<Body> {
    let escaped = e
        .output
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let page = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Build failed: {name}</title>\
         <style>body{{font:15px system-ui;margin:2rem}}pre{{background:#1d2330;color:#f3f4f8;padding:1rem;overflow:auto}}</style></head>\
         <body><h1>Servlet <code>{name}</code> failed to build</h1><p>swan keeps serving the previous version in production mode. \
         Fix the source and save: it is rebuilt and deployed.</p><pre>{escaped}</pre></body></html>\n",
        name = e.name
    );
    html_page(StatusCode::INTERNAL_SERVER_ERROR, page)
}
