//! The real binary under stress: descriptor exhaustion, SIGTERM under
//! load, a module that loops at start-up. Every load loop here is bounded
//! in count and time and stays on loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod support;
use support::{get, h2_frame, serve_in, site, spawn_serving, stop};

/// Waits for `child` to exit, at most `wait`.
fn exit_code(child: &mut Child, wait: Duration) -> Option<i32> {
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn running_out_of_descriptors_backs_off_and_recovers() {
    let dir = site();
    let mut command = Command::new("prlimit");
    command
        .arg("--nofile=256:256")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_swan"))
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("www"));
    let (mut child, addr) = spawn_serving(command);
    // Twice the server's descriptor limit in open connections.
    let mut held = Vec::new();
    for _ in 0..512 {
        match TcpStream::connect(&addr) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    assert!(held.len() > 300, "only {} connections", held.len());
    std::thread::sleep(Duration::from_millis(500));
    assert!(child.try_wait().expect("wait").is_none(), "swan died");
    drop(held);
    // Back to normal within a few back-off periods.
    let started = Instant::now();
    let mut reply = String::new();
    while started.elapsed() < Duration::from_secs(15) {
        reply = get(&addr, "/");
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = stop(child);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}\n{log}");
    assert!(log.contains("accept failed"), "{log}");
}

#[test]
fn sigterm_under_load_lets_every_answered_request_finish_whole() {
    let dir = site();
    std::fs::write(dir.path().join("www/big.bin"), vec![b'b'; 1 << 20]).expect("big");
    let (mut child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0", "--root", "www"]);
    let stopping = Arc::new(AtomicBool::new(false));
    let whole = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stopping, whole) = (addr.clone(), stopping.clone(), whole.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let started = Instant::now();
                for _ in 0..2000 {
                    if started.elapsed() > Duration::from_secs(10) {
                        break;
                    }
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        // Refused: the server stopped accepting. Fine once
                        // SIGTERM was sent.
                        return if stopping.load(Ordering::Relaxed) {
                            Ok(())
                        } else {
                            Err("refused before SIGTERM".to_owned())
                        };
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                    if s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        .is_err()
                    {
                        continue;
                    }
                    let mut reply = Vec::new();
                    let _ = s.read_to_end(&mut reply);
                    if reply.is_empty() && stopping.load(Ordering::Relaxed) {
                        continue; // closed before it was read: not answered
                    }
                    if !reply.starts_with(b"HTTP/1.1 200") || reply.len() < 1 << 20 {
                        return Err(format!("a cut answer: {} bytes", reply.len()));
                    }
                    whole.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    stopping.store(true, Ordering::Relaxed);
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let code = exit_code(&mut child, Duration::from_secs(20));
    for c in clients {
        let result = c.join().expect("client thread");
        assert!(result.is_ok(), "{result:?}");
    }
    assert_eq!(code, Some(0));
    assert!(
        whole.load(Ordering::Relaxed) > 10,
        "too few answers to mean anything"
    );
}

#[test]
fn a_module_looping_at_start_up_is_refused_and_sigterm_still_exits() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    let looping = wat::parse_str(
        r#"(module (memory (export "memory") 1)
             (func $s (loop $l (br $l))) (start $s)
             (func (export "swan_abi_version") (result i32) i32.const 1)
             (func (export "swan_handle") (result i32) i32.const 0))"#,
    )
    .expect("wat");
    std::fs::write(dir.path().join("servlets/spin.wasm"), looping).expect("write");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = \"500ms\"\n",
    )
    .expect("config");
    let started = Instant::now();
    let (mut child, addr) = serve_in(dir.path(), &["--config", "swan.toml"]);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Refused with no earlier version: 500, as a refused route.
    assert!(get(&addr, "/spin").starts_with("HTTP/1.1 500"));
    assert!(get(&addr, "/").starts_with("HTTP/1.1 200"));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert_eq!(exit_code(&mut child, Duration::from_secs(15)), Some(0));
    let mut log = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut log);
    }
    assert!(
        log.contains("spin.wasm") && log.contains("deadline"),
        "{log}"
    );
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// HTTP/2 clients that open every stream they may for large files, grant
/// the largest windows, and read nothing: the server's memory stays
/// bounded: about 6 MiB per connection, 24 MB for these four (before,
/// about 640 KB per stream, 160 MiB per connection). The limit leaves
/// room for that, far under what any one unbounded stream buffer takes.
#[test]
fn http2_streams_nobody_reads_hold_bounded_memory() {
    let dir = site();
    std::fs::write(dir.path().join("www/big.bin"), vec![b'b'; 20 << 20]).expect("big");
    let (child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0", "--root", "www"]);
    // Warm the page cache and the server's own allocations.
    assert!(get(&addr, "/big.bin").starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(child.id());
    // HPACK: GET, http, literal :path and :authority.
    let mut block = vec![0x82, 0x86, 0x04, 8];
    block.extend(b"/big.bin");
    block.extend([0x01, 1, b'a']);
    let mut sockets = Vec::new();
    for _ in 0..4 {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        let target: std::net::SocketAddr = addr.parse().expect("addr");
        socket.connect(&target.into()).expect("connect");
        let mut stream: TcpStream = socket.into();
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // SETTINGS_INITIAL_WINDOW_SIZE = 2^31 - 1; the connection's window
        // raised to match.
        out.extend(h2_frame(0x4, 0, 0, &[0, 4, 0x7f, 0xff, 0xff, 0xff]));
        out.extend(h2_frame(
            0x8,
            0,
            0,
            &(0x7fff_ffffu32 - 65_535).to_be_bytes(),
        ));
        for i in 0..128u32 {
            // HEADERS with END_STREAM and END_HEADERS.
            out.extend(h2_frame(0x1, 0x5, 2 * i + 1, &block));
        }
        stream.write_all(&out).expect("streams");
        sockets.push(stream);
    }
    std::thread::sleep(Duration::from_secs(3));
    let grown = rss_kib(child.id()).saturating_sub(before);
    // The streams were answered: a HEADERS frame saying 200.
    let mut seen = Vec::new();
    let mut buf = [0u8; 16384];
    sockets[0]
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    while seen.len() < 256 << 10 {
        match sockets[0].read(&mut buf) {
            Ok(n) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let mut answered = false;
    let mut at = 0;
    while let Some(frame) = seen.get(at..at + 9) {
        let len = usize::from(frame[0]) << 16 | usize::from(frame[1]) << 8 | usize::from(frame[2]);
        if frame[3] == 0x1 && seen.get(at + 9) == Some(&0x88) {
            answered = true;
            break;
        }
        at += 9 + len;
    }
    drop(sockets);
    // The server is fine afterwards.
    assert!(get(&addr, "/").starts_with("HTTP/1.1 200"));
    let log = stop(child);
    assert!(
        answered,
        "no stream answered: {:?}",
        &seen[..seen.len().min(64)]
    );
    assert!(
        grown < 48 << 10,
        "512 unread streams grew the server by {grown} KiB\n{log}"
    );
}

/// `/logs`: 1,000 `log` calls of 1 KiB each in one request, then "ok".
const LOG_FLOOD: &str = r#"(module
  (import "swan" "log" (func $log (param i32 i32 i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "ok")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $i i32)
    (memory.fill (i32.const 1024) (i32.const 120) (i32.const 1024))
    (loop $l
      (call $log (i32.const 2) (i32.const 1024) (i32.const 1024))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 1000))))
    (drop (call $write (i32.const 0) (i32.const 2)))
    i32.const 0))"#;

