//! Key-value stores: the same conformance tests on the embedded backend and
//! on a real Redis (started by the test), then through servlets: the visit
//! counter and the guestbook examples (Rust, native ABI), concurrent
//! increments, Redis going down and coming back.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan::config::{StoreConfig, StoreKind, StoreLimits};
use swan::store::{Store, StoreError};
use swan_tests::redis::RedisServer;
use swan_tests::{TestServer, TestSite};

fn limits() -> StoreLimits {
    StoreLimits {
        max_key_bytes: 64,
        max_value_bytes: 1024,
        max_ops_per_request: 1000,
        max_list_keys: 10,
    }
}

fn embedded(dir: &std::path::Path) -> Result<Arc<Store>> {
    Ok(Arc::new(Store::open(&StoreConfig {
        name: "test".to_owned(),
        kind: StoreKind::Embedded {
            path: dir.join("test.redb"),
        },
        limits: limits(),
    })?))
}

fn redis(server: &RedisServer, name: &str) -> Result<Arc<Store>> {
    Ok(Arc::new(Store::open(&StoreConfig {
        name: name.to_owned(),
        kind: StoreKind::Redis {
            url: server.url(),
            connections: 2,
            timeout: Duration::from_secs(1),
        },
        limits: limits(),
    })?))
}

/// Every operation, its edge cases and its limits.
async fn conformance(store: Arc<Store>) -> Result<()> {
    let kind = store.kind();
    assert_eq!(store.get("missing").await?, None, "{kind}");
    store.set("a", Bytes::from("1"), None).await?;
    assert_eq!(store.get("a").await?, Some(Bytes::from("1")), "{kind}");
    assert!(store.exists("a").await?);
    store.set("a", Bytes::from("2"), None).await?;
    assert_eq!(store.get("a").await?, Some(Bytes::from("2")));
    assert!(store.delete("a").await?);
    assert!(!store.delete("a").await?);
    assert!(!store.exists("a").await?);
    // Empty values and binary values are values.
    store.set("empty", Bytes::new(), None).await?;
    assert_eq!(store.get("empty").await?, Some(Bytes::new()), "{kind}");
    store
        .set("bin", Bytes::from(vec![0u8, 255, 10]), None)
        .await?;
    assert_eq!(
        store.get("bin").await?,
        Some(Bytes::from(vec![0u8, 255, 10]))
    );
    // Time to live.
    store
        .set("short", Bytes::from("x"), Some(Duration::from_millis(200)))
        .await?;
    assert!(store.exists("short").await?);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!store.exists("short").await?, "{kind}: ttl");
    // Setting again without a TTL makes a key permanent.
    store
        .set("kept", Bytes::from("x"), Some(Duration::from_millis(200)))
        .await?;
    store.set("kept", Bytes::from("y"), None).await?;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(store.get("kept").await?, Some(Bytes::from("y")), "{kind}");
    // Increment.
    assert_eq!(store.increment("n", 5).await?, 5);
    assert_eq!(store.increment("n", -2).await?, 3);
    assert_eq!(store.get("n").await?, Some(Bytes::from("3")));
    assert_eq!(
        store.increment("bin", 1).await,
        Err(StoreError::NotANumber),
        "{kind}"
    );
    // Numbers are read as Redis reads them, on both backends.
    for odd in [
        " 5",
        "5 ",
        "+5",
        "05",
        "-0",
        "5\n",
        "1e3",
        "9223372036854775808",
    ] {
        store.set("odd", Bytes::from(odd), None).await?;
        assert_eq!(
            store.increment("odd", 1).await,
            Err(StoreError::NotANumber),
            "{kind} {odd:?}"
        );
    }
    store
        .set("min", Bytes::from("-9223372036854775808"), None)
        .await?;
    assert_eq!(store.increment("min", 1).await?, i64::MIN + 1, "{kind}");
    // Unsigned counters (wasi:keyvalue's) refuse a negative number, and
    // leave it as it was.
    store.set("neg", Bytes::from("-5"), None).await?;
    assert_eq!(
        store.increment_unsigned("neg", 1).await,
        Err(StoreError::NotANumber),
        "{kind}"
    );
    assert_eq!(store.get("neg").await?, Some(Bytes::from("-5")), "{kind}");
    assert_eq!(store.increment_unsigned("uns", 3).await?, 3, "{kind}");
    assert_eq!(store.increment_unsigned("uns", 4).await?, 7, "{kind}");
    // A time to live past a century is refused alike; up to it, taken.
    let year = Duration::from_secs(365 * 24 * 3600);
    for (ttl, refused) in [
        (swan::store::MAX_TTL + Duration::from_secs(1), true),
        (101 * year, true),
        (Duration::from_millis(i64::MAX as u64), true),
        (99 * year, false),
    ] {
        let set = store.set("ttl", Bytes::from("x"), Some(ttl)).await;
        assert_eq!(
            matches!(set, Err(StoreError::Limit(_))),
            refused,
            "{kind} {ttl:?}: {set:?}"
        );
    }
    // Compare-and-swap.
    assert!(store.compare_and_swap("c", None, Bytes::from("v1")).await?);
    assert!(!store.compare_and_swap("c", None, Bytes::from("v2")).await?);
    assert!(
        !store
            .compare_and_swap("c", Some(Bytes::from("no")), Bytes::from("v2"))
            .await?
    );
    assert!(
        store
            .compare_and_swap("c", Some(Bytes::from("v1")), Bytes::from("v2"))
            .await?
    );
    assert_eq!(store.get("c").await?, Some(Bytes::from("v2")));
    // Listing by prefix, a page at a time: every key exactly once.
    for i in 0..25 {
        store
            .set(&format!("p:{i:02}"), Bytes::from("x"), None)
            .await?;
    }
    store.set("q:other", Bytes::from("x"), None).await?;
    let mut seen = Vec::new();
    let mut cursor = None;
    for _ in 0..100 {
        let page = store.list("p:", cursor, 10).await?;
        assert!(
            page.keys.len() <= 10,
            "{kind}: a page of {}",
            page.keys.len()
        );
        seen.extend(page.keys);
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 25, "{kind}: {seen:?}");
    assert!(seen.iter().all(|k| k.starts_with("p:")));
    // Keys deleted and added between pages never make the listing skip a
    // key that was there all along.
    let first = store.list("p:", None, 5).await?;
    assert_eq!(first.keys.len(), 5, "{kind}");
    for k in &first.keys {
        store.delete(k).await?;
    }
    store.set("p:!new", Bytes::from("x"), None).await?;
    let mut rest = Vec::new();
    let mut cursor = first.cursor;
    for _ in 0..100 {
        let Some(c) = cursor else { break };
        let page = store.list("p:", Some(c), 5).await?;
        assert!(
            page.keys.len() <= 5,
            "{kind}: a page of {}",
            page.keys.len()
        );
        rest.extend(page.keys);
        cursor = page.cursor;
    }
    for k in seen.iter().filter(|k| !first.keys.contains(k)) {
        assert!(rest.contains(k), "{kind}: {k} was skipped after deletions");
    }
    // A cursor the store never gave is an error, not a wrong page, on
    // either kind (Redis took any odd number for a SCAN position).
    for made_up in [7, 99_999, 987_654_321, 987_654_320] {
        assert!(
            store.list("p:", Some(made_up), 5).await.is_err(),
            "{kind}: {made_up}"
        );
    }
    // A cursor continues its own listing only: taken to another prefix it
    // never hands out keys outside that prefix (Redis kept the rest of a
    // SCAN step, of the first prefix's keys, under the cursor).
    store.set("r:1", Bytes::from("x"), None).await?;
    let mut cursor = None;
    for _ in 0..10 {
        let page = store.list("p:", cursor, 1).await?;
        let Some(c) = page.cursor else { break };
        if let Ok(other) = store.list("r:", Some(c), 5).await {
            assert!(
                other.keys.iter().all(|k| k.starts_with("r:")),
                "{kind}: {:?} listed under r:",
                other.keys
            );
        }
        cursor = Some(c);
    }
    // Limits.
    let long_key = "k".repeat(65);
    assert!(
        matches!(store.get(&long_key).await, Err(StoreError::Limit(_))),
        "{kind}"
    );
    assert!(matches!(
        store.set("big", Bytes::from(vec![0u8; 1025]), None).await,
        Err(StoreError::Limit(_))
    ));
    Ok(())
}

