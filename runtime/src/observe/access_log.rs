//! The access log: one line per request, written by a thread of its own.
//!
//! Requests hand their entry to a bounded queue and never wait: when the
//! queue is full (the disk or the terminal cannot keep up) the line is
//! dropped and counted (`swan_access_log_dropped_total`). The writer
//! wakes every 20 ms, formats what is queued and writes it with one flush. A file
//! target is reopened on request (SIGUSR1), so `logrotate` can move it
//! away and have swan write a new one.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

use http::{HeaderValue, Method, Version};
use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

use super::counters::Counter;
use crate::config::{AccessLogFormat, AccessLogTarget, LogConfig};
use crate::request::RequestId;

/// `10/Oct/2000:13:55:36 +0000`, NGINX's `$time_local` in UTC.
const COMBINED_TIME: &[FormatItem<'static>] =
    format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");

/// `2000-10-10T13:55:36`, to which JSON lines add milliseconds and `Z`.
const JSON_SECOND: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");

/// How often the writer takes the queued lines and writes them out (so a
/// line reaches the file at most this late).
const BATCH_EVERY: Duration = Duration::from_millis(20);

/// What one request leaves in the log.
#[derive(Debug)]
pub struct Entry {
    /// When the request started.
    pub time: SystemTime,
    /// The client (after trusted proxies).
    pub client: SocketAddr,
    /// Method.
    pub method: Method,
    /// The request target as received (path and query).
    pub target: String,
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
    /// `Referer`, if sent.
    pub referer: Option<HeaderValue>,
    /// `User-Agent`, if sent.
    pub user_agent: Option<HeaderValue>,
}

/// The sending side: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct AccessLog {
    tx: SyncSender<Entry>,
    dropped: Arc<Counter>,
    reopen: Arc<AtomicBool>,
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
            AccessLogTarget::Stdout => Output::Stdout(BufWriter::new(io::stdout())),
            AccessLogTarget::File(path) => Output::File {
                file: BufWriter::new(open(path)?),
                path: path.clone(),
            },
        };
        let (tx, rx) = sync_channel(config.buffer);
        let reopen = Arc::new(AtomicBool::new(false));
        let writer = Writer {
            out,
            format: config.format,
            reopen: reopen.clone(),
            line: String::with_capacity(512),
            clock: TimeText::default(),
        };
        std::thread::Builder::new()
            .name("swan-access-log".to_owned())
            .spawn(move || writer.run(&rx))
            .map_err(|source| OpenError {
                path: PathBuf::from("(writer thread)"),
                source,
            })?;
        Ok(Some(AccessLog {
            tx,
            dropped,
            reopen,
        }))
    }

    /// Queues a line; drops (and counts) it when the queue is full.
    #[inline]
    pub fn log(&self, entry: Entry) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(entry)
        {
            self.dropped.add(1);
        }
    }

    /// Reopens a file target before the next line (log rotation).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Relaxed);
        // An empty wake-up is not needed: the flag is read before each
        // batch, and a quiet log has nothing to write to the old file.
    }
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

enum Output {
    Stdout(BufWriter<io::Stdout>),
    File {
        file: BufWriter<File>,
        path: PathBuf,
    },
}

impl Output {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::Stdout(w) => w,
            Output::File { file, .. } => file,
        }
    }
}

struct Writer {
    out: Output,
    format: AccessLogFormat,
    reopen: Arc<AtomicBool>,
    line: String,
    clock: TimeText,
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
        use std::fmt::Write as _;
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
        let _ = write!(self.text, ".{:03}Z", at.millisecond());
        &self.text
    }
}

impl Writer {
    fn run(mut self, rx: &Receiver<Entry>) {
        // Wakes on its own every BATCH_EVERY, takes everything waiting and
        // flushes once; ends when every sender is gone. Never blocking in
        // `recv` means a request's `try_send` never has a sleeping thread
        // to wake: blocking there cost a futex wake and a context switch
        // per request, 62% of static throughput at 100 connections on 2
        // cores (BENCHMARKS.md).
        loop {
            std::thread::sleep(BATCH_EVERY);
            if self.reopen.swap(false, Ordering::Relaxed) {
                self.reopen_file();
            }
            let mut wrote = false;
            let ended = loop {
                match rx.try_recv() {
                    Ok(entry) => {
                        self.write(&entry);
                        wrote = true;
                    }
                    Err(TryRecvError::Empty) => break false,
                    Err(TryRecvError::Disconnected) => break true,
                }
            };
            if wrote && let Err(e) = self.out.writer().flush() {
                tracing::warn!(error = %e, "cannot write the access log");
            }
            if ended {
                return;
            }
        }
    }

    fn reopen_file(&mut self) {
        if let Output::File { file, path } = &mut self.out {
            let _ = file.flush();
            match open(path) {
                Ok(f) => {
                    *file = BufWriter::new(f);
                    tracing::info!(path = %path.display(), "access log reopened");
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot reopen the access log; still writing to the old file")
                }
            }
        }
    }

