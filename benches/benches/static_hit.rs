#![expect(missing_docs, reason = "criterion macros generate undocumented items")]
//! The cache-hit path: site lookup by Host, path normalisation, cache
//! lookup, conditional and encoding checks, response construction.
//! No network: this is the part of a static request that swan owns.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;

fn site() -> (tempfile::TempDir, swan::site::Sites) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("index.html"), "x".repeat(100)).expect("write");
    std::fs::write(
        dir.path().join("app.js"),
        "console.log('swan');\n".repeat(200),
    )
    .expect("write");
    let toml = "[[site]]\nroot = \".\"\n";
    let config =
        swan::Config::parse(toml, &dir.path().join("swan.toml"), dir.path()).expect("config");
    let sites = swan::site::Sites::load(&config, None).expect("load");
    (dir, sites)
}

/// Polls a future that must complete without waiting (a memory hit).
fn now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a cache hit must not wait"),
    }
}

fn bench(c: &mut Criterion) {
    let (_dir, sites) = site();
    let plain = Request::get("/index.html")
        .header("host", "localhost:8080")
        .body(())
        .expect("req");
    let br = Request::get("/app.js")
        .header("accept-encoding", "gzip, deflate, br")
        .body(())
        .expect("req");
    let revalidate = {
        let site = sites.for_host(None);
        let etag = now(swan::static_files::respond(
            &site.cache,
            &plain,
            "/index.html",
        ))
        .expect("200")
        .headers()["etag"]
            .clone();
        Request::get("/index.html")
            .header("if-none-match", etag)
            .body(())
            .expect("req")
    };
    let mut group = c.benchmark_group("static_hit");
    for (name, req) in [
        ("100B identity", &plain),
        ("brotli variant", &br),
        ("304 revalidate", &revalidate),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let host = req.headers().get("host").map(|h| h.as_bytes());
                let site = sites.for_host(host);
                let path = swan::request::path::normalize(req.uri().path()).expect("path");
                black_box(now(swan::static_files::respond(
                    &site.cache,
                    black_box(req),
                    &path,
                )))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
