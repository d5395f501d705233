//! The access log: one line per request, written by a thread of its own.
//!
//! When a response has been sent, its request formats its line into a
//! buffer of its worker thread's own (one of 16 shards, each behind a lock
//! no other core takes but the writer's, every 20 ms): no queue, no
//! allocation, nothing read again from another core's cache. The writer
//! thread wakes every 20 ms, swaps each shard's buffer for an empty one and
//! writes them, merged back into the order the lines were logged, with one
//! `write`. Requests never wait for the disk: past
//! `buffer` lines waiting, a line is dropped and counted
//! (`swan_access_log_dropped_total`). A file target is reopened on request
//! (SIGUSR1), so `logrotate` can move it away and have swan write a new one;
//! [`AccessLog::close`] writes what is left when the server stops.
//!
//! Order: lines are written in the order they were logged (each is
//! numbered as it is logged).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, SystemTime};

use crossbeam_utils::CachePadded;
use http::{Method, Version};
use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

use super::counters::{Counter, SHARDS, shard_index};
use crate::config::{AccessLogFormat, AccessLogTarget, LogConfig};
use crate::request::RequestId;

/// `10/Oct/2000:13:55:36 +0000`, NGINX's `$time_local` in UTC.
const COMBINED_TIME: &[FormatItem<'static>] =
    format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");

/// `2000-10-10T13:55:36`, to which JSON lines add milliseconds and `Z`.
const JSON_SECOND: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");

/// How often the writer takes the waiting lines and writes them out (so a
/// line reaches the file at most this late, unless a shard half fills
/// first and wakes it).
const BATCH_EVERY: Duration = Duration::from_millis(20);

/// A shard's buffer keeps at most this much room after a burst.
const KEEP_CAPACITY: usize = 256 << 10;

/// What one request leaves in the log.
#[derive(Debug)]
pub struct Entry {
    /// When the request started.
    pub time: SystemTime,
    /// The client (after trusted proxies).
    pub client: SocketAddr,
    /// Method.
    pub method: Method,
    /// Protocol version.
    pub version: Version,
    /// Response status.
    pub status: u16,
    /// Response body bytes sent.
    pub bytes: u64,
    /// Time from the request head to the last byte sent.
    pub duration: Duration,
    /// The site's name.
    pub site: Arc<str>,
    /// The servlet route, if a servlet answered.
    pub route: Option<Arc<str>>,
    /// The request id.
    pub id: RequestId,
    /// Target, `Referer` and `User-Agent`.
    pub text: RequestText,
}

/// The request target (path and query, as received), `Referer` and
/// `User-Agent`, copied into one allocation. Keeping the header values
/// themselves would keep the connection's whole read buffer alive until the
/// response is sent, and make the connection allocate a new one.
#[derive(Debug, Default)]
pub struct RequestText {
    bytes: Vec<u8>,
    target_end: usize,
    referer_end: Option<usize>,
    user_agent: bool,
}

impl RequestText {
    /// Copies the three.
    pub fn new(target: &str, referer: Option<&[u8]>, user_agent: Option<&[u8]>) -> RequestText {
        let len = target.len() + referer.map_or(0, <[u8]>::len) + user_agent.map_or(0, <[u8]>::len);
        let mut bytes = Vec::with_capacity(len);
        bytes.extend_from_slice(target.as_bytes());
        let target_end = bytes.len();
        let referer_end = referer.map(|r| {
            bytes.extend_from_slice(r);
            bytes.len()
        });
        if let Some(ua) = user_agent {
            bytes.extend_from_slice(ua);
        }
        RequestText {
            bytes,
            target_end,
            referer_end,
            user_agent: user_agent.is_some(),
        }
    }

    fn target(&self) -> &[u8] {
        &self.bytes[..self.target_end]
    }

    fn referer(&self) -> Option<&[u8]> {
        self.referer_end
            .map(|end| &self.bytes[self.target_end..end])
    }

    fn user_agent(&self) -> Option<&[u8]> {
        let start = self.referer_end.unwrap_or(self.target_end);
        self.user_agent.then(|| &self.bytes[start..])
    }
}

/// The requests' side: cheap to clone, never blocks on the disk.
#[derive(Clone)]
pub struct AccessLog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("format", &self.shared.format)
            .field("shards", &self.shared.shards.len())
            .field("per_shard", &self.shared.per_shard)
            .finish_non_exhaustive()
    }
}

