//! Hot-reload latency: from the moment a file is written to the first
//! response with the new content, for a static file and for a ~100 KB
//! `.wasm` (compilation included: every version differs, so the compiled-
//! code cache never hits). Prints median and p99 over ROUNDS writes.
//!
//! `cargo bench -p swan-benches --bench reload_latency`

use std::sync::Arc;
use std::time::{Duration, Instant};

use swan::engine::Tier;
use swan::servlet::Servlet;

const ROUNDS: usize = 50;
const LIMIT: Duration = Duration::from_secs(10);

/// `module` with a custom section carrying `nonce`: the same code, but
/// bytes no cache has seen.
fn with_nonce(module: &[u8], nonce: &str) -> Vec<u8> {
    let name = b"swan-bench-nonce";
    let mut payload = Vec::new();
    payload.push(name.len() as u8);
    payload.extend_from_slice(name);
    payload.extend_from_slice(nonce.as_bytes());
    let mut out = module.to_vec();
    out.push(0); // custom section id
    let mut len = payload.len();
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        if len == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    }
    out.extend_from_slice(&payload);
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

async fn measure(
    server: &swan_tests::TestServer,
    path: &str,
    mut write: impl FnMut(usize) -> String,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let started = Instant::now();
        let expected = write(round);
        loop {
            if let Ok(r) = server.get(path).await
                && r.text().contains(&expected)
            {
                break;
            }
            assert!(
                started.elapsed() < LIMIT,
                "round {round}: new content never served"
            );
        }
        samples.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    samples.sort();
    samples
}

fn report(what: &str, samples: &[Duration]) {
    println!(
        "{what:<40} median {:>7.1} ms   p99 {:>7.1} ms   ({} writes)",
        percentile(samples, 0.5).as_secs_f64() * 1000.0,
        percentile(samples, 0.99).as_secs_f64() * 1000.0,
        samples.len()
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let examples = swan_tests::example_servlets().expect("examples build (run scripts/setup)");
    let json_api = std::fs::read(examples.join("json-api.wasm")).expect("json-api.wasm");
    let site = swan_tests::TestSite::new().expect("site");
    site.file("www/index.html", "home").expect("file");
    site.file("www/page.html", "v-initial").expect("file");
    site.dir("servlets").expect("dir");
    site.file("servlets/api.wasm", with_nonce(&json_api, "initial"))
        .expect("file");
    let config = site
        .config("[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n")
        .expect("config");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let server = swan_tests::TestServer::start_watching(config)
            .await
            .expect("server");
        let page = site.path().join("www/page.html");
        let statics = measure(&server, "/page.html", |n| {
            let text = format!("static version {n} {}", "x".repeat(1000));
            std::fs::write(&page, &text).expect("write");
            format!("static version {n} ")
        })
        .await;
        let wasm = site.path().join("servlets/api.wasm");
        // Unique to this run: the compiled-code cache outlives a run, and
        // would serve a later run's versions without compiling.
        let run = format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let size = with_nonce(&json_api, &format!("{run}-0")).len();
        // A servlet round ends when /api is answered by a new servlet
        // (its identity changes) and that servlet serves a request.
        let mut samples = Vec::with_capacity(ROUNDS);
        for n in 0..ROUNDS {
            let before = current_servlet(&server);
            let started = Instant::now();
            std::fs::write(&wasm, with_nonce(&json_api, &format!("{run}-{n}"))).expect("write");
            loop {
                // The reload's version goes live on the baseline compiler;
                // the previous round's optimised version (its tier-up,
                // landing late) does not end this round.
                let now = current_servlet(&server);
                if !same(&now, &before)
                    && now.as_ref().is_some_and(|s| s.tier() == Tier::Baseline)
                    && server.get("/api/nope").await.is_ok_and(|r| r.status == 404)
                {
                    break;
                }
                assert!(
                    started.elapsed() < LIMIT,
                    "servlet round {n} never went live"
                );
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            samples.push(started.elapsed());
            // The next save comes after this version's tier-up (a
            // Cranelift compile on every core), as an edit would: one
            // save's latency, not a compile queue's.
            let tiering = Instant::now();
            while current_servlet(&server).is_some_and(|s| s.tier() == Tier::Baseline) {
                assert!(tiering.elapsed() < LIMIT, "round {n}: never tiered up");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        samples.sort();
        report("static file (1 KB), write -> served", &statics);
        report(
            &format!(".wasm ({} KB), write -> served", size / 1024),
            &samples,
        );
    });
}

/// The servlet answering /api (another one once a new version is swapped
/// in, or its optimised version). Held, not its address: a freed
/// servlet's address can be reused by the next version, which then looked
/// unchanged (a round that never ended).
fn current_servlet(server: &swan_tests::TestServer) -> Option<Arc<Servlet>> {
    let sites = server.app().sites.load();
    sites
        .iter()
        .next()
        .and_then(|s| s.servlets.servlet_at("/api").cloned())
}

fn same(a: &Option<Arc<Servlet>>, b: &Option<Arc<Servlet>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}
