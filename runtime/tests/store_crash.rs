//! The embedded store's promise: a write a servlet saw succeed survives the
//! process being killed (SIGKILL) right after. Bounded load on loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod support;
use support::{get, serve_in, site, start, stop};

/// `GET /put?KEY` stores KEY in `default` and answers "stored" only once
/// `kv_set` returned success; anything else answers "failed".
const PUT: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_set" (func $set (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "default")
  (data (i32.const 16) "stored")
  (data (i32.const 32) "failed")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $h i32) (local $n i32)
    (local.set $n (call $get (i32.const 2) (i32.const 256) (i32.const 128)))
    (local.set $h (call $open (i32.const 0) (i32.const 7)))
    (if (i32.and (i32.ge_s (local.get $h) (i32.const 0)) (i32.gt_s (local.get $n) (i32.const 0)))
      (then
        (if (i32.eqz (call $set (local.get $h) (i32.const 256) (local.get $n) (i32.const 16) (i32.const 6) (i64.const 0)))
          (then (drop (call $write (i32.const 16) (i32.const 6))) (return (i32.const 0))))))
    (drop (call $write (i32.const 32) (i32.const 6)))
    i32.const 0))"#;

/// `GET /has?KEY` answers "yes" if KEY is in `default`, "no" if not.
const HAS: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_exists" (func $exists (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "default")
  (data (i32.const 16) "yes")
  (data (i32.const 32) "no")
  (data (i32.const 48) "error")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32) (local $r i32)
    (local.set $n (call $get (i32.const 2) (i32.const 256) (i32.const 128)))
    (local.set $r (call $exists (call $open (i32.const 0) (i32.const 7)) (i32.const 256) (local.get $n)))
    (if (i32.eq (local.get $r) (i32.const 1)) (then (drop (call $write (i32.const 16) (i32.const 3))) (return (i32.const 0))))
    (if (i32.eqz (local.get $r)) (then (drop (call $write (i32.const 32) (i32.const 2))) (return (i32.const 0))))
    (drop (call $write (i32.const 48) (i32.const 5)))
    i32.const 0))"#;

/// The body of an HTTP reply, or "" if there was none.
fn body(reply: &str) -> &str {
    reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(
        dir.path().join("servlets/put.wasm"),
        wat::parse_str(PUT).expect("put"),
    )
    .expect("put");
    std::fs::write(
        dir.path().join("servlets/has.wasm"),
        wat::parse_str(HAS).expect("has"),
    )
    .expect("has");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\"]\n",
    )
    .expect("config");
    let (mut child, addr) = serve_in(dir.path(), &[]);
    assert!(body(&get(&addr, "/put?warm")).starts_with("stored"));

    // Four writers, each with its own keys, until the kill; a key counts as
    // acknowledged once its "stored" answer arrived whole.
    let killed = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, killed) = (addr.clone(), killed.clone());
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let started = Instant::now();
                for n in 0..20_000 {
                    if killed.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(10)
                    {
                        break;
                    }
                    let key = format!("w{w}-{n}");
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        break;
                    };
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let request =
                        format!("GET /put?{key} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    if s.write_all(request.as_bytes()).is_err() {
                        break;
                    }
                    let mut reply = String::new();
                    let _ = s.read_to_string(&mut reply);
                    if body(&reply) == "stored" {
                        acked.push(key);
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let _ = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status();
    killed.store(true, Ordering::Relaxed);
    let _ = child.wait();
    let acked: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    assert!(acked.len() > 20, "only {} writes acknowledged", acked.len());

    // Restarted on the same folder: every acknowledged key is there.
    let (child, addr) = serve_in(dir.path(), &[]);
    let missing: Vec<&String> = acked
        .iter()
        .filter(|key| body(&get(&addr, &format!("/has?{key}"))) != "yes")
        .collect();
    assert_eq!(body(&get(&addr, "/has?never-written")), "no");
    let log = stop(child);
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost: {:?}\n{log}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(5)]
    );
}