/// The access log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the access log {path}")]
pub struct OpenError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

impl AccessLog {
    /// Starts the writer for `config`; `None` when the log is off.
    pub fn start(
        config: &LogConfig,
        dropped: Arc<Counter>,
    ) -> Result<Option<AccessLog>, OpenError> {
        let out = match &config.access {
            AccessLogTarget::Off => return Ok(None),
            AccessLogTarget::Stdout => Output::Stdout,
            AccessLogTarget::File(path) => Output::File {
                file: open(path)?,
                path: path.clone(),
            },
        };
        let shared = Arc::new(Shared::new(config.format, config.buffer, dropped));
        let writer = Writer {
            out,
            spares: (0..shared.shards.len()).map(|_| Lines::default()).collect(),
            merged: Vec::new(),
            order: Vec::new(),
            shared: shared.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("swan-access-log".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| OpenError {
                path: PathBuf::from("(writer thread)"),
                source,
            })?;
        let _ = shared.writer.set(handle.thread().clone());
        *lock(&shared.handle) = Some(handle);
        Ok(Some(AccessLog { shared }))
    }

    /// Formats `entry` into this thread's buffer; drops (and counts) it
    /// when `buffer` lines are already waiting.
    #[inline]
    pub fn log(&self, entry: &Entry) {
        if self.shared.log(entry) {
            // The first shard to half fill wakes the writer early.
            if let Some(writer) = self.shared.writer.get() {
                writer.unpark();
            }
        }
    }

    /// Reopens a file target before the next batch (log rotation).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
        // No wake-up needed: the flag is read before each batch, and a
        // quiet log has nothing to write to the old file.
    }

    /// Writes every waiting line and stops the writer; lines logged after
    /// this are dropped and counted. Called once the server has stopped
    /// serving, so nothing answered goes unlogged.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::Release);
        let handle = lock(&self.shared.handle).take();
        if let Some(handle) = handle {
            handle.thread().unpark();
            if handle.join().is_err() {
                tracing::error!("the access log writer panicked");
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these cannot leave it half changed in a
    // way that matters: at worst a line is cut short.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn open(path: &PathBuf) -> Result<File, OpenError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| OpenError {
            path: path.clone(),
            source,
        })
}

/// What the requests and the writer share.
struct Shared {
    format: AccessLogFormat,
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Lines one shard holds before dropping: all shards together hold at
    /// most `buffer`.
    per_shard: usize,
    dropped: Arc<Counter>,
    reopen: AtomicBool,
    closing: AtomicBool,
    /// Numbers the lines in the order they were logged, across shards.
    sequence: CachePadded<AtomicU64>,
    writer: OnceLock<Thread>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

/// One worker's waiting lines.
#[derive(Default)]
struct Shard {
    lines: Lines,
    clock: TimeText,
}

/// Lines, and where each ends with its number: the writer puts the lines
/// of all shards back in the order they were logged.
#[derive(Default)]
struct Lines {
    text: Vec<u8>,
    ends: Vec<(u64, usize)>,
}

impl Shared {
    fn new(format: AccessLogFormat, buffer: usize, dropped: Arc<Counter>) -> Shared {
        let shards = SHARDS.min(buffer).max(1);
        Shared {
            format,
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            per_shard: (buffer / shards).max(1),
            dropped,
            reopen: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            sequence: CachePadded::new(AtomicU64::new(0)),
            writer: OnceLock::new(),
            handle: Mutex::new(None),
        }
    }

    /// Adds `e`'s line to this thread's shard; true when that shard has
    /// just reached half its room (time to wake the writer).
    fn log(&self, e: &Entry) -> bool {
        let shard = &self.shards[shard_index() % self.shards.len()];
        let mut shard = lock(shard);
        if shard.lines.ends.len() >= self.per_shard || self.closing.load(Ordering::Relaxed) {
            drop(shard);
            self.dropped.add(1);
            return false;
        }
        let Shard { lines, clock } = &mut *shard;
        let time = clock.of(e.time, self.format);
        match self.format {
            AccessLogFormat::Combined => combined(&mut lines.text, time, e),
            AccessLogFormat::Json => json(&mut lines.text, time, e),
        }
        lines.text.push(b'\n');
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        lines.ends.push((n, lines.text.len()));
        lines.ends.len() == self.per_shard.div_ceil(2)
    }

