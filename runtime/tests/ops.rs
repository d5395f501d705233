//! Operating swan, through the real binary: the admin listener (health,
//! metrics, status), the drain order on SIGTERM, the access log (formats,
//! rotation on SIGUSR1), trusted proxies and the PROXY protocol. Loopback
//! only; every load loop is bounded.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::{get, h2_frame, raw, sample, site, start, status_of, stop, stop_with_code, term};

/// `/who`: answers the remote address the servlet sees (ABI part 6).
const WHO: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $write (i32.const 0) (call $get (i32.const 6) (i32.const 0) (i32.const 256))))
    i32.const 0))"#;

/// `/trap`: always traps.
const TRAP: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) unreachable))"#;

fn with_servlets(config: &str) -> tempfile::TempDir {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(
        dir.path().join("servlets/who.wasm"),
        wat::parse_str(WHO).expect("who"),
    )
    .expect("who");
    std::fs::write(
        dir.path().join("servlets/trap.wasm"),
        wat::parse_str(TRAP).expect("trap"),
    )
    .expect("trap");
    std::fs::write(dir.path().join("swan.toml"), config).expect("config");
    dir
}

fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// Polls `path` until it answers 200 (a servlet just deployed), for at
/// most 10 s.
fn goes_live(public: &str, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&get(public, path)) != 200 {
        assert!(Instant::now() < deadline, "{path} never went live");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `/readyz` until it answers 200.
fn ready_within(admin: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if status_of(&get(admin, "/readyz")) == 200 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

const BASE: &str = "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n";

#[test]
fn the_admin_listener_reports_health_metrics_and_status() {
    let dir = with_servlets(&format!(
        "{BASE}[[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n"
    ));
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    assert_ne!(public, admin, "the admin listener has its own port");
    let live = get(&admin, "/livez");
    assert_eq!(status_of(&live), 200, "{live}");
    // The admin listener's answers carry `Server` like every other.
    assert!(
        live.to_ascii_lowercase().contains("\r\nserver: swan\r\n"),
        "{live}"
    );
    assert!(ready_within(&admin, Duration::from_secs(10)), "never ready");
    // Traffic: 20 static, 5 servlet, 3 traps, 2 missing.
    for _ in 0..20 {
        assert_eq!(status_of(&get(&public, "/")), 200);
    }
    for _ in 0..5 {
        assert!(body(&get(&public, "/who")).starts_with("127.0.0.1"));
    }
    for _ in 0..3 {
        assert_eq!(status_of(&get(&public, "/trap")), 500);
    }
    for _ in 0..2 {
        assert_eq!(status_of(&get(&public, "/nope")), 404);
    }
    let metrics = get(&admin, "/metrics");
    assert_eq!(status_of(&metrics), 200);
    let m = body(&metrics);
    let static_2xx = sample(
        m,
        "swan_requests_total",
        &["site=\"main\"", "route=\"static\"", "class=\"2xx\""],
    );
    assert_eq!(static_2xx, Some(20.0), "{m}");
    assert_eq!(
        sample(
            m,
            "swan_requests_total",
            &["route=\"static\"", "class=\"4xx\""]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            m,
            "swan_requests_total",
            &["route=\"/who/*\"", "class=\"2xx\""]
        ),
        Some(5.0)
    );
    assert_eq!(
        sample(
            m,
            "swan_requests_total",
            &["route=\"/trap/*\"", "class=\"5xx\""]
        ),
        Some(3.0)
    );
    assert_eq!(
        sample(m, "swan_servlet_traps_total", &["route=\"/trap/*\""]),
        Some(3.0)
    );
    assert!(
        sample(
            m,
            "swan_servlet_instances_made_total",
            &["route=\"/who/*\""]
        )
        .unwrap_or(0.0)
            >= 5.0
    );
    assert_eq!(
        sample(
            m,
            "swan_request_duration_seconds_count",
            &["route=\"/who/*\""]
        ),
        Some(5.0)
    );
    assert!(
        sample(
            m,
            "swan_request_duration_seconds_bucket",
            &["route=\"/who/*\"", "le=\"+Inf\""]
        ) == Some(5.0)
    );
    assert!(sample(m, "swan_static_cache_hits_total", &["site=\"main\""]).unwrap_or(0.0) >= 20.0);
    assert_eq!(
        sample(m, "swan_static_cache_files", &["site=\"main\""]),
        Some(1.0)
    );
    assert!(sample(m, "swan_connections_total", &[]).unwrap_or(0.0) >= 30.0);
    assert!(sample(m, "swan_servlet_compile_seconds", &["route=\"/who/*\""]).is_some());
    assert!(
        m.contains("swan_servlet_info{") && m.contains("kind=\"native ABI 1\""),
        "{m}"
    );
    assert!(
        m.trim_end().ends_with("# EOF"),
        "OpenMetrics text ends with # EOF"
    );
    // The status page, as JSON and as HTML.
    let status = get(&admin, "/status.json");
    let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
    assert_eq!(json["readiness"], "ready");
    assert_eq!(json["sites"][0]["name"], "main");
    let servlets = json["sites"][0]["servlets"].as_array().expect("servlets");
    let trap = servlets
        .iter()
        .find(|s| s["route"] == "/trap/*")
        .expect("trap servlet");
    assert_eq!(trap["traps"], 3);
    // What happened, not only that it failed: the trap and where.
    let what = trap["recent_errors"][0]["what"]
        .as_str()
        .unwrap_or_default();
    assert!(
        what.starts_with("servlet failed: trapped: trap: ") && what.contains("unreachable"),
        "{what}"
    );
    let page = get(&admin, "/");
    assert!(
        page.contains("text/html") && page.contains("Site main"),
        "{page}"
    );
    // Admin endpoints are GET-only and 404 elsewhere.
    assert_eq!(
        status_of(&raw(
            &admin,
            b"POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )),
        405
    );
    assert_eq!(status_of(&get(&admin, "/secret")), 404);
    // Another method on a path that does not exist is a 404 too, and
    // HTTP/1.1 without Host a 400, as on the public port.
    assert_eq!(
        status_of(&raw(
            &admin,
            b"POST /nope HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )),
        404
    );
    assert_eq!(
        status_of(&raw(
            &admin,
            b"GET /livez HTTP/1.1\r\nConnection: close\r\n\r\n"
        )),
        400
    );
    // The public port does not serve admin paths.
    assert_eq!(status_of(&get(&public, "/metrics")), 404);
    // A new version of the trapping servlet (a different module) carries
    // on its route's servlet counters and recent errors.
    let fixed = wat::parse_str(TRAP.replace("unreachable", "i32.const 0")).expect("fixed");
    let tmp = dir.path().join("trap.wasm.tmp");
    std::fs::write(&tmp, fixed).expect("fixed");
    std::fs::rename(&tmp, dir.path().join("servlets/trap.wasm")).expect("rename");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Traps while the old version still serves.
    let mut traps = 3;
    loop {
        match status_of(&get(&public, "/trap/x")) {
            200 => break,
            500 => traps += 1,
            other => panic!("/trap/x answered {other}"),
        }
        assert!(Instant::now() < deadline, "the new version never served");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every trap, before the new version and while it compiled, is
    // counted: the counter never goes down at a deploy.
    let metrics = get(&admin, "/metrics");
    assert_eq!(
        sample(
            body(&metrics),
            "swan_servlet_traps_total",
            &["route=\"/trap/*\""]
        ),
        Some(f64::from(traps)),
        "{metrics}"
    );
    let status = get(&admin, "/status.json");
    let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
    let trap = &json["sites"][0]["servlets"]
        .as_array()
        .expect("servlets")
        .iter()
        .find(|s| s["route"] == "/trap/*")
        .expect("trap servlet")
        .clone();
    assert_eq!(trap["traps"], traps, "{trap}");
    assert_eq!(
        trap["recent_errors"].as_array().map(Vec::len),
        Some(traps.min(10) as usize),
        "{trap}"
    );
    stop(s.child);
}

#[test]
fn sigterm_fails_readiness_first_keeps_accepting_for_the_grace_then_drains() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\ndrain_grace = \"1500ms\"\ndrain_timeout = \"5s\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    // A download the client does not read keeps the process draining
    // after the grace.
    std::fs::write(dir.path().join("www/big.bin"), vec![7u8; 48 << 20]).expect("big");
    let mut s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    assert!(ready_within(&admin, Duration::from_secs(10)), "never ready");
    let mut download = TcpStream::connect(&public).expect("connect");
    download
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut first = [0u8; 12];
    download
        .read_exact(&mut first)
        .expect("the download starts");
    // A keep-alive connection that made a request before the signal.
    let mut kept = TcpStream::connect(&public).expect("connect");
    kept.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    kept.write_all(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && kept.read(&mut byte).expect("read") == 1 {
        head.push(byte[0]);
    }
    term(&s.child);
    let signalled = Instant::now();
    // Its next request, in the grace, is answered with `Connection:
    // close`: the client reconnects rather than reuse a connection that
    // is about to close.
    let deadline = Instant::now() + Duration::from_secs(1);
    while !get(&admin, "/readyz").contains("draining") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    kept.write_all(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    let mut reply = String::new();
    let _ = kept.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );
    // Within the grace: not ready, yet new connections are served.
    let mut saw_unready = false;
    let mut served_during_grace = 0;
    while signalled.elapsed() < Duration::from_millis(1200) {
        let ready = get(&admin, "/readyz");
        if status_of(&ready) == 503 {
            assert!(ready.contains("draining"), "{ready}");
            saw_unready = true;
        }
        if status_of(&get(&public, "/")) == 200 {
            served_during_grace += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(saw_unready, "readiness never failed");
    assert!(
        served_during_grace >= 5,
        "only {served_during_grace} requests served in the grace period"
    );
    // After the grace: the public listener refuses, and swan exits 0.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refused = false;
    while Instant::now() < deadline {
        if TcpStream::connect(&public).is_err() {
            refused = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refused, "still accepting long after the grace");
    assert!(
        signalled.elapsed() >= Duration::from_millis(1400),
        "stopped accepting before the grace ended"
    );
    // Refused while still draining, not only once the process is gone.
    assert!(
        s.child.try_wait().expect("wait").is_none(),
        "refused only at exit"
    );
    drop(download);
    let status = s.child.wait().expect("exit");
    assert_eq!(status.code(), Some(0));
}

fn read_lines(path: &std::path::Path, at_least: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= at_least || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_access_log_writes_combined_lines_and_reopens_on_sigusr1() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\naccess = \"logs/access.log\"\n\
         [[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    std::fs::create_dir(dir.path().join("logs")).expect("logs");
    let s = start(dir.path(), &[], false);
    let public = s.urls[0].clone();
    let log = dir.path().join("logs/access.log");
    let reply = raw(
        &public,
        b"GET /index.html?q=a%22b HTTP/1.1\r\nHost: x\r\nUser-Agent: probe/1.0 \"quoted\"\r\nReferer: http://r.example/\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&reply), 200);
    assert_eq!(status_of(&get(&public, "/who")), 200);
    assert_eq!(status_of(&get(&public, "/missing")), 404);
    let lines = read_lines(&log, 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    // NGINX combined, then duration, site, route and request id.
    let first = &lines[0];
    assert!(first.starts_with("127.0.0.1 - - ["), "{first}");
    // Quotes in what the client sent are escaped: a line cannot be forged.
    assert!(first.contains("\"GET /index.html?q=a%22b HTTP/1.1\" 200 9 \"http://r.example/\" \"probe/1.0 \\x22quoted\\x22\""), "{first}");
    assert!(first.contains(" main - "), "{first}");
    assert!(
        lines[1].contains("\"GET /who HTTP/1.1\" 200 ") && lines[1].contains(" main /who/* "),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("\" 404 "), "{}", lines[2]);
    // The request id on the line is the one the client got.
    let id = reply
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .expect("request id header")
        .trim();
    assert!(first.ends_with(id), "{first} / {id}");
    // Rotation: move the file away, SIGUSR1, new lines go to a new file.
    let rotated = dir.path().join("logs/access.log.1");
    std::fs::rename(&log, &rotated).expect("rotate");
    Command::new("kill")
        .args(["-USR1", &s.child.id().to_string()])
        .status()
        .expect("kill");
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        assert_eq!(status_of(&get(&public, "/")), 200);
    }
    let fresh = read_lines(&log, 3);
    assert_eq!(fresh.len(), 3, "new file: {fresh:?}");
    // Made readable by its owner and group only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&log).expect("log").permissions().mode();
    assert_eq!(mode & 0o007, 0, "{mode:o}");
    assert_eq!(mode & 0o600, 0o600, "{mode:o}");
    assert_eq!(
        read_lines(&rotated, 3).len(),
        3,
        "the rotated file keeps its lines only"
    );
    stop(s.child);
}

/// Starts swan with `server` lines under `[server]`, an admin listener
/// and a JSON access log in `logs/access.log`: the folder, the server, its
/// public and admin addresses.
fn serve_logging_json(server: &str) -> (tempfile::TempDir, support::Running, String, String) {
    let dir = with_servlets(&format!(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n{server}\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [log]\naccess = \"logs/access.log\"\nformat = \"json\"\n\
         [[site]]\nname = \"main\"\nroot = \"www\"\n"
    ));
    std::fs::create_dir(dir.path().join("logs")).expect("logs");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    (dir, s, public, admin)
}

#[test]
fn request_heads_refused_before_the_app_are_logged_and_counted() {
    let (dir, s, public, admin) =
        serve_logging_json("max_header_bytes = 131072\nheader_read_timeout = \"1s\"\n");
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    // Past max_header_bytes before the request line ends: hyper's 431 goes
    // out as 414, and is logged and counted as what was sent.
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "l".repeat(400_000));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(140_000)
    );
    // Each refused in its own way, answered by hyper before any site.
    for (request, status) in [
        (long_uri.as_bytes(), 414),
        (long_line.as_bytes(), 414),
        (big_header.as_bytes(), 431),
        (&b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"[..], 400),
        (&b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n"[..], 400),
    ] {
        assert_eq!(status_of(&raw(&public, request)), status);
    }
    // A head cut off by header_read_timeout: closed without an answer,
    // logged and counted as a 408.
    let cut = Instant::now();
    assert_eq!(raw(&public, b"GET /slow HTTP/1.1\r\nHost: x\r\n"), "");
    assert!(cut.elapsed() < Duration::from_secs(5));
    // Just under the limit, and a plain request: answered, logged as such.
    let under = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "b".repeat(130_000)
    );
    assert_eq!(status_of(&raw(&public, under.as_bytes())), 200);
    assert_eq!(status_of(&get(&public, "/")), 200);
    let lines = read_lines(&dir.path().join("logs/access.log"), 8);
    assert_eq!(lines.len(), 8, "{lines:?}");
    let mut statuses = Vec::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        statuses.push(v["status"].as_u64().unwrap_or(0));
        assert_eq!(v["remote"], "127.0.0.1", "{line}");
        if v["status"] != 200 {
            // Nothing of the refused head is believed, or logged.
            assert!(v["method"].is_null() && v["path"].is_null(), "{line}");
            assert_eq!(v["bytes"], 0, "{line}");
        }
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 400, 400, 408, 414, 414, 431]);
    let metrics = get(&admin, "/metrics");
    for (status, n) in [("400", 2.0), ("408", 1.0), ("414", 2.0), ("431", 1.0)] {
        let label = format!("status=\"{status}\"");
        assert_eq!(
            sample(&metrics, "swan_requests_refused_total", &[&label]),
            Some(n),
            "{metrics}"
        );
    }
    stop(s.child);
}

/// HTTP/2 heads past `max_header_bytes` (RFC 9113's count: name, value
/// and 32 per field) are refused on their stream with 431, logged and
/// counted as HTTP/1's are. curl (nghttp2) sends at most 64 KiB of
/// headers, so the limit here is small.
#[test]
fn http2_heads_past_the_limit_are_refused_logged_and_counted() {
    let (dir, s, public, admin) = serve_logging_json("max_header_bytes = 16384\n");
    let url = format!("{public}/");
    // Under the limit with room for the pseudo-headers and curl's own
    // fields; just over it; well past it (the HTTP/2 layer's own check is
    // at twice the limit).
    for (size, status) in [(15_000, 200), (16_400, 431), (30_000, 431)] {
        let header = dir.path().join(format!("h{size}"));
        std::fs::write(&header, format!("X-Big: {}\n", "b".repeat(size))).expect("header");
        let out = Command::new("curl")
            .args(["-s", "--max-time", "10", "--http2-prior-knowledge"])
            .args(["-o", "/dev/null", "-w", "%{http_version} %{http_code}"])
            .arg("-H")
            .arg(format!("@{}", header.display()))
            .arg(&url)
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            format!("2 {status}"),
            "{size}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lines = read_lines(&dir.path().join("logs/access.log"), 3);
    let mut refused = 0;
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(v["protocol"], "HTTP/2.0", "{line}");
        if v["status"] == 431 {
            refused += 1;
            assert!(v["method"].is_null() && v["path"].is_null(), "{line}");
        } else {
            assert_eq!(v["status"], 200, "{line}");
        }
    }
    assert_eq!((lines.len(), refused), (3, 2), "{lines:?}");
    let metrics = get(&admin, "/metrics");
    assert_eq!(
        sample(&metrics, "swan_requests_refused_total", &["status=\"431\""]),
        Some(2.0),
        "{metrics}"
    );
    stop(s.child);
}

/// Starts `swan serve` in `dir` with its access log on stdout: the child
/// (stdout still piped), the public address from the banner, which is on
/// stderr, and stderr's lines as they come (read by a thread, so swan never
/// blocks on it).
fn serve_logging_to_stdout(
    dir: &std::path::Path,
) -> (
    std::process::Child,
    String,
    std::sync::mpsc::Receiver<String>,
) {
    let mut child = support::swan()
        .current_dir(dir)
        .arg("serve")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let (err_tx, err_rx) = std::sync::mpsc::channel::<String>();
    let stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            let _ = err_tx.send(line);
        }
    });
    let banner = stderr_line(&err_rx, "http://").expect("the banner on stderr");
    let public = banner
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .map(|a| a.trim_end_matches('/').to_owned())
        .expect("address");
    (child, public, err_rx)
}

/// The next stderr line holding `needle`, within 15 s.
fn stderr_line(lines: &std::sync::mpsc::Receiver<String>, needle: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return Some(line),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// With the access log on stdout, stdout carries access lines only (the
/// banner goes to stderr); a reload that changes `[log]` says a restart is
/// needed, and the running log keeps its format.
#[test]
fn stdout_is_left_to_the_access_log_and_log_changes_ask_for_a_restart() {
    let config = "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\naccess = \"stdout\"\n\
                  [[site]]\nname = \"main\"\nroot = \"www\"\n";
    let dir = with_servlets(config);
    let (mut child, public, err_rx) = serve_logging_to_stdout(dir.path());
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    assert_eq!(status_of(&get(&public, "/")), 200);
    std::io::BufRead::read_line(&mut stdout, &mut first).expect("a line");
    assert!(
        first.starts_with("127.0.0.1 - - [") && first.contains("\"GET / HTTP/1.1\" 200 "),
        "stdout's first line is an access line: {first:?}"
    );
    // Changing the format needs a restart: said, and not applied.
    std::fs::write(
        dir.path().join("swan.toml"),
        config.replace(
            "access = \"stdout\"\n",
            "access = \"stdout\"\nformat = \"json\"\n",
        ),
    )
    .expect("config");
    assert!(
        stderr_line(
            &err_rx,
            "[log] format changed: they take effect after a restart"
        )
        .is_some(),
        "no restart warning"
    );
    assert_eq!(status_of(&get(&public, "/missing")), 404);
    let mut next = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut next).expect("a line");
    assert!(
        next.starts_with("127.0.0.1 - - [") && next.contains("\" 404 "),
        "still combined: {next:?}"
    );
    drop(stdout);
    stop(child);
}

/// The access log on a stdout nobody reads: requests are still served,
/// and a stop still ends the process (exit 0), within its drain and the
/// log's wait.
#[test]
fn a_stdout_log_nobody_reads_does_not_hold_the_stop() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nworkers = 1\ndrain_timeout = \"2s\"\n\
         [log]\naccess = \"stdout\"\n[[site]]\nroot = \"www\"\n",
    );
    let (mut child, public, stderr) = serve_logging_to_stdout(dir.path());
    // stdout is held open and never read (until the end).
    let mut stdout = child.stdout.take().expect("stdout");
    // Far more lines than a pipe holds (64 KiB), on keep-alive connections.
    let long = "x".repeat(2000);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut stream = TcpStream::connect(&public).expect("connect");
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .expect("timeout");
                let request = format!("GET /?{long} HTTP/1.1\r\nHost: x\r\n\r\n");
                let mut reply = [0u8; 4096];
                for _ in 0..150 {
                    stream.write_all(request.as_bytes()).expect("write");
                    let n = stream.read(&mut reply).expect("read");
                    assert!(reply[..n].starts_with(b"HTTP/1.1 200"), "served");
                }
            });
        }
    });
    let stopping = Instant::now();
    term(&child);
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
    assert!(
        stopping.elapsed() < Duration::from_secs(12),
        "{:?}",
        stopping.elapsed()
    );
    // The stop says what was lost: the lines never written, and those of
    // the stuck write, of which the pipe took some.
    let line = stderr_line(&stderr, "could not be written within").expect("the stop's report");
    let number = |key: &str| -> u64 {
        line.split(&format!("{key}="))
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {line}"))
    };
    let mut piped = Vec::new();
    stdout.read_to_end(&mut piped).expect("read the pipe");
    let whole = piped.iter().filter(|&&b| b == b'\n').count() as u64;
    let (waiting, being_written) = (number("waiting"), number("being_written"));
    assert!(being_written > 0, "{line}");
    // Every answered request is in the pipe, or among those counted.
    assert!(whole + waiting + being_written >= 600, "{whole} + {line}");
    assert!(whole + waiting <= 600, "{whole} + {line}");
}

