//! Deploying without surprises, through the real binary: a listener is
//! this process's alone (a second swan on the same address is refused,
//! never silently sharing it through SO_REUSEPORT), and SIGUSR2 upgrades
//! the binary under load with no failed request, while a new binary that
//! cannot start leaves the old one serving. Loopback only; every load
//! loop is bounded in count and time.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

mod support;
use support::{exchange, get, signal, site, slow_to_load_site, start, start_program, swan};

/// `/hello`: a small servlet.
const HELLO: &str = r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hello")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $write (i32.const 0) (i32.const 5)))
    i32.const 0))"#;

/// `/slow`: runs for 1.5 s (WASI monotonic clock), then answers.
const SLOW: &str = r#"(module
  (import "wasi_snapshot_preview1" "clock_time_get" (func $now (param i32 i64 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "slow done")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $start i64)
    (drop (call $now (i32.const 1) (i64.const 1000) (i32.const 0)))
    (local.set $start (i64.load (i32.const 0)))
    (block $done (loop $spin
      (drop (call $now (i32.const 1) (i64.const 1000) (i32.const 0)))
      (br_if $done (i64.ge_u (i64.sub (i64.load (i32.const 0)) (local.get $start)) (i64.const 1500000000)))
      (br $spin)))
    (drop (call $write (i32.const 100) (i32.const 9)))
    i32.const 0))"#;

fn wait_exit(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn a_second_swan_on_a_taken_address_is_refused_for_every_listener() {
    let first_site = site();
    let mut first = start(first_site.path(), &["--listen", "127.0.0.1:0"], false);
    let taken = first.urls[0].clone();
    let other = site();
    std::fs::write(other.path().join("www/index.html"), "other swan").expect("index");
    // The taken address alone, and as the second of two listeners.
    std::fs::write(
        other.path().join("swan.toml"),
        format!("[server]\nlisten = [\"127.0.0.1:0\", \"{taken}\"]\n[[site]]\nroot = \"www\"\n"),
    )
    .expect("config");
    for args in [
        vec!["--listen", taken.as_str()],
        vec!["--config", "swan.toml"],
    ] {
        let mut second = swan()
            .current_dir(other.path())
            .arg("serve")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let status = wait_exit(&mut second, Duration::from_secs(30));
        let mut err = String::new();
        if status.is_none() {
            let _ = second.kill();
        }
        let _ = std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut err);
        let _ = second.wait();
        assert_eq!(status.and_then(|s| s.code()), Some(1), "{args:?}: {err}");
        assert!(
            err.to_lowercase().contains("address already in use"),
            "{err}"
        );
        assert!(err.contains(&taken) && err.contains("--listen"), "{err}");
    }
    // Every connection still reaches the first swan.
    for _ in 0..20 {
        assert!(get(&taken, "/").ends_with("cli hello"));
    }
    support::term(&first.child);
    assert!(wait_exit(&mut first.child, Duration::from_secs(20)).is_some());
}

/// Runs keep-alive GETs against `addr` until `stop`; returns (requests,
/// failures described).
fn load(addr: String, stop: Arc<AtomicBool>, seed: usize) -> (usize, Vec<String>) {
    load_paths(&addr, &stop, seed, &["/index.html", "/hello"], |_| {})
}

/// Keep-alive GETs of `paths` in turn (from the `seed`th) against `addr`
/// until `stop`, each 200's body given to `answered`; returns (requests,
/// failures described).
fn load_paths(
    addr: &str,
    stop: &AtomicBool,
    seed: usize,
    paths: &[&str],
    mut answered: impl FnMut(&str),
) -> (usize, Vec<String>) {
    let (mut done, mut failed) = (0, Vec::new());
    let mut conn: Option<BufReader<TcpStream>> = None;
    for i in 0..200_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if conn.is_none() {
            match TcpStream::connect(addr) {
                Ok(s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                    conn = Some(BufReader::new(s));
                }
                Err(e) => {
                    failed.push(format!("connect: {e}"));
                    continue;
                }
            }
        }
        let Some(stream) = conn.as_mut() else {
            continue;
        };
        let path = paths[(i + seed) % paths.len()];
        done += 1;
        match exchange(stream, "GET", path) {
            Ok(r) if r.status == 200 => {
                answered(&r.body);
                if r.close {
                    conn = None;
                }
            }
            Ok(r) => {
                failed.push(format!("{path}: {}", r.status));
                conn = None;
            }
            Err(e) => {
                failed.push(format!("{path}: {e}"));
                conn = None;
            }
        }
    }
    (done, failed)
}

