//! A small JSON API: query parameters in, JSON out; a JSON body in, JSON
//! out; and proper 4xx answers for bad input.
//!
//! - `GET  /json-api?name=NAME&times=N` → `{"greeting": "...", "times": N}`
//! - `POST /json-api/sum` with `{"numbers": [1, 2.5]}` → `{"sum": 3.5, "count": 2}`

use serde::{Deserialize, Serialize};
use swan_guest::{Request, Response};

#[derive(Serialize)]
struct Greeting {
    greeting: String,
    times: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SumRequest {
    numbers: Vec<f64>,
}

#[derive(Serialize)]
struct SumResponse {
    sum: f64,
    count: usize,
}

#[derive(Serialize)]
struct ApiError<'a> {
    error: &'a str,
    detail: String,
}

fn error(status: u16, error: &str, detail: impl Into<String>) -> Response {
    let body = serde_json::to_string(&ApiError { error, detail: detail.into() }).unwrap_or_default();
    Response::json(body).with_status(status)
}

fn json(value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => Response::json(body),
        Err(e) => error(500, "serialisation failed", e.to_string()),
    }
}

/// Routes by path info and method.
pub fn api(req: Request) -> Response {
    match (req.method(), req.path_info()) {
        // HEAD is GET without the body (swan sends the head only).
        ("GET" | "HEAD", "" | "/") => greet(&req),
        ("POST", "/sum") => sum(&req),
        (_, "" | "/") => error(405, "method not allowed", "use GET").header("allow", "GET, HEAD"),
        (_, "/sum") => error(405, "method not allowed", "use POST").header("allow", "POST"),
        (_, other) => error(404, "not found", format!("no endpoint at {other}")),
    }
}

fn greet(req: &Request) -> Response {
    let name = req.query("name").unwrap_or_else(|| "world".to_owned());
    if !(1..=100).contains(&name.chars().count()) {
        return error(400, "bad name", "name must have 1 to 100 characters");
    }
    let times = match req.query("times").map(|t| t.parse::<u32>()) {
        None => 1,
        Some(Ok(t)) if (1..=10).contains(&t) => t,
        Some(_) => return error(400, "bad times", "times must be a whole number from 1 to 10"),
    };
    json(&Greeting {
        greeting: vec![format!("Hello, {name}!"); times as usize].join(" "),
        times,
    })
}

fn sum(req: &Request) -> Response {
    // The media type, without parameters, compared case-insensitively
    // (RFC 9110 §8.3.1): `Application/JSON; charset=utf-8` is JSON,
    // `application/jsonp` is not.
    let media_type = req.header("content-type").unwrap_or("").split(';').next().unwrap_or("");
    if !media_type.trim().eq_ignore_ascii_case("application/json") {
        return error(415, "unsupported media type", "send Content-Type: application/json");
    }
    match serde_json::from_slice::<SumRequest>(req.body()) {
        Ok(r) => {
            // Start from +0.0: an empty sum is 0, not Rust's -0.0.
            let sum = r.numbers.iter().fold(0.0, |a, b| a + b);
            if !sum.is_finite() {
                return error(400, "sum out of range", "the sum is too large for a JSON number");
            }
            json(&SumResponse {
                sum,
                count: r.numbers.len(),
            })
        }
        Err(e) => error(400, "invalid JSON", e.to_string()),
    }
}

swan_guest::servlet!(api);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_numbers() {
        let req = Request::for_test("POST", "/json-api/sum", "", br#"{"numbers":[1,2.5]}"#)
            .with_path_info("/sum")
            .with_header("content-type", "application/json");
        let res = api(req);
        assert_eq!(res.body_bytes(), br#"{"sum":3.5,"count":2}"#);
        let bad = Request::for_test("POST", "/json-api/sum", "", b"{").with_path_info("/sum").with_header("content-type", "application/json");
        assert_eq!(api(bad).status_code(), 400);
        let sum = |body: &[u8], content_type: &str| {
            api(Request::for_test("POST", "/json-api/sum", "", body)
                .with_path_info("/sum")
                .with_header("content-type", content_type))
        };
        let empty = sum(br#"{"numbers":[]}"#, "Application/JSON; charset=utf-8");
        assert_eq!(empty.body_bytes(), br#"{"sum":0.0,"count":0}"#);
        assert_eq!(sum(br#"{"numbers":[1e308,1e308]}"#, "application/json").status_code(), 400);
        assert_eq!(sum(br#"{"numbers":[1]}"#, "application/jsonp").status_code(), 415);

    }
}
