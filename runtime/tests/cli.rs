//! The `swan` binary: flags, exit codes, banner, signals.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

mod support;
use support::{
    banner_address, get, serve_in, site, slow_to_load_site, spawn_serving, status_of, stop,
    stop_with_code, swan,
};

#[test]
fn version_and_help_are_available_on_every_command() {
    let out = swan().arg("--version").output().expect("run");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("swan {}", env!("CARGO_PKG_VERSION"))
    );
    for cmd in ["serve", "check"] {
        let out = swan().args([cmd, "--help"]).output().expect("run");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("--config") && text.contains("--listen"),
            "{text}"
        );
        let out = swan().args([cmd, "--version"]).output().expect("run");
        assert!(out.status.success());
    }
}

#[test]
fn usage_errors_exit_with_2() {
    let out = swan()
        .args(["serve", "--no-such-flag"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = swan().output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}

/// `swan check | head -1`: the reader goes away before the output ends.
/// The command still finishes, with its own exit status and no panic.
#[test]
fn commands_outlive_a_reader_that_went_away() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:9999\"]\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    let refused = "[server]\nlisten = [\"127.0.0.1:9999\"]\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n";
    std::fs::write(dir.path().join("refused.toml"), refused).expect("config");
    std::fs::write(dir.path().join("servlets/bad.wasm"), b"not wasm").expect("bad");
    for (args, code) in [
        (&["check", "--config", "swan.toml"][..], 0),
        (&["check", "--config", "refused.toml"][..], 1),
        (&["completions", "bash"][..], 0),
    ] {
        let mut child = swan()
            .current_dir(dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run");
        // Closed before the command has printed anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(!err.contains("panic"), "{args:?}: {err}");
    }
}

#[test]
fn check_prints_what_would_be_served() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:9999\"]\n[[site]]\nhosts = [\"example.test\"]\nroot = \"www\"\n",
    )
    .expect("config");
    let out = swan()
        .args(["check", "--config"])
        .arg(dir.path().join("swan.toml"))
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("http://127.0.0.1:9999/"), "{text}");
    assert!(text.contains("site example.test (default)"), "{text}");
    assert!(text.contains("1 files in memory"), "{text}");
    assert!(text.contains("max_connections"), "{text}");
}

#[test]
fn configuration_errors_exit_with_2_and_list_every_problem() {
    let dir = site();
    let file = dir.path().join("swan.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:70000\"\nworkerz = 1\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let out = swan()
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("swan.toml:2:10: server.listen: port 70000 is out of range"),
        "{err}"
    );
    assert!(
        err.contains("swan.toml:3:1: server.workerz: unknown key"),
        "{err}"
    );
    let out = swan()
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let empty = tempfile::tempdir().expect("temp dir");
    let out = swan()
        .args(["check", "--root", "/no/such/folder/swan"])
        .current_dir(empty.path())
        .output()
        .expect("run");

    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--root"));
}

#[test]
fn check_fails_when_a_servlet_is_refused_and_says_why() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(dir.path().join("servlets/broken.wasm"), b"not wasm at all").expect("write");
    let hello = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "swan_abi_version") (result i32) i32.const 1)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )
    .expect("wat");
    std::fs::write(dir.path().join("servlets/hello.wasm"), hello).expect("write");
    let out = swan()
        .args(["check", "--root"])
        .arg(dir.path().join("www"))
        .arg("--servlets")
        .arg(dir.path().join("servlets"))
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("broken.wasm: not a valid WebAssembly module"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("servlet /hello/*")
            && text.contains(
                "hello.wasm (servlets folder, native ABI 1): memory 64.0 MiB, timeout 5s"
            ),
        "{text}"
    );
}

#[test]
fn an_address_in_use_names_the_flag_that_fixes_it() {
    let dir = site();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let out = swan()
        .args(["serve", "--root"])
        .arg(dir.path().join("www"))
        .args(["--listen", &addr.to_string()])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--listen") && err.contains(&addr.to_string()),
        "{err}"
    );
}

/// `max_connections` at or past the open-file limit is a warning of
/// `check` (and of `serve`'s log): past it, connections wait for
/// descriptors.
#[test]
fn check_warns_when_max_connections_passes_the_descriptor_limit() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nmax_connections = 2000\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let check = |limit: u32| {
        let out = Command::new("sh")
            .current_dir(dir.path())
            .arg("-c")
            .arg(format!("ulimit -n {limit} && exec \"$0\" check"))
            .arg(env!("CARGO_BIN_EXE_swan"))
            .output()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let low = check(1024);
    assert!(
        low.contains("warning: max_connections (2000) is at or past the open-file limit (1024)"),
        "{low}"
    );
    let high = check(4096);
    assert!(!high.contains("open-file limit"), "{high}");
}

