//! The in-memory file cache of one site.
//!
//! At load every file under the root is read once. Files up to the size
//! threshold (and within the site's memory budget) are kept as `Bytes` with
//! their complete response headers already built, for each encoding that is
//! worth serving; larger ones keep only their headers and are streamed from
//! disk. A cache hit is then a hash lookup and a clone of prebuilt parts.
//!
//! One long file on purpose: the cache's types, the one loader that builds
//! them, and the reuse rules on reload belong together.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};

use super::compress::{self, Encoding};
pub(super) use super::entry::{CachedFile, DiskFile, Representation, Resource, Variant};
use super::headers::{
    Fingerprint, content_hash, content_type_for, disk_etag, disk_tag, http_date, last_modified,
    quoted_etag,
};
use super::progress::Progress;
use crate::config::{CacheConfig, SiteConfig};
use crate::file_stamp::FileStamp;
use crate::regular_file::Links;

/// Why a site's files could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The root folder could not be read.
    #[error("cannot read site root {path}")]
    Root {
        /// The root.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// What a cache holds, for the start-up banner and `swan check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Files kept in memory.
    pub cached_files: usize,
    /// Bytes of bodies kept in memory, compressed variants included.
    pub cached_bytes: u64,
    /// Compressed variants kept (precompressed siblings or made at load).
    pub compressed_variants: usize,
    /// Files too large for memory, streamed from disk.
    pub streamed_files: usize,
}

/// The loaded files of one site.
#[derive(Debug, Default)]
pub struct SiteCache {
    files: HashMap<Box<str>, Resource>,
    /// Folder paths, with a trailing slash ("/", "/docs/").
    dirs: HashSet<Box<str>>,
    not_found: Option<Arc<NotFoundPage>>,
    stats: CacheStats,
    /// The settings the entries' headers were built with.
    built_with: (Option<String>, CacheConfig),
    /// What the load skipped, and why: the next load warns only of what
    /// is new (a link out of the root is not news at every reload).
    skipped: HashSet<(PathBuf, &'static str)>,
}

/// The site's own `404.html`, with headers for a 404 answer.
#[derive(Debug)]
pub struct NotFoundPage {
    /// Headers (no validators: a 404 is not cacheable by ETag).
    pub headers: HeaderMap,
    /// The page.
    pub body: Bytes,
}

impl SiteCache {
    /// Reads every file under the site's root.
    pub fn load(site: &SiteConfig) -> Result<SiteCache, CacheError> {
        SiteCache::load_reusing(site, None)
    }

    /// Reads the site's root again, reusing the entries of `self` whose
    /// files have not changed (no re-read, no re-compression): a walk and a
    /// few `stat` calls per file.
    pub fn reload(&self, site: &SiteConfig) -> Result<SiteCache, CacheError> {
        // Entries carry headers built from these settings: reuse them only
        // while the settings are the same.
        let same_settings = self.built_with == (site.cache_control.clone(), site.cache);
        SiteCache::load_reusing(site, same_settings.then_some(self))
    }