/// Four clients pipelining 50 requests each (static and servlet, the last
/// one closing): 200 answers.
fn pipelined_burst(public: &str) -> usize {
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    let mut request = String::new();
                    for i in 0..50 {
                        let path = if i % 2 == 0 { "/" } else { "/who" };
                        let close = if i == 49 { "Connection: close\r\n" } else { "" };
                        request.push_str(&format!("GET {path} HTTP/1.1\r\nHost: x\r\n{close}\r\n"));
                    }
                    raw(public, request.as_bytes())
                        .matches("HTTP/1.1 200 ")
                        .count()
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().expect("client")).sum()
    })
}

#[test]
fn every_answered_request_is_logged_or_counted_as_dropped_up_to_the_stop() {
    // A buffer that holds everything, then one of four lines: whatever the
    // writer could not take in time is counted, the rest is in the file,
    // and stopping at once (no grace) loses nothing that was answered.
    for (buffer, format) in [(16_384, "combined"), (4, "json")] {
        let dir = with_servlets(&format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\ndrain_grace = \"0s\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [log]\naccess = \"access.log\"\nformat = \"{format}\"\nbuffer = {buffer}\n\
             [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n"
        ));
        let s = start(dir.path(), &[], true);
        let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
        assert_eq!(pipelined_burst(&public), 200);
        // Each client read to the end: every line is logged or counted.
        let metrics = get(&admin, "/metrics");
        let dropped = sample(&metrics, "swan_access_log_dropped_total", &[]).expect("counter");
        let (code, _) = stop_with_code(s.child);
        assert_eq!(code, Some(0));
        let text = std::fs::read_to_string(dir.path().join("access.log")).expect("log");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len() + dropped as usize,
            200,
            "buffer {buffer}: {} lines, {dropped} dropped",
            lines.len()
        );
        if buffer > 200 {
            assert_eq!(dropped, 0.0);
        }
        assert!(!lines.is_empty());
        for line in lines {
            if format == "json" {
                let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                assert_eq!(v["status"], 200, "{line}");
            } else {
                assert!(line.contains(" HTTP/1.1\" 200 "), "{line}");
            }
        }
    }
}

