//! Everything a request can fail with, and the one mapping from a failure
//! to the response the client sees.
//!
//! Modules return a [`RequestError`] instead of building error pages; the
//! app turns it into a response in one place ([`RequestError::into_response`],
//! plus the site's own 404 page). Client faults carry no detail worth
//! logging; server-side faults are logged where they happen, with the
//! request id, and the client only ever gets a generic page: no trap text,
//! no paths, nothing from a guest's internals.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use crate::body::Body;

/// Why a request could not be answered normally.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The request makes no sense: a malformed path or header, a missing or
    /// doubled `Host`. The text says what, for debug logs only.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// The request's body framing is ambiguous (RFC 9112 §6.3):
    /// `Transfer-Encoding` on several lines. The connection is closed:
    /// what follows cannot be trusted.
    #[error("ambiguous body framing: {0}")]
    AmbiguousFraming(&'static str),
    /// The body has a transfer coding other than `chunked` (`gzip,
    /// chunked`): 501 (RFC 9112 §6.1), and the connection is closed, as
    /// for ambiguous framing.
    #[error("transfer coding not implemented")]
    TransferCoding,
    /// The server cannot take this request now (no file descriptor left to
    /// open its file, or its connection holds as many files open as it
    /// may): 503 with `Retry-After`.
    #[error("unavailable: {0}")]
    Unavailable(&'static str),
    /// Nothing answers this path.
    #[error("not found")]
    NotFound,
    /// The path exists but not for this method.
    #[error("method not allowed")]
    MethodNotAllowed {
        /// The methods that are allowed, for the `Allow` header.
        allow: &'static str,
    },
    /// The request body is larger than the limit; the rest of it is not
    /// read, so the connection is closed.
    #[error("request body over the limit")]
    PayloadTooLarge,
    /// The request body did not arrive in time; the connection is closed.
    #[error("request body too slow")]
    BodyTimeout,
    /// `If-Match` or `If-Unmodified-Since` did not hold (RFC 9110 §13.1.1,
    /// §13.1.4).
    #[error("precondition failed")]
    PreconditionFailed,
    /// A range that starts past the end of a `len`-byte body.
    #[error("range not satisfiable")]
    RangeNotSatisfiable {
        /// The full length, for `Content-Range: bytes */LEN`.
        len: u64,
    },
    /// No servlet instance became free in time, or the process-wide
    /// instance pool is full.
    #[error("servlet busy")]
    ServletBusy,
    /// A key-value store a servlet needed could not be reached, and the
    /// servlet did not handle it.
    #[error("store unavailable")]
    StoreUnavailable,
    /// A servlet ran past its deadline.
    #[error("servlet deadline exceeded")]
    ServletTimeout,
    /// A servlet trapped, broke the ABI or reported failure; with what
    /// happened, in one line, for the status page's recent errors (the
    /// client sees only the status).
    #[error("servlet failed")]
    ServletFault(Option<Arc<str>>),
    /// Development mode only: a servlet trapped; the client sees the trap
    /// and the wasm backtrace.
    #[error("servlet {servlet} trapped")]
    ServletTrapped {
        /// The servlet.
        servlet: String,
        /// The trap and its backtrace.
        detail: Arc<str>,
    },
    /// Development mode only: the servlet's source failed to build.
    #[error("servlet {servlet} failed to build")]
    BuildFailed {
        /// The servlet.
        servlet: String,
        /// What the compiler said.
        output: Arc<str>,
    },
    /// Something went wrong on swan's side (a file that cannot be read, a
    /// panic while handling the request).
    #[error("internal error")]
    Internal,
}

/// How long a client is told to wait before retrying a 503.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

impl RequestError {
    /// A servlet's failure, and what happened (one line).
    pub(crate) fn fault(what: impl Into<Arc<str>>) -> RequestError {
        RequestError::ServletFault(Some(what.into()))
    }

    /// The status the client gets.
    pub fn status(&self) -> StatusCode {
        match self {
            RequestError::BadRequest(_) | RequestError::AmbiguousFraming(_) => {
                StatusCode::BAD_REQUEST
            }
            RequestError::TransferCoding => StatusCode::NOT_IMPLEMENTED,
            RequestError::NotFound => StatusCode::NOT_FOUND,
            RequestError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            RequestError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            RequestError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            RequestError::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            RequestError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            RequestError::ServletBusy
            | RequestError::StoreUnavailable
            | RequestError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            RequestError::ServletTimeout => StatusCode::GATEWAY_TIMEOUT,
            RequestError::ServletFault(_)
            | RequestError::ServletTrapped { .. }
            | RequestError::BuildFailed { .. }
            | RequestError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response the client gets: a small generic page with the headers
    /// the status calls for.
    pub fn into_response(self) -> Response<Body> {
        let status = self.status();
        let mut res = match &self {
            RequestError::BuildFailed { servlet, output } => dev_page(
                &format!("Servlet <code>{}</code> failed to build", escape(servlet)),
                "swan keeps serving the previous version in production mode. Fix the source and save: it is rebuilt and deployed.",
                output,
            ),
            RequestError::ServletTrapped { servlet, detail } => dev_page(
                &format!("Servlet <code>{}</code> trapped", escape(servlet)),
                "Development mode shows the trap and its WebAssembly backtrace (function names come from the module's name section); production answers a generic 500 and logs this with the request id.",
                detail,
            ),
            _ => page(status),
        };
        let headers = res.headers_mut();
        match self {
            RequestError::MethodNotAllowed { allow } => {
                headers.insert(header::ALLOW, HeaderValue::from_static(allow));
            }
            RequestError::PayloadTooLarge
            | RequestError::BodyTimeout
            | RequestError::AmbiguousFraming(_)
            | RequestError::TransferCoding => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            RequestError::RangeNotSatisfiable { len } => {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                    headers.insert(header::CONTENT_RANGE, v);
                }
            }
            RequestError::ServletBusy
            | RequestError::StoreUnavailable
            | RequestError::Unavailable(_) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(RETRY_AFTER.as_secs()),
                );
            }
            _ => {}
        }
        res
    }
}