/// `check` says where the admin listener and the access log are, and
/// warns when the admin listener is not on loopback (its status page shows
/// paths, errors and file names).
#[test]
fn check_shows_the_admin_listener_and_the_access_log() {
    let dir = site();
    let check = |config: &str| {
        std::fs::write(dir.path().join("swan.toml"), config).expect("config");
        let out = swan()
            .current_dir(dir.path())
            .arg("check")
            .output()
            .expect("check");
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (out, err) = check("[[site]]\nroot = \"www\"\n");
    assert!(
        out.contains("admin: off") && out.contains("access log: off"),
        "{out}"
    );
    assert!(!err.contains("warning"), "{err}");
    let (out, err) = check(
        "[admin]\nlisten = \"127.0.0.1:9191\"\n[log]\naccess = \"access.log\"\nformat = \"json\"\n\
         [[site]]\nroot = \"www\"\n",
    );
    assert!(out.contains("admin: http://127.0.0.1:9191/"), "{out}");
    assert!(out.contains("access.log (json)"), "{out}");
    assert!(!err.contains("warning"), "{err}");
    let (out, err) = check("[admin]\nlisten = \"0.0.0.0:9191\"\n[[site]]\nroot = \"www\"\n");
    assert!(out.contains("admin: http://0.0.0.0:9191/"), "{out}");
    assert!(
        err.contains("warning: the admin listener 0.0.0.0:9191 is not on loopback"),
        "{err}"
    );
}

/// `--listen` values are checked as the file's are: two on one address
/// (or on the admin listener's) are a configuration error (exit 2) for
/// `check` and `serve` alike, not a bind failure blamed on another process.
#[test]
fn overlapping_listen_flags_are_a_configuration_error() {
    let dir = site();
    let port = free_port();
    let admin = dir.path().join("admin.toml");
    std::fs::write(
        &admin,
        format!("[admin]\nlisten = \"127.0.0.1:{port}\"\n[[site]]\nroot = \"www\"\n"),
    )
    .expect("write");
    let same = format!("127.0.0.1:{port}");
    let wildcard = format!("0.0.0.0:{port}");
    for cmd in ["check", "serve"] {
        for (config, flags) in [
            (None, vec![same.as_str(), same.as_str()]),
            (None, vec![wildcard.as_str(), same.as_str()]),
            (Some(&admin), vec![same.as_str()]),
        ] {
            let mut run = swan();
            run.current_dir(dir.path()).arg(cmd);
            match config {
                Some(file) => run.arg("--config").arg(file),
                None => run.args(["--root", "www"]),
            };
            for flag in &flags {
                run.args(["--listen", flag]);
            }
            let out = run.output().expect("run");
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {flags:?}: {err}");
            assert!(
                err.contains("--listen") && err.contains("overlaps"),
                "{cmd} {flags:?}: {err}"
            );
        }
    }
}

#[test]
fn serve_prints_a_banner_answers_and_exits_0_on_sigterm() {
    let dir = site();
    let mut child = swan()
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("www"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut banner = String::new();
    BufReader::new(stdout)
        .read_line(&mut banner)
        .expect("banner");
    assert!(
        banner.contains("ready in") && banner.contains("1 files"),
        "{banner}"
    );
    let url = banner
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("url in banner");
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    assert!(
        reply.starts_with("HTTP/1.1 200") && reply.ends_with("cli hello"),
        "{reply}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert_eq!(status.code(), Some(0));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "swan did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every signal swan answers is handled from the moment the banner is out:
/// none meets the default action (which ends the process with no drain
/// and no log). SIGHUP, SIGUSR1 and SIGTERM are sent the instant the
/// banner line is read, several times over.
#[test]
fn signals_sent_as_soon_as_the_banner_is_out_are_handled() {
    let dir = site();
    for round in 0..5 {
        let (child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0", "--root", "www"]);
        for signal in ["-HUP", "-USR1"] {
            let sent = Command::new("kill")
                .args([signal, &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(sent.success());
        }
        // Still serving after both (SIGUSR1 with no access log does nothing).
        let reply = get(&addr, "/");
        assert!(reply.ends_with("cli hello"), "round {round}: {reply}");
        let (code, log) = stop_with_code(child);
        assert_eq!(code, Some(0), "round {round}: {log}");
        assert!(
            log.contains("SIGHUP received") && log.contains("SIGTERM received"),
            "round {round}: {log}"
        );
    }
    // SIGTERM at once, with nothing in between.
    for round in 0..5 {
        let (child, _) = serve_in(dir.path(), &["--listen", "127.0.0.1:0", "--root", "www"]);
        let log = stop(child);
        assert!(log.contains("SIGTERM received"), "round {round}: {log}");
    }
}

/// `swan serve` in `dir` (its `swan.toml`), output piped, banner unread.
fn serve_piped(dir: &std::path::Path) -> std::process::Child {
    swan()
        .current_dir(dir)
        .arg("serve")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// SIGHUP and SIGUSR1 sent while the sites load (here: a large file to
/// compress, seconds in a debug build) wait until swan serves; they do not
/// end the process (a log rotation or a reload during a restart). The
/// reload then finds nothing changed: a listener on port 0 is the same
/// listener on the port it was given.
#[test]
fn signals_sent_while_loading_are_handled_once_serving() {
    let dir = slow_to_load_site();
    let mut child = serve_piped(dir.path());
    std::thread::sleep(Duration::from_millis(400));
    for signal in ["-HUP", "-USR1"] {
        let sent = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
    }
    let addr = match banner_address(&mut child) {
        Ok(addr) => addr,
        Err(banner) => {
            let (code, log) = stop_with_code(child);
            panic!("no banner {banner:?} ({code:?}): {log}");
        }
    };
    assert!(get(&addr, "/").ends_with("cli hello"));
    // The reload runs once serving.
    std::thread::sleep(Duration::from_millis(500));
    let (code, log) = stop_with_code(child);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("SIGHUP received"), "{log}");
    assert!(!log.contains("take effect after a restart"), "{log}");
}

/// SIGTERM or SIGINT while the sites still load ends swan at once, exit 0
/// (nothing was served yet), saying so in the log. Before, the signal's
/// default action ended it: status 143, nothing logged.
#[test]
fn a_stop_while_loading_ends_at_once_with_exit_0() {
    let dir = slow_to_load_site();
    for signal in ["-TERM", "-INT"] {
        let mut child = serve_piped(dir.path());
        std::thread::sleep(Duration::from_millis(400));
        let sent = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        let mut banner = String::new();
        let _ = BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut banner);
        assert!(banner.is_empty(), "{signal}: served first: {banner}");
        let mut log = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut log);
        }
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(0), "{signal}: {status}: {log}");
        assert!(log.contains("received while loading"), "{signal}: {log}");
    }
}

/// The admin listener answers while the sites load (minutes, for source
/// builds or large compiles): `/livez` 200, `/readyz` 503 "starting", so
/// a liveness probe does not restart a process that is only loading.
#[test]
fn the_admin_listener_answers_while_the_sites_load() {
    let dir = slow_to_load_site();
    let admin = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        free.local_addr().expect("address").to_string()
    };
    let config = std::fs::read_to_string(dir.path().join("swan.toml")).expect("config");
    std::fs::write(
        dir.path().join("swan.toml"),
        format!("[admin]\nlisten = \"{admin}\"\n{config}"),
    )
    .expect("config");
    let mut child = serve_piped(dir.path());
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let banner = std::thread::spawn(move || {
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        line
    });
    // Probes until the banner is out (loading done).
    let (mut live, mut starting) = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !banner.is_finished() && std::time::Instant::now() < deadline {
        if TcpStream::connect(&admin).is_ok() {
            live |= get(&admin, "/livez").starts_with("HTTP/1.1 200");
            let ready = get(&admin, "/readyz");
            // Before the sites are loaded (after, "starting" comes
            // without a Retry-After, until the listeners serve).
            starting |= ready.starts_with("HTTP/1.1 503")
                && ready.contains("retry-after: 1")
                && ready.ends_with("not ready: starting\n");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let banner = banner.join().expect("banner");
    assert!(banner.contains("ready in"), "{banner}");
    assert!(
        live && starting,
        "while loading: /livez 200 {live}, /readyz starting {starting}"
    );
    // Ready once serving (the banner comes just before).
    let mut ready = String::new();
    for _ in 0..100 {
        ready = get(&admin, "/readyz");
        if ready.starts_with("HTTP/1.1 200") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, log) = stop_with_code(child);
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert_eq!(code, Some(0), "{log}");
}

/// A servlet that prints a line through WASI, then traps.
const NOISY_TRAP: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write"
    (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "\64\00\00\00\21\00\00\00")
  (data (i32.const 100) "printed line request_id=forged\e2\80\a8")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 200)))
    unreachable))"#;

