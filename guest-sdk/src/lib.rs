//! Write swan servlets in Rust.
//!
//! A servlet is a function from a [`Request`] to a [`Response`], exported
//! with the [`servlet!`] macro and built for `wasm32-wasip1`:
//!
//! ```
//! use swan_guest::{Request, Response};
//!
//! fn hello(req: Request) -> Response {
//!     let name = req.query("name").unwrap_or_else(|| "world".to_owned());
//!     Response::text(format!("Hello, {name}!"))
//! }
//!
//! swan_guest::servlet!(hello);
//! # fn main() {
//! #     let res = hello(Request::for_test("GET", "/hello", "name=swan", b""));
//! #     assert_eq!(res.body_bytes(), b"Hello, swan!");
//! # }
//! ```
//!
//! ```toml
//! # Cargo.toml
//! [lib]
//! crate-type = ["cdylib"]
//! ```
//!
//! `cargo build --release --target wasm32-wasip1` then gives a `.wasm` to
//! drop into a site's servlets folder. The ABI underneath is specified in
//! `guest-sdk/ABI.md`; user code never needs `unsafe`.

mod ffi;
pub mod http;
pub mod kv;
mod query;

pub use query::{parse_query, percent_decode};

/// The ABI version this SDK speaks.
pub const ABI_VERSION: i32 = 1;

/// Log levels for [`log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something failed.
    Error = 0,
    /// Something is off.
    Warn = 1,
    /// Worth knowing.
    Info = 2,
    /// Details.
    Debug = 3,
}

/// Writes a line to swan's log, tagged with this servlet and the request id.
pub fn log(level: Level, message: &str) {
    ffi::log(level as i32, message.as_bytes());
}

/// A static setting of this servlet (`[site.route.settings]`).
pub fn setting(key: &str) -> Option<String> {
    ffi::read_with(|buf| ffi::setting(key.as_bytes(), buf))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The request being served.
#[derive(Debug, Clone, Default)]
pub struct Request {
    method: String,
    path: String,
    query: String,
    path_info: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    remote_addr: String,
    request_id: String,
}

impl Request {
    /// Reads the current request from the host.
    fn from_host() -> Request {
        let part = |n: i32| ffi::read_with(|buf| ffi::request_get(n, buf)).unwrap_or_default();
        let text = |n: i32| String::from_utf8_lossy(&part(n)).into_owned();
        let headers = text(4)
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Request {
            method: text(0),
            path: text(1),
            query: text(2),
            path_info: text(3),
            headers,
            body: part(5),
            remote_addr: text(6),
            request_id: text(7),
        }
    }

    /// A request made up in memory, for unit tests of handlers.
    pub fn for_test(method: &str, path: &str, query: &str, body: &[u8]) -> Request {
        Request {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            body: body.to_vec(),
            ..Request::default()
        }
    }

    /// Sets the path info of a test request.
    pub fn with_path_info(mut self, path_info: &str) -> Request {
        self.path_info = path_info.to_owned();
        self
    }

    /// Adds a header to a test request.
    pub fn with_header(mut self, name: &str, value: &str) -> Request {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// `GET`, `POST`, …
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The normalised path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The raw query string, without `?`.
    pub fn query_string(&self) -> &str {
        &self.query
    }

    /// The first value of a query parameter, percent-decoded.
    pub fn query(&self, name: &str) -> Option<String> {
        parse_query(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// Every query parameter, percent-decoded, in order.
    pub fn query_params(&self) -> Vec<(String, String)> {
        parse_query(&self.query)
    }

    /// The path after the servlet's route prefix.
    pub fn path_info(&self) -> &str {
        &self.path_info
    }

    /// The first value of a header (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every header, names in lower case.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as UTF-8 text.
    pub fn body_text(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.body)
    }

    /// The client's address, `IP:PORT`.
    pub fn remote_addr(&self) -> &str {
        &self.remote_addr
    }

    /// The id swan logs for this request.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }
}

/// The response to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// An empty response with a status.
    pub fn status(status: u16) -> Response {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// 200 with a `text/plain` body.
    pub fn text(body: impl Into<String>) -> Response {
        Response::status(200)
            .header("content-type", "text/plain; charset=utf-8")
            .body(body.into().into_bytes())
    }

    /// 200 with a `text/html` body.
    pub fn html(body: impl Into<String>) -> Response {
        Response::status(200)
            .header("content-type", "text/html; charset=utf-8")
            .body(body.into().into_bytes())
    }

    /// 200 with an `application/json` body (already serialised).
    pub fn json(body: impl Into<String>) -> Response {
        Response::status(200)
            .header("content-type", "application/json")
            .body(body.into().into_bytes())
    }

    /// A redirect (302 Found) to `location`.
    pub fn redirect(location: &str) -> Response {
        Response::status(302).header("location", location)
    }

    /// 400 with a plain-text reason.
    pub fn bad_request(reason: impl Into<String>) -> Response {
        Response::text(reason).with_status(400)
    }

    /// 404.
    pub fn not_found() -> Response {
        Response::text("not found").with_status(404)
    }

    /// 405 with `Allow`.
    pub fn method_not_allowed(allow: &str) -> Response {
        Response::text("method not allowed")
            .with_status(405)
            .header("allow", allow)
    }

    /// Changes the status.
    pub fn with_status(mut self, status: u16) -> Response {
        self.status = status;
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Replaces the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Response {
        self.body = body.into();
        self
    }

    /// The status code.
    pub fn status_code(&self) -> u16 {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body bytes.
    pub fn body_bytes(&self) -> &[u8] {
        &self.body
    }

    /// Sends the response to the host.
    fn send(&self) -> i32 {
        if ffi::response_status(i32::from(self.status)) != 0 {
            log(Level::Error, &format!("invalid status {}", self.status));
            return 1;
        }
        for (name, value) in &self.headers {
            match ffi::response_header(name.as_bytes(), value.as_bytes()) {
                0 => {}
                -2 => log(
                    Level::Warn,
                    &format!("header {name:?} is set by swan; ignored"),
                ),
                _ => log(Level::Warn, &format!("invalid header {name:?}; ignored")),
            }
        }
        for chunk in self.body.chunks(1 << 20) {
            ffi::response_write(chunk);
        }
        0
    }
}

/// Support for [`servlet!`]; not part of the public API.
#[doc(hidden)]
pub fn __run(handler: fn(Request) -> Response) -> i32 {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            log(Level::Error, &format!("servlet panicked: {info}"))
        }));
    });
    handler(Request::from_host()).send()
}

/// Exports `handler` (a `fn(Request) -> Response`) as this module's servlet.
#[macro_export]
macro_rules! servlet {
    ($handler:path) => {
        #[doc(hidden)]
        #[unsafe(export_name = "swan_handle")]
        pub extern "C" fn __swan_handle() -> i32 {
            $crate::__run($handler)
        }

        #[doc(hidden)]
        #[unsafe(export_name = "swan_abi_version")]
        pub extern "C" fn __swan_abi_version() -> i32 {
            $crate::ABI_VERSION
        }
    };
}