/// A small HTML page for `status`.
pub fn page(status: StatusCode) -> Response<Body> {
    let code = status.as_u16();
    let title = status.canonical_reason().unwrap_or("Error");
    html(
        status,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{code} {title}</title></head>\
             <body><h1>{code} {title}</h1><hr><p>swan</p></body></html>\n"
        ),
    )
}

/// An uncacheable HTML response.
fn html(status: StatusCode, page: String) -> Response<Body> {
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

/// Development mode only: the compiler's output, escaped.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A development-mode error page: a title, a sentence, and a tool's text.
fn dev_page(title_html: &str, explain: &str, text: &str) -> Response<Body> {
    let text = escape(text);
    html(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>swan: error</title>\
             <style>body{{font:15px system-ui;margin:2rem}}pre{{background:#1d2330;color:#f3f4f8;padding:1rem;overflow:auto}}</style></head>\
             <body><h1>{title_html}</h1><p>{explain}</p><pre>{text}</pre></body></html>\n"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_gets_its_status_and_headers() {
        for busy in [RequestError::ServletBusy, RequestError::StoreUnavailable] {
            let res = busy.into_response();
            assert_eq!(res.status(), 503);
            assert_eq!(res.headers()["retry-after"], "1");
        }
        let res = RequestError::MethodNotAllowed { allow: "GET, HEAD" }.into_response();
        assert_eq!(res.headers()["allow"], "GET, HEAD");
        let res = RequestError::PayloadTooLarge.into_response();
        assert_eq!(res.headers()["connection"], "close");
        let res = RequestError::RangeNotSatisfiable { len: 10 }.into_response();
        assert_eq!(res.headers()["content-range"], "bytes */10");
        assert_eq!(RequestError::ServletTimeout.into_response().status(), 504);
        assert_eq!(
            RequestError::ServletFault(None).into_response().status(),
            500
        );
    }

    #[test]
    fn build_output_is_escaped() {
        let res = RequestError::BuildFailed {
            servlet: "x".to_owned(),
            output: Arc::from("<script>&"),
        }
        .into_response();
        let Some(bytes) = res.into_body().into_bytes() else {
            panic!("a full body")
        };
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("&lt;script&gt;&amp;"), "{text}");
    }
}
