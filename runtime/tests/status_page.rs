//! The admin status page in a real browser: headless Chromium (Debian's
//! package, installed by scripts/setup) loads it from a running swan and
//! the test asserts on the DOM it rendered. With `SWAN_SCREENSHOT=FILE`
//! it also saves a screenshot (how docs/status-page.png is made:
//! `scripts/status-screenshot`).

use std::process::Command;
use std::time::{Duration, Instant};

mod support;
use support::{get, sample, site, start, status_of, stop};

const HELLO: &str = r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "hello")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (drop (call $write (i32.const 0) (i32.const 5))) i32.const 0))"#;

const TRAP: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) unreachable))"#;

/// Headless Chromium with its profile in `profile`, a folder the test
/// owns and removes.
fn chromium(profile: &std::path::Path) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
    ])
    .args([
        "--disable-extensions",
        "--disable-background-networking",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn the_status_page_renders_in_a_real_browser() {
    let dir = site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(
        dir.path().join("servlets/hello.wasm"),
        wat::parse_str(HELLO).expect("wat"),
    )
    .expect("hello");
    std::fs::write(
        dir.path().join("servlets/broken.wasm"),
        wat::parse_str(TRAP).expect("wat"),
    )
    .expect("broken");
    // A module refused at load, over static files it shadows.
    std::fs::write(dir.path().join("servlets/bad.wasm"), b"not a module").expect("bad");
    std::fs::create_dir(dir.path().join("www/bad")).expect("www/bad");
    std::fs::write(dir.path().join("www/bad/index.html"), "shadowed").expect("shadowed");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\"]\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [[site]]\nname = \"demo\"\nhosts = [\"demo.test\"]\nroot = \"www\"\nservlets = \"servlets\"\n\
         cache_control = \"max-age=60\"\n\
         [site.servlet]\nmax_body_bytes = \"2 KiB\"\nqueue_timeout = \"750ms\"\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], true);
    let (public, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    for _ in 0..7 {
        assert_eq!(status_of(&get(&public, "/hello")), 200);
    }
    assert_eq!(status_of(&get(&public, "/broken")), 500);
    // A refused folder servlet answers 500 like a refused route, never
    // the files it shadows.
    assert_eq!(status_of(&get(&public, "/bad")), 500);
    assert_eq!(status_of(&get(&public, "/bad/")), 500);
    // Counted as the refused route's 500s, not as the site's static files.
    let metrics = get(&admin, "/metrics");
    assert_eq!(
        sample(
            &metrics,
            "swan_requests_total",
            &["route=\"/bad/*\"", "class=\"5xx\""]
        ),
        Some(2.0),
        "{metrics}"
    );
    // A reload shows up too.
    std::fs::write(dir.path().join("www/new.html"), "new").expect("file");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of(&get(&public, "/new.html")) != 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    while status_of(&get(&admin, "/readyz")) != 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }

    let url = format!("http://{admin}/");
    let profile = tempfile::tempdir().expect("chromium profile");
    let out = chromium(profile.path())
        .args(["--dump-dom", "--virtual-time-budget=2000"])
        .arg(&url)
        .output()
        .expect("chromium (scripts/setup installs it)");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dom.contains("<title>swan status</title>"), "{dom}");
    assert!(dom.contains("id=\"readiness\">ready<"), "{dom}");
    assert!(
        dom.contains("Site demo (default)") && dom.contains("demo.test"),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("http://{public}/")),
        "listeners: {dom}"
    );
    // Both servlets, with their pools and counts.
    assert!(
        dom.contains("<code>/hello/*</code>") && dom.contains("<code>/broken/*</code>"),
        "{dom}"
    );
    assert!(
        dom.contains("native ABI 1") && dom.contains("optimized"),
        "{dom}"
    );
    // What happened, with the request id.
    assert!(
        dom.contains("servlet failed: trapped: trap: wasm trap: wasm `unreachable`"),
        "recent errors: {dom}"
    );
    assert!(dom.contains("files of site demo"), "recent reloads: {dom}");
    assert!(dom.contains("3 files in memory"), "cache: {dom}");
    // Settings a reload may change are shown: the site's Cache-Control,
    // and every servlet limit.
    assert!(
        dom.contains("cache-control <code>max-age=60</code>"),
        "{dom}"
    );
    assert!(
        dom.contains("body 2.0 KiB")
            && dom.contains("response 16.0 MiB")
            && dom.contains("queue 750 ms"),
        "limits: {dom}"
    );
    assert!(
        dom.contains("<code>/bad/*</code>") && dom.contains("bad refused at load"),
        "a refused servlet's row: {dom}"
    );
    // Nothing loaded from elsewhere: every link and source is local.
    for attr in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!dom.contains(attr), "external asset ({attr}): {dom}");
    }
    if let Some(file) = std::env::var_os("SWAN_SCREENSHOT") {
        let shot = chromium(profile.path())
            .arg(format!(
                "--screenshot={}",
                std::path::Path::new(&file).display()
            ))
            .args(["--window-size=1280,720", "--virtual-time-budget=2000"])
            .arg(&url)
            .output()
            .expect("chromium");
        assert!(
            shot.status.success(),
            "{}",
            String::from_utf8_lossy(&shot.stderr)
        );
    }
    stop(s.child);
}
