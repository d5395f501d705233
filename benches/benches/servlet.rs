//! Servlet costs: one request through `Servlet::call` (instantiate, call,
//! drop) for the Rust `hello` example and a minimal WAT servlet, fresh
//! per request and with reuse; then an end-to-end request through hyper
//! over a keep-alive connection, servlet and static side by side.
#![expect(missing_docs, reason = "criterion macros generate undocumented items")]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use http_body_util::{BodyExt, Empty};
use swan::config::{ServerConfig, ServletLimits};
use swan::engine::Tier;
use swan::request::{BodyPolicy, RequestId};
use swan::servlet::{CallContext, Loader, Servlet, ServletInfo};

const WAT_HELLO: &str = r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (drop (call $write (i32.const 16) (i32.const 5))) i32.const 0))"#;

fn servlet(loader: &Loader, file: std::path::PathBuf, prewarm: u32, reuse: u32) -> Arc<Servlet> {
    let limits = ServletLimits {
        prewarm,
        reuse,
        ..ServletLimits::default()
    };
    loader
        .load_servlet(
            ServletInfo {
                name: "bench".to_owned(),
                file,
                limits,
                settings: Vec::new(),
                development: false,
            },
            Tier::Optimized,
        )
        .expect("servlet loads")
}

fn call(rt: &tokio::runtime::Runtime, s: &Arc<Servlet>) {
    let req = Request::get("/hello?name=bench")
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("request");
    let ctx = CallContext {
        path: "/hello",
        path_info: "",
        remote: SocketAddr::from(([127, 0, 0, 1], 1)),
        https: false,
        id: RequestId::next(),
        body: BodyPolicy {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(10),
            min_rate: 0,
        },
    };
    let res = rt.block_on(s.call(req, ctx)).expect("servlet answers");
    assert_eq!(res.status(), 200);
}

fn per_call(c: &mut Criterion) {
    let examples = swan_tests::example_servlets().expect("examples build (run scripts/setup)");
    let dir = tempfile::tempdir().expect("temp dir");
    let wat_file = dir.path().join("wat-hello.wasm");
    std::fs::write(&wat_file, wat::parse_str(WAT_HELLO).expect("wat")).expect("write");
    let loader = Loader::new(&ServerConfig::defaults(), Default::default()).expect("engine");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("servlet_call");
    for (name, file) in [
        ("rust hello", examples.join("hello.wasm")),
        ("wat hello", wat_file),
    ] {
        let fresh = servlet(&loader, file.clone(), 0, 1);
        group.bench_function(format!("{name}: instantiate + call + drop"), |b| {
            b.iter(|| call(&rt, &fresh))
        });
        let reused = servlet(&loader, file, 0, u32::MAX);
        group.bench_function(format!("{name}: call on a reused instance"), |b| {
            b.iter(|| call(&rt, &reused))
        });
    }
    group.finish();
}

fn end_to_end(c: &mut Criterion) {
    let examples = swan_tests::example_servlets().expect("examples build");
    let site = swan_tests::TestSite::new().expect("site");
    site.file("www/100.html", "x".repeat(100)).expect("file");
    let config = site
        .config(&format!(
            "[[site]]\nroot = \"www\"\nservlets = {:?}\n",
            examples.display().to_string()
        ))
        .expect("config");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt
        .block_on(swan_tests::TestServer::start(config))
        .expect("server");
    let stream = rt
        .block_on(tokio::net::TcpStream::connect(server.addr()))
        .expect("connect");
    let (mut sender, conn) = rt
        .block_on(hyper::client::conn::http1::handshake(
            hyper_util::rt::TokioIo::new(stream),
        ))
        .expect("handshake");
    rt.spawn(conn);
    let mut group = c.benchmark_group("end_to_end");
    group.measurement_time(Duration::from_secs(5));
    for path in ["/hello", "/100.html"] {
        group.bench_function(format!("GET {path} (keep-alive, hyper client)"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    let req = Request::get(path)
                        .header("host", "localhost")
                        .body(Empty::<Bytes>::new())
                        .expect("req");
                    let res = sender.send_request(req).await.expect("response");
                    assert_eq!(res.status(), 200);
                    res.into_body().collect().await.expect("body");
                })
            })
        });
    }
    group.finish();
    drop(server);
}

criterion_group!(benches, per_call, end_to_end);
criterion_main!(benches);