/// `/headers`: 300 response headers of 60,000 bytes each (18 MB the host
/// would copy), then "ok".
const HEADER_FLOOD: &str = r#"(module
  (import "swan" "response_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "x-big")
  (data (i32.const 16) "ok")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $i i32)
    (memory.fill (i32.const 1024) (i32.const 97) (i32.const 60000))
    (loop $l
      (drop (call $header (i32.const 0) (i32.const 5) (i32.const 1024) (i32.const 60000)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 300))))
    (drop (call $write (i32.const 16) (i32.const 2)))
    i32.const 0))"#;

/// What a native servlet makes the host hold or write is bounded: its
/// response headers (64 KiB, then the request fails with a 500) and its
/// `log` calls (64 KiB a request, then dropped with one warning), as its
/// stdout and stderr are.
#[test]
fn a_native_guest_flooding_headers_or_the_log_is_bounded() {
    let dir = site();
    let servlets = dir.path().join("servlets");
    std::fs::create_dir(&servlets).expect("servlets");
    for (name, text) in [("logs", LOG_FLOOD), ("headers", HEADER_FLOOD)] {
        let wasm = wat::parse_str(text).expect("wat");
        std::fs::write(servlets.join(format!("{name}.wasm")), wasm).expect("servlet");
    }
    // The log goes to a file: a pipe nobody reads until the end would
    // hold the server up.
    let log_path = dir.path().join("swan.log");
    let log_file = std::fs::File::create(&log_path).expect("log file");
    let mut child = support::swan()
        .current_dir(dir.path())
        .arg("serve")
        .args(support::SITE_ARGS)
        .stdout(std::process::Stdio::piped())
        .stderr(log_file)
        .spawn()
        .expect("spawn");
    let addr = support::banner_address(&mut child)
        .unwrap_or_else(|banner| panic!("no url in banner: {banner:?}"));
    let before = std::fs::metadata(&log_path).map_or(0, |m| m.len());
    for _ in 0..3 {
        let reply = get(&addr, "/logs");
        assert_eq!(support::status_of(&reply), 200, "{reply}");
    }
    let headers = get(&addr, "/headers");
    assert_eq!(
        support::status_of(&headers),
        500,
        "{}",
        &headers[..headers.len().min(300)]
    );
    assert!(headers.len() < 4096, "{} bytes", headers.len());
    assert!(get(&addr, "/").ends_with("cli hello"));
    support::term(&child);
    let _ = exit_code(&mut child, Duration::from_secs(10));
    let log = std::fs::read_to_string(&log_path).expect("log");
    let grown = log.len() as u64 - before;
    // Three requests, each 64 KiB of lines and their prefixes at most;
    // 3 MB without the cap.
    assert!(grown < 400 << 10, "the log grew by {grown} bytes");
    assert_eq!(
        log.matches("log calls past the per-request cap were dropped")
            .count(),
        3
    );
    assert!(
        log.contains("response headers larger than 65536 bytes"),
        "{}",
        &log[log.len().saturating_sub(2000)..]
    );
}
