//! One access log line: what a request leaves ([`Entry`]) and its text,
//! in NGINX's combined format or as JSON, written without `core::fmt`
//! (the numbers with `itoa`) and with everything a client sent escaped.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::{Method, Version};
use time::OffsetDateTime;
use time::format_description::FormatItem;
use time::macros::format_description;

use crate::config::AccessLogFormat;
use crate::request::RequestId;

/// `10/Oct/2000:13:55:36 +0000`, NGINX's `$time_local` in UTC.
const COMBINED_TIME: &[FormatItem<'static>] =
    format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");

/// `2000-10-10T13:55:36`, to which JSON lines add milliseconds and `Z`.
const JSON_SECOND: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");

/// What one request leaves in the log.
#[derive(Debug)]
pub struct Entry {
    /// When the request started.
    pub time: SystemTime,
    /// The client (after trusted proxies).
    pub client: SocketAddr,
    /// Method; `None` for a request head refused before it could be read
    /// (hyper's own 400, 414 or 431): its line reads `"-"` for the request.
    pub method: Option<Method>,
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

/// A line's timestamp. The second is formatted once: a busy log writes
/// thousands of lines per second with the same one.
#[derive(Default)]
pub(crate) struct TimeText {
    second: Option<(i64, AccessLogFormat)>,
    formatted: String,
    text: String,
}

impl TimeText {
    /// Combined: `10/Oct/2000:13:55:36 +0000`; JSON: RFC 3339 in UTC with
    /// milliseconds, `2000-10-10T13:55:36.153Z`.
    pub(crate) fn of(&mut self, time: SystemTime, format: AccessLogFormat) -> &str {
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
        self.text.push('.');
        self.text
            .extend(padded::<3>(u32::from(at.millisecond())).map(char::from));
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
    out.extend_from_slice(&padded::<6>(d.subsec_micros()));
}

/// The last `N` decimal digits of `n`, zero-padded: `padded::<3>(7)` is
/// `007`.
fn padded<const N: usize>(mut n: u32) -> [u8; N] {
    let mut digits = [b'0'; N];
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (n % 10) as u8;
        n /= 10;
    }
    digits
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
    escape_but(out, bytes, |b| (0x20..0x7f).contains(&b));
}

/// A field outside quotes (site, route): a space would split it in two for
/// anything that reads the line by spaces, so it is escaped too.
fn escape_field(out: &mut Vec<u8>, bytes: &[u8]) {
    escape_but(out, bytes, |b| (0x21..0x7f).contains(&b));
}

/// `bytes` with `"`, `\` and every byte `plain` refuses written `\xHH`.
fn escape_but(out: &mut Vec<u8>, bytes: &[u8], plain: impl Fn(u8) -> bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: &u8| *b != b'"' && *b != b'\\' && plain(*b);
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
pub(crate) fn combined(out: &mut Vec<u8>, time: &str, e: &Entry) {
    address(out, e.client.ip());
    out.extend_from_slice(b" - - [");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"] \"");
    match &e.method {
        // A method is a token: no quotes, spaces or backslashes.
        Some(method) => {
            out.extend_from_slice(method.as_str().as_bytes());
            out.push(b' ');
            escape(out, e.text.target());
            out.push(b' ');
            out.extend_from_slice(version(e.version).as_bytes());
        }
        None => out.push(b'-'),
    }
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
    escape_field(out, e.site.as_bytes());
    out.push(b' ');
    match e.route.as_deref() {
        Some(route) => escape_field(out, route.as_bytes()),
        None => out.push(b'-'),
    }
    out.push(b' ');
    out.extend_from_slice(&e.id.hex());
}

/// A JSON string (or `null`); bytes that are not UTF-8 become U+FFFD. The
/// line and paragraph separators and the bidirectional overrides and
/// isolates (which JSON allows raw) are written as `\u` escapes: a tool
/// that splits on them, or a viewer that reorders by them, still sees
/// one line as it was.
fn json_text(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.extend_from_slice(b"null"),
        Some(bytes) => {
            let start = out.len();
            let _ = serde_json::to_writer(&mut *out, &*String::from_utf8_lossy(bytes));
            if out[start..].contains(&0xe2) {
                let written = out.split_off(start);
                let text = String::from_utf8_lossy(&written);
                for c in text.chars() {
                    if super::one_line::breaks_or_reorders(c) {
                        out.extend_from_slice(format!("\\u{:04x}", u32::from(c)).as_bytes());
                    } else {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                }
            }
        }
    }
}

/// One JSON object per line.
pub(crate) fn json(out: &mut Vec<u8>, time: &str, e: &Entry) {
    out.extend_from_slice(b"{\"time\":\"");
    out.extend_from_slice(time.as_bytes());
    out.extend_from_slice(b"\",\"remote\":\"");
    address(out, e.client.ip());
    out.extend_from_slice(b"\",\"method\":");
    json_text(out, e.method.as_ref().map(|m| m.as_str().as_bytes()));
    out.extend_from_slice(b",\"path\":");
    json_text(out, e.method.is_some().then(|| e.text.target()));
    out.extend_from_slice(b",\"protocol\":\"");
    out.extend_from_slice(version(e.version).as_bytes());
    out.extend_from_slice(b"\",\"status\":");
    number(out, e.status);
    out.extend_from_slice(b",\"bytes\":");
    number(out, e.bytes);
    out.extend_from_slice(b",\"duration_ms\":");
    // Milliseconds to the microsecond, as written: never 0.035401999999999996.
    let micros = e.duration.as_micros();
    number(out, micros / 1000);
    out.push(b'.');
    out.extend_from_slice(&padded::<3>((micros % 1000) as u32));
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
pub(crate) mod tests {
    use super::*;

    /// A line with every usual part.
    pub(crate) fn entry() -> Entry {
        Entry {
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(971_186_136),
            client: SocketAddr::from(([203, 0, 113, 7], 5000)),
            method: Some(Method::GET),
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
        // Every part present, IPv6, whole seconds, a route with a space
        // (escaped: the fields outside quotes are split by spaces).
        let e = Entry {
            client: SocketAddr::from(([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1], 443)),
            method: Some(Method::POST),
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
                "2001:db8::1 - - [T] \"POST / HTTP/2.0\" 503 0 \"http://r.example/\" \"ua\" 12.000003 main /my\\x20app {}",
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
    fn json_escapes_line_separators_and_bidirectional_overrides() {
        let mut line = Vec::new();
        let e = Entry {
            text: RequestText::new(
                "/a\u{2028}b",
                Some("r\u{2029}".as_bytes()),
                Some("ua\u{202e}\u{2066}\u{2192}".as_bytes()),
            ),
            ..entry()
        };
        json(
            &mut line,
            TimeText::default().of(e.time, AccessLogFormat::Json),
            &e,
        );
        let text = text(line.clone());
        assert!(text.contains(r#""path":"/a\u2028b""#), "{text}");
        assert!(
            text.contains("\"user_agent\":\"ua\\u202e\\u2066\u{2192}\""),
            "{text}"
        );
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{2029}'),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_slice(&line).expect("valid JSON");
        assert_eq!(v["path"], "/a\u{2028}b");
        assert_eq!(v["referer"], "r\u{2029}");
        assert_eq!(v["user_agent"], "ua\u{202e}\u{2066}\u{2192}");
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
        assert!(text(line.clone()).contains("\"duration_ms\":0.153,"));
        // Written to the microsecond, never with float noise.
        let long = Entry {
            duration: Duration::new(12, 345_678_901),
            ..entry()
        };
        let mut line = Vec::new();
        json(&mut line, "T", &long);
        assert!(text(line).contains("\"duration_ms\":12345.678,"));
        let mut line = Vec::new();
        json(&mut line, "T", &entry());
        let v: serde_json::Value = serde_json::from_slice(&line).expect("valid JSON");
        assert!(v["referer"].is_null() && v["route"].is_null());
    }
}
