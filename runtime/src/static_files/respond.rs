//! Answering a request from a site's cache: method check, folders and
//! index files, conditional requests, ranges and content-coding
//! negotiation. Failures are returned as [`RequestError`]s; the app turns
//! them into responses (and a 404 into the site's own page).

use std::io::ErrorKind;
use std::sync::Arc;
use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::cache::{CachedFile, DiskFile, Representation, Resource, SiteCache, Variant};
use super::compress::Accepted;
use super::headers::{disk_etag, http_date, last_modified};
use crate::body::Body;
use crate::file_stamp::FileStamp;
use crate::request::RequestError;

/// The file served for a folder path ending in `/`.
pub const INDEX_FILE: &str = "index.html";

/// Methods a static path answers.
const ALLOW: &str = "GET, HEAD";

/// Answers a GET or HEAD for `normalized`, the request's path as
/// `request::path::normalize` made it.
pub async fn respond<B>(
    cache: &SiteCache,
    req: &Request<B>,
    normalized: &str,
) -> Result<Response<Body>, RequestError> {
    let head = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => return Err(RequestError::MethodNotAllowed { allow: ALLOW }),
    };
    let resource = if normalized.ends_with('/') {
        let mut index = String::with_capacity(normalized.len() + INDEX_FILE.len());
        index.push_str(normalized);
        index.push_str(INDEX_FILE);
        cache.get(&index)
    } else {
        cache.get(normalized)
    };
    let Some(resource) = resource else {
        if !normalized.ends_with('/') && cache.is_dir(&format!("{normalized}/")) {
            return Ok(redirect_to_folder(req, normalized));
        }
        return Err(RequestError::NotFound);
    };
    match resource {
        Resource::Memory(file) => from_memory(file, req, head),
        // Boxed: opening and reading a file is slow anyway, and the memory
        // path should not carry (and move) its state.
        Resource::Disk(file) => Box::pin(from_disk(file, req, head)).await,
    }
}

fn from_memory<B>(
    file: &CachedFile,
    req: &Request<B>,
    head: bool,
) -> Result<Response<Body>, RequestError> {
    let headers = req.headers();
    let range = headers.get(header::RANGE);
    // Ranges apply to the identity body only (documented in README).
    let variant = if range.is_some() {
        &file.identity
    } else {
        chosen(&file.brotli, &file.gzip, headers).unwrap_or(&file.identity)
    };
    if let Some(res) = not_modified(&variant.rep, file.modified, headers)? {
        return Ok(res);
    }
    if let Some(range) = range {
        match byte_range(range, headers, &file.identity.rep, file.modified) {
            RangeAnswer::Full => {}
            RangeAnswer::Partial(start, end) => {
                let body = if head {
                    Body::empty()
                } else {
                    Body::full(file.identity.body.slice(start as usize..=end as usize))
                };
                return Ok(partial(&file.identity.rep, start, end, body));
            }
            RangeAnswer::Unsatisfiable => {
                return Err(RequestError::RangeNotSatisfiable {
                    len: file.identity.rep.len,
                });
            }
        }
    }
    Ok(whole(variant, head))
}

/// A 200 with `variant`, held in memory (no body for HEAD).
fn whole(variant: &Variant, head: bool) -> Response<Body> {
    let body = if head {
        Body::empty()
    } else {
        Body::full(variant.body.clone())
    };
    with_headers(StatusCode::OK, variant.rep.headers.clone(), body)
}