    /// Swaps shard `i`'s lines for `spare` (empty); false if it had none.
    fn take(&self, i: usize, spare: &mut Lines) -> bool {
        let mut shard = lock(&self.shards[i]);
        if shard.lines.ends.is_empty() {
            return false;
        }
        std::mem::swap(&mut shard.lines, spare);
        true
    }
}

enum Output {
    Stdout,
    File { file: File, path: PathBuf },
}

struct Writer {
    out: Output,
    shared: Arc<Shared>,
    /// One empty buffer per shard, swapped for the shard's lines.
    spares: Vec<Lines>,
    /// The lines of several shards, in the order they were logged.
    merged: Vec<u8>,
    /// (number, shard, start, end) of each line taken.
    order: Vec<(u64, usize, usize, usize)>,
}

impl Writer {
    fn run(mut self) {
        // Sleeps BATCH_EVERY (or until a shard half fills, or close), then
        // writes what each shard holds. Never waiting on a lock or channel
        // the requests signal means a request has no sleeping thread to
        // wake: that cost a futex wake and a context switch per request,
        // 62% of static throughput at 100 connections on 2 cores
        // (BENCHMARKS.md).
        loop {
            std::thread::park_timeout(BATCH_EVERY);
            // Read before the batch: a line logged before `close` set it
            // is in this batch.
            let closing = self.shared.closing.load(Ordering::Acquire);
            if self.shared.reopen.swap(false, Ordering::Relaxed) {
                self.reopen_file();
            }
            self.write_batch();
            // Closed, or every handle gone (an app dropped without close).
            if closing || Arc::strong_count(&self.shared) == 1 {
                self.write_batch();
                return;
            }
        }
    }

    /// Takes every shard's lines and writes them, in the order they were
    /// logged, with one `write`: one batch is one append (and one event for
    /// whoever watches the file).
    fn write_batch(&mut self) {
        let mut taken = Vec::new();
        for (i, spare) in self.spares.iter_mut().enumerate() {
            if self.shared.take(i, spare) {
                taken.push(i);
            }
        }
        let text: &[u8] = match taken.as_slice() {
            [] => return,
            [one] => &self.spares[*one].text,
            _ => {
                self.order.clear();
                for &i in &taken {
                    let mut start = 0;
                    for &(n, end) in &self.spares[i].ends {
                        self.order.push((n, i, start, end));
                        start = end;
                    }
                }
                self.order.sort_unstable_by_key(|line| line.0);
                self.merged.clear();
                for &(_, i, start, end) in &self.order {
                    self.merged
                        .extend_from_slice(&self.spares[i].text[start..end]);
                }
                &self.merged
            }
        };
        let written = match &mut self.out {
            Output::Stdout => io::stdout().lock().write_all(text),
            Output::File { file, .. } => file.write_all(text),
        };
        if let Err(e) = written {
            tracing::warn!(error = %e, "cannot write the access log");
        }
        for spare in &mut self.spares {
            spare.text.clear();
            spare.ends.clear();
            spare.text.shrink_to(KEEP_CAPACITY);
            spare.ends.shrink_to(KEEP_CAPACITY / 64);
        }
        self.merged.clear();
        self.merged.shrink_to(KEEP_CAPACITY);
        self.order.shrink_to(KEEP_CAPACITY / 64);
    }

