//! What a site's cache holds for each file: its representations (a
//! validator and prebuilt headers), in memory or streamed from disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};

use super::headers::Fingerprint;

/// One representation of a file: its validator and prebuilt headers.
#[derive(Debug)]
pub struct Representation {
    /// The strong ETag, quoted.
    pub etag: HeaderValue,
    /// Complete headers of a 200 answer.
    pub headers: HeaderMap,
    /// Headers of a 304 answer.
    pub not_modified: HeaderMap,
    /// Body length in bytes.
    pub len: u64,
}

/// A representation with its body in memory.
#[derive(Debug)]
pub struct Variant {
    /// Validator and headers.
    pub rep: Representation,
    /// The body.
    pub body: Bytes,
}

/// A file served from memory.
#[derive(Debug)]
pub struct CachedFile {
    /// The file as it is.
    pub identity: Variant,
    /// Brotli variant, if worth serving.
    pub brotli: Option<Variant>,
    /// Gzip variant, if worth serving.
    pub gzip: Option<Variant>,
    /// Last modification, whole seconds.
    pub modified: SystemTime,
    /// What the file and its siblings looked like when read.
    pub(super) fingerprint: Fingerprint,
}

/// Bytes `variants` hold in memory.
pub(super) fn bytes_of(variants: [&Option<Variant>; 2]) -> u64 {
    variants
        .into_iter()
        .flatten()
        .map(|v| v.body.len() as u64)
        .sum()
}

impl CachedFile {
    /// Bytes it holds in memory, variants included.
    pub(super) fn held(&self) -> u64 {
        self.identity.body.len() as u64 + bytes_of([&self.brotli, &self.gzip])
    }
}

/// A file streamed from disk.
#[derive(Debug)]
pub struct DiskFile {
    /// Validator and headers.
    pub rep: Representation,
    /// Where it is (resolved: no link in it).
    pub path: PathBuf,
    /// The site's root (resolved), which `path` must stay beneath when
    /// it is opened.
    pub root: Arc<Path>,
    /// Last modification, whole seconds.
    pub modified: SystemTime,
    /// Its precompressed `.br` sibling, held in memory when it fits.
    pub brotli: Option<Variant>,
    /// Its precompressed `.gz` sibling, likewise.
    pub gzip: Option<Variant>,
    pub(super) fingerprint: Fingerprint,
}

impl DiskFile {
    /// Bytes its precompressed siblings hold in memory.
    pub(super) fn siblings_held(&self) -> u64 {
        bytes_of([&self.brotli, &self.gzip])
    }
}

/// A file of the site.
#[derive(Debug, Clone)]
pub enum Resource {
    /// Held in memory.
    Memory(Arc<CachedFile>),
    /// Streamed from disk.
    Disk(Arc<DiskFile>),
}

impl Resource {
    /// Last modification time, whole seconds.
    pub fn modified(&self) -> SystemTime {
        match self {
            Resource::Memory(f) => f.modified,
            Resource::Disk(f) => f.modified,
        }
    }
}
