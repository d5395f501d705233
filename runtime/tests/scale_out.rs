//! Scale-out, for real: `deploy/local-cluster` starts three swan processes
//! (this build), a Redis they share and an HAProxy in front, each in a
//! network namespace of its own. A bounded load run goes through HAProxy
//! (its UNIX socket: the test itself stays in the root namespace and never
//! dials the cluster's subnet) while one swan is killed with SIGKILL and
//! restarted, another drains on SIGTERM, and a servlet is swapped in the
//! shared servlets folder.
//!
//! Needs root (ip netns), haproxy, redis-server and curl: scripts/setup
//! installs them.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};

mod support;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::exchange;

/// Client connections of the load run (each one request at a time).
const CONNECTIONS: usize = 12;
/// Requests one connection may send, whatever happens (the run is also
/// bounded in time by its phases).
const MAX_REQUESTS_PER_CONNECTION: usize = 100_000;
/// How long every process may take to serve a swapped servlet.
const SWAP_WITHIN: Duration = Duration::from_secs(5);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `(version)`: answers its version text.
fn version_servlet(text: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{text}")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $write (i32.const 0) (i32.const {len})))
    i32.const 0))"#,
        len = text.len()
    ))
    .expect("version servlet")
}

/// `/who`: answers the client address swan sees.
const WHO: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $write (i32.const 0) (call $get (i32.const 6) (i32.const 0) (i32.const 256))))
    i32.const 0))"#;

/// Builds the example servlets (hello, visits) from source.
fn example_servlets() -> PathBuf {
    let out = repo().join("target/example-servlets");
    let status = Command::new(repo().join("examples/build.sh"))
        .arg(&out)
        .status()
        .expect("run examples/build.sh");
    assert!(status.success(), "examples/build.sh failed");
    out
}

/// Writes `bytes` to `path` as a deploy tool should: a new file renamed
/// over the old one.
fn deploy(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("wasm.part");
    std::fs::write(&tmp, bytes).expect("write servlet");
    std::fs::rename(&tmp, path).expect("rename servlet");
}

/// The running cluster: the script's process and its state folder.
struct Cluster {
    script: Child,
    dir: PathBuf,
    prefix: String,
}