/// `GET /big?KEY` sets KEY in `default` to 64 KiB (zeros) and answers
/// "stored", "unavailable" (the store said so) or "failed".
const BIG: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_set" (func $set (param i32 i32 i32 i32 i32 i64) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 0) "default")
  (data (i32.const 16) "stored")
  (data (i32.const 32) "unavailable")
  (data (i32.const 48) "failed")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32) (local $r i32)
    (local.set $n (call $get (i32.const 2) (i32.const 256) (i32.const 128)))
    (local.set $r (call $set (call $open (i32.const 0) (i32.const 7))
      (i32.const 256) (local.get $n) (i32.const 65536) (i32.const 65536) (i64.const 0)))
    (if (i32.eqz (local.get $r)) (then (drop (call $write (i32.const 16) (i32.const 6))) (return (i32.const 0))))
    (if (i32.eq (local.get $r) (i32.const -3)) (then (drop (call $write (i32.const 32) (i32.const 11))) (return (i32.const 0))))
    (drop (call $write (i32.const 48) (i32.const 6)))
    i32.const 0))"#;

/// A site with `/big` and `/has` on the default embedded store, and
/// `extra` (such as an `[admin]` table) in its configuration.
fn big_and_has_site(extra: &str) -> tempfile::TempDir {
    let dir = site();
    let servlets = dir.path().join("servlets");
    std::fs::create_dir(&servlets).expect("servlets");
    std::fs::write(servlets.join("big.wasm"), wat::parse_str(BIG).expect("big")).expect("big");
    std::fs::write(servlets.join("has.wasm"), wat::parse_str(HAS).expect("has")).expect("has");
    std::fs::write(
        dir.path().join("swan.toml"),
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\n{extra}[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\"]\n"
        ),
    )
    .expect("config");
    dir
}