/// Writes `servlets/NAME.wasm` under `dir` from WAT (making the folder).
fn servlet(dir: &std::path::Path, name: &str, wat: &str) {
    let folder = dir.join("servlets");
    std::fs::create_dir_all(&folder).expect("servlets");
    std::fs::write(
        folder.join(format!("{name}.wasm")),
        wat::parse_str(wat).expect(name),
    )
    .expect(name);
}

/// Collects the process's log lines (its stderr, shared with the
/// processes it starts).
fn log_lines(
    stderr: std::process::ChildStderr,
) -> (Arc<Mutex<Vec<String>>>, mpsc::Receiver<String>) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    let keep = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            keep.lock().expect("log").push(line.clone());
            let _ = tx.send(line);
        }
    });
    (lines, rx)
}

fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, limit: Duration) -> String {
    let started = Instant::now();
    while let Some(left) = limit.checked_sub(started.elapsed()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no log line with {needle:?} within {limit:?}");
}

/// Starts a copy of swan in `dir/bin` (upgrades run the file the process
/// was started from: a copy, so a test can replace it) on `swan.toml`.
fn start_copy(dir: &std::path::Path, admin: bool) -> support::Running {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let program = bin.join("swan");
    std::fs::copy(env!("CARGO_BIN_EXE_swan"), &program).expect("copy swan");
    start_program(
        Command::new(&program),
        dir,
        &["--config", "swan.toml"],
        admin,
    )
}

/// Increments `visits` in the `default` store and answers its new value;
/// traps on any store error.
const COUNTER: &str = r#"(module
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_increment" (func $incr (param i32 i32 i32 i64 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "default")
  (data (i32.const 16) "visits")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $h i32) (local $n i64) (local $p i32)
    (local.set $h (call $open (i32.const 0) (i32.const 7)))
    (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
    (if (i32.lt_s (call $incr (local.get $h) (i32.const 16) (i32.const 6) (i64.const 1) (i32.const 64)) (i32.const 0))
      (then unreachable))
    (local.set $n (i64.load (i32.const 64)))
    (local.set $p (i32.const 200))
    (loop $digit
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p)
        (i32.add (i32.const 48) (i32.wrap_i64 (i64.rem_u (local.get $n) (i64.const 10)))))
      (local.set $n (i64.div_u (local.get $n) (i64.const 10)))
      (br_if $digit (i64.ne (local.get $n) (i64.const 0))))
    (drop (call $write (local.get $p) (i32.sub (i32.const 200) (local.get $p))))
    i32.const 0))"#;

