//! Outbound HTTP requests from a servlet, where its route allows them
//! (`allowed_outbound_hosts` in swan.toml; everything else is denied).
//!
//! ```no_run
//! use swan_guest::http;
//!
//! let res = http::get("https://api.example.com/v1/items")?;
//! assert_eq!(res.status, 200);
//! # Ok::<(), http::Error>(())
//! ```

/// Why an outbound request failed (ABI `http_send` error codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No rule of the route allows the destination.
    Denied,
    /// The name resolved only to addresses the route may not reach.
    AddressProhibited,
    /// Name lookup, connection or TLS failed.
    ConnectFailed,
    /// A timeout passed.
    Timeout,
    /// Too many outbound requests in flight.
    TooManyInFlight,
    /// The request was malformed (method, URL or a header).
    BadRequest,
    /// The response body was larger than the servlet's `max_response_bytes`.
    ResponseTooLarge,
    /// Anything else.
    Failed,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Error {}

/// A response, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, Error> {
    send("GET", url, &[], b"")
}

/// Sends a request and waits for the whole response.
pub fn send(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, Error> {
    let mut request = format!("{method} {url}\n").into_bytes();
    for (name, value) in headers {
        request.extend_from_slice(format!("{name}: {value}\n").as_bytes());
    }
    request.push(b'\n');
    request.extend_from_slice(body);
    let status = crate::ffi::http_send(&request);
    if status < 0 {
        return Err(match status {
            -1 => Error::Denied,
            -2 => Error::AddressProhibited,
            -3 => Error::ConnectFailed,
            -4 => Error::Timeout,
            -5 => Error::TooManyInFlight,
            -6 => Error::BadRequest,
            -7 => Error::ResponseTooLarge,
            _ => Error::Failed,
        });
    }
    let part =
        |n| crate::ffi::read_with(|buf| crate::ffi::http_response_get(n, buf)).unwrap_or_default();
    let headers = String::from_utf8_lossy(&part(0))
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect();
    Ok(Response {
        status: u16::try_from(status).unwrap_or(0),
        headers,
        body: part(1),
    })
}