async fn from_disk<B>(
    file: &DiskFile,
    req: &Request<B>,
    head: bool,
) -> Result<Response<Body>, RequestError> {
    // Open first and answer from what was opened: if the file was replaced
    // since it was loaded (renamed over, rewritten), the answer is the new
    // version whole, with headers that match it; never a 404 for a path
    // that exists, never a length that lies.
    let place = match FILE_BUDGET.try_with(Arc::clone) {
        Ok(budget) => Some(budget.try_acquire_owned().map_err(|_| {
            RequestError::Unavailable("the connection holds as many files open as it may")
        })?),
        Err(_) => None,
    };
    let opened = open_file(file).await.map_err(|e| {
        let answer = open_failure(&e);
        // A file swan may not read is the operator's to hear of, though
        // the client gets the 404 of a file that was never loaded.
        let news = !matches!(answer, RequestError::NotFound)
            || e.kind() == ErrorKind::PermissionDenied;
        if news && once_a_second() {
            tracing::warn!(file = %file.path.display(), error = %e, status = answer.status().as_u16(), "cannot open a streamed file (said at most once a second)");
        } else {
            tracing::debug!(file = %file.path.display(), error = %e, "cannot open a streamed file");
        }
        answer
    })?;
    let meta = opened.metadata().await.map_err(|e| {
        tracing::warn!(file = %file.path.display(), error = %e, "cannot stat a streamed file");
        RequestError::Internal
    })?;
    if !meta.is_file() {
        return Err(RequestError::NotFound);
    }
    let fresh = file.revalidated(&meta);
    let headers = req.headers();
    // A precompressed sibling held in memory, for the file as loaded
    // (ranges apply to the identity body only, as from memory).
    if fresh.is_none()
        && !headers.contains_key(header::RANGE)
        && let Some(variant) = chosen(&file.brotli, &file.gzip, headers)
    {
        if let Some(res) = not_modified(&variant.rep, file.modified, headers)? {
            return Ok(res);
        }
        return Ok(whole(variant, head));
    }
    let (rep, modified) = match &fresh {
        Some((rep, modified)) => (rep, *modified),
        None => (&file.rep, file.modified),
    };
    if let Some(res) = not_modified(rep, modified, headers)? {
        return Ok(res);
    }
    let (start, len, partial_range) = match headers.get(header::RANGE) {
        None => (0, rep.len, None),
        Some(range) => match byte_range(range, headers, rep, modified) {
            RangeAnswer::Full => (0, rep.len, None),
            RangeAnswer::Partial(s, e) => (s, e - s + 1, Some((s, e))),
            RangeAnswer::Unsatisfiable => {
                return Err(RequestError::RangeNotSatisfiable { len: rep.len });
            }
        },
    };
    let body = if head {
        Body::empty()
    } else {
        let stamp = crate::file_stamp::OpenStamp::from_meta(&meta);
        Body::file_holding(opened, start, len, place, Some(stamp))
    };
    Ok(match partial_range {
        Some((s, e)) => partial(rep, s, e, body),
        None => with_headers(StatusCode::OK, rep.headers.clone(), body),
    })
}

tokio::task_local! {
    /// HTTP/2: how many streamed files the connection whose request is
    /// being answered may hold open at once, set by the connection around
    /// the app (a task-local: nothing allocated per request). A stream
    /// past it gets 503 with `Retry-After` before its file is opened: one
    /// connection's 128 streams must not each hold a descriptor (a few
    /// such clients used up the process's 20,000).
    pub static FILE_BUDGET: Arc<tokio::sync::Semaphore>;
}

/// Whether a warning may be logged now: at most one a second, so that
/// running out of descriptors (which a client can cause) is said, not
/// turned into a flood of lines.
fn once_a_second() -> bool {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = crate::clock::now_ms();
    let last = LAST.load(std::sync::atomic::Ordering::Relaxed);
    (last == 0 || now >= last + 1000)
        && LAST
            .compare_exchange(
                last,
                now.max(1),
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
            )
            .is_ok()
}

/// What a streamed file that cannot be opened answers: 404 when it is
/// gone (or replaced by a link, which is not followed) or swan may not
/// read it (as a small file it may not read is never loaded); 503 when
/// the process is out of descriptors or memory (it is there: try again);
/// 500 otherwise (I/O). Never a 404 a cache in front would keep for a
/// file that exists and can be served.
fn open_failure(e: &std::io::Error) -> RequestError {
    use rustix::io::Errno;
    let is = |errno: Errno| e.raw_os_error() == Some(errno.raw_os_error());
    // LOOP: a link where none is followed; XDEV: a path leading out of
    // the root. A file swan may not read is not served, as a small one
    // (skipped at load) is not: 404, not a server error.
    if matches!(
        e.kind(),
        ErrorKind::NotFound | ErrorKind::NotADirectory | ErrorKind::PermissionDenied
    ) || is(Errno::LOOP)
        || is(Errno::XDEV)
    {
        RequestError::NotFound
    } else if is(Errno::MFILE) || is(Errno::NFILE) || is(Errno::NOMEM) {
        RequestError::Unavailable("no file descriptor left")
    } else {
        RequestError::Internal
    }
}