/// 1,000 concurrent increments end at exactly 1,000; concurrent
/// read-modify-CAS loops lose no update.
async fn contention(store: Arc<Store>) -> Result<()> {
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    store.increment("hits", 1).await?;
                }
                Ok::<_, StoreError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    assert_eq!(
        store.get("hits").await?,
        Some(Bytes::from("1000")),
        "{}",
        store.kind()
    );
    store.set("cas", Bytes::from("0"), None).await?;
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut done = 0;
                let mut attempts = 0;
                while done < 20 && attempts < 10_000 {
                    attempts += 1;
                    let current = store.get("cas").await?;
                    let n: u64 = current
                        .as_ref()
                        .and_then(|b| std::str::from_utf8(b).ok())
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    let next = Bytes::from((n + 1).to_string());
                    if store.compare_and_swap("cas", current, next).await? {
                        done += 1;
                    }
                }
                Ok::<_, StoreError>(done)
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    assert_eq!(total, 200);
    assert_eq!(
        store.get("cas").await?,
        Some(Bytes::from("200")),
        "{}",
        store.kind()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_passes_the_conformance_tests() -> Result<()> {
    let dir = tempfile::tempdir()?;
    conformance(embedded(dir.path())?).await?;
    contention(embedded(&dir.path().join("other"))?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_store_passes_the_conformance_tests() -> Result<()> {
    let server = RedisServer::start()?;
    conformance(redis(&server, "one")?).await?;
    contention(redis(&server, "two")?).await?;
    // A key that is not UTF-8 (written by another client) is listed with
    // U+FFFD, not an error for every listing that meets it.
    let raw = {
        use std::io::{Read, Write};
        let addr = server.url().trim_start_matches("redis://").to_owned();
        let mut conn = std::net::TcpStream::connect(addr.trim_end_matches('/'))?;
        let key = b"swan:three:nu\xff\xfekey";
        let mut command = format!("*3\r\n$3\r\nSET\r\n${}\r\n", key.len()).into_bytes();
        command.extend_from_slice(key);
        command.extend_from_slice(b"\r\n$1\r\nv\r\n");
        conn.write_all(&command)?;
        let mut reply = [0u8; 5];
        conn.read_exact(&mut reply)?;
        reply
    };
    assert_eq!(&raw, b"+OK\r\n");
    let three = redis(&server, "three")?;
    three.set("nu-ok", Bytes::from("v"), None).await?;
    let mut listed = three.list("nu", None, 10).await?.keys;
    listed.sort();
    assert_eq!(listed, ["nu-ok", "nu\u{fffd}\u{fffd}key"]);
    // Stores are namespaced: the same key in two stores is two keys.
    let a = redis(&server, "a")?;
    let b = redis(&server, "b")?;
    a.set("k", Bytes::from("in a"), None).await?;
    assert_eq!(b.get("k").await?, None);
    Ok(())
}

#[test]
fn an_embedded_store_keeps_its_data_across_a_reopen() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let before = rt.block_on(async {
        let store = embedded(dir.path())?;
        store.set("kept", Bytes::from("yes"), None).await?;
        for k in ["l:1", "l:2", "l:3"] {
            store.set(k, Bytes::from("x"), None).await?;
        }
        let page = store.list("l:", None, 1).await?;
        anyhow::Ok(page.cursor.expect("more keys"))
    })?;
    rt.block_on(async {
        let store = embedded(dir.path())?;
        assert_eq!(store.get("kept").await?, Some(Bytes::from("yes")));
        // A cursor from before the reopen is unknown (-6 to a servlet),
        // even once a new listing of the same prefix has begun: it never
        // continues another listing from where that one is.
        let now = store.list("l:", None, 1).await?;
        assert!(now.cursor.is_some());
        assert!(store.list("l:", Some(before), 1).await.is_err());
        anyhow::Ok(())
    })
}

/// A site with the store examples, on `store_toml` stores.
async fn start(store_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let examples = swan_tests::example_servlets()?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    for name in ["visits", "guestbook"] {
        site.file(
            &format!("servlets/{name}.wasm"),
            std::fs::read(examples.join(format!("{name}.wasm")))?,
        )?;
    }
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n{store_toml}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 2\nstores = [\"default\"]\n"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

async fn counter_and_guestbook(server: &TestServer) -> Result<()> {
    let first: u64 = server.get("/visits").await?.text().parse()?;
    let second: u64 = server.get("/visits").await?.text().parse()?;
    assert_eq!(second, first + 1);
    // 200 increments from 20 concurrent clients: none lost.
    let clients: Vec<_> = (0..20)
        .map(|_| {
            let url = server.url("/visits");
            tokio::spawn(async move {
                let client = hyper_util::client::legacy::Client::builder(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .build_http::<Full<Bytes>>();
                for _ in 0..10 {
                    let res = client
                        .request(Request::get(url.clone()).body(Full::default())?)
                        .await?;
                    anyhow::ensure!(res.status() == StatusCode::OK, "{}", res.status());
                }
                Ok(())
            })
        })
        .collect();
    for c in clients {
        c.await??;
    }
    let last: u64 = server.get("/visits").await?.text().parse()?;
    assert_eq!(last, second + 201);
    // The guestbook: post, list, delete.
    for (name, message) in [("Ada", "hello"), ("Grace", "hi there")] {
        let r = server
            .send(
                Request::post(server.url("/guestbook")).body(Full::new(Bytes::from(format!(
                    r#"{{"name":"{name}","message":"{message}"}}"#
                ))))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    }
    let list = server.get("/guestbook").await?.text();
    assert!(list.contains("Ada") && list.contains("Grace"), "{list}");
    let id = list
        .split("\"id\":")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap_or("0")
        .to_owned();
    let r = server
        .send(Request::delete(server.url(&format!("/guestbook/{id}"))).body(Full::default())?)
        .await?;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = server
        .send(Request::delete(server.url(&format!("/guestbook/{id}"))).body(Full::default())?)
        .await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!server.get("/guestbook").await?.text().contains("Ada"));
    let bad = server
        .send(Request::post(server.url("/guestbook")).body(Full::new(Bytes::from("{")))?)
        .await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    // HEAD counts nothing and answers GET's head.
    let head = server
        .send(Request::head(server.url("/visits")).body(Full::default())?)
        .await?;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(server.get("/visits").await?.text(), (last + 1).to_string());
    let head = server
        .send(Request::head(server.url("/guestbook")).body(Full::default())?)
        .await?;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header("content-type"), "application/json");
    // Names are 1 to 100 characters (not bytes).
    let post = |body: String| {
        server.send(
            Request::post(server.url("/guestbook"))
                .body(Full::new(Bytes::from(body)))
                .expect("request"),
        )
    };
    let long = "N".repeat(101);
    let r = post(format!(r#"{{"name":"{long}","message":"m"}}"#)).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let accents = "é".repeat(60);
    let r = post(format!(r#"{{"name":"{accents}","message":"m"}}"#)).await?;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    // A long book is read a page of 100 at a time, each page a bounded
    // number of store operations (before, one GET read every entry and
    // failed past the per-request limit of 1,000 operations).
    for n in 0..150 {
        let r = post(format!(r#"{{"name":"n{n}","message":"m"}}"#)).await?;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    }
    let mut seen = 0;
    let mut url = "/guestbook".to_owned();
    for page in 0.. {
        assert!(page < 10, "more pages than entries");
        let r = server.get(&url).await?;
        assert_eq!(r.status, StatusCode::OK, "{url}: {}", r.text());
        let entries = r.text().matches("\"id\":").count();
        assert!(entries <= 100, "{entries} entries on one page");
        seen += entries;
        let link = r.header("link").to_owned();
        let Some(next) = link
            .strip_prefix('<')
            .and_then(|l| l.split_once(">; rel=\"next\""))
            .map(|(target, _)| target.to_owned())
        else {
            break;
        };
        url = next;
    }
    // Grace, the accented name and the 150 (Ada was deleted).
    assert_eq!(seen, 152);
    Ok(())
}

#[tokio::test]
async fn native_servlets_keep_state_in_the_default_embedded_store() -> Result<()> {
    let (site, server) = start("").await?;
    counter_and_guestbook(&server).await?;
    // The implicit default store lives next to the configuration.
    assert!(site.path().join("data/default.redb").is_file());
    Ok(())
}

#[tokio::test]
async fn native_servlets_keep_state_in_redis() -> Result<()> {
    let redis = RedisServer::start()?;
    let (_site, server) = start(&format!(
        "[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = {:?}\n",
        redis.url()
    ))
    .await?;
    counter_and_guestbook(&server).await
}

/// Opens `default`, increments `visits`, traps on any error: a servlet that
/// does not handle a store failure.
const CARELESS: &str = r#"(module
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_increment" (func $incr (param i32 i32 i32 i64 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "default")
  (data (i32.const 16) "visits")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $h i32)
    (local.set $h (call $open (i32.const 0) (i32.const 7)))
    (if (i32.lt_s (local.get $h) (i32.const 0)) (then unreachable))
    (if (i32.lt_s (call $incr (local.get $h) (i32.const 16) (i32.const 6) (i64.const 1) (i32.const 64)) (i32.const 0))
      (then unreachable))
    (drop (call $write (i32.const 16) (i32.const 6)))
    i32.const 0))"#;

#[tokio::test]
async fn redis_going_down_gives_503_and_coming_back_needs_no_restart() -> Result<()> {
    let mut redis = RedisServer::start()?;
    let (site, server) = start(&format!(
        "[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = {:?}\n",
        redis.url()
    ))
    .await?;
    drop(server);
    site.file("servlets/careless.wasm", wat::parse_str(CARELESS)?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = {:?}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\nstores = [\"default\"]\n",
        redis.url()
    ))?;
    let server = TestServer::start(config).await?;
    let first = server.get("/visits").await?;
    assert_eq!(first.text(), "1", "{}", first.status);
    assert_eq!(server.get("/careless").await?.status, StatusCode::OK);
    redis.stop();
    // The example handles the error itself; the careless one traps, and
    // swan answers 503 for it, not 500. Static files are unaffected.
    let r = server.get("/visits").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    let r = server.get("/careless").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    assert_eq!(server.get("/").await?.text(), "home");
    redis.restart()?;
    assert!(
        server
            .answers_ok_within("/careless", Duration::from_secs(20))
            .await,
        "calls did not work again after Redis came back"
    );
    Ok(())
}

/// A store's health is every connection's: with one of its two connections
/// refused (Redis at `maxclients`), so that calls on some keys fail, every
/// ping says unavailable and names the connection, instead of a probe of
/// one connection in turn answering well and not by turns (a `/readyz`
/// that flapped).
#[tokio::test]
async fn one_broken_redis_connection_fails_every_ping() -> Result<()> {
    let server = RedisServer::start()?;
    let store = redis(&server, "half")?;
    store.ping().await?;
    let killed = server.command(None, &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])?;
    assert!(killed.starts_with(':'), "{killed}");
    assert_eq!(
        server.command(None, &["CONFIG", "SET", "maxclients", "1"])?,
        "+OK"
    );
    // The first pings reconnect both; one connection gets the only place.
    for _ in 0..2 {
        let _ = store.ping().await;
    }
    for round in 0..6 {
        match store.ping().await {
            Err(swan::store::StoreError::Unavailable(why)) => {
                assert!(why.contains("of 2"), "round {round}: {why}");
            }
            other => panic!("round {round}: {other:?}"),
        }
    }
    // Calls on keys split: some take the working connection, some not.
    let mut results = (0, 0);
    for n in 0..32 {
        match store.get(&format!("k{n}")).await {
            Ok(_) => results.0 += 1,
            Err(_) => results.1 += 1,
        }
    }
    assert!(results.0 > 0 && results.1 > 0, "{results:?}");
    Ok(())
}

/// Redis going away after it was up: calls fail quickly and keep failing
/// quickly, instead of each waiting for a reconnection of its own (about
/// 140 ms apiece before); they work again once Redis is back. A connection
/// reset while Redis is up (a killed client) costs at most the calls that
/// find it reset, also many at once.
#[tokio::test]
async fn calls_during_a_redis_outage_fail_at_once_and_one_drop_costs_one_call() -> Result<()> {
    let mut server = RedisServer::start()?;
    let store = redis(&server, "outage")?;
    store.set("k", Bytes::from_static(b"v"), None).await?;
    // A dropped connection while Redis is up: the manager reconnects.
    let killed = server.command(None, &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])?;
    assert!(killed.starts_with(':'), "{killed}");
    let mut failed = 0;
    for _ in 0..10 {
        match store.get("k").await {
            Ok(Some(v)) => assert_eq!(v.as_ref(), b"v"),
            Ok(None) => panic!("the value went missing"),
            Err(_) => failed += 1,
        }
    }
    assert!(failed <= 1, "{failed} of 10 calls failed after one drop");
    // Again with 16 calls at once on a connection just reset (they start
    // after the kill: this test's runtime runs them when it awaits): they
    // may all fail as dropped, and the calls after them work (no second of
    // refusals).
    let mut waiting = Vec::new();
    for _ in 0..16 {
        let store = store.clone();
        waiting.push(tokio::spawn(async move { store.get("k").await }));
    }
    let killed = server.command(None, &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])?;
    assert!(killed.starts_with(':'), "{killed}");
    for call in waiting {
        let _ = call.await?;
    }
    let _ = store.get("k").await;
    for n in 0..10 {
        let got = store.get("k").await;
        assert!(
            matches!(&got, Ok(Some(v)) if v.as_ref() == b"v"),
            "call {n} after the reset: {got:?}"
        );
    }
    // Redis goes away: 40 calls back to back on one key. Each waiting for
    // a reconnection of its own took over 5 s in all.
    server.stop();
    let started = std::time::Instant::now();
    for n in 0..40 {
        match store.get("k").await {
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("call {n}: {other:?}"),
        }
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "40 calls during the outage took {took:?}"
    );
    server.restart()?;
    let back = std::time::Instant::now();
    loop {
        match store.get("k").await {
            // The value did not outlive the restart (no persistence).
            Ok(_) => break,
            Err(_) if back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("still failing once Redis was back: {e}"),
        }
    }
    Ok(())
}

/// Redis closing connections left idle (its `timeout`, as a proxy or a
/// NAT also may) costs no call: an idle connection is checked before use.
/// A handshake Redis refuses (a password it starts to require, so SELECT
/// of the store's database fails) is tried again once it accepts again,
/// with no restart. Before, the first call on each connection after an
/// idle second failed (503), and the refused handshake stayed refused
/// until swan restarted.
#[tokio::test]
async fn redis_closing_idle_connections_or_refusing_a_handshake_needs_no_restart() -> Result<()> {
    let redis = RedisServer::start()?;
    let (_site, server) = start(&format!(
        "[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = \"{}/1\"\n",
        redis.url()
    ))
    .await?;
    let count = |r: &swan_tests::Reply| r.text().parse::<u64>().ok();
    let first = server.get("/visits").await?;
    let mut last = count(&first).unwrap_or_else(|| panic!("{} {}", first.status, first.text()));
    assert_eq!(
        redis.command(None, &["CONFIG", "SET", "timeout", "1"])?,
        "+OK"
    );
    for _ in 0..2 {
        // Long enough for Redis to close both idle connections.
        tokio::time::sleep(Duration::from_millis(3500)).await;
        for _ in 0..6 {
            let r = server.get("/visits").await?;
            assert_eq!(
                r.status,
                StatusCode::OK,
                "after an idle spell: {}",
                r.text()
            );
            let now = count(&r).unwrap_or_default();
            assert_eq!(now, last + 1, "{}", r.text());
            last = now;
        }
    }
    // A password now required; swan's connections closed.
    assert_eq!(
        redis.command(None, &["CONFIG", "SET", "timeout", "0"])?,
        "+OK"
    );
    assert_eq!(
        redis.command(None, &["CONFIG", "SET", "requirepass", "sekrit"])?,
        "+OK"
    );
    let killed = redis.command(Some("sekrit"), &["CLIENT", "KILL", "TYPE", "normal"])?;
    assert!(killed.starts_with(':'), "{killed}");
    for _ in 0..3 {
        let r = server.get("/visits").await?;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        redis.command(Some("sekrit"), &["CONFIG", "SET", "requirepass", ""])?,
        "+OK"
    );
    assert!(
        server
            .answers_ok_within("/visits", Duration::from_secs(10))
            .await,
        "the store did not work again once Redis accepted its handshake"
    );
    // Redis at its `maxmemory` refuses writes for now: unavailable (503),
    // not a servlet error (500).
    assert_eq!(
        redis.command(None, &["CONFIG", "SET", "maxmemory", "1"])?,
        "+OK"
    );
    let r = server.get("/visits").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    assert_eq!(
        redis.command(None, &["CONFIG", "SET", "maxmemory", "0"])?,
        "+OK"
    );
    assert!(
        server
            .answers_ok_within("/visits", Duration::from_secs(10))
            .await
    );
    Ok(())
}

/// Redis refusing connections, or accepting them and never answering,
/// from the start: every call fails as unavailable within the store's
/// `timeout` (500 ms here), so 20 requests at once all get the servlet's
/// 503 quickly. Before, they queued behind one connection attempt at a
/// time and most got a 504 after the servlet's 5 s deadline.
#[tokio::test]
async fn a_redis_down_or_silent_from_the_start_fails_calls_fast() -> Result<()> {
    // A port nobody listens on, and a listener that never answers.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let silent_addr = silent.local_addr()?;
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
            if held.len() > 200 {
                break;
            }
        }
    });
    for addr in [closed, silent_addr] {
        let (_site, server) = start(&format!(
            "[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = \"redis://{addr}\"\nconnections = 1\ntimeout = \"500ms\"\n"
        ))
        .await?;
        let started = std::time::Instant::now();
        let calls: Vec<_> = (0..20).map(|_| server.spawn_get("/visits")).collect();
        for call in calls {
            let status = call.await??.status;
            // Read in turn: the time is that of the last answer so far.
            let took = started.elapsed();
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{addr}");
            assert!(took < Duration::from_secs(3), "{addr}: {took:?}");
        }
        let r = server.get("/visits").await?;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.header("retry-after"), "1");
    }
    holder.abort();
    Ok(())
}

#[test]
fn stores_are_checked_at_configuration_load() -> Result<()> {
    let site = TestSite::new()?;
    site.dir("www")?;
    // One folder under two names.
    site.dir("x")?;
    std::os::unix::fs::symlink(site.path().join("x"), site.path().join("link"))?;
    for (toml, expect) in [
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\npath = \"x/s.redb\"\n[[store]]\nname = \"b\"\nkind = \"embedded\"\npath = \"./x/../x/s.redb\"\n[[site]]\nroot = \"www\"\n",
            "stores \"a\" and \"b\" share the file",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\npath = \"x/s.redb\"\n[[store]]\nname = \"b\"\nkind = \"embedded\"\npath = \"link/s.redb\"\n[[site]]\nroot = \"www\"\n",
            "stores \"a\" and \"b\" share the file",
        ),
        (
            "[[site]]\nroot = \"www\"\n[site.servlet]\nstores = [\"nope\"]\n",
            "no store is named \"nope\"",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"redis\"\nurl = \"http://x\"\n[[site]]\nroot = \"www\"\n",
            "is not a Redis URL",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\n[[store]]\nname = \"a\"\nkind = \"embedded\"\n[[site]]\nroot = \"www\"\n",
            "two stores are named \"a\"",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"disk\"\n[[site]]\nroot = \"www\"\n",
            "unknown store kind",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\npath = \"x.redb\"\n[[store]]\nname = \"b\"\nkind = \"embedded\"\npath = \"x.redb\"\n[[site]]\nroot = \"www\"\n",
            "stores \"a\" and \"b\" share the file",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"redis\"\nurl = \"redis://:pw@host:99999\"\n[[site]]\nroot = \"www\"\n",
            "is not a Redis URL",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"redis\"\n[[site]]\nroot = \"www\"\n",
            "needs `url` or `url_env`",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"redis\"\nurl = \"redis://h\"\nurl_env = \"X\"\n[[site]]\nroot = \"www\"\n",
            "are both set",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\nurl = \"redis://h\"\n[[site]]\nroot = \"www\"\n",
            "an embedded store has no `url`",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"redis\"\nurl = \"redis://h\"\nconnections = 0\n[[site]]\nroot = \"www\"\n",
            "must be at least 1",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\ntimeout = \"1s\"\n[[site]]\nroot = \"www\"\n",
            "it is a Redis setting",
        ),
        (
            "[[store]]\nname = \"a b\"\nkind = \"embedded\"\n[[site]]\nroot = \"www\"\n",
            "is not a store name",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\nmax_value_bytes = 0\n[[site]]\nroot = \"www\"\n",
            "must be at least 1 byte",
        ),
        (
            "[[store]]\nname = \"a\"\nkind = \"embedded\"\nmax_size = 5\n[[site]]\nroot = \"www\"\n",
            "max_size",
        ),
    ] {
        let err = match site.config(toml) {
            Ok(_) => anyhow::bail!("accepted: {toml}"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(expect), "{toml}\n{err}");
        assert!(!err.contains("pw@"), "a password in an error: {err}");
        // Every error names the file and line, and gives a hint.
        assert!(err.contains("swan.toml:") && err.contains("hint"), "{err}");
    }
    Ok(())
}

/// A site serving the `state-rust` component (wasi:keyvalue) as
/// `visits.wasm` and `guestbook.wasm`, on `store_toml` stores.
async fn start_component(store_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let built = swan_tests::example_components(&["state"])?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    for name in ["visits", "guestbook"] {
        site.file(
            &format!("servlets/{name}.wasm"),
            std::fs::read(built.join("state-rust.wasm"))?,
        )?;
    }
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n{store_toml}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 2\nstores = [\"default\"]\n"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn components_keep_state_in_the_embedded_store_through_wasi_keyvalue() -> Result<()> {
    let (_site, server) = start_component("").await?;
    counter_and_guestbook(&server).await
}

#[tokio::test]
async fn components_keep_state_in_redis_through_wasi_keyvalue() -> Result<()> {
    let redis = RedisServer::start()?;
    let (_site, server) = start_component(&format!(
        "[[store]]\nname = \"default\"\nkind = \"redis\"\nurl = {:?}\n",
        redis.url()
    ))
    .await?;
    counter_and_guestbook(&server).await?;
    // Redis going away: the component handles the error with its own 503.
    drop(redis);
    let r = server.get("/visits").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    Ok(())
}

/// Opens the store named by the request body and answers the code
/// `kv_open` returned, as one decimal digit after a minus sign or "ok".
const OPENER: &str = r#"(module
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "ok")
  (data (i32.const 110) "-")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32) (local $h i32)
    (local.set $n (call $get (i32.const 5) (i32.const 0) (i32.const 64)))
    (local.set $h (call $open (i32.const 0) (local.get $n)))
    (if (i32.ge_s (local.get $h) (i32.const 0))
      (then (drop (call $write (i32.const 100) (i32.const 2))))
      (else
        (i32.store8 (i32.const 111) (i32.sub (i32.const 48) (local.get $h)))
        (drop (call $write (i32.const 110) (i32.const 2)))))
    i32.const 0))"#;