    fn reopen_file(&mut self) {
        if let Output::File { file, path } = &mut self.out {
            match open(path) {
                Ok(f) => {
                    *file = f;
                    tracing::info!(path = %path.display(), "access log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot reopen the access log; still writing to the old file")
                }
            }
        }
    }
}

/// A line's timestamp. The second is formatted once: a busy log writes
/// thousands of lines per second with the same one.
#[derive(Default)]
struct TimeText {
    second: Option<(i64, AccessLogFormat)>,
    formatted: String,
    text: String,
}

impl TimeText {
    /// Combined: `10/Oct/2000:13:55:36 +0000`; JSON: RFC 3339 in UTC with
    /// milliseconds, `2000-10-10T13:55:36.153Z`.
    fn of(&mut self, time: SystemTime, format: AccessLogFormat) -> &str {
        let at = OffsetDateTime::from(time);
        let second = at.unix_timestamp();
        if self.second != Some((second, format)) {
            self.formatted = match format {
                AccessLogFormat::Combined => at.format(COMBINED_TIME),
                AccessLogFormat::Json => at.format(JSON_SECOND),
            }
            .unwrap_or_default();
            self.second = Some((second, format));
        }
        if format == AccessLogFormat::Combined {
            return &self.formatted;
        }
        self.text.clear();
        self.text.push_str(&self.formatted);
        let ms = at.millisecond();
        self.text.push('.');
        for digit in [ms / 100, ms / 10 % 10, ms % 10] {
            self.text.push(char::from(b'0' + digit as u8));
        }
        self.text.push('Z');
        &self.text
    }
}

fn version(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn address(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                number(out, octet);
            }
        }
        IpAddr::V6(v6) => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Seconds with microseconds, NGINX's `$request_time` to the microsecond:
/// `0.000153`.
fn seconds(out: &mut Vec<u8>, d: Duration) {
    number(out, d.as_secs());
    out.push(b'.');
    let micros = d.subsec_micros();
    let mut digits = [b'0'; 6];
    let mut rest = micros;
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    out.extend_from_slice(&digits);
}

/// A header value as log text: `-` when absent, quotes and control bytes
/// escaped (NGINX's `\xHH` convention), so a line cannot be forged.
fn quoted(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(b'-'),
        Some(bytes) => escape(out, bytes),
    }
}

fn escape(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: &u8| *b != b'"' && *b != b'\\' && (0x20..0x7f).contains(b);
    let mut rest = bytes;
    while !rest.is_empty() {
        let run = rest.iter().position(|b| !plain(b)).unwrap_or(rest.len());
        out.extend_from_slice(&rest[..run]);
        match rest.get(run) {
            Some(&b) => {
                out.extend_from_slice(&[
                    b'\\',
                    b'x',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0xf)],
                ]);
                rest = &rest[run + 1..];
            }
            None => rest = &[],
        }
    }
}

/// NGINX's combined format, then request time in seconds, site, route and
/// request id:
/// `203.0.113.7 - - [10/Oct/2000:13:55:36 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8.0" 0.000153 main /api 4f2a…`
fn combined(out: &mut Vec<u8>, time: &str, e: &Entry) {
    address(out, e.client.ip());
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"] \"");
    // A method is a token: no quotes, spaces or backslashes.
    out.extend_from_slice(e.method.as_str().as_bytes());
    out.push(b' ');
    escape(out, e.text.target());
    out.push(b' ');
    out.extend_from_slice(version(e.version).as_bytes());
    out.extend_from_slice(b"\" ");
    number(out, e.status);
    out.push(b' ');
    number(out, e.bytes);
    out.extend_from_slice(b" \"");
    quoted(out, e.text.referer());
    out.extend_from_slice(b"\" \"");
    quoted(out, e.text.user_agent());
    out.extend_from_slice(b"\" ");
    seconds(out, e.duration);
    out.push(b' ');
    escape(out, e.site.as_bytes());
    out.push(b' ');
    quoted(out, e.route.as_deref().map(str::as_bytes));
    out.push(b' ');
    out.extend_from_slice(&e.id.hex());
}

/// A JSON string (or `null`); bytes that are not UTF-8 become U+FFFD.
fn json_text(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.extend_from_slice(b"null"),
        Some(bytes) => {
            let _ = serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(bytes));
        }
    }
}