#[test]
fn json_access_lines_name_the_client_behind_a_trusted_proxy() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[server.proxy]\ntrusted = [\"127.0.0.1\"]\n\
         [log]\naccess = \"access.json\"\nformat = \"json\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    let s = start(dir.path(), &[], false);
    let public = s.urls[0].clone();
    let forwarded = |xff: &str| {
        raw(
            &public,
            format!("GET /who HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {xff}\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
    };
    // The servlet sees the forwarded client; spoofed entries on the left
    // are not believed.
    assert!(
        body(&forwarded("203.0.113.9")).starts_with("203.0.113.9"),
        "direct"
    );
    assert!(body(&forwarded("6.6.6.6, 198.51.100.4")).starts_with("198.51.100.4"));
    assert!(body(&get(&public, "/who")).starts_with("127.0.0.1"));
    let lines = read_lines(&dir.path().join("access.json"), 3);
    let v: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(v[0]["remote"], "203.0.113.9");
    assert_eq!(v[1]["remote"], "198.51.100.4");
    assert_eq!(v[2]["remote"], "127.0.0.1");
    assert_eq!(v[0]["route"], "/who/*");
    assert_eq!(v[0]["status"], 200);
    assert!(v[0]["duration_ms"].as_f64().is_some());
    stop(s.child);

    // The same headers from a peer that is not trusted are ignored.
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[server.proxy]\ntrusted = [\"10.0.0.0/8\"]\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    let s = start(dir.path(), &[], false);
    let reply = raw(
        &s.urls[0],
        b"GET /who HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n",
    );
    assert!(body(&reply).starts_with("127.0.0.1"), "{reply}");
    stop(s.child);
}

#[test]
fn proxy_protocol_listeners_take_the_client_from_the_header() {
    let dir = with_servlets(
        "[server]\nlisten = [{ addr = \"127.0.0.1:0\", proxy_protocol = true }]\n\
         [server.proxy]\ntrusted = [\"127.0.0.0/8\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    let s = start(dir.path(), &[], true);
    let public = s.urls[0].clone();
    let get_who = b"GET /who HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // A balancer's TCP health checks (connect, close) are not refusals:
    // neither counted nor warned about (below).
    for _ in 0..3 {
        drop(TcpStream::connect(&public).expect("connect"));
    }
    std::thread::sleep(Duration::from_millis(300));
    // v1.
    let mut request = b"PROXY TCP4 203.0.113.7 127.0.0.1 51000 80\r\n".to_vec();
    request.extend_from_slice(get_who);
    assert!(body(&raw(&public, &request)).starts_with("203.0.113.7"));
    // v1, IPv6.
    let mut request = b"PROXY TCP6 2001:db8::7 ::1 51000 80\r\n".to_vec();
    request.extend_from_slice(get_who);
    assert!(body(&raw(&public, &request)).starts_with("[2001:db8::7]:51000"));
    // v2, the header split over two writes.
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[
        0x21, 0x11, 0, 12, 198, 51, 100, 9, 127, 0, 0, 1, 0xC3, 0x50, 0, 80,
    ]);
    let mut stream = TcpStream::connect(&public).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(&v2[..10]).expect("write");
    std::thread::sleep(Duration::from_millis(100));
    stream.write_all(&v2[10..]).expect("write");
    stream.write_all(get_who).expect("write");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    assert!(body(&reply).starts_with("198.51.100.9"), "{reply}");
    // No header: the connection is closed without an answer.
    let reply = raw(&public, get_who);
    assert_eq!(status_of(&reply), 0, "{reply}");
    // A malformed one too; the server keeps serving.
    assert_eq!(
        status_of(&raw(
            &public,
            b"PROXY TCP4 nonsense\r\nGET / HTTP/1.1\r\n\r\n"
        )),
        0
    );
    let mut request = b"PROXY UNKNOWN\r\n".to_vec();
    request.extend_from_slice(get_who);
    assert!(body(&raw(&public, &request)).starts_with("127.0.0.1"));
    // The two refused are counted; a connection still sending its header
    // is open.
    let mut waiting = TcpStream::connect(&public).expect("connect");
    waiting.write_all(b"PROXY TCP4 ").expect("write");
    let admin = s.admin.clone().expect("admin");
    let deadline = Instant::now() + Duration::from_secs(5);
    let metrics = loop {
        let m = get(&admin, "/metrics");
        if sample(&m, "swan_connections_open", &[]) >= Some(1.0) || Instant::now() > deadline {
            break m;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        sample(
            &metrics,
            "swan_connections_failed_total",
            &["stage=\"proxy\""]
        ),
        Some(2.0),
        "{metrics}"
    );
    assert!(
        sample(&metrics, "swan_connections_open", &[]) >= Some(1.0),
        "{metrics}"
    );
    drop(waiting);
    // Refusals are worth a warning (a balancer left out of `trusted`
    // loses every connection), one per 10 s at most.
    let log = stop(s.child);
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("PROXY protocol header refused"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(warned[0].contains("did not start with one"), "{log}");
}

#[test]
fn production_keys_are_checked_at_load() {
    let dir = site();
    std::fs::create_dir(dir.path().join("www/logs")).expect("logs");
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    for (toml, expect) in [
        (
            "[server]\nlisten = [{ addr = \"127.0.0.1:0\", tls = true }]\n[[site]]\nroot = \"www\"\n",
            "a TLS listener needs a certificate",
        ),
        (
            "[server]\nlisten = [{ addr = \"127.0.0.1:0\", proxy_protocol = true }]\n[[site]]\nroot = \"www\"\n",
            "accepted only from trusted proxies",
        ),
        (
            "[server.proxy]\ntrusted = [\"10.0.0.0/33\"]\n[[site]]\nroot = \"www\"\n",
            "is not an IP address or network",
        ),
        (
            "[server]\nlisten = [{ addr = \"127.0.0.1:0\", tls = true }]\n[server.tls]\ncert = \"no.pem\"\nkey = \"no.pem\"\n[[site]]\nroot = \"www\"\n",
            "cannot serve this certificate",
        ),
        (
            "[admin]\nlisten = \"localhost:9\"\n[[site]]\nroot = \"www\"\n",
            "is not an IP address",
        ),
        (
            "[log]\nformat = \"apache\"\n[[site]]\nroot = \"www\"\n",
            "unknown access log format",
        ),
        (
            "[log]\nbuffer = 0\n[[site]]\nroot = \"www\"\n",
            "would drop every line",
        ),
        (
            "[log]\naccess = \"\"\n[[site]]\nroot = \"www\"\n",
            "an empty path",
        ),
        (
            "[log]\naccess = \"stderr\"\n[[site]]\nroot = \"www\"\n",
            "\"stderr\" would be a file of that name",
        ),
        // Inside a root (as written, or through `..`), or a servlets folder.
        (
            "[log]\naccess = \"www/logs/../access.log\"\n[[site]]\nroot = \"www\"\n",
            "is inside the root of site",
        ),
        (
            "[log]\naccess = \"servlets/access.log\"\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
            "is inside the servlets folder of site",
        ),
        (
            "[server]\nlisten = [{ adr = \"127.0.0.1:0\" }]\n[[site]]\nroot = \"www\"\n",
            "missing key `addr`",
        ),
        (
            "[server]\ndrain_grace = 5\n[[site]]\nroot = \"www\"\n",
            "expected a duration",
        ),
        (
            "[server]\nlisten = [\"127.0.0.1:9471\"]\n[admin]\nlisten = \"0.0.0.0:9471\"\n[[site]]\nroot = \"www\"\n",
            "0.0.0.0:9471 overlaps the server listener 127.0.0.1:9471",
        ),
        (
            "[admin]\nlisten = \"127.0.0.1:8080\"\n[[site]]\nroot = \"www\"\n",
            "overlaps the server listener 127.0.0.1:8080",
        ),
        (
            "[admin]\nhosts = [\"metrics.internal:9090\"]\n[[site]]\nroot = \"www\"\n",
            "is not a host name",
        ),
        (
            "[admin]\nhosts = [\"*.internal\"]\n[[site]]\nroot = \"www\"\n",
            "there are no wildcards",
        ),
        // An access log that serve could not open.
        (
            "[log]\naccess = \"no-such-folder/access.log\"\n[[site]]\nroot = \"www\"\n",
            "does not exist",
        ),
        (
            "[log]\naccess = \"servlets\"\n[[site]]\nroot = \"www\"\n",
            "is a folder",
        ),
        (
            "[log]\nbuffer = -1\n[[site]]\nroot = \"www\"\n",
            "from 1 to 16777216",
        ),
        // A duration that would wrap to a tiny timeout.
        (
            "[server]\nheader_read_timeout = \"18446744073709552s\"\n[[site]]\nroot = \"www\"\n",
            "from 1ms to a year",
        ),
        (
            "[[site]]\nroot = \"www\"\nhosts = [\"x\", \"b\", \"B\"]\n",
            "host \"b\" is listed twice",
        ),
        (
            "[[site]]\nname = \"x\"\nroot = \"www\"\ndefault = true\n[[site]]\nname = \"x\"\nhosts = [\"b.test\"]\nroot = \"www\"\n",
            "two sites are named \"x\"",
        ),
    ] {
        std::fs::write(dir.path().join("swan.toml"), toml).expect("config");
        let out = support::swan()
            .current_dir(dir.path())
            .arg("check")
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{toml}\n{err}");
        assert!(err.contains(expect), "{toml}\n{err}");
        assert!(err.contains("swan.toml:") && err.contains("hint:"), "{err}");
    }
}

/// The admin listener answers IP addresses, `localhost` and the names
/// `[admin] hosts` lists, and nothing else (a page whose name was
/// rebound to 127.0.0.1 cannot read it); its status page forbids scripts
/// and framing. `[::]` is IPv6 only, so it can share a port number with
/// an IPv4 public listener.
#[test]
fn the_admin_listener_answers_only_its_own_names_and_pages_carry_no_script() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    let admin_addr = if v6 {
        format!("[::]:{port}")
    } else {
        "127.0.0.1:0".to_owned()
    };
    let dir = with_servlets(&format!(
        "[server]\nlisten = [\"127.0.0.1:{port}\"]\n[admin]\nlisten = \"{admin_addr}\"\nhosts = [\"Metrics.Internal.\"]\n[[site]]\nroot = \"www\"\n"
    ));
    let s = start(dir.path(), &[], true);
    let admin = if v6 {
        format!("[::1]:{port}")
    } else {
        s.admin.clone().expect("admin")
    };
    let with_host = |host: &str, path: &str| {
        raw(
            &admin,
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
    };
    for host in [
        "127.0.0.1:9090",
        "[::1]:9090",
        "localhost",
        "metrics.internal:9090",
    ] {
        assert_eq!(status_of(&with_host(host, "/status.json")), 200, "{host}");
    }
    for host in [
        "attacker.example",
        "attacker.example:9090",
        "metrics.internal.attacker.example",
    ] {
        let reply = with_host(host, "/status.json");
        assert_eq!(status_of(&reply), 421, "{host}: {reply}");
        assert!(!body(&reply).contains("attacker"), "{reply}");
    }
    let page = with_host("localhost", "/");
    let head = page
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
        "{head}"
    );
    assert!(head.contains("x-content-type-options: nosniff"), "{head}");
    // The public port is still the public site, on the same number.
    assert_eq!(status_of(&get(&format!("127.0.0.1:{port}"), "/")), 200);
    stop(s.child);
}

/// `/spin`: loops until its deadline.
const SPIN: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (loop $l (br $l)) i32.const 0))"#;

/// A request whose client resets it before the answer (HTTP/2
/// RST_STREAM, here while its servlet runs) is still logged, with NGINX's
/// 499, and counted; the connection goes on. Over HTTP/2 the bytes
/// logged are those sent, not a cached body handed over whole.
#[test]
fn an_http2_request_reset_before_its_answer_is_logged_as_499_and_bytes_are_those_sent() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [log]\naccess = \"logs/access.log\"\nformat = \"json\"\n\
         [[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = \"3s\"\n",
    );
    std::fs::create_dir(dir.path().join("logs")).expect("logs");
    std::fs::write(
        dir.path().join("servlets/spin.wasm"),
        wat::parse_str(SPIN).expect("spin"),
    )
    .expect("spin");
    std::fs::write(dir.path().join("www/mid.html"), "m".repeat(200_000)).expect("mid");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    // HPACK: GET, http, a literal :path and :authority.
    let block = |path: &str| {
        let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
        block.extend(path.as_bytes());
        block.extend([0x01, 1, b'a']);
        block
    };
    let mut stream = TcpStream::connect(&public).expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[]));
    out.extend(h2_frame(0x1, 0x5, 1, &block("/spin")));
    stream.write_all(&out).expect("request");
    std::thread::sleep(Duration::from_millis(300));
    // RST_STREAM (CANCEL), then another request on the same connection.
    let mut out = h2_frame(0x3, 0, 1, &8u32.to_be_bytes());
    out.extend(h2_frame(0x1, 0x5, 3, &block("/")));
    stream.write_all(&out).expect("reset");
    let lines = read_lines(&dir.path().join("logs/access.log"), 2);
    let parsed: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let spin = parsed
        .iter()
        .find(|v| v["path"] == "/spin")
        .unwrap_or_else(|| panic!("no line for the reset request: {lines:?}"));
    assert_eq!(spin["status"], 499, "{lines:?}");
    assert_eq!(spin["protocol"], "HTTP/2.0");
    assert!(
        parsed
            .iter()
            .any(|v| v["path"] == "/" && v["status"] == 200),
        "{lines:?}"
    );
    let metrics = get(&admin, "/metrics");
    assert!(metrics.contains("class=\"4xx\""), "{metrics}");
    drop(stream);
    // A client that grants no window and resets: the bytes logged are
    // those sent (none), not the cached body handed to HTTP/2 at once.
    let mut stream = TcpStream::connect(&public).expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    out.extend(h2_frame(0x1, 0x5, 1, &block("/mid.html")));
    stream.write_all(&out).expect("request");
    std::thread::sleep(Duration::from_millis(300));
    stream
        .write_all(&h2_frame(0x3, 0, 1, &8u32.to_be_bytes()))
        .expect("reset");
    let lines = read_lines(&dir.path().join("logs/access.log"), 3);
    let mid: serde_json::Value = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .find(|v: &serde_json::Value| v["path"] == "/mid.html")
        .unwrap_or_else(|| panic!("no line for /mid.html: {lines:?}"));
    assert_eq!(mid["status"], 200, "{mid}");
    let bytes = mid["bytes"].as_u64().expect("bytes");
    assert!(bytes <= 16 << 10, "{bytes} bytes logged, none sent");
    drop(stream);
    // HEADs over HTTP/1.1, of a servlet and of a file: no body sent.
    for path in ["/who/x", "/mid.html"] {
        let head = format!("HEAD {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        assert_eq!(status_of(&raw(&public, head.as_bytes())), 200);
    }
    // The metric counts the bytes sent, as the log does: the reset body
    // only what went out, the HEADs nothing.
    let lines = read_lines(&dir.path().join("logs/access.log"), 5);
    let logged = |route: &str| -> f64 {
        lines
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line"))
            .filter(|v| {
                let servlet = v["path"].as_str().is_some_and(|p| p.starts_with("/who"));
                (route == "static") != servlet
            })
            .map(|v| v["bytes"].as_f64().expect("bytes"))
            .sum()
    };
    let metrics = get(&admin, "/metrics");
    for (route, label) in [("static", "route=\"static\""), ("who", "route=\"/who/*\"")] {
        assert_eq!(
            sample(body(&metrics), "swan_response_body_bytes_total", &[label]),
            Some(logged(route)),
            "{route}: {lines:?}"
        );
    }
    stop(s.child);
}

