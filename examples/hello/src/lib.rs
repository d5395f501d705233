//! The smallest useful servlet: a greeting that shows what it was asked.
//! `GREETING` comes from the servlet's settings, through WASI's environment.

use swan_guest::{Request, Response};

/// Answers every request with a greeting.
pub fn hello(req: Request) -> Response {
    let greeting = std::env::var("GREETING").unwrap_or_else(|_| "Hello".to_owned());
    let name = req.query("name").unwrap_or_else(|| "world".to_owned());
    Response::text(format!(
        "{greeting}, {name}! (from a Rust servlet)\npath: {}\npath info: {}\nrequest id: {}\n",
        req.path(),
        req.path_info(),
        req.request_id()
    ))
}

swan_guest::servlet!(hello);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greets_by_name() {
        let res = hello(Request::for_test("GET", "/hello", "name=swan", b""));
        assert_eq!(res.status_code(), 200);
        assert!(String::from_utf8_lossy(res.body_bytes()).starts_with("Hello, swan!"));
    }
}