#[tokio::test]
async fn a_servlet_opens_only_the_stores_its_route_lists() -> Result<()> {
    swan_tests::init_logs();
    let built = swan_tests::example_components(&["state"])?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/opener.wasm", wat::parse_str(OPENER)?)?;
    site.file(
        "servlets/visits.wasm",
        std::fs::read(built.join("state-rust.wasm"))?,
    )?;
    let config = site.config(
        "[[store]]\nname = \"a\"\nkind = \"embedded\"\npath = \"data/a.redb\"\n\
         [[store]]\nname = \"default\"\nkind = \"embedded\"\npath = \"data/d.redb\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\nstores = [\"a\"]\n",
    )?;
    let server = TestServer::start(config).await?;
    let server = &server;
    let open = |name: &'static str| {
        let url = server.url("/opener");
        async move {
            let r = server
                .send(Request::post(url).body(Full::new(Bytes::from(name)))?)
                .await?;
            anyhow::ensure!(r.status == StatusCode::OK, "{}", r.status);
            Ok::<_, anyhow::Error>(r.text())
        }
    };
    // Listed: opens. Configured but not listed, or not configured: denied
    // (-2), the same answer, so a servlet cannot probe which stores exist.
    assert_eq!(open("a").await?, "ok");
    assert_eq!(open("default").await?, "-2");
    assert_eq!(open("nope").await?, "-2");
    assert_eq!(open("").await?, "-2");
    // The component is refused `default` the same way.
    let r = server.get("/visits").await?;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.text().contains("AccessDenied"), "{}", r.text());
    Ok(())
}