/// Revalidating a streamed file at answer time.
impl DiskFile {
    /// When the opened file (`meta`) is not the one loaded, the headers
    /// and modification time that match it; `None` when it is the same.
    pub(crate) fn revalidated(
        &self,
        meta: &std::fs::Metadata,
    ) -> Option<(Representation, SystemTime)> {
        let stamp = FileStamp::from_meta(meta);
        if Some(stamp) == self.fingerprint.0[0] {
            return None;
        }
        let modified = last_modified(meta);
        let etag = disk_etag(stamp);
        let last_modified = http_date(modified);
        let mut headers = self.rep.headers.clone();
        let mut not_modified = self.rep.not_modified.clone();
        for map in [&mut headers, &mut not_modified] {
            map.insert(header::ETAG, etag.clone());
            map.insert(header::LAST_MODIFIED, last_modified.clone());
        }
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(stamp.len));
        Some((
            Representation {
                etag,
                headers,
                not_modified,
                len: stamp.len,
            },
            modified,
        ))
    }
}

/// Opens a streamed file for reading as it is now (`open::beneath`: no
/// link out of the root, none in the last component, no wait on a FIFO).
async fn open_file(file: &DiskFile) -> std::io::Result<tokio::fs::File> {
    let (root, path) = (file.root.clone(), file.path.clone());
    let opened = tokio::task::spawn_blocking(move || super::open::beneath(&root, &path))
        .await
        .map_err(std::io::Error::other)??;
    Ok(tokio::fs::File::from_std(opened))
}

/// The compressed variant the client accepts, brotli first; `None` for
/// the identity body.
fn chosen<'f>(
    brotli: &'f Option<Variant>,
    gzip: &'f Option<Variant>,
    headers: &HeaderMap,
) -> Option<&'f Variant> {
    if brotli.is_none() && gzip.is_none() {
        return None;
    }
    let lines = headers.get_all(header::ACCEPT_ENCODING);
    let accepted = Accepted::parse(lines.iter().map(HeaderValue::as_bytes));
    // The client's preference; brotli (smaller) when it has none.
    let br_q = if brotli.is_some() { accepted.brotli } else { 0 };
    let gz_q = if gzip.is_some() { accepted.gzip } else { 0 };
    match (brotli, gzip) {
        (Some(br), _) if br_q > 0 && br_q >= gz_q => Some(br),
        (_, Some(gz)) if gz_q > 0 => Some(gz),
        _ => None,
    }
}