/// HTTP/1.1: a client that closes its connection (FIN) or resets it
/// while its servlet runs, even with a pipelined request still unread
/// behind it, is noticed without a write: the servlet is
/// stopped long before its `timeout`, its `max_concurrency` place goes to
/// the next client, and the line says 499 with the servlet's route (not
/// the static files' `-`). What the servlet printed before it was stopped
/// is still logged with its request id. A body over `max_body_bytes`
/// refused before any servlet runs is the route's too.
#[test]
fn an_http1_client_that_leaves_while_its_servlet_runs_is_a_499_of_that_route() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\nmax_body_bytes = 1000\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [log]\naccess = \"logs/access.log\"\nformat = \"json\"\n\
         [[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\ntimeout = \"5s\"\nmax_concurrency = 1\nqueue_timeout = \"4s\"\n",
    );
    std::fs::create_dir(dir.path().join("logs")).expect("logs");
    std::fs::write(
        dir.path().join("servlets/spin.wasm"),
        wat::parse_str(PRINT_THEN_SPIN).expect("spin"),
    )
    .expect("spin");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    let log = dir.path().join("logs/access.log");
    let spin = b"GET /spin HTTP/1.1\r\nHost: a\r\n\r\n";
    let mut ids = Vec::new();
    // A close, a reset, a client that only ends its sending side, and one
    // that closes with a second request still unread behind the first.
    for (n, how) in ["close", "reset", "shutdown", "pipelined"]
        .iter()
        .enumerate()
    {
        let mut stream = TcpStream::connect(&public).expect("connect");
        stream.write_all(spin).expect("request");
        if *how == "pipelined" {
            // Sent once hyper has read the first: it waits in the socket.
            std::thread::sleep(Duration::from_millis(100));
            stream
                .write_all(b"GET /who HTTP/1.1\r\nHost: a\r\n\r\n")
                .expect("second request");
        }
        std::thread::sleep(Duration::from_millis(300));
        match *how {
            "reset" => socket2::SockRef::from(&stream)
                .set_linger(Some(Duration::ZERO))
                .expect("linger"),
            "shutdown" => {
                // Only the sending side ends: the server closes the
                // connection itself, without an answer.
                stream
                    .shutdown(std::net::Shutdown::Write)
                    .expect("shutdown");
                stream
                    .set_read_timeout(Some(Duration::from_secs(3)))
                    .expect("timeout");
                let mut got = Vec::new();
                let read = stream.read_to_end(&mut got);
                assert!(
                    got.is_empty() && read.is_ok(),
                    "half-closed: {read:?} {:?}",
                    String::from_utf8_lossy(&got)
                );
            }
            _ => {}
        }
        drop(stream);
        let lines = read_lines(&log, n + 1);
        let line: serde_json::Value = serde_json::from_str(&lines[n]).expect("a JSON line");
        assert_eq!(line["status"], 499, "{how}: {lines:?}");
        assert_eq!(line["route"], "/spin/*", "{how}: {lines:?}");
        ids.push(line["request_id"].as_str().expect("an id").to_owned());
        let ms = line["duration_ms"].as_f64().expect("duration");
        assert!(
            ms < 2500.0,
            "{how}: stopped after {ms} ms, its timeout is 5 s"
        );
        // Its place is free: nothing of the spin servlet runs any more.
        let metrics = get(&admin, "/metrics");
        let running = sample(
            &metrics,
            "swan_servlet_requests_in_flight",
            &["route=\"/spin/*\""],
        );
        assert_eq!(running, Some(0.0), "{how}: {metrics}");
    }
    let metrics = get(&admin, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("swan_requests_total{")
                && l.contains("route=\"/spin/*\"")
                && l.contains("class=\"4xx\"")
                && l.ends_with(" 4")),
        "{metrics}"
    );
    // Refused on its declared length before the servlet runs: the route's.
    let reply = raw(
        &public,
        b"POST /who HTTP/1.1\r\nHost: a\r\nContent-Length: 5000\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&reply), 413, "{reply}");
    let lines = read_lines(&log, 5);
    let line: serde_json::Value = serde_json::from_str(&lines[4]).expect("a JSON line");
    assert_eq!(
        (&line["status"], &line["route"]),
        (&413.into(), &"/who/*".into()),
        "{lines:?}"
    );
    let server_log = stop(s.child);
    for id in &ids {
        assert!(
            server_log.lines().any(|l| l.contains("spinning now")
                && l.contains("stdout")
                && l.contains(id.as_str())),
            "the output of {id} is not in the log:\n{server_log}"
        );
    }
}