#[test]
fn every_log_line_of_a_request_carries_its_id() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(
        dir.path().join("servlets/noisy.wasm"),
        wat::parse_str(NOISY_TRAP).expect("wat"),
    )
    .expect("write");
    let mut command = swan();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("www"))
        .arg("--servlets")
        .arg(dir.path().join("servlets"))
        .env("RUST_LOG", "info");
    let (child, addr) = spawn_serving(command);
    let mut stream = TcpStream::connect(&addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /noisy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    assert!(reply.starts_with("HTTP/1.1 500"), "{reply}");
    assert!(!reply.contains("unreachable"), "trap text leaked: {reply}");
    let id = reply
        .lines()
        .find_map(|l| l.strip_prefix("x-request-id: "))
        .expect("x-request-id")
        .trim()
        .to_owned();
    let log = stop(child);
    let request_lines: Vec<&str> = log.lines().filter(|l| l.contains("noisy")).collect();
    let printed = request_lines
        .iter()
        .find(|l| l.contains("printed line"))
        .unwrap_or_else(|| panic!("the servlet's output is logged: {log}"));
    let trapped = request_lines
        .iter()
        .find(|l| l.contains("trap"))
        .unwrap_or_else(|| panic!("the trap is logged: {log}"));
    for line in [printed, trapped] {
        assert!(line.contains(&format!("request_id={id}")), "{line}");
    }
    // The real id comes before anything the guest wrote, and a line
    // separator it wrote is escaped.
    assert!(
        printed.find(&format!("request_id={id}")) < printed.find("request_id=forged"),
        "{printed}"
    );
    assert!(printed.contains("forged\\u{2028}"), "{printed}");
}