/// A disk that fails under the embedded store (here: the file may not
/// grow, `RLIMIT_FSIZE`, as a full disk refuses it) fails the writes it
/// hits as "unavailable", and `/readyz` says so; once the disk takes
/// writes again the store works again without a restart, with every write
/// acknowledged before still there. Meanwhile reads go on, and readiness
/// fails all along: it comes back when a write commits, not when the file
/// reopens. A store file removed while open refuses writes the same way
/// (they would be lost).
#[test]
fn a_failing_disk_makes_the_store_unavailable_until_it_works_again() {
    let dir = big_and_has_site("[admin]\nlisten = \"127.0.0.1:0\"\n");
    // SIGXFSZ ignored (inherited through exec), so a write past the limit
    // fails with EFBIG instead of ending the process.
    let mut program = Command::new("sh");
    program.args([
        "-c",
        "trap '' XFSZ; exec prlimit --fsize=4194304:unlimited -- \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_swan"),
    ]);
    let s = support::start_program(program, dir.path(), &[], true);
    let (addr, admin) = (&s.urls[0], s.admin.as_deref().expect("admin"));
    let ready = || support::status_of(&get(admin, "/readyz"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready() != 200 {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Written until the file may not grow (at most 200 × 64 KiB).
    let mut acked = Vec::new();
    let mut refused = None;
    for n in 0..200 {
        match body(&get(addr, &format!("/big?k{n}"))) {
            "stored" => acked.push(format!("k{n}")),
            "unavailable" => {
                refused = Some(n);
                break;
            }
            other => panic!("write {n}: {other:?}"),
        }
    }
    let refused = refused.expect("no write failed under a 4 MiB file size limit");
    assert!(!acked.is_empty(), "the first write failed");
    // Writes keep failing while the disk does, and the store is not ready
    // all along (a reopened file, or an empty commit, on a disk still
    // failing is not a store that works); reads go on from the open file.
    // Idle for a while first: the writer's probes find the disk failing.
    std::thread::sleep(Duration::from_millis(2500));
    let reply = get(admin, "/readyz");
    assert_eq!(support::status_of(&reply), 503, "idle: {reply}");
    for n in 0..10 {
        assert_eq!(body(&get(addr, &format!("/big?again{n}"))), "unavailable");
        let reply = get(admin, "/readyz");
        assert_eq!(support::status_of(&reply), 503, "write {n}: {reply}");
        assert!(reply.contains("default"), "{reply}");
        assert_eq!(
            body(&get(addr, &format!("/has?{}", acked[0]))),
            "yes",
            "read {n}"
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    // The disk takes writes again: so does the store, with no restart.
    let raised = Command::new("prlimit")
        .args(["--pid", &s.child.id().to_string(), "--fsize=unlimited"])
        .status()
        .expect("prlimit");
    assert!(raised.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    while body(&get(addr, &format!("/big?k{refused}"))) != "stored" {
        if Instant::now() > deadline {
            panic!("the store never worked again: {}", stop(s.child));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    acked.push(format!("k{refused}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while ready() != 200 {
        assert!(Instant::now() < deadline, "/readyz never recovered");
        std::thread::sleep(Duration::from_millis(100));
    }
    for key in &acked {
        assert_eq!(body(&get(addr, &format!("/has?{key}"))), "yes", "{key}");
    }
    // The file removed while open: writes are refused, not lost.
    std::fs::remove_file(dir.path().join("data/default.redb")).expect("remove");
    assert_eq!(body(&get(addr, "/big?after-removal")), "unavailable");
    let reply = get(admin, "/readyz");
    assert_eq!(support::status_of(&reply), 503, "{reply}");
    let log = stop(s.child);
    assert!(log.contains("store failing"), "{log}");
}

/// A disk that fills up (a small tmpfs under the store's folder, as root)
/// refuses writes but not reads: with no writes coming, the writer's
/// probes find the disk still full once a second, and every read in
/// between is answered from the open file. Before, each probe's reopen
/// waited on the writer's own handle, refusing reads for a second, then
/// kept the failed handle, so reads failed for as long as the disk was
/// full. Room again: writes work with no restart, nothing acknowledged is
/// lost.
#[test]
fn a_full_disk_refuses_writes_but_not_reads() {
    let dir = big_and_has_site("");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("data");
    let mount = |args: &[&str]| {
        Command::new("mount")
            .args(args)
            .arg(&data)
            .status()
            .is_ok_and(|s| s.success())
    };
    assert!(
        mount(&["-t", "tmpfs", "-o", "size=3m", "tmpfs"]),
        "mounting a tmpfs needs root"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(data.clone());
    let (child, addr) = serve_in(dir.path(), &["--config", "swan.toml"]);
    let mut acked = Vec::new();
    let mut refused = None;
    for n in 0..200 {
        match body(&get(&addr, &format!("/big?k{n}"))) {
            "stored" => acked.push(format!("k{n}")),
            "unavailable" => {
                refused = Some(n);
                break;
            }
            other => panic!("write {n}: {other:?}"),
        }
    }
    let refused = refused.expect("no write failed on a 3 MiB disk");
    assert!(!acked.is_empty(), "the first write failed");
    // Reads only, over several of the writer's probes.
    for n in 0..30 {
        assert_eq!(
            body(&get(&addr, &format!("/has?{}", acked[n % acked.len()]))),
            "yes",
            "read {n}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(mount(&["-o", "remount,size=64m"]), "remount");
    let deadline = Instant::now() + Duration::from_secs(15);
    while body(&get(&addr, &format!("/big?k{refused}"))) != "stored" {
        if Instant::now() > deadline {
            panic!("the store never worked again: {}", stop(child));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    acked.push(format!("k{refused}"));
    for key in &acked {
        assert_eq!(body(&get(&addr, &format!("/has?{key}"))), "yes", "{key}");
    }
    stop(child);
}

/// A store file the system will not write (as after ext4's
/// `errors=remount-ro`; here an immutable file, as root) refuses writes
/// but goes on answering reads: the database stays open rather than being
/// closed for a reopen that cannot succeed. Writable again: writes work
/// with no restart, and `/readyz` recovers.
#[test]
fn an_unwritable_store_file_refuses_writes_but_not_reads() {
    let dir = big_and_has_site("[admin]\nlisten = \"127.0.0.1:0\"\n");
    let s = start(dir.path(), &[], true);
    let (addr, admin) = (&s.urls[0], s.admin.as_deref().expect("admin"));
    assert_eq!(body(&get(addr, "/big?before")), "stored");
    let frozen = Immutable::new(&dir.path().join("data/default.redb"));
    assert_eq!(body(&get(addr, "/big?refused")), "unavailable");
    // Reads, over several of the writer's once-a-second probes, with
    // writes failing between them.
    for n in 0..25 {
        assert_eq!(body(&get(addr, "/has?before")), "yes", "read {n}");
        if n % 5 == 0 {
            assert_eq!(body(&get(addr, &format!("/big?again{n}"))), "unavailable");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let reply = get(admin, "/readyz");
    assert_eq!(support::status_of(&reply), 503, "{reply}");
    frozen.release();
    let deadline = Instant::now() + Duration::from_secs(15);
    while body(&get(addr, "/big?after")) != "stored" {
        if Instant::now() > deadline {
            panic!("the store never worked again: {}", stop(s.child));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while support::status_of(&get(admin, "/readyz")) != 200 {
        assert!(Instant::now() < deadline, "/readyz never recovered");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(body(&get(addr, "/has?before")), "yes");
    stop(s.child);
}

/// `swan check` finds a store file a route's store could not make: its
/// folder is not writable (here an immutable folder, as root, for whom
/// permissions alone would not stop a write), or it is under `/proc`. A
/// store no route lists (the default store of a static site) is never
/// opened, so its folder may be read-only; a link is followed to its own.
#[test]
fn check_refuses_a_store_file_that_cannot_be_made() {
    let dir = site();
    std::fs::write(
        dir.path().join("has.wasm"),
        wat::parse_str(HAS).expect("has"),
    )
    .expect("has");
    let folder = dir.path().join("frozen");
    std::fs::create_dir(&folder).expect("folder");
    std::fs::create_dir(dir.path().join("open")).expect("folder");
    std::os::unix::fs::symlink(dir.path().join("open/kv.redb"), folder.join("link.redb"))
        .expect("link");
    let check = |config: &Path, text: &str| {
        std::fs::write(config, text).expect("config");
        let out = support::swan()
            .args(["check", "--config"])
            .arg(config)
            .output()
            .expect("run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The static site's configuration, in the folder made read-only
    // below: its default store (frozen/data/default.redb) is never opened.
    let static_site = folder.join("swan.toml");
    std::fs::write(&static_site, "[[site]]\nroot = \"../www\"\n").expect("config");
    let frozen = Immutable::new(&folder);
    let out = support::swan()
        .args(["check", "--config"])
        .arg(&static_site)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = dir.path().join("swan.toml");
    let with_store = |path: &str, listed: bool| {
        let route = if listed {
            "[[site.route]]\npath = \"/s\"\nservlet = \"has.wasm\"\nstores = [\"kv\"]\n"
        } else {
            ""
        };
        check(
            &config,
            &format!(
                "[[store]]\nname = \"kv\"\nkind = \"embedded\"\npath = \"{path}\"\n[[site]]\nroot = \"www\"\n{route}"
            ),
        )
    };
    let (code, text) = with_store("frozen/kv.redb", true);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("swan.toml:4:8"), "{text}");
    assert!(text.contains("frozen is not writable"), "{text}");
    let (code, text) = with_store("frozen/more/kv.redb", true);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("frozen is not writable"), "{text}");
    let (code, text) = with_store("/proc/swan/kv.redb", true);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("/proc is a kernel file system"), "{text}");
    // sysfs, where it is mounted (it is on any ordinary Linux system).
    if Path::new("/sys/kernel").is_dir() {
        let (code, text) = with_store("/sys/swan.redb", true);
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains("/sys is a kernel file system"), "{text}");
    }
    // Not listed by any route: never opened, not refused.
    let (code, text) = with_store("frozen/kv.redb", false);
    assert_eq!(code, Some(0), "{text}");
    // A link to a file still to be made in a writable folder.
    let (code, text) = with_store("frozen/link.redb", true);
    assert_eq!(code, Some(0), "{text}");
    // Writable again: the same file is fine.
    frozen.release();
    let (code, text) = with_store("frozen/kv.redb", true);
    assert_eq!(code, Some(0), "{text}");
}

/// A file or folder made immutable (`chattr +i`, as root: permissions
/// alone do not stop root) until [`Immutable::release`] or the drop.
struct Immutable(std::path::PathBuf);

impl Immutable {
    fn new(path: &Path) -> Immutable {
        assert!(
            chattr("+i", path),
            "chattr +i needs root and a file system with attributes"
        );
        Immutable(path.to_owned())
    }

    fn release(&self) {
        assert!(chattr("-i", &self.0), "chattr -i");
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        chattr("-i", &self.0);
    }
}

fn chattr(flag: &str, path: &Path) -> bool {
    Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}