/// Waits for the line saying the new process of an upgrade is ready;
/// its pid.
fn upgraded_to(rx: &mpsc::Receiver<String>) -> u32 {
    let line = wait_line(
        rx,
        "is ready; this one stops accepting",
        Duration::from_secs(60),
    );
    line.split("new process ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

/// Waits (at most 30 s) until process `pid` has ended; whether it has.
fn gone(pid: u32) -> bool {
    let started = Instant::now();
    while alive(pid) && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    !alive(pid)
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn sigusr2_upgrades_the_binary_under_load_without_a_failed_request() {
    let dir = site();
    servlet(dir.path(), "hello", HELLO);
    servlet(dir.path(), "slow", SLOW);
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\ndrain_timeout = \"20s\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = \"10s\"\n",
    )
    .expect("config");
    let mut old = start_copy(dir.path(), true);
    let (bin, program) = (dir.path().join("bin"), dir.path().join("bin/swan"));
    let addr = old.urls[0].clone();
    let admin = old.admin.clone().expect("admin");
    let (log, rx) = log_lines(old.child.stderr.take().expect("stderr"));

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..6)
        .map(|seed| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || load(addr, stop, seed))
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    // A request in flight on the old process when the upgrade starts.
    let slow = {
        let addr = addr.clone();
        std::thread::spawn(move || get(&addr, "/slow"))
    };
    std::thread::sleep(Duration::from_millis(200));
    let old_pid = old.child.id();
    assert!(
        Command::new("kill")
            .args(["-USR2", &old_pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let new_pid = upgraded_to(&rx);
    assert_ne!(new_pid, old_pid);
    // The old process drains and exits; its slow request completes.
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    assert!(status.success(), "old process: {status}");
    let slow = slow.join().expect("slow");
    assert!(
        slow.starts_with("HTTP/1.1 200") && slow.ends_with("slow done"),
        "{slow}"
    );
    // The load goes on against the new process alone.
    std::thread::sleep(Duration::from_secs(1));
    assert!(alive(new_pid), "new process is running");
    assert!(
        get(&admin, "/readyz").starts_with("HTTP/1.1 200"),
        "the admin socket moved too"
    );
    stop.store(true, Ordering::Relaxed);
    let (mut requests, mut failures) = (0, Vec::new());
    for c in clients {
        let (n, f) = c.join().expect("client");
        requests += n;
        failures.extend(f);
    }
    println!(
        "upgrade under load: {requests} requests, {} failed",
        failures.len()
    );
    assert!(requests > 100, "the load ran: {requests}");
    assert!(
        failures.is_empty(),
        "{} of {requests} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );

    // A new binary that cannot start: the running one keeps serving.
    let broken = bin.join("swan.new");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'this build is broken' >&2\nexit 3\n",
    )
    .expect("script");
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::rename(&broken, &program).expect("replace the binary");
    assert!(
        Command::new("kill")
            .args(["-USR2", &new_pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let failed = wait_line(&rx, "upgrade failed", Duration::from_secs(30));
    assert!(failed.contains("exit status: 3"), "{failed}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(alive(new_pid), "a failed upgrade stops nothing");
    for _ in 0..10 {
        assert!(get(&addr, "/hello").ends_with("hello"));
    }
    // Done: stop the process this test started (by pid).
    assert!(
        Command::new("kill")
            .args(["-TERM", &new_pid.to_string()])
            .status()
            .expect("kill")
            .success()
    );
    assert!(
        gone(new_pid),
        "stopped; log:\n{}",
        log.lock().expect("log").join("\n")
    );
}

/// SIGTERM while an upgrade's new process is still loading: the upgrade is
/// abandoned and the new process stopped with the old one. Before, the old
/// process exited 0 and the new one went on to serve the port, unknown to
/// whoever stopped swan.
#[test]
fn a_stop_during_an_upgrade_stops_the_new_process_too() {
    // Loading takes seconds in a debug build: the new process is still
    // loading when the stop comes.
    let dir = slow_to_load_site();
    let mut old = start_program(swan(), dir.path(), &["--config", "swan.toml"], false);
    let addr = old.urls[0].clone();
    let (log, rx) = log_lines(old.child.stderr.take().expect("stderr"));
    let old_pid = old.child.id();
    signal("-USR2", old_pid);
    let line = wait_line(&rx, "upgrade: new process started", Duration::from_secs(30));
    let new_pid: u32 = line
        .split("pid=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    assert!(alive(new_pid), "the new process runs");
    // A second SIGUSR2 while this upgrade is under way is said to be
    // ignored, not silently dropped nor a second upgrade.
    signal("-USR2", old_pid);
    wait_line(
        &rx,
        "SIGUSR2 received while an upgrade is under way: ignored",
        Duration::from_secs(30),
    );
    signal("-TERM", old_pid);
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    assert!(status.success(), "old process: {status}");
    assert!(!alive(new_pid), "the new process was stopped");
    // Long enough for the new one to have finished loading, had it lived.
    std::thread::sleep(Duration::from_secs(4));
    assert!(!alive(new_pid));
    assert!(
        TcpStream::connect(&addr).is_err(),
        "something serves {addr}"
    );
    let log = log.lock().expect("log").join("\n");
    assert!(log.contains("upgrade abandoned"), "{log}");
}

/// A source build that hangs (clang opening a FIFO nobody writes to) is
/// killed when the server stops: SIGTERM ends the process within its
/// drain, not after `build_timeout`. Before, the stop waited for the
/// build (the reload thread was joined), here two minutes.
#[test]
fn a_stop_kills_a_source_build_that_hangs() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\nbuild_sources = true\nbuild_timeout = \"120s\"\n\
         drain_timeout = \"1s\"\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    )
    .expect("config");
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    let mut s = start(dir.path(), &[], false);
    let (log, rx) = log_lines(s.child.stderr.take().expect("stderr"));
    // Made aside, then moved in whole: one build, of a complete folder.
    let stuck = dir.path().join("stuck");
    std::fs::create_dir(&stuck).expect("stuck");
    std::fs::write(stuck.join("main.c"), "#include \"hang.h\"\nint x;\n").expect("main.c");
    let made = Command::new("mkfifo")
        .arg(stuck.join("hang.h"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    std::fs::rename(&stuck, dir.path().join("servlets/stuck")).expect("move in");
    wait_line(&rx, "building servlet", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &s.child.id().to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let status = wait_exit(&mut s.child, Duration::from_secs(15));
    // Whatever happened, nothing is left blocked on the FIFO: a writer
    // that opens and closes it ends clang's read.
    if status.is_none() {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(dir.path().join("servlets/stuck/hang.h"));
    let status = status.expect("the process exits while its build hangs");
    assert!(status.success(), "{status}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // The build did hang, and was killed for the stop (not a toolchain
    // that failed at once).
    let log = log.lock().expect("log").join("\n");
    assert!(
        log.contains("build killed: the server is stopping"),
        "{log}"
    );
}

/// Started through a symlink that an install then flips to a new version
/// (`current -> v2`), SIGUSR2 starts the new version: swan starts again
/// the path it was started by, not the file the link named at start.
/// Before, `/proc/self/exe` started the old version again.
#[test]
fn sigusr2_through_a_flipped_symlink_starts_the_new_version() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let (v1, v2) = (dir.path().join("v1"), dir.path().join("v2"));
    std::fs::create_dir(&v1).expect("v1");
    std::fs::create_dir(&v2).expect("v2");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_swan"), v1.join("swan")).expect("v1 link");
    // Version 2: leaves a mark, then is swan.
    let marker = dir.path().join("v2-ran");
    std::fs::write(
        v2.join("swan"),
        format!(
            "#!/bin/sh\ntouch '{}'\nexec '{}' \"$@\"\n",
            marker.display(),
            env!("CARGO_BIN_EXE_swan")
        ),
    )
    .expect("v2");
    std::fs::set_permissions(
        v2.join("swan"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let current = dir.path().join("current");
    std::os::unix::fs::symlink("v1", &current).expect("current");
    let mut old = start_program(
        Command::new(current.join("swan")),
        dir.path(),
        &["--config", "swan.toml"],
        false,
    );
    let (_log, rx) = log_lines(old.child.stderr.take().expect("stderr"));
    let flipped = dir.path().join("current.new");
    std::os::unix::fs::symlink("v2", &flipped).expect("flip");
    std::fs::rename(&flipped, &current).expect("flip");
    assert!(
        Command::new("kill")
            .args(["-USR2", &old.child.id().to_string()])
            .status()
            .expect("kill")
            .success()
    );
    let new_pid = upgraded_to(&rx);
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    let _ = Command::new("kill")
        .args(["-TERM", &new_pid.to_string()])
        .status();
    // Stopped before the folder goes; whether it did is not this test's.
    let _ = gone(new_pid);
    assert!(status.success(), "old process: {status}");
    assert!(marker.exists(), "the upgrade started version 1 again");
}

/// A `NAME.wasm` beside a `NAME/` source folder is not served (the source
/// wins): the log says so once, not again at every later reload while both
/// stay, and again when the file comes back after it was removed.
#[test]
fn a_module_beside_its_source_folder_is_warned_about_once() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\nbuild_sources = true\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    )
    .expect("config");
    let servlets = dir.path().join("servlets");
    std::fs::create_dir_all(servlets.join("x")).expect("servlets");
    std::fs::write(servlets.join("x/main.c"), "int x;\n").expect("main.c");
    std::fs::write(servlets.join("x.wasm"), b"\0asm\x01\0\0\0").expect("x.wasm");
    let mut s = start(dir.path(), &[], false);
    let (log, rx) = log_lines(s.child.stderr.take().expect("stderr"));
    let shadowed = "x.wasm is not served";
    let count = |log: &Mutex<Vec<String>>| {
        log.lock()
            .expect("log")
            .iter()
            .filter(|l| l.contains(shadowed))
            .count()
    };
    let limit = Duration::from_secs(30);
    // Said at start.
    wait_line(&rx, shadowed, limit);
    // Two more reloads of the servlets folder, each seen through the
    // refusal of a broken module it adds.
    for broken in ["y", "z"] {
        std::fs::write(servlets.join(format!("{broken}.wasm")), b"junk").expect("junk");
        wait_line(&rx, &format!("{broken}.wasm"), limit);
    }
    std::fs::remove_file(servlets.join("x.wasm")).expect("remove");
    std::fs::write(servlets.join("w.wasm"), b"junk").expect("junk");
    wait_line(&rx, "w.wasm", limit);
    std::fs::write(servlets.join("x.wasm"), b"\0asm\x01\0\0\0").expect("x.wasm");
    wait_line(&rx, shadowed, limit);
    support::term(&s.child);
    let status = wait_exit(&mut s.child, limit).expect("exit");
    assert!(status.success(), "{status}");
    let all = log.lock().expect("log").join("\n");
    assert_eq!(count(&log), 2, "{all}");
}

/// A stop that comes while a reload is loading a module whose start
/// function runs for a minute (its `timeout`) does not wait for it: the
/// process exits within moments, saying the reload was abandoned.
#[test]
fn a_stop_does_not_wait_for_a_reload_under_way() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\ndrain_timeout = \"1s\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = \"60s\"\n",
    )
    .expect("config");
    let servlets = dir.path().join("servlets");
    std::fs::create_dir(&servlets).expect("servlets");
    let mut s = start(dir.path(), &[], false);
    let (log, _rx) = log_lines(s.child.stderr.take().expect("stderr"));
    let spins = wat::parse_str(
        r#"(module
          (memory (export "memory") 1)
          (func $spin (loop $l (br $l)))
          (start $spin)
          (func (export "swan_abi_version") (result i32) i32.const 1)
          (func (export "swan_handle") (result i32) i32.const 0))"#,
    )
    .expect("wat");
    std::fs::write(servlets.join("spin.wasm"), spins).expect("deploy");
    // Seen, compiled and spinning well within this.
    std::thread::sleep(Duration::from_secs(3));
    let stopping = Instant::now();
    support::term(&s.child);
    let status = wait_exit(&mut s.child, Duration::from_secs(15));
    if status.is_none() {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    let status = status.expect("the process exits while a reload spins");
    assert!(status.success(), "{status}");
    assert!(stopping.elapsed() < Duration::from_secs(15));
    let log = log.lock().expect("log").join("\n");
    assert!(log.contains("reload under way: it is abandoned"), "{log}");
}

/// An embedded store's file is locked to one process: in an upgrade the new
/// process takes it over once the old one has drained and exited, and
/// holds store calls until then. Under load through the upgrade no request
/// fails and no increment is lost or counted twice.
#[test]
fn sigusr2_takes_an_embedded_store_over_without_a_failed_or_lost_increment() {
    let dir = site();
    servlet(dir.path(), "count", COUNTER);
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\"]\n",
    )
    .expect("config");
    let mut old = start_copy(dir.path(), false);
    let addr = old.urls[0].clone();
    let (_log, rx) = log_lines(old.child.stderr.take().expect("stderr"));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|seed| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut counts = Vec::new();
                let (n, failed) = load_paths(&addr, &stop, seed, &["/count"], |body| {
                    counts.push(body.parse::<u64>().unwrap_or(0));
                });
                (n, failed, counts)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let old_pid = old.child.id();
    signal("-USR2", old_pid);
    let new_pid = upgraded_to(&rx);
    assert_ne!(new_pid, old_pid);
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    assert!(status.success(), "old process: {status}");
    wait_line(
        &rx,
        "store taken over from the process this one replaced",
        Duration::from_secs(15),
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let (mut requests, mut failures, mut counts) = (0, Vec::new(), Vec::new());
    for c in clients {
        let (n, f, seen) = c.join().expect("client");
        requests += n;
        failures.extend(f);
        counts.extend(seen);
    }
    assert!(requests > 100, "the load ran: {requests}");
    assert!(
        failures.is_empty(),
        "{} of {requests} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    // Every answer a different count, and the next one follows them all.
    counts.sort_unstable();
    counts.dedup();
    assert_eq!(counts.len(), requests, "an increment was answered twice");
    let next = get(&addr, "/count");
    assert!(
        next.ends_with(&format!("\r\n\r\n{}", requests + 1)),
        "after {requests} increments: {next}"
    );
    signal("-TERM", new_pid);
    assert!(gone(new_pid), "the new process stops");
}

/// A second stop signal while in-flight requests finish ends the process
/// at once (exit 1, said in the log), as a second Ctrl-C does: the drain
/// would otherwise wait up to `drain_timeout`, and only SIGKILL ended it.
#[test]
fn a_second_stop_signal_during_the_drain_exits_at_once() {
    let dir = site();
    servlet(dir.path(), "slow", SLOW);
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\ndrain_timeout = \"20s\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = \"10s\"\n",
    )
    .expect("config");
    let mut s = start(dir.path(), &[], false);
    let (log, _rx) = log_lines(s.child.stderr.take().expect("stderr"));
    let addr = s.urls[0].clone();
    let slow = std::thread::spawn(move || get(&addr, "/slow"));
    std::thread::sleep(Duration::from_millis(300));
    let pid = s.child.id();
    signal("-TERM", pid);
    std::thread::sleep(Duration::from_millis(200));
    signal("-TERM", pid);
    let status = wait_exit(&mut s.child, Duration::from_secs(5)).expect("exits");
    assert_eq!(status.code(), Some(1), "{status}");
    let reply = slow.join().expect("client");
    assert!(
        !reply.contains("slow done"),
        "the slow request finished: {reply}"
    );
    std::thread::sleep(Duration::from_millis(100));
    let log = log.lock().expect("log").join("\n");
    assert!(log.contains("stop signal during the drain"), "{log}");
}

/// Reads the datagrams swan sends to the socket standing in for systemd's
/// (`NOTIFY_SOCKET`) until one holds `want`; every one read goes to `seen`.
fn notified(
    socket: &std::os::unix::net::UnixDatagram,
    want: &str,
    seen: &mut Vec<String>,
) -> String {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(60) {
        let Ok(n) = socket.recv(&mut buf) else {
            continue;
        };
        let message = String::from_utf8_lossy(&buf[..n]).into_owned();
        seen.push(message.clone());
        if message.lines().any(|l| l == want || l.starts_with(want)) {
            return message;
        }
    }
    panic!("systemd was not told {want:?}; it was told {seen:?}");
}

/// Under systemd (`Type=notify` or `notify-reload`): READY=1 once serving;
/// RELOADING=1 with the monotonic time, then READY=1, around a SIGHUP; on
/// SIGUSR2 the old process names the new one as MAINPID= once it serves
/// (and never says STOPPING=1, which would stop the unit); STOPPING=1 when
/// the new one is stopped.
#[test]
fn systemd_is_told_ready_reloading_the_new_main_pid_and_stopping() {
    let dir = site();
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let path = dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&path).expect("notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let mut command = swan();
    command.env("NOTIFY_SOCKET", &path);
    let mut old = start_program(command, dir.path(), &["--config", "swan.toml"], false);
    let (_log, rx) = log_lines(old.child.stderr.take().expect("stderr"));
    let old_pid = old.child.id();
    let mut seen = Vec::new();
    notified(&socket, "READY=1", &mut seen);

    signal("-HUP", old_pid);
    let reloading = notified(&socket, "RELOADING=1", &mut seen);
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    notified(&socket, "READY=1", &mut seen);
    wait_line(&rx, "SIGHUP received", Duration::from_secs(10));

    signal("-USR2", old_pid);
    let main_pid = notified(&socket, "MAINPID=", &mut seen);
    let new_pid: u32 = main_pid
        .lines()
        .find_map(|l| l.strip_prefix("MAINPID="))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {main_pid:?}"));
    assert_ne!(new_pid, old_pid);
    assert!(alive(new_pid), "the new process runs");
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    assert!(status.success(), "old process: {status}");
    // Everything the old process said, to its end, has arrived: read it.
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert!(
        !seen.iter().any(|m| m.contains("STOPPING=1")),
        "the old process said it was stopping: {seen:?}"
    );
    // The new process said READY=1 too (accepted once it is the main one).
    let ready_count = seen.iter().filter(|m| m.contains("READY=1")).count();
    if ready_count < 3 {
        notified(&socket, "READY=1", &mut seen);
    }
    assert!(
        TcpStream::connect(&old.urls[0]).is_ok(),
        "the new process serves"
    );

    signal("-TERM", new_pid);
    notified(&socket, "STOPPING=1", &mut seen);
    assert!(gone(new_pid), "the new process stopped");
}

/// Waits until `path` holds `pid` (`None`: until it is gone); what it
/// held last.
fn pid_file_becomes(path: &std::path::Path, pid: Option<u32>) -> Option<u32> {
    let read = || {
        std::fs::read_to_string(path).ok().map(|s| {
            s.trim_end_matches('\n')
                .parse::<u32>()
                .expect("a number and a newline")
        })
    };
    let started = Instant::now();
    while read() != pid && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    read()
}

#[test]
fn the_pid_file_names_the_serving_process_through_an_upgrade_and_goes_at_exit() {
    let dir = site();
    std::fs::create_dir(dir.path().join("run")).expect("run folder");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\npid_file = \"run/swan.pid\"\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let path = dir.path().join("run/swan.pid");
    // Left by a process that died without removing it: taken over.
    std::fs::write(&path, "4194303\n").expect("stale pid file");
    let mut old = start_program(swan(), dir.path(), &["--config", "swan.toml"], false);
    let (_log, rx) = log_lines(old.child.stderr.take().expect("stderr"));
    let old_pid = old.child.id();
    assert_eq!(pid_file_becomes(&path, Some(old_pid)), Some(old_pid));

    // A second swan that cannot bind never touches it (`--pid-file`
    // names the same file from another folder).
    let taken = old.urls[0].clone();
    let mut second = swan()
        .current_dir(dir.path().join("run"))
        .args([
            "serve",
            "--root",
            "../www",
            "--listen",
            &taken,
            "--pid-file",
            "swan.pid",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let status = wait_exit(&mut second, Duration::from_secs(30)).expect("second swan exits");
    assert_eq!(status.code(), Some(1));
    assert_eq!(pid_file_becomes(&path, Some(old_pid)), Some(old_pid));

    signal("-USR2", old_pid);
    let new_pid = upgraded_to(&rx);
    assert_eq!(pid_file_becomes(&path, Some(new_pid)), Some(new_pid));
    let status = wait_exit(&mut old.child, Duration::from_secs(30)).expect("old process exits");
    assert!(status.success(), "old process: {status}");
    // The old process left the new one's file alone.
    assert_eq!(pid_file_becomes(&path, Some(new_pid)), Some(new_pid));
    assert!(
        get(&taken, "/").ends_with("cli hello"),
        "the new process serves"
    );

    signal("-TERM", new_pid);
    assert!(gone(new_pid), "the new process stopped");
    assert_eq!(pid_file_becomes(&path, None), None, "removed at exit");
    let left: Vec<_> = std::fs::read_dir(dir.path().join("run"))
        .expect("run folder")
        .collect();
    assert!(left.is_empty(), "no temporary file left: {left:?}");
}

/// Fetches `path` until it answers with `body` (or 15 s pass).
fn served_within(addr: &str, path: &str, body: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if get(addr, path).ends_with(&format!("\r\n\r\n{body}")) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A folder in the site that swan may not read (a `lost+found`, here a
/// mode 000 folder; as root, swan runs without the capabilities that
/// bypass file modes) costs only that folder, and only while it cannot be
/// read: files added beside it, in other folders, in a folder made later
/// and in a folder replaced under the same name are served, and once it
/// is readable its own changes are seen. Before, the recursive watch
/// failed on it and hot reload was off for the life of the process. And a
/// large file it may not read is a 404, as a small one is.
#[test]
fn a_folder_swan_cannot_read_does_not_turn_hot_reload_off() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    let dir = site();
    let www = dir.path().join("www");
    std::fs::create_dir_all(www.join("locked")).expect("locked");
    std::fs::write(www.join("locked/a.txt"), "secret").expect("a.txt");
    std::fs::create_dir_all(www.join("sub")).expect("sub");
    let locked = www.join("locked");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // A file too large to cache (streamed) that swan may not read.
    let big = www.join("big.bin");
    std::fs::write(&big, vec![b'b'; 2 << 20]).expect("big.bin");
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let program = if root {
        let mut setpriv = Command::new("setpriv");
        let caps = "-dac_override,-dac_read_search";
        setpriv
            .args(["--inh-caps", caps, "--bounding-set", caps])
            .arg(env!("CARGO_BIN_EXE_swan"));
        setpriv
    } else {
        swan()
    };
    let mut s = start_program(
        program,
        dir.path(),
        &["--listen", "127.0.0.1:0", "--root", "www"],
        false,
    );
    let (log, _rx) = log_lines(s.child.stderr.take().expect("stderr"));
    let addr = s.urls[0].clone();
    // The folder is unreadable to this swan (else the test shows nothing).
    assert!(get(&addr, "/locked/a.txt").starts_with("HTTP/1.1 404"));
    let reply = get(&addr, "/big.bin");
    assert!(
        reply.starts_with("HTTP/1.1 404"),
        "{}",
        &reply[..reply.len().min(200)]
    );
    // Each step writes `www/FILE` and waits for it to be served.
    let mut served = Vec::new();
    let mut step = |name: &str, file: &str, body: &str| {
        std::fs::write(www.join(file), body).expect("write");
        served.push((
            name.to_owned(),
            served_within(&addr, &format!("/{file}"), body),
        ));
    };
    step("beside", "new.txt", "beside");
    step("below", "sub/b.txt", "below");
    // A folder made after the start is watched too.
    std::fs::create_dir(www.join("later")).expect("later");
    step("made later", "later/c.txt", "later");
    step("in the folder made later", "later/d.txt", "later still");
    // A folder replaced under the same name (a deploy's `rm -rf` and
    // copy; ext4 may give it the same inode) is watched anew.
    std::fs::remove_dir_all(www.join("sub")).expect("rm sub");
    std::fs::create_dir(www.join("sub")).expect("sub again");
    step("replaced", "sub/e.txt", "replaced");
    step(
        "in the replaced folder",
        "sub/f.txt",
        "replaced, then edited",
    );
    // Made readable: its changes are seen from then on.
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    step("readable", "locked/a.txt", "open");
    step(
        "added to the folder made readable",
        "locked/g.txt",
        "open, then added",
    );
    support::stop(s.child);
    let all = log.lock().expect("log").join("\n");
    let missed: Vec<&String> = served
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| n)
        .collect();
    assert!(missed.is_empty(), "not served: {missed:?}\n{all}");
    assert!(!all.contains("hot reload is off"), "{all}");
    assert!(all.contains("locked"), "the folder is named: {all}");
}

/// What the cache skips (a link out of the root, a broken link) is warned
/// of once, not again at every reload of the site (it filled the log
/// under file churn); one skipped anew after it was fixed is warned of
/// again.
#[test]
fn a_skipped_link_is_warned_about_once_not_at_every_reload() {
    let dir = site();
    let www = dir.path().join("www");
    std::fs::write(dir.path().join("outside.txt"), "outside").expect("outside");
    std::os::unix::fs::symlink("../outside.txt", www.join("link-out.txt")).expect("link");
    std::os::unix::fs::symlink("nowhere.txt", www.join("broken.txt")).expect("link");
    let mut s = start(
        dir.path(),
        &["--listen", "127.0.0.1:0", "--root", "www"],
        false,
    );
    let (log, _rx) = log_lines(s.child.stderr.take().expect("stderr"));
    let addr = s.urls[0].clone();
    for n in 0..3 {
        let body = format!("version {n}");
        std::fs::write(www.join("churn.txt"), &body).expect("churn");
        assert!(served_within(&addr, "/churn.txt", &body), "reload {n}");
    }
    // Fixed, then broken again: news again.
    std::fs::write(www.join("nowhere.txt"), "here").expect("target");
    assert!(served_within(&addr, "/broken.txt", "here"));
    std::fs::remove_file(www.join("nowhere.txt")).expect("remove");
    std::fs::write(www.join("churn.txt"), "last").expect("churn");
    assert!(served_within(&addr, "/churn.txt", "last"));
    assert!(get(&addr, "/link-out.txt").starts_with("HTTP/1.1 404"));
    support::stop(s.child);
    let all = log.lock().expect("log").join("\n");
    let count = |needle: &str| all.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(count("link points outside the site root"), 1, "{all}");
    assert_eq!(count("skipped: broken link"), 2, "{all}");
}
