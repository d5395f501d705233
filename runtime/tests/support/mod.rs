//! Running the real `swan` binary from tests.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The binary under test.
pub(crate) fn swan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_swan"))
}

/// A folder with `www/index.html` ("cli hello").
pub(crate) fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("www")).expect("www");
    std::fs::write(dir.path().join("www/index.html"), "cli hello").expect("index");
    dir
}

/// A folder like [`site`], whose `swan.toml` (listening on port 0) makes
/// loading take seconds in a debug build: an 8 MiB text file to compress.
pub(crate) fn slow_to_load_site() -> tempfile::TempDir {
    let dir = site();
    let mut text = String::new();
    let mut n: u64 = 1;
    while text.len() < 8 << 20 {
        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        text.push_str(["swan ", "wasm ", "cache ", "server "][(n >> 62) as usize]);
        text.push_str(&(n >> 40).to_string());
        text.push(' ');
    }
    std::fs::write(dir.path().join("www/big.txt"), text).expect("write");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"32 MiB\"\n",
    )
    .expect("config");
    dir
}

/// `swan serve` arguments for a site's `www` and `servlets` folders on an
/// ephemeral port.
pub(crate) const SITE_ARGS: [&str; 6] = [
    "--listen",
    "127.0.0.1:0",
    "--root",
    "www",
    "--servlets",
    "servlets",
];

/// Starts `swan serve` in `dir` with `args`; returns the child and the
/// address from its banner.
pub(crate) fn serve_in(dir: &std::path::Path, args: &[&str]) -> (std::process::Child, String) {
    let mut command = swan();
    command.current_dir(dir).arg("serve").args(args);
    spawn_serving(command)
}

/// Spawns `command` (a `swan serve`, however wrapped or configured) with
/// its output piped; returns the child and the address from its banner.
pub(crate) fn spawn_serving(mut command: Command) -> (std::process::Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let addr =
        banner_address(&mut child).unwrap_or_else(|banner| panic!("no url in banner: {banner:?}"));
    (child, addr)
}

/// Reads the banner of a `swan serve` spawned with its stdout piped: the
/// first address it names, or the line read when it names none.
pub(crate) fn banner_address(child: &mut std::process::Child) -> Result<String, String> {
    let mut banner = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut banner)
        .expect("banner");
    banner
        .split_whitespace()
        .find_map(|w| w.strip_prefix("http://"))
        .map(|a| a.trim_end_matches('/').to_owned())
        .ok_or(banner)
}

pub(crate) fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("write");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

/// Sends SIGTERM and returns the log (stderr) once the process ended.
pub(crate) fn stop(child: std::process::Child) -> String {
    stop_with_code(child).1
}

/// [`stop`], with the exit code.
pub(crate) fn stop_with_code(mut child: std::process::Child) -> (Option<i32>, String) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let mut log = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut log);
    }
    let code = child.wait().ok().and_then(|s| s.code());
    (code, log)
}

/// A running `swan serve` whose banner was read: the public URLs and the
/// admin address (when `[admin]` is configured).
pub(crate) struct Running {
    pub(crate) child: std::process::Child,
    /// Every `http://` or `https://` address of the banner, in order
    /// (`host:port`).
    pub(crate) urls: Vec<String>,
    /// The admin listener's `host:port`.
    pub(crate) admin: Option<String>,
    /// The banner line.
    #[allow(dead_code, reason = "not every test binary reads it")]
    pub(crate) banner: String,
}

/// Starts `swan serve` in `dir` with `args` and reads its banner (and the
/// admin line when `admin` is expected).
pub(crate) fn start(dir: &std::path::Path, args: &[&str], admin: bool) -> Running {
    start_program(swan(), dir, args, admin)
}

/// [`start`] with another program (a copy of the binary, for upgrades).
pub(crate) fn start_program(
    mut program: Command,
    dir: &std::path::Path,
    args: &[&str],
    admin: bool,
) -> Running {
    let mut child = program
        .current_dir(dir)
        .arg("serve")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut banner = String::new();
    out.read_line(&mut banner).expect("banner");
    let urls = banner
        .split_whitespace()
        .filter_map(|w| {
            w.strip_prefix("http://")
                .or_else(|| w.strip_prefix("https://"))
        })
        .map(|a| a.trim_end_matches('/').to_owned())
        .collect::<Vec<_>>();
    assert!(!urls.is_empty(), "no url in banner: {banner:?}");
    let admin = admin.then(|| {
        let mut line = String::new();
        out.read_line(&mut line).expect("admin line");
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .map(|a| a.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| panic!("no admin address: {line:?}"))
    });
    // Keep draining stdout (the access log may go there) so swan never
    // blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
            sink.clear();
        }
    });
    Running {
        child,
        urls,
        admin,
        banner,
    }
}

/// Sends raw `request` bytes to `addr` and reads the whole reply.
pub(crate) fn raw(addr: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("write");
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

/// The status code of an HTTP reply (0 when there is none).
pub(crate) fn status_of(reply: &str) -> u16 {
    reply
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Sends SIGTERM to a child by pid.
pub(crate) fn term(child: &std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
}

/// Sends `signal` (`-USR2`, …) to a process this test started, by pid.
pub(crate) fn signal(signal: &str, pid: u32) {
    let sent = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill {signal} {pid}");
}

/// A reply read by [`exchange`].
pub(crate) struct Reply {
    pub(crate) status: u16,
    /// `X-Served-By` (set by the load balancer in the cluster tests).
    pub(crate) served_by: String,
    pub(crate) body: String,
    /// The server said `Connection: close`: open a new connection.
    pub(crate) close: bool,
}

/// One HTTP/1.1 request on a kept-alive connection, and its whole reply
/// (Content-Length or chunked).
pub(crate) fn exchange<S: Read + Write>(
    stream: &mut BufReader<S>,
    method: &str,
    path: &str,
) -> std::io::Result<Reply> {
    use std::io::{Error, ErrorKind};
    stream.get_mut().write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: swan.test\r\nContent-Length: 0\r\n\r\n")
            .as_bytes(),
    )?;
    let mut line = String::new();
    if stream.read_line(&mut line)? == 0 {
        return Err(Error::new(
            ErrorKind::UnexpectedEof,
            "closed before a reply",
        ));
    }
    let status = status_of(&line);
    let (mut len, mut chunked, mut served_by, mut close) = (0usize, false, String::new(), false);
    loop {
        line.clear();
        if stream.read_line(&mut line)? == 0 {
            return Err(Error::new(ErrorKind::UnexpectedEof, "closed in the head"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (name, value) = l.split_once(':').unwrap_or((l, ""));
        let value = value.trim();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => len = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
            "x-served-by" => served_by = value.to_owned(),
            "connection" => close = value.eq_ignore_ascii_case("close"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            stream.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16)
                .map_err(|_| Error::new(ErrorKind::InvalidData, "bad chunk size"))?;
            let mut chunk = vec![0; size + 2];
            stream.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        body.resize(len, 0);
        stream.read_exact(&mut body)?;
    }
    Ok(Reply {
        status,
        served_by,
        body: String::from_utf8_lossy(&body).into_owned(),
        close,
    })
}

/// An HTTP/2 frame: length, type, flags, stream.
pub(crate) fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// The value of the first sample of `name` whose labels contain every
/// `labels` pair.
pub(crate) fn sample(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