#[test]
fn c_sources_build_when_every_path_is_relative() {
    let dir = site();
    std::fs::create_dir_all(dir.path().join("servlets/rel")).expect("mkdir");
    std::fs::write(
        dir.path().join("servlets/rel/main.c"),
        "#include \"swan.h\"\nstatic int handle(void) { swan_print(\"relative ok\"); return 0; }\nSWAN_SERVLET(handle)\n",
    )
    .expect("source");
    // Relative in the file (read from a relative --config) ...
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nmode = \"development\"\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    )
    .expect("config");
    let (child, addr) = serve_in(dir.path(), &["--config", "swan.toml"]);
    let reply = get(&addr, "/rel");
    let log = stop(child);
    assert!(reply.ends_with("relative ok"), "{reply}\n{log}");
    // ... and on the command line.
    std::fs::remove_dir_all(dir.path().join("servlets/target")).expect("clean");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nmode = \"development\"\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let (child, addr) = serve_in(dir.path(), &support::SITE_ARGS);
    let reply = get(&addr, "/rel");
    let log = stop(child);
    assert!(reply.ends_with("relative ok"), "{reply}\n{log}");
}

#[test]
fn check_lists_each_servlets_kind_and_outbound_rules() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = root.join("tests/guests/faults-component/Cargo.toml");
    let built = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(&root)
        .args([
            "build",
            "--quiet",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(&manifest)
        .status()
        .expect("cargo");
    assert!(built.success(), "the test component did not build");
    let component = root
        .join("tests/guests/faults-component/target/wasm32-wasip2/release/faults_component.wasm");
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::copy(&component, dir.path().join("servlets/comp.wasm")).expect("copy");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nallowed_outbound_hosts = [\"https://api.example.com\", \"http://127.0.0.1:8080\"]\n",
    )
    .expect("config");
    let out = swan()
        .args(["check", "--config", "swan.toml"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("comp.wasm (servlets folder, component (wasi:http/incoming-handler@0.2.12))"),
        "{text}"
    );
    assert!(
        text.contains("outbound https://api.example.com, http://127.0.0.1:8080"),
        "{text}"
    );
    // A component streams: no response size cap unless one is set.
    let line = text
        .lines()
        .find(|l| l.contains("comp.wasm"))
        .unwrap_or_default();
    assert!(line.contains("response unlimited (streamed)"), "{line}");
}

/// A free port on 127.0.0.1 (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

#[test]
fn check_lists_the_stores_who_opens_them_and_whether_they_answer() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    // A real Redis with a password, and a port where nothing listens.
    let (up, down) = (free_port(), free_port());
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &up.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--requirepass", "s3cret"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (scripts/setup installs it)");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", up)).is_err() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let config = format!(
        "[[store]]\nname = \"default\"\nkind = \"embedded\"\n\
         [[store]]\nname = \"shared\"\nkind = \"redis\"\nurl_env = \"SWAN_TEST_REDIS\"\n\
         [[store]]\nname = \"gone\"\nkind = \"redis\"\nurl = \"redis://:s3cret@127.0.0.1:{down}\"\n\
         [[store]]\nname = \"spare\"\nkind = \"embedded\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\", \"shared\"]\n"
    );
    std::fs::write(dir.path().join("swan.toml"), &config).expect("config");
    let run = |config: &str| {
        std::fs::write(dir.path().join("swan.toml"), config).expect("config");
        swan()
            .current_dir(dir.path())
            .arg("check")
            .env(
                "SWAN_TEST_REDIS",
                format!("redis://:s3cret@127.0.0.1:{up}/0"),
            )
            .output()
            .expect("run")
    };
    // `gone` is configured but no route lists it: listed, not opened.
    let out = run(&config);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = redis.kill();
    let _ = redis.wait();
    assert!(out.status.success(), "{text}\n{errors}");
    assert!(text.contains("default      embedded"), "{text}");
    assert!(
        text.contains(&format!("redis redis://:***@127.0.0.1:{up}/0")),
        "{text}"
    );
    assert!(text.contains("site default (every servlet)"), "{text}");
    assert!(
        text.contains("nothing (no route lists it; not opened)"),
        "{text}"
    );
    // Redis answers; the embedded store's file is made by serve, not by
    // a check, which writes nothing.
    assert_eq!(text.matches("reachable    yes").count(), 1, "{text}");
    assert!(
        text.contains("reachable    a new file, made when swan serves"),
        "{text}"
    );
    for file in ["data/spare.redb", "data/default.redb"] {
        assert!(!dir.path().join(file).exists(), "{file} was created");
    }
    // Now the route lists `gone`: check says it does not answer, exits 1.
    let out = run(&config.replace("\"default\", \"shared\"", "\"default\", \"gone\""));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}\n{errors}");
    assert!(text.contains("reachable    NO"), "{text}");
    assert!(errors.contains("store gone does not answer"), "{errors}");
    assert!(
        !text.contains("s3cret") && !errors.contains("s3cret"),
        "{text}\n{errors}"
    );
    // An unset url_env is a configuration error naming the variable.
    let out = swan()
        .current_dir(dir.path())
        .arg("check")
        .env_remove("SWAN_TEST_REDIS")
        .output()
        .expect("run");
    let errors = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{errors}");
    assert!(errors.contains("SWAN_TEST_REDIS is not set"), "{errors}");
}

