//! Static files: a site's root held in memory with prebuilt headers.
//!
//! - `path`: request path → normalised cache key, refusing escapes;
//! - `cache`: loading a root into memory, precomputing headers and variants;
//! - `compress`: load-time gzip/brotli and `Accept-Encoding` parsing;
//! - `respond`: conditional requests, ranges, folders, 404s.

mod cache;
mod compress;
pub mod path;
mod respond;

pub use cache::{CacheStats, LoadError, Resource, SiteCache, content_type_for};
pub use compress::{Accepted, Encoding};
pub use respond::{INDEX_FILE, not_found, respond};