/// The client's conditions, in RFC 9110 §13.2.2's order: 412 when
/// `If-Match` (strong comparison) or, without it, `If-Unmodified-Since`
/// does not hold; then a 304 when `If-None-Match` (weak comparison) or,
/// without it, `If-Modified-Since` says the client's copy is current. A
/// date that cannot be parsed, or one in the future, is ignored (§13.1.3,
/// §13.1.4), and so is a date sent on several field lines (a list of
/// dates is not one); an entity-tag condition sent on several lines is
/// one list.
/// `modified` has whole seconds, as Last-Modified does (the cache keeps it
/// so).
fn not_modified(
    rep: &Representation,
    modified: SystemTime,
    headers: &HeaderMap,
) -> Result<Option<Response<Body>>, RequestError> {
    let date = |name| {
        let mut lines = headers.get_all(name).iter();
        match (lines.next(), lines.next()) {
            (Some(v), None) => v
                .to_str()
                .ok()
                .and_then(|s| httpdate::parse_http_date(s).ok()),
            _ => None,
        }
    };
    if headers.contains_key(header::IF_MATCH) {
        let holds = headers.get_all(header::IF_MATCH).iter().any(|v| {
            v.as_bytes()
                .split(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
                .any(|t| t == b"*" || t == rep.etag.as_bytes())
        });
        if !holds {
            return Err(RequestError::PreconditionFailed);
        }
    } else if let Some(since) = date(header::IF_UNMODIFIED_SINCE)
        && modified > since
    {
        return Err(RequestError::PreconditionFailed);
    }
    let fresh = if headers.contains_key(header::IF_NONE_MATCH) {
        headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .any(|v| etag_list_matches_weak(v.as_bytes(), rep.etag.as_bytes()))
    } else if let Some(since) = date(header::IF_MODIFIED_SINCE) {
        modified <= since && since <= SystemTime::now()
    } else {
        false
    };
    Ok(fresh.then(|| {
        with_headers(
            StatusCode::NOT_MODIFIED,
            rep.not_modified.clone(),
            Body::empty(),
        )
    }))
}

/// Weak comparison of `etag` against a list (or `*`) from If-None-Match.
pub(crate) fn etag_list_matches_weak(list: &[u8], etag: &[u8]) -> bool {
    let etag = strip_weak(etag);
    list.split(|b| *b == b',')
        .map(|t| t.trim_ascii())
        .any(|t| t == b"*" || strip_weak(t) == etag)
}

fn strip_weak(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

enum RangeAnswer {
    /// Ignore the Range header: answer 200 with the whole body.
    Full,
    /// Inclusive byte positions.
    Partial(u64, u64),
    /// 416.
    Unsatisfiable,
}

/// Interprets Range (and If-Range) for a body of `rep.len` bytes.
/// Multiple ranges, other units and malformed values (Range on two lines
/// among them: no valid field value joins them) get the full body.
fn byte_range(
    range: &HeaderValue,
    headers: &HeaderMap,
    rep: &Representation,
    modified: SystemTime,
) -> RangeAnswer {
    if headers.get_all(header::RANGE).iter().nth(1).is_some() {
        return RangeAnswer::Full;
    }
    let mut if_ranges = headers.get_all(header::IF_RANGE).iter();
    if let Some(if_range) = if_ranges.next() {
        // One validator, or none that holds (RFC 9110 §13.1.5).
        if if_ranges.next().is_some() {
            return RangeAnswer::Full;
        }
        let v = if_range.as_bytes();
        let current = if v.starts_with(b"\"") {
            // Strong comparison: weak tags never match.
            v == rep.etag.as_bytes()
        } else {
            if_range
                .to_str()
                .ok()
                .and_then(|s| httpdate::parse_http_date(s).ok())
                .is_some_and(|d| d == modified)
        };
        if !current {
            return RangeAnswer::Full;
        }
    }
    // A zero-length body has no byte to give: the range is ignored, as
    // RFC 9110 §14.2 allows and NGINX does, never a 416 a media player
    // (which asks `bytes=0-`) would take for an error.
    if rep.len == 0 {
        return RangeAnswer::Full;
    }
    let Ok(value) = range.to_str() else {
        return RangeAnswer::Full;
    };
    // The unit is case-insensitive (RFC 9110 §14.1).
    let value = value.trim();
    let Some(spec) = value
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| &value[6..])
    else {
        return RangeAnswer::Full;
    };
    // Empty list elements count for nothing (RFC 9110 §5.6.1): `1-2,` is
    // one range. More than one is answered whole.
    let mut specs = spec.split(',').map(str::trim).filter(|r| !r.is_empty());
    let (Some(spec), None) = (specs.next(), specs.next()) else {
        return RangeAnswer::Full;
    };
    let Some((first, last)) = spec.split_once('-') else {
        return RangeAnswer::Full;
    };
    let len = rep.len;
    let (first, last) = (first.trim(), last.trim());
    // Positions are digits only (no sign); one too large for a u64 is
    // past any end.
    let position = |s: &str| -> Option<u64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u64>().unwrap_or(u64::MAX))
    };
    if first.is_empty() {
        // Suffix range: the last N bytes.
        let Some(n) = position(last) else {
            return RangeAnswer::Full;
        };
        if n == 0 || len == 0 {
            return RangeAnswer::Unsatisfiable;
        }
        return RangeAnswer::Partial(len.saturating_sub(n), len - 1);
    }
    let Some(start) = position(first) else {
        return RangeAnswer::Full;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match position(last) {
            Some(e) if e >= start => e,
            _ => return RangeAnswer::Full,
        }
    };
    if start >= len {
        return RangeAnswer::Unsatisfiable;
    }
    RangeAnswer::Partial(start, end.min(len - 1))
}