    fn load_reusing(
        site: &SiteConfig,
        previous: Option<&SiteCache>,
    ) -> Result<SiteCache, CacheError> {
        let root = site
            .root
            .canonicalize()
            .map_err(|source| CacheError::Root {
                path: site.root.clone(),
                source,
            })?;
        let cache_control = site
            .cache_control
            .as_deref()
            .and_then(|v| HeaderValue::from_str(v).ok());
        let mut loader = Loader {
            root: Arc::from(root.as_path()),
            servlets: site
                .servlets
                .as_ref()
                .and_then(|d| d.canonicalize().ok())
                .filter(|d| d.starts_with(&root)),
            route_files: site
                .routes
                .iter()
                .filter_map(|r| r.servlet.canonicalize().ok())
                .filter(|f| f.starts_with(&root))
                .collect(),
            site,
            cache_control,
            cache: SiteCache::default(),
            ancestors: Vec::new(),
            loaded: HashMap::new(),
            walks: HashMap::new(),
            previous,
            progress: Progress::new(),
        };
        loader.cache.dirs.insert("/".into());
        loader.walk(&root, "").map_err(|source| CacheError::Root {
            path: site.root.clone(),
            source,
        })?;
        let mut cache = loader.cache;
        cache.built_with = (site.cache_control.clone(), site.cache);
        if let Some(Resource::Disk(page)) = cache.files.get("/404.html") {
            // Missing paths are answered from memory only. Said when the
            // page is new or changed, not at every reload of the site.
            let said_before = matches!(
                previous.and_then(|p| p.files.get("/404.html")),
                Some(Resource::Disk(before)) if Arc::ptr_eq(before, page)
            );
            if !said_before {
                let why = if page.rep.len > site.cache.max_file_size {
                    "larger than max_file_size (raise it, or make the page smaller)"
                } else {
                    "not held in memory: the cache's budget is used up (raise `budget` in [site.cache])"
                };
                tracing::warn!(
                    site = %site.name,
                    size = page.rep.len,
                    max_file_size = site.cache.max_file_size,
                    "the site's 404.html is {why}: missing paths get the built-in page"
                );
            }
        }
        if let Some(Resource::Memory(page)) = cache.files.get("/404.html") {
            let mut headers = page.identity.rep.headers.clone();
            for name in [
                header::ETAG,
                header::LAST_MODIFIED,
                header::ACCEPT_RANGES,
                header::CACHE_CONTROL,
            ] {
                headers.remove(name);
            }
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            cache.not_found = Some(Arc::new(NotFoundPage {
                headers,
                body: page.identity.body.clone(),
            }));
        }
        Ok(cache)
    }

    /// The file at a normalised path.
    #[inline]
    pub fn get(&self, path: &str) -> Option<&Resource> {
        self.files.get(path)
    }

    /// Whether a normalised path (with trailing slash) is a folder.
    pub fn is_dir(&self, path_with_slash: &str) -> bool {
        self.dirs.contains(path_with_slash)
    }

    /// The site's `404.html`, if it has one.
    pub fn not_found(&self) -> Option<&NotFoundPage> {
        self.not_found.as_deref()
    }

    /// What the cache holds.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Every path served, sorted (for `swan check` and tests).
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = self.files.keys().map(|k| &**k).collect();
        paths.sort_unstable();
        paths
    }
}

/// The most names (links) one folder is served under.
const MAX_NAMES: u32 = 8;

struct Loader<'a> {
    /// The root, resolved; shared with every streamed file, which is
    /// opened beneath it.
    root: Arc<Path>,
    /// The site's servlets folder, when it lies inside the root: never
    /// served (its modules, sources and build output are not public).
    servlets: Option<PathBuf>,
    /// The modules of the site's `[[site.route]]`s that lie inside the
    /// root, resolved: never served either.
    route_files: Vec<PathBuf>,
    site: &'a SiteConfig,
    cache_control: Option<HeaderValue>,
    cache: SiteCache,
    /// The real folders being walked, the root first: a link to one of
    /// them would loop. A folder reached by two names is walked under both.
    ancestors: Vec<PathBuf>,
    /// Files read so far, by real path: a file reached by two names is
    /// read and held once.
    loaded: HashMap<PathBuf, Resource>,
    /// How many names each real folder was reached by.
    walks: HashMap<PathBuf, u32>,
    previous: Option<&'a SiteCache>,
    progress: Progress,
}