/// One JSON object per line.
fn json(out: &mut Vec<u8>, time: &str, e: &Entry) {
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"\",\"remote\":\"");
    address(out, e.client.ip());
    out.extend_from_slice(b"\",\"method\":");
    json_text(out, Some(e.method.as_str().as_bytes()));
    out.extend_from_slice(b",\"path\":");
    json_text(out, Some(e.text.target()));
    out.extend_from_slice(b",\"protocol\":\"");
    out.extend_from_slice(version(e.version).as_bytes());
    out.extend_from_slice(b"\",\"status\":");
    number(out, e.status);
    out.extend_from_slice(b",\"bytes\":");
    number(out, e.bytes);
    out.extend_from_slice(b",\"duration_ms\":");
    let _ = serde_json::to_writer(&mut *out, &(e.duration.as_secs_f64() * 1000.0));
    out.extend_from_slice(b",\"site\":");
    json_text(out, Some(e.site.as_bytes()));
    out.extend_from_slice(b",\"route\":");
    json_text(out, e.route.as_deref().map(str::as_bytes));
    out.extend_from_slice(b",\"request_id\":\"");
    out.extend_from_slice(&e.id.hex());
    out.extend_from_slice(b"\",\"referer\":");
    json_text(out, e.text.referer());
    out.extend_from_slice(b",\"user_agent\":");
    json_text(out, e.text.user_agent());
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(971_186_136),
            client: SocketAddr::from(([203, 0, 113, 7], 5000)),
            method: Method::GET,
            version: Version::HTTP_11,
            status: 200,
            bytes: 512,
            duration: Duration::from_micros(153),
            site: Arc::from("main"),
            route: None,
            id: RequestId::next(),
            text: RequestText::new("/a?b=\"c\"", None, Some(b"curl/8.0 \"x\"")),
        }
    }

    fn text(bytes: Vec<u8>) -> String {
        String::from_utf8(bytes).expect("log lines are UTF-8")
    }

    #[test]
    fn combined_lines_look_like_nginx_and_cannot_be_forged() {
        let mut line = Vec::new();
        let e = entry();
        combined(
            &mut line,
            TimeText::default().of(e.time, AccessLogFormat::Combined),
            &e,
        );
        assert_eq!(
            text(line),
            format!(
                "203.0.113.7 - - [10/Oct/2000:13:55:36 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 512 \"-\" \"curl/8.0 \\x22x\\x22\" 0.000153 main - {}",
                e.id
            )
        );
        // Every part present, IPv6, whole seconds, a route with a space.
        let e = Entry {
            client: SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1], 443)),
            method: Method::POST,
            version: Version::HTTP_2,
            status: 503,
            bytes: 0,
            duration: Duration::new(12, 3_000),
            route: Some(Arc::from("/my app")),
            text: RequestText::new("/", Some(b"http://r.example/"), Some(b"ua")),
            ..entry()
        };
        let mut line = Vec::new();
        combined(&mut line, "T", &e);
        assert_eq!(
            text(line),
            format!(
                "2001:db8::1 - - [T] \"POST / HTTP/2.0\" 503 0 \"http://r.example/\" \"ua\" 12.000003 main /my app {}",
                e.id
            )
        );
    }

    #[test]
    fn request_text_keeps_each_part_whichever_are_missing() {
        for (referer, ua) in [
            (None, None),
            (Some(&b"r"[..]), None),
            (None, Some(&b"u"[..])),
            (Some(&b""[..]), Some(&b"u"[..])),
            (Some(&b"ref"[..]), Some(&b""[..])),
        ] {
            let t = RequestText::new("/t?q", referer, ua);
            assert_eq!(t.target(), b"/t?q");
            assert_eq!(t.referer(), referer);
            assert_eq!(t.user_agent(), ua);
        }
    }

    #[test]
    fn the_timestamp_follows_the_clock_across_seconds_and_formats() {
        let mut clock = TimeText::default();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(971_186_136);
        assert_eq!(
            clock.of(t, AccessLogFormat::Combined),
            "10/Oct/2000:13:55:36 +0000"
        );
        let later = t + Duration::from_millis(999);
        assert_eq!(
            clock.of(later, AccessLogFormat::Combined),
            "10/Oct/2000:13:55:36 +0000"
        );
        assert_eq!(
            clock.of(later, AccessLogFormat::Json),
            "2000-10-10T13:55:36.999Z"
        );
        assert_eq!(
            clock.of(t + Duration::from_millis(7), AccessLogFormat::Json),
            "2000-10-10T13:55:36.007Z"
        );
        let next = t + Duration::from_secs(1);
        assert_eq!(
            clock.of(next, AccessLogFormat::Combined),
            "10/Oct/2000:13:55:37 +0000"
        );
    }

    #[test]
    fn escaping_keeps_plain_runs_and_hex_escapes_the_rest() {
        let mut out = Vec::new();
        escape(&mut out, b"/a b\"c\\d\x01\xffe");
        assert_eq!(text(out), "/a b\\x22c\\x5Cd\\x01\\xFFe");
        let mut out = Vec::new();
        escape(&mut out, b"\"");
        assert_eq!(text(out), "\\x22");
    }

    #[test]
    fn json_lines_parse_back() {
        let mut line = Vec::new();
        let e = Entry {
            text: RequestText::new("/a?b=\"c\"", Some(b"\xff\n"), Some(b"curl/8.0 \"x\"")),
            route: Some(Arc::from("/api")),
            ..entry()
        };
        json(
            &mut line,
            TimeText::default().of(e.time, AccessLogFormat::Json),
            &e,
        );
        let v: serde_json::Value = serde_json::from_slice(&line).expect("valid JSON");
        assert_eq!(v["status"], 200);
        assert_eq!(v["bytes"], 512);
        assert_eq!(v["method"], "GET");
        assert_eq!(v["remote"], "203.0.113.7");
        assert_eq!(v["protocol"], "HTTP/1.1");
        assert_eq!(v["path"], "/a?b=\"c\"");
        assert_eq!(v["time"], "2000-10-10T13:55:36.000Z");
        assert_eq!(v["user_agent"], "curl/8.0 \"x\"");
        assert_eq!(v["referer"], "\u{fffd}\n");
        assert_eq!(v["site"], "main");
        assert_eq!(v["route"], "/api");
        assert_eq!(v["request_id"], e.id.to_string());
        assert!((v["duration_ms"].as_f64().expect("a number") - 0.153).abs() < 1e-9);
        let mut line = Vec::new();
        json(&mut line, "T", &entry());
        let v: serde_json::Value = serde_json::from_slice(&line).expect("valid JSON");
        assert!(v["referer"].is_null() && v["route"].is_null());
    }

    #[test]
    fn past_the_buffer_lines_are_dropped_and_counted_until_the_writer_takes_them() {
        let dropped = Arc::new(Counter::default());
        // Four lines of room: one shard per line at most, one line each.
        let shared = Shared::new(AccessLogFormat::Combined, 4, dropped.clone());
        assert_eq!((shared.shards.len(), shared.per_shard), (4, 1));
        let e = entry();
        assert!(shared.log(&e), "the shard is full: wake the writer");
        assert!(!shared.log(&e));
        assert_eq!(dropped.get(), 1);
        let i = shard_index() % shared.shards.len();
        let mut spare = Lines::default();
        assert!(shared.take(i, &mut spare));
        assert_eq!(spare.text.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(spare.ends, [(0, spare.text.len())]);
        assert!(!shared.take(i, &mut Lines::default()), "nothing left");
        // Room again once the writer took the lines.
        assert!(shared.log(&e));
        assert_eq!(dropped.get(), 1);
        // The default: 16 shards of 1,024 lines.
        let shared = Shared::new(AccessLogFormat::Json, 16_384, dropped);
        assert_eq!((shared.shards.len(), shared.per_shard), (16, 1024));
    }

    #[test]
    fn close_writes_every_line_from_every_thread_in_each_threads_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("access.log");
        let config = LogConfig {
            access: AccessLogTarget::File(path.clone()),
            format: AccessLogFormat::Combined,
            buffer: 1 << 20,
        };
        let dropped = Arc::new(Counter::default());
        let log = AccessLog::start(&config, dropped.clone())
            .expect("opens")
            .expect("on");
        // One line each from threads made one after the other: different
        // shards, written in the order they were logged.
        for n in 0..6u64 {
            std::thread::scope(|s| {
                s.spawn(|| {
                    log.log(&Entry {
                        bytes: 9_000_000 + n,
                        ..entry()
                    })
                });
            });
        }
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let log = log.clone();
                s.spawn(move || {
                    for n in 0..5_000u64 {
                        log.log(&Entry {
                            bytes: t * 1_000_000 + n,
                            ..entry()
                        });
                    }
                });
            }
        });
        log.close();
        assert_eq!(dropped.get(), 0);
        let written = std::fs::read_to_string(&path).expect("log");
        let mut last = [None::<u64>; 10];
        let mut lines = 0;
        for line in written.lines() {
            lines += 1;
            let bytes: u64 = line
                .split(' ')
                .nth(9)
                .and_then(|b| b.parse().ok())
                .expect("a byte count");
            let (t, n) = ((bytes / 1_000_000) as usize, bytes % 1_000_000);
            assert!(
                last[t].is_none_or(|l| l + 1 == n),
                "thread {t}: {n} after {:?}",
                last[t]
            );
            last[t] = Some(n);
        }
        assert_eq!(lines, 20_006);
        // After close nothing more is written; it is counted instead.
        log.log(&entry());
        assert_eq!(dropped.get(), 1);
    }
}