impl Cluster {
    fn up(dir: &Path, root: &Path, servlets: &Path) -> Cluster {
        let mut script = Command::new(repo().join("deploy/local-cluster"))
            .args(["up", "--dir"])
            .arg(dir)
            .arg("--root")
            .arg(root)
            .arg("--servlets")
            .arg(servlets)
            .env("SWAN", env!("CARGO_BIN_EXE_swan"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start deploy/local-cluster");
        let mut out = BufReader::new(script.stdout.take().expect("stdout"));
        let mut line = String::new();
        let started = Instant::now();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("read the script's output");
            assert!(
                n > 0,
                "deploy/local-cluster exited before it was ready (logs in {})",
                dir.display()
            );
            if line.starts_with("local-cluster: ready") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(300),
                "cluster start timed out"
            );
        }
        std::thread::spawn(move || {
            let mut sink = String::new();
            while out.read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {
                print!("{sink}");
                sink.clear();
            }
        });
        let env = std::fs::read_to_string(dir.join("cluster.env")).expect("cluster.env");
        let prefix = env
            .lines()
            .find_map(|l| l.strip_prefix("PREFIX="))
            .expect("PREFIX in cluster.env")
            .to_owned();
        Cluster {
            script,
            dir: dir.to_owned(),
            prefix,
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("haproxy.sock")
    }

    fn swan_pid(&self, n: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("swan{n}.pid")))
            .expect("pid file")
            .trim()
            .to_owned()
    }

    fn signal(&self, n: usize, signal: &str) {
        let pid = self.swan_pid(n);
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    fn alive(&self, n: usize) -> bool {
        Path::new(&format!("/proc/{}", self.swan_pid(n))).exists()
    }

    fn start_swan(&self, n: usize) {
        let status = Command::new(repo().join("deploy/local-cluster"))
            .arg("start-swan")
            .arg(&self.dir)
            .arg(n.to_string())
            .status()
            .expect("start-swan");
        assert!(status.success(), "start-swan {n}");
    }

    /// Runs `curl ARGS` inside the cluster's namespace `ns`.
    fn curl_in(&self, ns: &str, args: &[&str]) -> Option<String> {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &format!("{}-{ns}", self.prefix),
                "curl",
                "-sf",
                "-m",
                "2",
            ])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until HAProxy reports swan `n` up.
    fn wait_up(&self, n: usize, limit: Duration) {
        let started = Instant::now();
        loop {
            let ready = self
                .curl_in("hub", &[&format!("http://10.77.0.{}:9090/readyz", 10 + n)])
                .is_some();
            if ready && self.haproxy_state(n).as_deref() == Some("UP") {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "swan{n} did not come back within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// HAProxy's view of swan `n` (UP, DOWN, ...), from its stats socket.
    fn haproxy_state(&self, n: usize) -> Option<String> {
        let mut s = UnixStream::connect(self.dir.join("haproxy-admin.sock")).ok()?;
        s.write_all(b"show stat\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let name = format!("swan{n}");
        out.lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f.len() > 17 && f[0] == "swans" && f[1] == name)
            .map(|f| f[17].split(' ').next().unwrap_or("").to_owned())
    }

    fn stop(mut self) {
        self.stop_script();
        // Every namespace it made is gone.
        let left = Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns");
        let left = String::from_utf8_lossy(&left.stdout);
        assert!(
            !left.contains(&format!("{}-", self.prefix)),
            "namespaces left behind: {left}"
        );
    }
}

impl Cluster {
    /// Stops the script, which stops everything it started.
    fn stop_script(&mut self) {
        if matches!(self.script.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &self.script.id().to_string()])
                .status();
            let _ = self.script.wait();
        }
    }
}

impl Drop for Cluster {
    /// A failed assertion still stops the cluster.
    fn drop(&mut self) {
        self.stop_script();
    }
}

/// What one request of the load run gave.
#[derive(Clone)]
struct Outcome {
    at: Instant,
    kind: &'static str,
    /// `None` for a transport error.
    status: Option<u16>,
    served_by: String,
    error: String,
}