/// Prints a line to stdout (WASI `fd_write`), then spins.
const PRINT_THEN_SPIN: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "spinning now\n")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 13))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (loop $l (br $l))
    i32.const 0))"#;

/// Connections held open on the admin listener (idle, or a flood) never
/// keep a probe waiting: past its cap of 1,024 the oldest is closed and
/// the new one served. Before, a probe waited for a slot (up to 3 s, over
/// a Kubernetes probe's 1 s timeout).
#[test]
fn idle_connections_cannot_keep_a_probe_waiting_on_the_admin_listener() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], true);
    let admin = s.admin.clone().expect("admin");
    let addr: std::net::SocketAddr = admin.parse().expect("address");
    let idle: Vec<TcpStream> = (0..1100)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect();
    assert!(idle.len() > 1024, "only {} connections", idle.len());
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..3 {
        let started = Instant::now();
        let reply = get(&admin, "/livez");
        assert_eq!(status_of(&reply), 200, "{reply}");
        assert!(
            started.elapsed() < Duration::from_millis(900),
            "{:?}",
            started.elapsed()
        );
    }
    drop(idle);
    stop(s.child);
}

/// A site renamed by a configuration reload takes its metric series with
/// it: the old name's series leave `/metrics` (they piled up with every
/// rename), the new name's appear.
#[test]
fn a_site_renamed_by_a_reload_leaves_the_metrics() {
    let dir = site();
    let config = |name: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [[site]]\nname = \"{name}\"\nroot = \"www\"\n"
        )
    };
    std::fs::write(dir.path().join("swan.toml"), config("before")).expect("config");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    assert_eq!(status_of(&get(&public, "/")), 200);
    assert!(get(&admin, "/metrics").contains("site=\"before\""));
    std::fs::write(dir.path().join("swan.toml"), config("after")).expect("config");
    let _ = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert_eq!(status_of(&get(&public, "/")), 200);
        let metrics = get(&admin, "/metrics");
        if metrics.contains("site=\"after\"") {
            assert!(!metrics.contains("site=\"before\""), "{metrics}");
            break;
        }
        assert!(Instant::now() < deadline, "never renamed: {metrics}");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(s.child);
}