impl Loader<'_> {
    fn walk(&mut self, dir: &Path, prefix: &str) -> std::io::Result<()> {
        // A link to a folder that contains it would loop; one folder
        // reached by many names is walked under at most `MAX_NAMES` (links
        // between folders must not multiply the walk without end).
        let names = self.walks.entry(dir.to_path_buf()).or_default();
        *names += 1;
        if self.ancestors.iter().any(|a| a == dir) || *names > MAX_NAMES {
            if *names == MAX_NAMES + 1 {
                tracing::warn!(site = %self.site.name, dir = ?dir, "folder reached by more than {MAX_NAMES} names (links): served under the first {MAX_NAMES}");
            }
            return Ok(());
        }
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        self.ancestors.push(dir.to_path_buf());
        for entry in entries {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                if self.newly_skipped(&entry.path(), "name") {
                    tracing::warn!(site = %self.site.name, file = ?entry.path(), "skipped: file name is not UTF-8");
                }
                continue;
            };
            if crate::request::path::is_hidden(name, prefix.is_empty()) {
                continue;
            }
            let path = entry.path();
            // Follow symlinks only when they stay inside the root.
            let Ok(real) = path.canonicalize() else {
                if self.newly_skipped(&path, "broken") {
                    tracing::warn!(site = %self.site.name, file = ?path, "skipped: broken link");
                }
                continue;
            };
            if !real.starts_with(&self.root) {
                if self.newly_skipped(&path, "outside") {
                    tracing::warn!(site = %self.site.name, file = ?path, target = ?real, "skipped: link points outside the site root");
                }
                continue;
            }
            let Ok(meta) = std::fs::metadata(&real) else {
                continue;
            };
            let key = format!("{prefix}/{name}");
            if self.private(&real) {
                tracing::debug!(site = %self.site.name, path = ?path, "not served: a servlet's module, or a dotfile (or a link to one)");
                continue;
            }
            if meta.is_dir() {
                self.cache.dirs.insert(format!("{key}/").into());
                if let Err(e) = self.walk(&real, &key)
                    && self.newly_skipped(&path, "folder")
                {
                    tracing::warn!(site = %self.site.name, dir = ?path, error = %e, "skipped folder");
                }
            } else if meta.is_file() {
                if let Some(same) = self.loaded.get(&real).cloned() {
                    self.add_alias(key, same);
                } else if let Err(e) = self.add_file(&real, key.clone(), &meta) {
                    if self.newly_skipped(&path, "file") {
                        tracing::warn!(site = %self.site.name, file = ?path, error = %e, "skipped file");
                    }
                } else if let Some(added) = self.cache.files.get(key.as_str()) {
                    self.loaded.insert(real, added.clone());
                }
                self.progress
                    .file_done(&self.site.name, self.cache.stats.cached_bytes);
            }
        }
        self.ancestors.pop();
        Ok(())
    }

    /// Records `path` as skipped for `why`; whether the load before did
    /// not skip it so (and so a warning is news).
    fn newly_skipped(&mut self, path: &Path, why: &'static str) -> bool {
        let key = (path.to_path_buf(), why);
        let new = !self.previous.is_some_and(|p| p.skipped.contains(&key));
        self.cache.skipped.insert(key);
        new
    }

    /// Whether `real` (a resolved path inside the root) is never served:
    /// in the servlets folder or a route's module, or hidden (a dotfile or
    /// in a dot-folder: `hidden_below`); a link to one is not a way to
    /// serve it.
    fn private(&self, real: &Path) -> bool {
        real.strip_prefix(&self.root)
            .is_ok_and(crate::request::path::hidden_below)
            || self
                .servlets
                .as_deref()
                .is_some_and(|s| real.starts_with(s))
            || self.route_files.iter().any(|f| real == f)
    }

    /// A file already held under another name (a link): counted, not
    /// held or charged to the budget twice.
    fn add_alias(&mut self, key: String, file: Resource) {
        match &file {
            Resource::Memory(_) => self.cache.stats.cached_files += 1,
            Resource::Disk(_) => self.cache.stats.streamed_files += 1,
        }
        self.cache.files.insert(key.into(), file);
    }

    fn add_file(
        &mut self,
        path: &Path,
        key: String,
        meta: &std::fs::Metadata,
    ) -> std::io::Result<()> {
        let modified = last_modified(meta);
        let last_modified = http_date(modified);
        let content_type = content_type_for(path);
        let len = meta.len();
        let fingerprint = Fingerprint::of(path, meta);
        let remaining = self
            .site
            .cache
            .budget
            .saturating_sub(self.cache.stats.cached_bytes);
        // An unchanged file is reused as it was loaded if that still fits
        // the budget as this load has spent it: held in memory if it fits
        // what is left, streamed if it still has to be.
        let fits = len <= self.site.cache.max_file_size && len <= remaining;
        match self.previous.and_then(|p| p.files.get(key.as_str())) {
            Some(Resource::Memory(f)) if f.fingerprint == fingerprint && f.held() <= remaining => {
                self.add_cached(key, f.clone());
                return Ok(());
            }
            Some(Resource::Disk(f))
                if f.fingerprint == fingerprint && !fits && f.siblings_held() <= remaining =>
            {
                self.add_streamed(key, f.clone());
                return Ok(());
            }
            _ => {}
        }
        if len > self.site.cache.max_file_size || len > remaining {
            if len <= self.site.cache.max_file_size {
                tracing::warn!(site = %self.site.name, file = ?path, "cache budget used up: streaming from disk");
            }
            let stamp = FileStamp::from_meta(meta);
            // Precompressed siblings only: compressing a large file at
            // load would hold it whole in memory.
            let tag = disk_tag(stamp);
            // Within what is left of the budget, as any file held in
            // memory (this file may be streamed because it is used up).
            let no = Compress::No { room: remaining };
            let [brotli, gzip] = self.variants(path, &tag, &content_type, &last_modified, no);
            let vary = brotli.is_some() || gzip.is_some();
            let rep = self.representation(
                &content_type,
                len,
                disk_etag(stamp),
                &last_modified,
                None,
                vary,
            );
            let file = DiskFile {
                rep,
                path: path.to_path_buf(),
                root: self.root.clone(),
                modified,
                brotli,
                gzip,
                fingerprint,
            };
            self.add_streamed(key, Arc::new(file));
            return Ok(());
        }
        let data = Bytes::from(crate::regular_file::read(path, Links::NoFollow, u64::MAX)?);
        let hash = content_hash(&data);
        let tag = format!("{hash:016x}");
        // The variants share what the budget has left after the file.
        let from = Compress::From {
            data: &data,
            room: remaining.saturating_sub(len),
        };
        let [brotli, gzip] = self.variants(path, &tag, &content_type, &last_modified, from);
        let vary = brotli.is_some() || gzip.is_some();
        let etag = quoted_etag(&tag);
        let identity = Variant {
            rep: self.representation(
                &content_type,
                data.len() as u64,
                etag,
                &last_modified,
                None,
                vary,
            ),
            body: data,
        };
        self.add_cached(
            key,
            Arc::new(CachedFile {
                identity,
                brotli,
                gzip,
                modified,
                fingerprint,
            }),
        );
        Ok(())
    }

    /// The compressed variants of the file at `path`, whose validator is
    /// `tag`: its precompressed siblings, else (see [`Compress`]) made now.
    fn variants(
        &self,
        path: &Path,
        tag: &str,
        content_type: &HeaderValue,
        last_modified: &HeaderValue,
        compress: Compress<'_>,
    ) -> [Option<Variant>; 2] {
        let ct = content_type.to_str().unwrap_or("");
        let compressible = self.site.cache.compress && compress::is_compressible(ct);
        let (Compress::From { room, .. } | Compress::No { room }) = compress;
        let mut room = room;
        [Encoding::Brotli, Encoding::Gzip].map(|encoding| {
            let sibling = PathBuf::from(format!("{}.{}", path.display(), encoding.suffix()));
            // A sibling's tag names its own bytes too (a new `.gz`, a new tag).
            let (own, body) = match (self.read_sibling(&sibling, room), &compress) {
                (Some(bytes), _) => (format!("-{:016x}", content_hash(&bytes)), bytes),
                (None, Compress::From { data, .. }) if compressible => {
                    (String::new(), compress::compress(data, encoding)?)
                }
                (None, _) => return None,
            };
            if body.len() as u64 > room {
                return None;
            }
            room = room.saturating_sub(body.len() as u64);
            let etag = quoted_etag(&format!("{tag}{own}-{}", encoding.suffix()));
            let len = body.len() as u64;
            let rep =
                self.representation(content_type, len, etag, last_modified, Some(encoding), true);
            Some(Variant {
                rep,
                body: Bytes::from(body),
            })
        })
    }

    /// Adds a file held in memory, counting it in the statistics.
    fn add_cached(&mut self, key: String, file: Arc<CachedFile>) {
        let stats = &mut self.cache.stats;
        stats.cached_files += 1;
        stats.cached_bytes += file.identity.body.len() as u64;
        count_variants(stats, [&file.brotli, &file.gzip]);
        self.cache.files.insert(key.into(), Resource::Memory(file));
    }

    /// Adds a file streamed from disk, counting it (and its siblings held
    /// in memory) in the statistics.
    fn add_streamed(&mut self, key: String, file: Arc<DiskFile>) {
        let stats = &mut self.cache.stats;
        stats.streamed_files += 1;
        count_variants(stats, [&file.brotli, &file.gzip]);
        self.cache.files.insert(key.into(), Resource::Disk(file));
    }

    /// A precompressed sibling (`file.br`, `file.gz`), under the same rules
    /// as every other file: it must resolve inside the root (links out are
    /// ignored, with a warning), be a regular file, and fit the size limit.
    fn read_sibling(&self, sibling: &Path, room: u64) -> Option<Vec<u8>> {
        let real = sibling.canonicalize().ok()?;
        if self.private(&real) {
            return None;
        }
        if !real.starts_with(&self.root) {
            tracing::warn!(site = %self.site.name, file = ?sibling, target = ?real, "precompressed sibling ignored: it points outside the site root");
            return None;
        }
        let meta = std::fs::metadata(&real).ok()?;
        if !meta.is_file() || meta.len() > self.site.cache.max_file_size || meta.len() > room {
            return None;
        }
        crate::regular_file::read(&real, Links::NoFollow, u64::MAX).ok()
    }

    fn representation(
        &self,
        content_type: &HeaderValue,
        len: u64,
        etag: HeaderValue,
        last_modified: &HeaderValue,
        encoding: Option<Encoding>,
        vary: bool,
    ) -> Representation {
        let mut not_modified = HeaderMap::with_capacity(6);
        not_modified.insert(header::ETAG, etag.clone());
        not_modified.insert(header::LAST_MODIFIED, last_modified.clone());
        if let Some(cc) = &self.cache_control {
            not_modified.insert(header::CACHE_CONTROL, cc.clone());
        }
        if vary {
            not_modified.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        }
        let mut headers = not_modified.clone();
        headers.reserve(5);
        headers.insert(header::CONTENT_TYPE, content_type.clone());
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Some(encoding) = encoding {
            headers.insert(header::CONTENT_ENCODING, encoding.header_value());
        }
        Representation {
            etag,
            headers,
            not_modified,
            len,
        }
    }
}

/// Counts compressed variants held in memory.
fn count_variants(stats: &mut CacheStats, variants: [&Option<Variant>; 2]) {
    stats.cached_bytes += super::entry::bytes_of(variants);
    stats.compressed_variants += variants.into_iter().flatten().count();
}

/// Where a file's variants come from besides its siblings: its body in
/// memory (compressible types, when the site compresses), or nowhere (a
/// streamed file: siblings within `room` bytes of the budget only).
enum Compress<'a> {
    From { data: &'a [u8], room: u64 },
    No { room: u64 },
}