fn load(socket: PathBuf, stop: Arc<AtomicBool>, outcomes: Arc<Mutex<Vec<Outcome>>>, seed: usize) {
    let kinds: [(&str, &str, &str); 3] = [
        ("static", "GET", "/index.html"),
        ("hello", "GET", "/hello"),
        ("increment", "POST", "/visits"),
    ];
    let mut conn: Option<BufReader<UnixStream>> = None;
    let mut mine = Vec::new();
    for i in 0..MAX_REQUESTS_PER_CONNECTION {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let (kind, method, path) = kinds[(i + seed) % kinds.len()];
        if conn.is_none() {
            match UnixStream::connect(&socket) {
                Ok(s) => {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                    conn = Some(BufReader::new(s));
                }
                Err(e) => {
                    mine.push(Outcome {
                        at: Instant::now(),
                        kind,
                        status: None,
                        served_by: String::new(),
                        error: format!("connect: {e}"),
                    });
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
        }
        let Some(stream) = conn.as_mut() else {
            continue;
        };
        match exchange(stream, method, path) {
            Ok(r) => {
                if r.close {
                    conn = None;
                }
                mine.push(Outcome {
                    at: Instant::now(),
                    kind,
                    status: Some(r.status),
                    served_by: r.served_by,
                    error: String::new(),
                });
            }
            Err(e) => {
                conn = None;
                mine.push(Outcome {
                    at: Instant::now(),
                    kind,
                    status: None,
                    served_by: String::new(),
                    error: e.to_string(),
                });
            }
        }
    }
    outcomes.lock().expect("outcomes").extend(mine);
}

#[test]
fn three_swans_behind_haproxy_survive_a_kill_a_drain_and_a_servlet_swap() {
    let servlets_built = example_servlets();
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("www");
    let servlets = dir.path().join("servlets");
    std::fs::create_dir_all(&root).expect("www");
    std::fs::create_dir_all(&servlets).expect("servlets");
    std::fs::write(root.join("index.html"), "cluster home").expect("index");
    for name in ["hello", "visits"] {
        std::fs::copy(
            servlets_built.join(format!("{name}.wasm")),
            servlets.join(format!("{name}.wasm")),
        )
        .expect("copy servlet");
    }
    std::fs::write(servlets.join("who.wasm"), wat::parse_str(WHO).expect("who")).expect("who");
    deploy(&servlets.join("version.wasm"), &version_servlet("v1"));
    let state = dir.path().join("cluster");
    let cluster = Cluster::up(&state, &root, &servlets);

    // The client's address reaches swan through HAProxy (PROXY v2).
    for _ in 0..3 {
        let who = cluster.curl_in("client", &["http://10.77.0.1:8080/who"]);
        assert!(
            who.as_deref()
                .is_some_and(|w| w.starts_with("10.77.0.100:")),
            "swan sees the client, not HAProxy: {who:?}"
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|seed| {
            let (socket, stop, outcomes) = (cluster.socket(), stop.clone(), outcomes.clone());
            std::thread::spawn(move || load(socket, stop, outcomes, seed))
        })
        .collect();
    let t0 = Instant::now();
    let mut phases: Vec<(&str, Instant)> = vec![("steady", t0)];

    // Swap a servlet in the shared folder: every process serves the new
    // version within SWAP_WITHIN.
    std::thread::sleep(Duration::from_secs(2));
    deploy(&servlets.join("version.wasm"), &version_servlet("v2"));
    let swapped = Instant::now();
    let mut on_v2: BTreeMap<String, Duration> = BTreeMap::new();
    {
        let mut conn = BufReader::new(UnixStream::connect(cluster.socket()).expect("connect"));
        while on_v2.len() < 3 {
            assert!(
                swapped.elapsed() < SWAP_WITHIN,
                "after {SWAP_WITHIN:?} only {on_v2:?} serve the new servlet"
            );
            match exchange(&mut conn, "GET", "/version") {
                Ok(r) if r.body == "v2" => {
                    on_v2
                        .entry(r.served_by)
                        .or_insert_with(|| swapped.elapsed());
                }
                Ok(r) => {
                    assert_eq!(r.body, "v1", "old or new, nothing else");
                    assert!(
                        !on_v2.contains_key(&r.served_by),
                        "{} went back to v1",
                        r.served_by
                    );
                }
                Err(_) => {
                    conn = BufReader::new(UnixStream::connect(cluster.socket()).expect("connect"));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    println!("servlet swap: every process served v2 after {on_v2:?}");
    std::thread::sleep(Duration::from_secs(1));

    // kill -9 swan1, then start it again.
    phases.push(("swan1 killed", Instant::now()));
    cluster.signal(1, "-KILL");
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_swan(1);
    cluster.wait_up(1, Duration::from_secs(60));
    phases.push(("swan1 restarted", Instant::now()));
    std::thread::sleep(Duration::from_secs(3));

    // Drain swan2 with SIGTERM: it leaves without failing a request.
    phases.push(("swan2 draining", Instant::now()));
    cluster.signal(2, "-TERM");
    let drain_started = Instant::now();
    while cluster.alive(2) {
        assert!(
            drain_started.elapsed() < Duration::from_secs(30),
            "swan2 never exited"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    cluster.start_swan(2);
    cluster.wait_up(2, Duration::from_secs(60));
    phases.push(("all back", Instant::now()));
    std::thread::sleep(Duration::from_secs(3));
    let end = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("load thread");
    }

    // The counter: one more increment reads it.
    let mut conn = BufReader::new(UnixStream::connect(cluster.socket()).expect("connect"));
    let last = exchange(&mut conn, "POST", "/visits").expect("final increment");
    assert_eq!(last.status, 200);
    let counter: u64 = last.body.trim().parse().expect("a count");
    let outcomes = outcomes.lock().expect("outcomes").clone();
    cluster.stop();

    // Report.
    let phase_of = |at: Instant| {
        phases
            .iter()
            .rev()
            .find(|(_, start)| at >= *start)
            .map_or("before", |(name, _)| *name)
    };
    let mut report = String::new();
    let mut errors_by_phase: BTreeMap<&str, Vec<&Outcome>> = BTreeMap::new();
    for (i, (name, start)) in phases.iter().enumerate() {
        let stop_at = phases.get(i + 1).map_or(end, |(_, s)| *s);
        let secs = stop_at.duration_since(*start).as_secs_f64();
        let in_phase: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| phase_of(o.at) == *name)
            .collect();
        let failed: Vec<&Outcome> = in_phase
            .iter()
            .copied()
            .filter(|o| o.status != Some(200))
            .collect();
        report += &format!(
            "  {name:<16} {:>6} requests in {secs:>4.1} s = {:>6.0}/s, {} failed\n",
            in_phase.len(),
            in_phase.len() as f64 / secs,
            failed.len()
        );
        errors_by_phase.insert(name, failed);
    }
    let mut causes: BTreeMap<String, usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| o.status != Some(200)) {
        let cause = match o.status {
            Some(s) => format!(
                "{} {s} via {}",
                o.kind,
                if o.served_by.is_empty() {
                    "haproxy"
                } else {
                    &o.served_by
                }
            ),
            None => format!("{} transport: {}", o.kind, o.error),
        };
        *causes.entry(cause).or_default() += 1;
    }
    let acked = outcomes
        .iter()
        .filter(|o| o.kind == "increment" && o.status == Some(200))
        .count() as u64
        + 1;
    let failed_increments = outcomes
        .iter()
        .filter(|o| o.kind == "increment" && o.status != Some(200))
        .count() as u64;
    println!(
        "scale-out run: {} requests, {} connections\n{report}  errors by cause: {causes:?}\n  counter {counter}, acknowledged increments {acked}, failed increments {failed_increments}",
        outcomes.len(),
        CONNECTIONS
    );

    // No acknowledged increment is lost; an increment that failed (its
    // swan killed mid-request) may or may not have counted.
    assert!(
        counter >= acked,
        "lost increments: counter {counter} < acknowledged {acked}"
    );
    assert!(
        counter <= acked + failed_increments,
        "counter {counter} > acknowledged {acked} + failed {failed_increments}"
    );
    // Only the kill may fail requests, at most those in flight on it (one
    // per client connection).
    for (phase, failed) in &errors_by_phase {
        if *phase != "swan1 killed" {
            assert!(
                failed.is_empty(),
                "{phase}: {} failed\n{report}{causes:?}",
                failed.len()
            );
        }
    }
    let killed = errors_by_phase.get("swan1 killed").map_or(0, Vec::len);
    assert!(
        killed <= CONNECTIONS,
        "{killed} failures from one kill\n{report}"
    );
    // Throughput recovers once swan1 is back.
    let rate = |name: &str| {
        let i = phases.iter().position(|(n, _)| *n == name).expect("phase");
        let start = phases[i].1;
        let stop_at = phases.get(i + 1).map_or(end, |(_, s)| *s);
        let n = outcomes.iter().filter(|o| phase_of(o.at) == name).count();
        n as f64 / stop_at.duration_since(start).as_secs_f64()
    };
    assert!(
        rate("all back") >= 0.5 * rate("steady"),
        "throughput did not recover\n{report}"
    );
}