/// Compiled servlet code lands in `$SWAN_CACHE_DIR/code` and is mapped
/// from there (not copied) by the running server; a restart maps the same
/// file without compiling; a damaged file is compiled again and replaced;
/// `max_code_cache_bytes = 0` writes nothing. Each time the servlet
/// answers.
#[test]
fn compiled_code_is_mapped_from_the_cache_folder_across_restarts() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    let module = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "swan_abi_version") (result i32) i32.const 1)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )
    .expect("wat");
    std::fs::write(dir.path().join("servlets/mapped.wasm"), module).expect("write");
    let cache = dir.path().join("cache");
    let code = cache.join("code");
    let serve = |config: &str| {
        std::fs::write(
            dir.path().join("swan.toml"),
            format!("[server]\nlisten = [\"127.0.0.1:0\"]\n{config}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n"),
        )
        .expect("config");
        let mut command = swan();
        command
            .current_dir(dir.path())
            .args(["serve", "--config", "swan.toml"])
            .env("SWAN_CACHE_DIR", &cache);
        let (child, addr) = spawn_serving(command);
        let reply = get(&addr, "/mapped");
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).expect("maps");
        (child, maps)
    };
    let artifacts = || -> Vec<(std::path::PathBuf, u64)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&code)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| (e.path(), e.metadata().map(|m| m.ino()).unwrap_or(0)))
            .collect()
    };

    let (child, maps) = serve("");
    let first = artifacts();
    // One artifact per compiler tier the load used (the optimising one at
    // least), each with its checksum, no temporary file left.
    assert!(!first.is_empty(), "nothing under {}", code.display());
    assert!(
        first.iter().all(|(p, _)| {
            let is = |ext: &str| p.extension().is_some_and(|e| e == ext);
            is("cwasm") && p.with_extension("sum").is_file() || is("sum")
        }),
        "{first:?}"
    );
    assert!(
        first
            .iter()
            .any(|(p, _)| maps.contains(&*p.to_string_lossy())),
        "no artifact is mapped:\n{maps}"
    );
    stop(child);

    // A restart maps the very same files: nothing compiled or rewritten.
    let (child, maps) = serve("");
    assert_eq!(artifacts(), first);
    assert!(
        first
            .iter()
            .any(|(p, _)| maps.contains(&*p.to_string_lossy()))
    );
    stop(child);

    // Damaged files are compiled again, replaced, and mapped.
    for (path, _) in &first {
        std::fs::write(path, b"damaged").expect("damage");
    }
    let (child, maps) = serve("");
    let again = artifacts();
    assert_eq!(again.len(), first.len());
    for (path, _) in &again {
        assert!(
            std::fs::metadata(path).expect("artifact").len() > 7,
            "{path:?} not replaced"
        );
    }
    assert!(
        again
            .iter()
            .any(|(p, _)| maps.contains(&*p.to_string_lossy()))
    );
    stop(child);

    // A zero cap: compiled in memory, nothing written or mapped.
    std::fs::remove_dir_all(&code).expect("clear");
    let (child, maps) = serve("max_code_cache_bytes = 0");
    assert!(artifacts().is_empty());
    assert!(!maps.contains(&*code.to_string_lossy()));
    stop(child);

    // A bad value is a configuration error naming the key.
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nmax_code_cache_bytes = \"lots\"\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let out = swan()
        .current_dir(dir.path())
        .args(["check", "--config", "swan.toml"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_code_cache_bytes") && err.contains("swan.toml:2"),
        "{err}"
    );
}