/// The ready queue of a servlet comes back to `prewarm` once the slots of
/// `server.max_instances` that other servlets took are free again, rather
/// than limping on with one instance made per request.
#[test]
fn prewarmed_instances_come_back_after_other_servlets_took_every_slot() {
    let dir = site();
    for (folder, name, wat) in [("servlets", "spin", SPIN), ("apps", "who", WHO)] {
        std::fs::create_dir_all(dir.path().join(folder)).expect("folder");
        std::fs::write(
            dir.path().join(format!("{folder}/{name}.wasm")),
            wat::parse_str(wat).expect("wat"),
        )
        .expect("servlet");
    }
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\nmax_instances = 4\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\nprewarm = 0\ntimeout = \"1s\"\n\
         [[site.route]]\npath = \"/who\"\nservlet = \"apps/who.wasm\"\nprewarm = 3\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    let ready = || {
        sample(
            &get(&admin, "/metrics"),
            "swan_servlet_instances_ready",
            &["route=\"/who\""],
        )
    };
    let settles_at = |want: f64| {
        let deadline = Instant::now() + Duration::from_secs(3);
        while ready() != Some(want) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        ready()
    };
    assert_eq!(settles_at(3.0), Some(3.0), "filled at load");
    // Three spinning requests take the free slot and two of who's three.
    let spins: Vec<_> = (0..3)
        .map(|_| {
            let public = public.clone();
            std::thread::spawn(move || status_of(&get(&public, "/spin")))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // who's last instance serves; its refill finds one slot free (the
    // one that instance held), and no more.
    assert_eq!(status_of(&get(&public, "/who")), 200);
    assert_eq!(settles_at(1.0), Some(1.0), "one slot to refill into");
    for spin in spins {
        assert_eq!(spin.join().expect("spin"), 504);
    }
    // The slots are free: one request, and the queue is full again (not
    // one made for each request taken).
    assert_eq!(status_of(&get(&public, "/who")), 200);
    assert_eq!(settles_at(3.0), Some(3.0), "refilled to prewarm");
    stop(s.child);
}

/// `/chatty`: logs a line that tries to forge a server log line (a newline,
/// a timestamp, a CR, a NUL), then 5,000 one-byte lines and 5,000 empty
/// ones.
const CHATTY: &str = r#"(module
  (import "swan" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "x")
  (data (i32.const 16) "hello\n2026-12-02T00:00:00.000000Z ERROR swan: forged\rhidden\00end")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32)
    (call $log (i32.const 1) (i32.const 16) (i32.const 67))
    (loop $l
      (call $log (i32.const 1) (i32.const 0) (i32.const 1))
      (call $log (i32.const 1) (i32.const 0) (i32.const 0))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $n) (i32.const 5000))))
    i32.const 0))"#;

/// A guest's log lines are capped per request in lines as in bytes (each
/// costs its text and 64 bytes, so at most about a thousand), empty ones
/// are not logged, and a guest cannot forge a server log line: its text
/// is split at newlines and its control characters escaped. Before, 5,000
/// calls wrote 5,000 lines (200,000 empty ones as many), and the forged
/// line stood alone with its own timestamp.
#[test]
fn guest_log_lines_are_capped_in_number_and_cannot_forge_server_lines() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\naccess = \"stdout\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    std::fs::write(
        dir.path().join("servlets/chatty.wasm"),
        wat::parse_str(CHATTY).expect("chatty"),
    )
    .expect("chatty");
    let (child, public, lines) = serve_logging_to_stdout(dir.path());
    assert_eq!(status_of(&get(&public, "/chatty")), 200);
    let mut chatty = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) if line.contains("chatty") => chatty.push(line),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        (900..=1100).contains(&chatty.len()),
        "{} lines logged",
        chatty.len()
    );
    assert!(
        chatty
            .iter()
            .all(|l| !l.starts_with("2026-12-02T00:00:00") && !l.contains(['\r', '\0'])),
        "{:?}",
        &chatty[..3.min(chatty.len())]
    );
    assert!(
        chatty
            .iter()
            .any(|l| l.contains("forged\\u{d}hidden\\u{0}end")),
        "{:?}",
        &chatty[..3.min(chatty.len())]
    );
    stop(child);
}

/// `/bad`: passes `request_get` a buffer outside its memory, from a
/// function whose name (in the module's name section) tries to forge a
/// server log line.
const BAD_POINTER: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $inner (@name "inner\n2026-12-02T00:00:00.000000Z ERROR swan: forged") (result i32)
    (call $get (i32.const 1) (i32.const 0x7fffff00) (i32.const 4096)))
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func $swan_handle (export "swan_handle") (result i32) (drop (call $inner)) i32.const 0))"#;

/// A guest's failure is one log line that names the host call it broke
/// and the guest's frames, with the names a module gave its functions
/// escaped. Before, wasmtime's backtrace spread over several lines, the
/// forged name stood alone as a line with its own timestamp, and the call
/// was not named.
#[test]
fn a_guest_fault_is_one_log_line_naming_the_host_call() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\naccess = \"stdout\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    );
    std::fs::write(
        dir.path().join("servlets/bad.wasm"),
        wat::parse_str(BAD_POINTER).expect("bad"),
    )
    .expect("bad");
    let (child, public, lines) = serve_logging_to_stdout(dir.path());
    assert_eq!(status_of(&get(&public, "/bad")), 500);
    let mut logged = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains("servlet trapped");
                logged.push(line);
                if done {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let fault = logged
        .iter()
        .find(|l| l.contains("servlet trapped"))
        .unwrap_or_else(|| panic!("no fault logged: {logged:#?}"));
    for want in [
        "outside its memory",
        "in swan::request_get",
        "at inner\\u{a}2026-12-02T00:00:00.000000Z ERROR swan: forged",
        "< swan_handle",
    ] {
        assert!(fault.contains(want), "{want:?} not in {fault:?}");
    }
    // Nothing more of it on the lines that follow.
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(300)) {
        assert!(
            !line.starts_with(' ') && !line.contains("forged"),
            "a line of the fault's own: {line:?}"
        );
    }
    stop(child);
}