fn partial(rep: &Representation, start: u64, end: u64, body: Body) -> Response<Body> {
    let mut headers = rep.headers.clone();
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start + 1));
    headers.remove(header::CONTENT_ENCODING);
    let content_range = format!("bytes {start}-{end}/{}", rep.len);
    if let Ok(v) = HeaderValue::from_str(&content_range) {
        headers.insert(header::CONTENT_RANGE, v);
    }
    with_headers(StatusCode::PARTIAL_CONTENT, headers, body)
}

/// 301 from `/dir` to `/dir/`, query kept. The location is built from the
/// normalised path, re-encoded, so it always starts with exactly one `/`:
/// never protocol-relative (`//host`), never carrying raw control bytes.
fn redirect_to_folder<B>(req: &Request<B>, normalized: &str) -> Response<Body> {
    let mut location = crate::request::path::encode(normalized);
    location.push('/');
    if let Some(q) = req.uri().query() {
        location.push('?');
        location.push_str(q);
    }
    let mut res = crate::request::error::page(StatusCode::MOVED_PERMANENTLY);
    if let Ok(v) = HeaderValue::from_str(&location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// The site's own 404 page, if it has one.
pub fn not_found_page(cache: &SiteCache, head: bool) -> Option<Response<Body>> {
    let page = cache.not_found()?;
    let body = if head {
        Body::empty()
    } else {
        Body::full(page.body.clone())
    };
    Some(with_headers(
        StatusCode::NOT_FOUND,
        page.headers.clone(),
        body,
    ))
}

fn with_headers(status: StatusCode, headers: HeaderMap, body: Body) -> Response<Body> {
    let mut res = Response::new(body);
    *res.status_mut() = status;
    *res.headers_mut() = headers;
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_cannot_be_opened_is_a_404_when_it_is_gone_or_not_ours_to_read() {
        use rustix::io::Errno;
        let os = |e: Errno| std::io::Error::from_raw_os_error(e.raw_os_error());
        for (e, want) in [
            (os(Errno::NOENT), StatusCode::NOT_FOUND),
            (os(Errno::NOTDIR), StatusCode::NOT_FOUND),
            (os(Errno::LOOP), StatusCode::NOT_FOUND),
            (os(Errno::MFILE), StatusCode::SERVICE_UNAVAILABLE),
            (os(Errno::NFILE), StatusCode::SERVICE_UNAVAILABLE),
            (os(Errno::NOMEM), StatusCode::SERVICE_UNAVAILABLE),
            (os(Errno::ACCESS), StatusCode::NOT_FOUND),
            (os(Errno::PERM), StatusCode::NOT_FOUND),
            (os(Errno::IO), StatusCode::INTERNAL_SERVER_ERROR),
        ] {
            assert_eq!(open_failure(&e).status(), want, "{e}");
        }
    }

    #[test]
    fn weak_comparison_for_if_none_match() {
        assert!(etag_list_matches_weak(b"\"a\"", b"\"a\""));
        assert!(etag_list_matches_weak(b"W/\"a\"", b"\"a\""));
        assert!(etag_list_matches_weak(b"\"x\", W/\"a\"", b"\"a\""));
        assert!(etag_list_matches_weak(b"*", b"\"a\""));
        assert!(!etag_list_matches_weak(b"\"b\"", b"\"a\""));
    }
}