/// A log reader that goes away (`swan serve 2>&1 | head`, a collector that
/// restarts) costs the log lines, never the server: writes to the closed
/// pipe fail with EPIPE and are dropped, where they used to abort the
/// process.
#[test]
fn a_closed_log_pipe_does_not_stop_the_server() {
    let dir = site();
    let (mut child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0", "--root", "www"]);
    // Nobody reads the log any more.
    drop(child.stderr.take());
    for _ in 0..3 {
        // Each logs a line ("SIGHUP received: reading the configuration
        // again"), and the reload another.
        let sent = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success());
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(status_of(&get(&addr, "/missing")), 404);
        assert!(child.try_wait().expect("wait").is_none(), "swan ended");
    }
    let (code, _) = stop_with_code(child);
    assert_eq!(code, Some(0));
}

/// `docs/swan.example.toml` passes `swan check` as it is (no Redis, no
/// certificate needed), and checking it writes nothing: its embedded
/// store's file is made by `serve`.
#[test]
fn the_documented_example_passes_check_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for folder in ["docs", "www", "servlets"] {
        std::fs::create_dir(dir.path().join(folder)).expect("folder");
    }
    std::fs::write(dir.path().join("www/index.html"), "home").expect("index");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/swan.example.toml"),
        dir.path().join("docs/swan.example.toml"),
    )
    .expect("example");
    let out = swan()
        .current_dir(dir.path())
        .args(["check", "--config", "docs/swan.example.toml"])
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}\n{errors}");
    assert!(text.contains("(valid)"), "{text}");
    assert!(
        !dir.path().join("data").exists(),
        "check wrote a store file"
    );
}

