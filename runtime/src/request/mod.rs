//! What every layer knows of a request: its id, its normalised path, and
//! the one error type any part of its handling can fail with.
//!
//! - `id`: the request id, logged with every line and sent as
//!   `x-request-id`;
//! - `path`: the one place a URL path is normalised (once per request);
//! - `peer`: who the client is (PROXY protocol, trusted `X-Forwarded-For`);
//! - `body`: reading a request body under the size and rate rules;
//! - `incoming`: the body handed on, and an HTTP/2 body left unread;
//! - `checks`: the Host and body-framing checks every head passes;
//! - `mark`: whether a request went to a servlet (the connection then
//!   watches for a client that leaves);
//! - `error`: [`RequestError`] and the one mapping from errors to
//!   responses.

pub mod body;
pub(crate) mod checks;
pub mod error;
pub mod id;
pub mod incoming;
pub mod mark;
pub mod path;
pub mod peer;

pub use body::BodyPolicy;
pub use error::RequestError;
pub use id::RequestId;
pub use incoming::RequestBody;
pub use mark::ServletMark;
pub use peer::Peer;