/// A site with the kv-ops guests (`/native`, `/component`), granted
/// `default` on `kind_toml` with small limits, and a second store `other`
/// they are not granted.
async fn start_ops(kind_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let native = swan_tests::guest("kv-ops-native", "wasm32-wasip1")?;
    let component = swan_tests::guest("kv-ops-component", "wasm32-wasip2")?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/native.wasm", std::fs::read(native)?)?;
    site.file("servlets/component.wasm", std::fs::read(component)?)?;
    let config = site.config(&format!(
        "[[store]]\nname = \"default\"\n{kind_toml}\nmax_key_bytes = 64\nmax_value_bytes = 128\n\
         max_ops_per_request = 20\nmax_list_keys = 4\n\
         [[store]]\nname = \"other\"\nkind = \"embedded\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\"]\n"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

/// Every operation, its edge cases and its limits, through one servlet.
async fn every_operation(server: &TestServer, servlet: &str) -> Result<()> {
    let op = |query: String| {
        let path = format!("/{servlet}?{query}");
        async move {
            let r = server.get(&path).await?;
            anyhow::ensure!(r.status == StatusCode::OK, "{query}: {}", r.status);
            Ok::<_, anyhow::Error>(r.text())
        }
    };
    let k = |name: &str| format!("{servlet}:{name}");
    // get, set, exists, delete.
    assert_eq!(op(format!("op=get&key={}", k("a"))).await?, "absent");
    assert_eq!(op(format!("op=set&key={}&value=1", k("a"))).await?, "ok");
    assert_eq!(op(format!("op=get&key={}", k("a"))).await?, "value:1");
    assert_eq!(op(format!("op=set&key={}&value=", k("empty"))).await?, "ok");
    assert_eq!(op(format!("op=get&key={}", k("empty"))).await?, "value:");
    assert_eq!(op(format!("op=has&key={}", k("a"))).await?, "true");
    assert_eq!(op(format!("op=has&key={}", k("b"))).await?, "false");
    // increment: from absent, by a delta, on a number set as text, on text.
    assert_eq!(op(format!("op=incr&key={}&delta=5", k("n"))).await?, "5");
    assert_eq!(op(format!("op=incr&key={}", k("n"))).await?, "6");
    assert_eq!(op(format!("op=incr&key={}", k("a"))).await?, "2");
    assert_eq!(op(format!("op=get&key={}", k("n"))).await?, "value:6");
    assert_eq!(op(format!("op=set&key={}&value=x", k("s"))).await?, "ok");
    assert_eq!(
        op(format!("op=incr&key={}", k("s"))).await?,
        "err:NotANumber"
    );
    // compare-and-swap: only-if-absent, stale expectations lose.
    assert_eq!(op(format!("op=cas&key={}&new=v1", k("c"))).await?, "true");
    assert_eq!(op(format!("op=cas&key={}&new=v9", k("c"))).await?, "false");
    assert_eq!(
        op(format!("op=cas&key={}&expect=v1&new=v2", k("c"))).await?,
        "true"
    );
    assert_eq!(
        op(format!("op=cas&key={}&expect=v1&new=v3", k("c"))).await?,
        "false"
    );
    assert_eq!(op(format!("op=get&key={}", k("c"))).await?, "value:v2");
    // delete says whether the key was there.
    assert_eq!(op(format!("op=del&key={}", k("a"))).await?, "true");
    assert_eq!(op(format!("op=del&key={}", k("a"))).await?, "false");
    assert_eq!(op(format!("op=has&key={}", k("a"))).await?, "false");
    // A time-to-live: there, then gone.
    assert_eq!(
        op(format!("op=set&key={}&value=t&ttl=300", k("t"))).await?,
        "ok"
    );
    assert_eq!(op(format!("op=get&key={}", k("t"))).await?, "value:t");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(op(format!("op=get&key={}", k("t"))).await?, "absent");
    assert_eq!(op(format!("op=has&key={}", k("t"))).await?, "false");
    // Listing by prefix, 4 keys a page: every key once, nothing else.
    for i in 0..10 {
        op(format!("op=set&key={}{i:02}&value=v", k("l:"))).await?;
    }
    op(format!("op=set&key={}&value=v", k("l"))).await?; // not under "l:"
    let (mut seen, mut cursor, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let page = op(format!("op=list&prefix={}&cursor={cursor}", k("l:"))).await?;
        let (c, keys) = page
            .strip_prefix("cursor=")
            .and_then(|p| p.split_once(";keys="))
            .ok_or_else(|| anyhow::anyhow!("bad page {page}"))?;
        let keys: Vec<String> = keys
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        assert!(keys.len() <= 4, "{page}");
        seen.extend(keys);
        pages += 1;
        anyhow::ensure!(pages < 20, "the cursor never ends");
        if c.is_empty() {
            break;
        }
        cursor = c.to_owned();
    }
    seen.sort();
    let expected: Vec<String> = (0..10).map(|i| format!("{}{i:02}", k("l:"))).collect();
    assert_eq!(seen, expected);
    // Limits: key, value, operations per request.
    let long_key = "k".repeat(65);
    assert_eq!(
        op(format!("op=set&key={long_key}&value=v")).await?,
        "err:Limit"
    );
    assert_eq!(op(format!("op=get&key={long_key}")).await?, "err:Limit");
    let long_value = "v".repeat(129);
    assert_eq!(
        op(format!("op=set&key={}&value={long_value}", k("big"))).await?,
        "err:Limit"
    );
    assert_eq!(op(format!("op=has&key={}", k("big"))).await?, "false");
    assert_eq!(
        op(format!("op=set&key={}&value={}", k("big"), "v".repeat(128))).await?,
        "ok"
    );
    assert_eq!(op(format!("op=burst&key={}&n=20", k("burst"))).await?, "20");
    assert_eq!(
        op(format!("op=burst&key={}&n=21", k("burst"))).await?,
        "err:Limit"
    );
    // The limit is per request: the next request starts again.
    assert_eq!(op(format!("op=incr&key={}", k("burst"))).await?, "41");
    // A store the route does not list, and one that does not exist.
    assert_eq!(
        op(format!("store=other&op=get&key={}", k("a"))).await?,
        "err:Denied"
    );
    assert_eq!(
        op(format!("store=nope&op=get&key={}", k("a"))).await?,
        "err:Denied"
    );
    Ok(())
}

/// What only wasi:keyvalue has: batch calls and listing every key.
async fn batch_operations(server: &TestServer) -> Result<()> {
    let op = |query: &str| {
        let path = format!("/component?{query}");
        async move { Ok::<_, anyhow::Error>(server.get(&path).await?.text()) }
    };
    assert_eq!(op("op=setmany&keys=b:1,b:2,b:3&value=x").await?, "ok");
    assert_eq!(
        op("op=many&keys=b:1,b:9,b:3").await?,
        "b:1=x,b:9=absent,b:3=x"
    );
    assert_eq!(op("op=delmany&keys=b:1,b:2").await?, "ok");
    assert_eq!(
        op("op=many&keys=b:1,b:2,b:3").await?,
        "b:1=absent,b:2=absent,b:3=x"
    );
    // A batch counts one operation per key: 20 fit the limit of 20 (the
    // batch call itself is not one more), 25 do not, and the refusal is
    // in the store's metrics.
    let limited = || {
        let loader = server.app().loader.clone();
        loader
            .and_then(|l| l.stores().get("default").map(|s| s.stats().limited.get()))
            .unwrap_or_default()
    };
    let before = limited();
    let keys: Vec<String> = (0..20).map(|i| format!("b:{i}")).collect();
    let answer = op(&format!("op=many&keys={}", keys.join(","))).await?;
    assert!(answer.starts_with("b:0="), "{answer}");
    let keys: Vec<String> = (0..25).map(|i| format!("b:{i}")).collect();
    assert_eq!(
        op(&format!("op=many&keys={}", keys.join(","))).await?,
        "err:Limit"
    );
    assert_eq!(limited(), before + 1);
    // Past a limit nothing of a batch is written or deleted: too many
    // keys, or one value too large.
    let over: Vec<String> = (0..25).map(|i| format!("over:{i}")).collect();
    let sets = format!("op=setmany&keys={}&value=x", over.join(","));
    assert_eq!(op(&sets).await?, "err:Limit");
    assert_eq!(
        op("op=many&keys=over:0,over:1,over:19").await?,
        "over:0=absent,over:1=absent,over:19=absent"
    );
    let dels = format!("op=delmany&keys=b:3,{}", over.join(","));
    assert_eq!(op(&dels).await?, "err:Limit");
    assert_eq!(op("op=many&keys=b:3").await?, "b:3=x");
    let long = "v".repeat(200);
    assert_eq!(
        op(&format!("op=setmany&keys=fit:1,fit:2&value={long}")).await?,
        "err:Limit"
    );
    assert_eq!(op("op=many&keys=fit:1").await?, "fit:1=absent");
    // wasi:keyvalue counts are unsigned: a negative number stored is
    // refused, and left as it was.
    assert_eq!(op("op=set&key=neg&value=-5").await?, "ok");
    assert_eq!(op("op=incr&key=neg&delta=1").await?, "err:NotANumber");
    assert_eq!(op("op=get&key=neg").await?, "value:-5");
    // list-keys pages through every key of the store, 4 at a time.
    let (mut all, mut cursor) = (Vec::new(), String::new());
    for _ in 0..100 {
        let page = op(&format!("op=listall&cursor={cursor}")).await?;
        let (c, keys) = page
            .strip_prefix("cursor=")
            .and_then(|p| p.split_once(";keys="))
            .ok_or_else(|| anyhow::anyhow!("bad page {page}"))?;
        assert!(keys.split(',').count() <= 4, "{page}");
        all.extend(keys.split(',').filter(|k| !k.is_empty()).map(str::to_owned));
        if c.is_empty() {
            break;
        }
        cursor = c.to_owned();
    }
    assert!(all.iter().any(|k| k == "b:3"), "{all:?}");
    assert!(!all.iter().any(|k| k == "b:1"), "{all:?}");
    assert!(all.iter().any(|k| k == "native:n") && all.iter().any(|k| k == "component:n"));
    Ok(())
}

#[tokio::test]
async fn every_operation_works_for_both_servlet_kinds_on_the_embedded_store() -> Result<()> {
    let (_site, server) = start_ops("kind = \"embedded\"").await?;
    every_operation(&server, "native").await?;
    every_operation(&server, "component").await?;
    batch_operations(&server).await
}

#[tokio::test]
async fn every_operation_works_for_both_servlet_kinds_on_redis() -> Result<()> {
    let redis = RedisServer::start()?;
    let (_site, server) = start_ops(&format!("kind = \"redis\"\nurl = {:?}", redis.url())).await?;
    every_operation(&server, "native").await?;
    every_operation(&server, "component").await?;
    batch_operations(&server).await
}

#[tokio::test]
async fn the_assemblyscript_example_counts_visits_through_the_raw_abi() -> Result<()> {
    swan_tests::init_logs();
    let examples = swan_tests::example_servlets()?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file(
        "servlets/hello-as.wasm",
        std::fs::read(examples.join("hello-as.wasm"))?,
    )?;
    site.file(
        "denied/hello-as.wasm",
        std::fs::read(examples.join("hello-as.wasm"))?,
    )?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nstores = [\"default\"]\n\
         [[site.route]]\npath = \"/denied/*\"\nservlet = \"denied/hello-as.wasm\"\nstores = []\n",
    )?;
    let server = TestServer::start(config).await?;
    assert_eq!(server.get("/hello-as/visits").await?.text(), "visits: 1\n");
    assert_eq!(server.get("/hello-as/visits").await?.text(), "visits: 2\n");
    let r = server.get("/denied/visits").await?;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(r.text(), "store error -2\n");
    Ok(())
}

/// Native guests for the ABI's edges: `badout` increments `n` with its
/// result to go past the end of memory (a trap); `read` answers `n`;
/// `keep` opens `default` once and keeps the handle in a global for the
/// instance's later requests; `exit` answers how many requests its
/// instance served, and exits (`proc_exit(0)`) after its first.
const ABI_EDGES: [(&str, &str); 5] = [
    (
        "two",
        r#"(local $d i32) (local $i i32)
           (local.set $d (call $open (i32.const 0) (i32.const 7)))
           (loop $l
             (drop (call $incr (local.get $d) (i32.const 17) (i32.const 1) (i64.const 1) (i32.const 256)))
             (local.set $i (i32.add (local.get $i) (i32.const 1)))
             (br_if $l (i32.lt_u (local.get $i) (i32.const 5))))
           (if (i32.lt_s (call $incr (call $open (i32.const 64) (i32.const 5)) (i32.const 17) (i32.const 1) (i64.const 1) (i32.const 256)) (i32.const 0))
             (then (drop (call $write (i32.const 48) (i32.const 3))))
             (else (drop (call $write (i32.const 56) (i32.const 4)))))
           i32.const 0"#,
    ),
    (
        "badout",
        r#"(i32.store (i32.const 96) (call $open (i32.const 0) (i32.const 7)))
           (drop (call $incr (i32.load (i32.const 96)) (i32.const 16) (i32.const 1) (i64.const 1) (i32.const 65532)))
           i32.const 0"#,
    ),
    (
        "read",
        r#"(local $n i32)
           (local.set $n (call $get (call $open (i32.const 0) (i32.const 7)) (i32.const 16) (i32.const 1) (i32.const 128) (i32.const 32)))
           (if (i32.lt_s (local.get $n) (i32.const 0))
             (then (drop (call $write (i32.const 32) (i32.const 6))))
             (else (drop (call $write (i32.const 128) (local.get $n)))))
           i32.const 0"#,
    ),
    (
        "keep",
        r#"(if (i32.lt_s (global.get $h) (i32.const 0))
             (then
               (global.set $h (call $open (i32.const 0) (i32.const 7)))
               (drop (call $write (i32.const 40) (i32.const 6))))
             (else
               (if (i32.lt_s (call $incr (global.get $h) (i32.const 17) (i32.const 1) (i64.const 1) (i32.const 256)) (i32.const 0))
                 (then (drop (call $write (i32.const 48) (i32.const 3))))
                 (else (drop (call $write (i32.const 56) (i32.const 4)))))))
           i32.const 0"#,
    ),
    (
        "exit",
        r#"(global.set $served (i32.add (global.get $served) (i32.const 1)))
           (i32.store8 (i32.const 300) (i32.add (i32.const 48) (global.get $served)))
           (drop (call $write (i32.const 300) (i32.const 1)))
           (if (i32.eq (global.get $served) (i32.const 1)) (then (call $exit (i32.const 0))))
           i32.const 0"#,
    ),
];

fn abi_edge(body: &str) -> Result<Vec<u8>> {
    Ok(wat::parse_str(format!(
        r#"(module
  (import "swan" "kv_open" (func $open (param i32 i32) (result i32)))
  (import "swan" "kv_get" (func $get (param i32 i32 i32 i32 i32) (result i32)))
  (import "swan" "kv_increment" (func $incr (param i32 i32 i32 i64 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (global $h (mut i32) (i32.const -1))
  (global $served (mut i32) (i32.const 0))
  (data (i32.const 0) "default")
  (data (i32.const 16) "nk")
  (data (i32.const 32) "absent")
  (data (i32.const 40) "opened")
  (data (i32.const 48) "bad")
  (data (i32.const 56) "kept")
  (data (i32.const 64) "small")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) {body}))"#
    ))?)
}

/// A store call whose result cannot be written (a trap) changes nothing;
/// a store handle lasts as long as its instance (ABI.md), so a reused
/// instance may keep one; an instance that called `proc_exit(0)` answered,
/// but is never reused (its stack was unwound partway). Operations count
/// against each store's own per-request limit, not a total over stores.
#[tokio::test]
async fn native_abi_edges_of_stores_and_exits() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    for (name, body) in ABI_EDGES {
        site.file(&format!("servlets/{name}.wasm"), abi_edge(body)?)?;
    }
    let config = site.config(
        "[server]\nmax_instances = 16\n\
         [[store]]\nname = \"default\"\nkind = \"embedded\"\n\
         [[store]]\nname = \"small\"\nkind = \"embedded\"\nmax_ops_per_request = 3\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\nprewarm = 0\nreuse = 4\nmax_concurrency = 1\nstores = [\"default\", \"small\"]\n",
    )?;
    let server = TestServer::start(config).await?;
    for _ in 0..3 {
        let r = server.get("/badout").await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    assert_eq!(server.get("/read").await?.text(), "absent");
    assert_eq!(server.get("/keep").await?.text(), "opened");
    assert_eq!(server.get("/keep").await?.text(), "kept");
    assert_eq!(server.get("/exit").await?.text(), "1");
    assert_eq!(
        server.get("/exit").await?.text(),
        "1",
        "an exited instance served again"
    );
    // Five operations on `default` leave `small` (3 a request) its own.
    assert_eq!(server.get("/two").await?.text(), "kept");
    Ok(())
}