/// A privileged port without the capability to bind it says how to get it
/// (here: root without CAP_NET_BIND_SERVICE, by `setpriv`), and a
/// configuration file that is not UTF-8 says that, not "check the path".
#[test]
fn a_privileged_port_and_a_non_utf8_configuration_get_hints() {
    let dir = site();
    // Only where port 1 is privileged (as here, and on Linux by default)
    // and this runs as root, which setpriv needs to drop the capability.
    let privileged = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(|start| start > 1);
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    if privileged && root {
        let mut child = Command::new("setpriv")
            .args(["--bounding-set", "-net_bind_service"])
            .arg(env!("CARGO_BIN_EXE_swan"))
            .args(["serve", "--listen", "127.0.0.1:1", "--root", "www"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv (util-linux)");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("swan served a privileged port without the capability");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut errors = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut errors);
        }
        assert_eq!(status.code(), Some(1), "{errors}");
        assert!(errors.contains("CAP_NET_BIND_SERVICE"), "{errors}");
    }
    std::fs::write(dir.path().join("latin1.toml"), b"[server]\n# caf\xe9\n").expect("file");
    let out = swan()
        .args(["check", "--config", "latin1.toml"])
        .current_dir(dir.path())
        .output()
        .expect("run");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{errors}");
    assert!(errors.contains("is not UTF-8 text"), "{errors}");
    assert!(!errors.contains("--config"), "{errors}");
}

/// A site's `404.html` too large for the cache cannot be the 404 page:
/// the log says so at load, and missing paths get the built-in page.
#[test]
fn a_404_page_over_max_file_size_is_named_in_the_log() {
    let dir = site();
    let www = dir.path().join("www");
    std::fs::write(www.join("404.html"), "<p>gone</p>".repeat(200)).expect("404 page");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"1 KiB\"\n",
    )
    .expect("config");
    let (child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0"]);
    let reply = get(&addr, "/missing");
    assert!(reply.starts_with("HTTP/1.1 404 "), "{reply}");
    assert!(!reply.contains("<p>gone</p>"), "{reply}");
    let log = stop(child);
    assert!(
        log.contains("404.html is larger than max_file_size") && log.contains("size=2200"),
        "{log}"
    );
    assert!(log.matches("404.html is").count() == 1, "{log}");
    // Within the limit, it is the page.
    std::fs::write(www.join("404.html"), "<p>gone</p>").expect("404 page");
    let (child, addr) = serve_in(dir.path(), &["--listen", "127.0.0.1:0"]);
    let reply = get(&addr, "/missing");
    assert!(reply.contains("<p>gone</p>"), "{reply}");
    let log = stop(child);
    assert!(!log.contains("larger than max_file_size"), "{log}");
}

/// Nothing a file name or a module's contents carry can start a line of
/// swan's own log: a servlet file whose name holds a line feed, and a
/// module importing a name that holds one, are refused, and their
/// refusals stay one line each, the line feed escaped.
#[test]
fn file_names_and_import_names_cannot_forge_log_lines() {
    let dir = site();
    let servlets = dir.path().join("servlets");
    std::fs::create_dir(&servlets).expect("servlets");
    std::fs::write(
        servlets.join("x\n2026-01-01T00:00:00Z  INFO forged by a name.wasm"),
        b"not a module",
    )
    .expect("name");
    std::fs::write(
        servlets.join("imports.wasm"),
        wat::parse_str(
            r#"(module (import "evil\0a2026-01-01T00:00:00Z  INFO forged by an import" "f" (func))
                 (memory (export "memory") 1)
                 (func (export "swan_abi_version") (result i32) i32.const 1)
                 (func (export "swan_handle") (result i32) i32.const 0))"#,
        )
        .expect("wat"),
    )
    .expect("imports");
    let mut command = swan();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("www"))
        .arg("--servlets")
        .arg(&servlets)
        .env("RUST_LOG", "info");
    let (child, _addr) = spawn_serving(command);
    let log = stop(child);
    assert!(
        !log.lines().any(|l| l.starts_with("2026-01-01")),
        "a forged line: {log}"
    );
    assert!(
        log.contains("\\n2026-01-01T00:00:00Z  INFO forged by an import"),
        "{log}"
    );
    assert!(log.contains("forged by a name"), "{log}");
    // `swan check` says the same, one line each, to a terminal too.
    let out = swan()
        .args(["check", "--listen", "127.0.0.1:0", "--root"])
        .arg(dir.path().join("www"))
        .arg("--servlets")
        .arg(&servlets)
        .output()
        .expect("check");
    assert_eq!(out.status.code(), Some(1));
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!text.lines().any(|l| l.starts_with("2026-01-01")), "{text}");
    assert!(
        text.contains("\\n2026-01-01T00:00:00Z  INFO forged by an import"),
        "{text}"
    );
}