/// A store whose settings change in a reloaded configuration keeps its
/// running settings until a restart, and the log says so (before, the
/// change was silently ignored).
#[test]
fn a_store_changed_by_a_reload_is_named_in_the_log() {
    let config = |max_key: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[log]\naccess = \"stdout\"\n\
             [[store]]\nname = \"sessions\"\nkind = \"embedded\"\nmax_key_bytes = \"{max_key}\"\n\
             [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
             [site.servlet]\nstores = [\"sessions\"]\n"
        )
    };
    let dir = with_servlets(&config("64 B"));
    let (child, public, lines) = serve_logging_to_stdout(dir.path());
    assert_eq!(status_of(&get(&public, "/who")), 200);
    std::fs::write(dir.path().join("swan.toml"), config("16 B")).expect("config");
    let _ = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status();
    let line = stderr_line(&lines, "store settings changed");
    assert!(
        line.as_deref().is_some_and(|l| l.contains("sessions")),
        "{line:?}"
    );
    stop(child);
}

/// With `ready_needs_stores = false`, a store that fails leaves `/readyz`
/// green: several processes sharing one Redis would otherwise all leave
/// their balancer together, static files included. The same setup with
/// the default goes 503 within seconds (the test below). The outage is
/// still shown (status page, `swan_store_up`), and its end.
#[test]
fn readiness_can_leave_the_stores_out() {
    let dir = with_servlets(
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\
         [admin]\nlisten = \"127.0.0.1:0\"\nready_needs_stores = false\n\
         [[store]]\nname = \"sessions\"\nkind = \"embedded\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\nstores = [\"sessions\"]\n",
    );
    let s = start(dir.path(), &[], true);
    let admin = s.admin.clone().expect("admin");
    assert!(ready_within(&admin, Duration::from_secs(10)));
    let file = dir.path().join("data/sessions.redb");
    std::fs::rename(&file, dir.path().join("data/away.redb")).expect("move the file away");
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let reply = get(&admin, "/readyz");
        assert_eq!(status_of(&reply), 200, "{reply}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The outage still shows: on the status page, in /status.json and as
    // swan_store_up.
    let metrics = get(&admin, "/metrics");
    assert!(
        metrics.contains("swan_store_up{store=\"sessions\",kind=\"embedded\"} 0"),
        "{metrics}"
    );
    let status = get(&admin, "/status.json");
    assert!(status.contains("\"state\":\"down: "), "{status}");
    let page = get(&admin, "/");
    assert!(page.contains("<td class=bad>down: "), "{page}");
    // And its end.
    std::fs::rename(dir.path().join("data/away.redb"), &file).expect("move the file back");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !get(&admin, "/metrics").contains("swan_store_up{store=\"sessions\",kind=\"embedded\"} 1")
    {
        assert!(Instant::now() < deadline, "the store never came back up");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(get(&admin, "/status.json").contains("\"state\":\"up\""));
    stop(s.child);
}

/// `/readyz` checks the stores some route lists now: one a reload left
/// unlisted (here, its file then removed) holds up nothing. Before, every
/// store opened at start was checked for good. One a reload takes out of
/// the configuration leaves `/metrics` and the status page too.
#[test]
fn readiness_checks_only_the_stores_routes_list_now() {
    let config = |listed: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [[store]]\nname = \"sessions\"\nkind = \"embedded\"\n\
             [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
             [site.servlet]\nstores = [{listed}]\n"
        )
    };
    let dir = with_servlets(&config("\"sessions\""));
    let s = start(dir.path(), &[], true);
    let admin = s.admin.clone().expect("admin");
    assert!(ready_within(&admin, Duration::from_secs(10)));
    let file = dir.path().join("data/sessions.redb");
    std::fs::rename(&file, dir.path().join("data/away.redb")).expect("move the file away");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&get(&admin, "/readyz")) != 503 {
        assert!(
            Instant::now() < deadline,
            "a listed store's file removed: still ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(dir.path().join("swan.toml"), config("")).expect("config");
    let _ = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status();
    assert!(
        ready_within(&admin, Duration::from_secs(10)),
        "{}",
        get(&admin, "/readyz")
    );
    // Still configured, though unlisted: still shown (down).
    let up = "swan_store_up{store=\"sessions\"";
    assert!(get(&admin, "/metrics").contains(up));
    // Taken out of the configuration: it leaves /metrics and the status
    // page (an alert on its swan_store_up would fire for nothing), and
    // comes back with it.
    let without = config("").replace("[[store]]\nname = \"sessions\"\nkind = \"embedded\"\n", "");
    for (text, shown) in [(without, false), (config(""), true)] {
        std::fs::write(dir.path().join("swan.toml"), text).expect("config");
        let _ = Command::new("kill")
            .args(["-HUP", &s.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while get(&admin, "/metrics").contains(up) != shown {
            assert!(Instant::now() < deadline, "store shown: {}", !shown);
            std::thread::sleep(Duration::from_millis(100));
        }
        let status = get(&admin, "/status.json");
        assert_eq!(status.contains("\"name\":\"sessions\""), shown, "{status}");
    }
    stop(s.child);
}

/// A servlet removed from its folder, or a route taken out of the
/// configuration, takes its series out of `/metrics`: deploys under new
/// names (`api-v123.wasm`) do not pile up series for the life of the
/// process. The routes that stay keep their counts.
#[test]
fn removed_routes_leave_the_metrics() {
    let config = |route: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
             [[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n{route}"
        )
    };
    let routed = "[[site.route]]\npath = \"/api-v1/*\"\nservlet = \"routed/who.wasm\"\n";
    let dir = with_servlets(&config(routed));
    std::fs::create_dir(dir.path().join("routed")).expect("routed");
    std::fs::copy(
        dir.path().join("servlets/who.wasm"),
        dir.path().join("routed/who.wasm"),
    )
    .expect("routed module");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    std::fs::copy(
        dir.path().join("servlets/who.wasm"),
        dir.path().join("servlets/v1.wasm"),
    )
    .expect("deploy v1");
    goes_live(&public, "/v1");
    for path in ["/who", "/api-v1/x"] {
        assert_eq!(status_of(&get(&public, path)), 200, "{path}");
    }
    let series = |route: &str| {
        get(&admin, "/metrics")
            .lines()
            .filter(|l| {
                l.starts_with("swan_requests_total{") && l.contains(&format!("route=\"{route}\""))
            })
            .count()
    };
    for route in ["/v1/*", "/who/*", "/api-v1/*"] {
        assert!(series(route) > 0, "{route}");
    }
    std::fs::remove_file(dir.path().join("servlets/v1.wasm")).expect("remove v1");
    let deadline = Instant::now() + Duration::from_secs(10);
    while series("/v1/*") > 0 {
        assert!(Instant::now() < deadline, "v1's series stayed");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The status page's recent reloads say what each one changed.
    let status = get(&admin, "/status.json");
    let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
    let details: Vec<&str> = json["reloads"]
        .as_array()
        .expect("reloads")
        .iter()
        .filter_map(|r| r["detail"].as_str())
        .collect();
    for change in ["added /v1/* (v1.wasm)", "removed /v1/* (v1.wasm)"] {
        assert!(
            details.iter().any(|d| d.contains(change)),
            "{change}: {details:?}"
        );
    }
    std::fs::write(dir.path().join("swan.toml"), config("")).expect("config");
    let _ = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while series("/api-v1/*") > 0 {
        assert!(
            Instant::now() < deadline,
            "the removed route's series stayed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(series("/who/*") > 0, "a route that stays keeps its series");
    // The configuration reload's entry names the route it took out.
    let status = get(&admin, "/status.json");
    let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
    let configuration = json["reloads"]
        .as_array()
        .expect("reloads")
        .iter()
        .filter(|r| r["what"] == "configuration")
        .filter_map(|r| r["detail"].as_str())
        .collect::<Vec<_>>();
    assert!(
        configuration
            .iter()
            .any(|d| d.contains("removed /api-v1/* (who.wasm)")),
        "{configuration:?}"
    );
    // Each addition and removal is a log line naming the route.
    let log = stop(s.child);
    assert!(
        log.lines()
            .any(|l| l.contains("servlet added") && l.contains("route=/v1/*")),
        "{log}"
    );
    for route in ["/v1/*", "/api-v1/*"] {
        assert!(
            log.lines()
                .any(|l| l.contains("servlet removed") && l.contains(&format!("route={route}"))),
            "{route}: {log}"
        );
    }
    assert!(
        !log.lines()
            .any(|l| l.contains("servlet removed") && l.contains("route=/who/*")),
        "{log}"
    );
}

/// A configuration reload's entry on the status page says what the log
/// says: servlets it refused, and settings left for a restart.
#[test]
fn a_configuration_reload_names_refused_servlets_and_restart_settings_on_the_status_page() {
    let base = "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let dir = with_servlets(&format!(
        "{base}[[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n"
    ));
    std::fs::create_dir(dir.path().join("extra")).expect("extra");
    std::fs::write(dir.path().join("extra/bad.wasm"), b"not wasm").expect("bad");
    let s = start(dir.path(), &[], true);
    let admin = s.admin.clone().expect("admin");
    std::fs::write(
        dir.path().join("swan.toml"),
        format!(
            "{base}ready_needs_stores = false\n[[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n\
             [[site.route]]\npath = \"/bad/*\"\nservlet = \"extra/bad.wasm\"\n"
        ),
    )
    .expect("config");
    let _ = Command::new("kill")
        .args(["-HUP", &s.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    let entry = loop {
        let status = get(&admin, "/status.json");
        let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
        if let Some(entry) = json["reloads"]
            .as_array()
            .and_then(|r| r.iter().find(|e| e["what"] == "configuration"))
        {
            break entry.clone();
        }
        assert!(Instant::now() < deadline, "no configuration reload: {json}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // It went live (the rest of it serves), with a servlet refused: not
    // "ok", not "refused" either.
    assert_eq!(entry["ok"], false, "{entry}");
    assert_eq!(entry["applied"], true, "{entry}");
    let page = get(&admin, "/");
    assert!(page.contains("live in part: "), "{page}");
    let metrics = get(&admin, "/metrics");
    assert_eq!(
        sample(&metrics, "swan_reloads_total", &["result=\"partial\""]),
        Some(1.0),
        "{metrics}"
    );
    let detail = entry["detail"].as_str().expect("detail");
    assert!(
        detail.contains("servlets refused") && detail.contains("bad.wasm"),
        "{detail}"
    );
    assert!(
        detail.contains("needs a restart: [admin] ready_needs_stores"),
        "{detail}"
    );
    stop(s.child);
}

/// A servlet whose name cannot be a route (`/NAME`) is refused like any
/// other: on the status page, in `swan check`, once in the log.
#[test]
fn a_servlet_named_so_it_cannot_be_a_route_is_shown_refused() {
    let dir = with_servlets(&format!(
        "{BASE}[[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n"
    ));
    std::fs::copy(
        dir.path().join("servlets/who.wasm"),
        dir.path().join("servlets/<b>x y.wasm"),
    )
    .expect("copy");
    // A name that is not UTF-8 is refused too, not skipped unseen.
    let not_utf8 = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"bad\xff.wasm");
    std::fs::copy(
        dir.path().join("servlets/who.wasm"),
        dir.path().join("servlets").join(not_utf8),
    )
    .expect("copy");
    let check = support::swan()
        .current_dir(dir.path())
        .arg("check")
        .output()
        .expect("check");
    let out = String::from_utf8_lossy(&check.stdout);
    let err = String::from_utf8_lossy(&check.stderr);
    assert!(
        format!("{out}{err}").contains("not a valid URL segment"),
        "{out}\n{err}"
    );
    assert_eq!(check.status.code(), Some(1), "{out}\n{err}");
    assert!(
        format!("{out}{err}").contains("bad\u{fffd}.wasm"),
        "{out}\n{err}"
    );
    let s = start(dir.path(), &[], true);
    // The banner counts the servlets that serve, and says two were refused.
    assert!(
        s.banner.contains(" servlets (2 refused: see the log)"),
        "{}",
        s.banner
    );
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    assert_eq!(status_of(&get(&public, "/who")), 200);
    let status = get(&admin, "/status.json");
    let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
    let refused = json["sites"][0]["refused"].to_string();
    assert!(
        refused.contains("<b>x y.wasm")
            && refused.contains("bad\u{fffd}.wasm")
            && refused.contains("not a valid URL segment"),
        "{refused}"
    );
    let page = get(&admin, "/");
    assert!(page.contains("&lt;b&gt;x y.wasm"), "{page}");
    // A reload of the folder does not log it again.
    std::fs::write(dir.path().join("www/new.html"), "new").expect("touch");
    std::fs::copy(
        dir.path().join("servlets/who.wasm"),
        dir.path().join("servlets/who2.wasm"),
    )
    .expect("copy");
    goes_live(&public, "/who2");
    let log = stop(s.child);
    assert_eq!(log.matches("not a valid URL segment").count(), 2, "{log}");
}

/// A native servlet that GETs the URL in its `URL` setting with
/// `http_send`, and answers `refused` when the call fails, `sent` when not.
const FETCH: &str = r#"(module
  (import "swan" "setting" (func $setting (param i32 i32 i32 i32) (result i32)))
  (import "swan" "http_send" (func $send (param i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "URL")
  (data (i32.const 16) "refusedsent")
  (data (i32.const 100) "GET ")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32)
    (local.set $n (call $setting (i32.const 0) (i32.const 3) (i32.const 104) (i32.const 1000)))
    (i32.store8 (i32.add (i32.const 104) (local.get $n)) (i32.const 10))
    (i32.store8 (i32.add (i32.const 105) (local.get $n)) (i32.const 10))
    (if (i32.lt_s (call $send (i32.const 100) (i32.add (local.get $n) (i32.const 6))) (i32.const 0))
      (then (drop (call $write (i32.const 16) (i32.const 7))))
      (else (drop (call $write (i32.const 23) (i32.const 4)))))
    i32.const 0))"#;

/// An outbound request the rules refuse is logged as a warning that names
/// the servlet, the request and the destination (scheme, host and port,
/// never the path or query), and says which rule refused it.
#[test]
fn refused_outbound_requests_are_logged_with_why() {
    let dir = site();
    std::fs::write(
        dir.path().join("fetch.wasm"),
        wat::parse_str(FETCH).expect("fetch"),
    )
    .expect("fetch");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\n\
         [[site.route]]\npath = \"/deny\"\nservlet = \"fetch.wasm\"\n\
         [site.route.settings]\nURL = \"http://127.0.0.1:9/secret?token=abc\"\n\
         [[site.route]]\npath = \"/private\"\nservlet = \"fetch.wasm\"\nallowed_outbound_hosts = [\"http://localhost:9\"]\n\
         [site.route.settings]\nURL = \"http://localhost:9/secret?token=abc\"\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], false);
    let public = &s.urls[0];
    for path in ["/deny", "/private"] {
        let reply = get(public, path);
        assert_eq!(body(&reply), "refused", "{path}: {reply}");
    }
    let log = stop(s.child);
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{log}"))
            .to_owned()
    };
    let denied = line("no rule of the route's allowed_outbound_hosts allows it");
    let private = line("loopback, private or link-local address");
    for (l, to) in [
        (&denied, "http://127.0.0.1:9"),
        (&private, "http://localhost:9"),
    ] {
        assert!(l.contains("WARN"), "{l}");
        assert!(l.contains("servlet=fetch"), "{l}");
        assert!(l.contains("request_id="), "{l}");
        assert!(l.contains(&format!("to={to}")), "{l}");
    }
    assert!(!log.contains("token=abc"), "{log}");
}

/// A configuration saved in two writes with a pause between them (an
/// editor or a script caught half-way) is not reported as refused: the
/// half-written file is read again once the rest arrives, and the whole
/// one goes live. A file that stays broken is refused as before.
#[test]
fn a_configuration_caught_half_written_is_read_again_not_refused() {
    let base = "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n";
    let site = "[[site]]\nname = \"main\"\nroot = \"www\"\nservlets = \"servlets\"\n";
    let dir = with_servlets(&format!("{base}{site}"));
    let s = start(dir.path(), &[], true);
    let admin = s.admin.clone().expect("admin");
    let reloads = || -> Vec<serde_json::Value> {
        let status = get(&admin, "/status.json");
        let json: serde_json::Value = serde_json::from_str(body(&status)).expect("status JSON");
        json["reloads"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["what"] == "configuration")
            .cloned()
            .collect()
    };
    let whole = format!(
        "{base}{site}[[site.route]]\npath = \"/greeting/*\"\nservlet = \"servlets/who.wasm\"\n"
    );
    let (first, rest) = whole.split_at(whole.len() - 20);
    let path = dir.path().join("swan.toml");
    {
        let mut file = std::fs::File::create(&path).expect("config");
        file.write_all(first.as_bytes()).expect("first part");
        file.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(150));
        file.write_all(rest.as_bytes()).expect("the rest");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let entries = reloads();
        if !entries.is_empty() {
            break entries;
        }
        assert!(Instant::now() < deadline, "no configuration reload");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["ok"], true, "{entries:?}");
    assert_eq!(status_of(&get(&s.urls[0], "/greeting/x")), 200);
    // Broken for good: refused, once.
    std::fs::write(&path, format!("{base}{site}[[site.route]]\npath = \"/x\n")).expect("broken");
    let deadline = Instant::now() + Duration::from_secs(10);
    while reloads().len() < 2 {
        assert!(Instant::now() < deadline, "the broken file was not refused");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(reloads()[0]["ok"], false);
    let log = stop(s.child);
    assert_eq!(
        log.matches("configuration change refused").count(),
        1,
        "{log}"
    );
}