    fn write(&mut self, e: &Entry) {
        self.line.clear();
        let time = self.clock.of(e.time, self.format);
        match self.format {
            AccessLogFormat::Combined => combined(&mut self.line, time, e),
            AccessLogFormat::Json => json(&mut self.line, time, e),
        }
        self.line.push('\n');
        if let Err(err) = self.out.writer().write_all(self.line.as_bytes()) {
            tracing::warn!(error = %err, "cannot write the access log");
        }
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

/// A header value as log text: `-` when absent, quotes and control bytes
/// escaped (NGINX's `\xHH` convention), so a line cannot be forged.
fn quoted(out: &mut String, v: Option<&[u8]>) {
    match v {
        None => out.push('-'),
        Some(bytes) => escape(out, bytes),
    }
}

fn escape(out: &mut String, bytes: &[u8]) {
    use std::fmt::Write as _;
    let plain = |b: &u8| *b != b'"' && *b != b'\\' && (0x20..0x7f).contains(b);
    let mut rest = bytes;
    while !rest.is_empty() {
        let run = rest.iter().position(|b| !plain(b)).unwrap_or(rest.len());
        // Printable ASCII: valid UTF-8 as it is.
        out.push_str(std::str::from_utf8(&rest[..run]).unwrap_or_default());
        if let Some(b) = rest.get(run) {
            let _ = write!(out, "\\x{b:02X}");
            rest = &rest[run + 1..];
        } else {
            rest = &[];
        }
    }
}

/// NGINX's combined format, then request time in seconds, site, route and
/// request id:
/// `203.0.113.7 - - [10/Oct/2000:13:55:36 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8.0" 0.000153 main /api 4f2a`
fn combined(out: &mut String, time: &str, e: &Entry) {
    use std::fmt::Write as _;
    let _ = write!(out, "{} - - [{time}] \"{} ", e.client.ip(), e.method);
    escape(out, e.target.as_bytes());
    let _ = write!(out, " {}\" {} {} \"", version(e.version), e.status, e.bytes);
    quoted(out, e.referer.as_ref().map(HeaderValue::as_bytes));
    out.push_str("\" \"");
    quoted(out, e.user_agent.as_ref().map(HeaderValue::as_bytes));
    let _ = write!(
        out,
        "\" {:.6} {} {} {}",
        e.duration.as_secs_f64(),
        e.site,
        e.route.as_deref().unwrap_or("-"),
        e.id
    );
}

/// One JSON object per line.
fn json(out: &mut String, time: &str, e: &Entry) {
    let text = |v: &Option<HeaderValue>| {
        v.as_ref()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let line = serde_json::json!({
        "time": time,
        "remote": e.client.ip().to_string(),
        "method": e.method.as_str(),
        "path": e.target,
        "protocol": version(e.version),
        "status": e.status,
        "bytes": e.bytes,
        "duration_ms": e.duration.as_secs_f64() * 1000.0,
        "site": &*e.site,
        "route": e.route.as_deref(),
        "request_id": e.id.to_string(),
        "referer": text(&e.referer),
        "user_agent": text(&e.user_agent),
    });
    out.push_str(&line.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry {
        Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(971_186_136),
            client: SocketAddr::from(([203, 0, 113, 7], 5000)),
            method: Method::GET,
            target: "/a?b=\"c\"".to_owned(),
            version: Version::HTTP_11,
            status: 200,
            bytes: 512,
            duration: Duration::from_micros(153),
            site: Arc::from("main"),
            route: None,
            id: RequestId::next(),
            referer: None,
            user_agent: Some(HeaderValue::from_static("curl/8.0 \"x\"")),
        }
    }

    #[test]
    fn combined_lines_look_like_nginx_and_cannot_be_forged() {
        let mut line = String::new();
        let e = entry();
        combined(
            &mut line,
            TimeText::default().of(e.time, AccessLogFormat::Combined),
            &e,
        );
        assert_eq!(
            line,
            format!(
                "203.0.113.7 - - [10/Oct/2000:13:55:36 +0000] \"GET /a?b=\\x22c\\x22 HTTP/1.1\" 200 512 \"-\" \"curl/8.0 \\x22x\\x22\" 0.000153 main - {}",
                e.id
            )
        );
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
        let next = t + Duration::from_secs(1);
        assert_eq!(
            clock.of(next, AccessLogFormat::Combined),
            "10/Oct/2000:13:55:37 +0000"
        );
    }

    #[test]
    fn escaping_keeps_plain_runs_and_hex_escapes_the_rest() {
        let mut out = String::new();
        escape(&mut out, b"/a b\"c\\d\x01\xffe");
        assert_eq!(out, "/a b\\x22c\\x5Cd\\x01\\xFFe");
    }

    #[test]
    fn json_lines_parse_back() {
        let mut line = String::new();
        let e = entry();
        json(
            &mut line,
            TimeText::default().of(e.time, AccessLogFormat::Json),
            &e,
        );
        let v: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
        assert_eq!(v["status"], 200);
        assert_eq!(v["path"], "/a?b=\"c\"");
        assert_eq!(v["time"], "2000-10-10T13:55:36.000Z");
        assert_eq!(v["user_agent"], "curl/8.0 \"x\"");
        assert!(v["referer"].is_null());
    }
}
