//! What a servlet is, and what a call to it brings besides the request.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::ServletLimits;
use crate::request::{BodyPolicy, RequestId};

/// What a servlet is: shared by its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServletInfo {
    /// Name used in logs (the file stem, or the source folder's name).
    pub name: String,
    /// The `.wasm` file.
    pub file: PathBuf,
    /// Limits.
    pub limits: ServletLimits,
    /// Static settings, readable through the ABI and as environment.
    pub settings: Vec<(String, String)>,
    /// Development mode: a trap is shown to the client with its backtrace
    /// (production answers a generic 500).
    pub development: bool,
}

/// What a request brings besides itself.
#[derive(Debug, Clone, Copy)]
pub struct CallContext<'a> {
    /// The normalised request path.
    pub path: &'a str,
    /// The part of the path after the route's prefix.
    pub path_info: &'a str,
    /// The client's address.
    pub remote: SocketAddr,
    /// Whether the request came over TLS (directly, or per a trusted
    /// proxy's `X-Forwarded-Proto`).
    pub https: bool,
    /// The request's id, for logs.
    pub id: RequestId,
    /// The server's rules for request bodies (the smaller of its size
    /// limit and the servlet's applies).
    pub body: BodyPolicy,
}
