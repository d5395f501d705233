//! {{name}}: a swan servlet in Rust, on swan's Rust SDK (native ABI v1).
//!
//! Try it:
//!   curl 'http://127.0.0.1:8080/{{name}}?name=Ada'
//!   -> Hello, Ada! GET /{{name}}

use swan_guest::{Request, Response};

/// Answers every request with a greeting, the method and the path.
fn handle(req: Request) -> Response {
    let name = req.query("name").unwrap_or_else(|| "world".to_owned());
    Response::text(format!("Hello, {name}! {} {}", req.method(), req.path()))
}

swan_guest::servlet!(handle);
