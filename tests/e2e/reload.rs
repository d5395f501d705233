//! Hot reload: static files, .wasm servlets and the configuration change
//! under a running server without failed requests or broken versions.

use std::time::Duration;

use anyhow::Result;
use http::StatusCode;
use swan_tests::{TestServer, TestSite, eventually};

const WAIT: Duration = Duration::from_secs(10);

/// A servlet answering `text`.
fn version(text: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{text}")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (drop (call $write (i32.const 16) (i32.const {len}))) i32.const 0))"#,
        len = text.len()
    ))
    .unwrap_or_default()
}

async fn start(site: &TestSite, extra: &str) -> Result<TestServer> {
    swan_tests::init_logs();
    site.dir("www")?;
    site.dir("servlets")?;
    let config = site.config(&format!(
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n{extra}"
    ))?;
    TestServer::start_watching(config).await
}

async fn text_is(server: &TestServer, path: &str, want: &str) -> bool {
    server.get(path).await.is_ok_and(|r| r.text() == want)
}

async fn status_is(server: &TestServer, path: &str, want: StatusCode) -> bool {
    server.get(path).await.is_ok_and(|r| r.status == want)
}

#[tokio::test]
async fn static_files_follow_edits_additions_removals_and_new_folders() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/page.html", "first")?;
    let server = start(&site, "").await?;
    assert_eq!(server.get("/page.html").await?.text(), "first");
    let etag = server.get("/page.html").await?.header("etag").to_owned();

    site.file("www/page.html", "second version")?;
    assert!(eventually(WAIT, || text_is(&server, "/page.html", "second version")).await);
    let r = server.get("/page.html").await?;
    assert_ne!(r.header("etag"), etag, "ETag must follow the content");
    assert_eq!(r.header("content-length"), "14");

    site.file("www/new.txt", "added")?;
    assert!(eventually(WAIT, || text_is(&server, "/new.txt", "added")).await);

    std::fs::remove_file(site.path().join("www/new.txt"))?;
    assert!(
        eventually(WAIT, || status_is(
            &server,
            "/new.txt",
            StatusCode::NOT_FOUND
        ))
        .await
    );

    site.file("www/blog/index.html", "blog home")?;
    assert!(eventually(WAIT, || text_is(&server, "/blog/", "blog home")).await);
    assert!(
        eventually(WAIT, || status_is(
            &server,
            "/blog",
            StatusCode::MOVED_PERMANENTLY
        ))
        .await
    );
    Ok(())
}

#[tokio::test]
async fn editor_save_patterns_end_in_the_right_content() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/doc.txt", "original")?;
    let server = start(&site, "").await?;
    // Write to a temporary file, then rename over the original (vim, most IDEs).
    site.file("www/.doc.txt.swp", "renamed into place")?;
    std::fs::rename(
        site.path().join("www/.doc.txt.swp"),
        site.path().join("www/doc.txt"),
    )?;
    assert!(eventually(WAIT, || text_is(&server, "/doc.txt", "renamed into place")).await);
    // Truncate, then write in several pieces.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(site.path().join("www/doc.txt"))?;
        for piece in ["in ", "several ", "pieces"] {
            f.write_all(piece.as_bytes())?;
            f.flush()?;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert!(eventually(WAIT, || text_is(&server, "/doc.txt", "in several pieces")).await);
    Ok(())
}

/// Writes `text` to `path` with the modification time every version of
/// it has (`cp -p`, `tar x`, builds with `SOURCE_DATE_EPOCH`).
fn write_dated(path: &std::path::Path, text: &str) -> Result<()> {
    std::fs::write(path, text)?;
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(path)?
        .set_modified(when)?;
    Ok(())
}

/// A file replaced by one of the same size and modification time, renamed
/// over it or written in place, cached or streamed: the new content goes
/// live. Before, size and modification time alone said "unchanged" and the
/// old content was served until a restart.
#[tokio::test]
async fn a_file_replaced_by_one_of_the_same_size_and_date_goes_live() -> Result<()> {
    let site = TestSite::new()?;
    let www = site.path().join("www");
    std::fs::create_dir_all(&www)?;
    let big = |c: char| c.to_string().repeat(2 << 20);
    write_dated(&www.join("rep.txt"), "version-AAAA")?;
    write_dated(&www.join("big.txt"), &big('A'))?;
    let server = start(&site, "[site.cache]\nmax_file_size = \"1 MiB\"\n").await?;
    assert!(text_is(&server, "/rep.txt", "version-AAAA").await);
    let big_tag = server.get("/big.txt").await?.header("etag").to_owned();
    // Renamed over.
    write_dated(&www.join(".rep.new"), "version-BBBB")?;
    std::fs::rename(www.join(".rep.new"), www.join("rep.txt"))?;
    write_dated(&www.join(".big.new"), &big('B'))?;
    std::fs::rename(www.join(".big.new"), www.join("big.txt"))?;
    assert!(eventually(WAIT, || text_is(&server, "/rep.txt", "version-BBBB")).await);
    let b = big('B');
    assert!(eventually(WAIT, || text_is(&server, "/big.txt", &b)).await);
    // Its validator changed with it: the old one gets no 304 (a client's
    // stale copy) and no range of the new bytes (a spliced download).
    let r = server.get("/big.txt").await?;
    assert_ne!(r.header("etag"), big_tag);
    let r = server
        .get_with("/big.txt", &[("if-none-match", &big_tag)])
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    let r = server
        .get_with(
            "/big.txt",
            &[("range", "bytes=0-9"), ("if-range", &big_tag)],
        )
        .await?;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "a range of the new file for the old tag"
    );
    // Written in place, the date put back.
    write_dated(&www.join("rep.txt"), "version-CCCC")?;
    assert!(eventually(WAIT, || text_is(&server, "/rep.txt", "version-CCCC")).await);
    Ok(())
}

#[tokio::test]
async fn a_servlet_replaced_50_times_under_load_never_fails_a_request() -> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/live.wasm", version("v00"))?;
    let server = std::sync::Arc::new(start(&site, "").await?);
    assert_eq!(server.get("/live").await?.text(), "v00");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let (server, stop) = (server.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut failed, mut last, mut backwards) = (0u32, Vec::new(), 0u32, 0u32);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && tokio::time::Instant::now() < deadline
            {
                match server.get("/live").await {
                    Ok(r) if r.status == StatusCode::OK && r.text().starts_with('v') => {
                        let n: u32 = r.text()[1..].parse().unwrap_or(0);
                        if n < last {
                            backwards += 1;
                        }
                        last = last.max(n);
                        ok += 1;
                    }
                    Ok(r) => failed.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (ok, failed, last, backwards)
        })
    };
    for n in 1..=50u32 {
        let text = format!("v{n:02}");
        // A plain (non-atomic) write: swan may see the file half-written.
        std::fs::write(site.path().join("servlets/live.wasm"), version(&text))?;
        assert!(
            eventually(WAIT, || text_is(&server, "/live", &text)).await,
            "version {n} never went live"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed, last, backwards) = client.await?;
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(last, 50);
    assert_eq!(
        backwards, 0,
        "a request after a swap was served by an older version"
    );
    assert!(ok > 50, "only {ok} requests made");
    Ok(())
}

#[tokio::test]
async fn a_truncated_or_invalid_wasm_keeps_the_working_version() -> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/app.wasm", version("good one"))?;
    let server = start(&site, "").await?;
    assert_eq!(server.get("/app").await?.text(), "good one");
    let mut broken = version("broken");
    broken.truncate(broken.len() / 2);
    site.file("servlets/app.wasm", &broken)?;
    // The reload happens, is refused, and the old version keeps serving.
    assert!(
        eventually(WAIT, || async {
            server
                .app()
                .sites
                .load()
                .iter()
                .any(|s| s.servlets.refused.iter().any(|r| r.kept_previous))
        })
        .await
    );
    assert_eq!(server.get("/app").await?.text(), "good one");
    // Fixing the file deploys it.
    site.file("servlets/app.wasm", version("fixed"))?;
    assert!(eventually(WAIT, || text_is(&server, "/app", "fixed")).await);
    Ok(())
}

/// A `[[site.route]]`'s `.wasm`, outside any watched folder, replaced by a
/// rename (as a deploy does) or rewritten in place: the new version goes
/// live. Before, only SIGHUP or a configuration edit noticed it.
#[tokio::test]
async fn a_route_servlet_file_replaced_goes_live() -> Result<()> {
    let site = TestSite::new()?;
    site.file("deploy/app.wasm", version("first"))?;
    let server = start(
        &site,
        "[[site.route]]\npath = \"/app/*\"\nservlet = \"deploy/app.wasm\"\n",
    )
    .await?;
    assert_eq!(server.get("/app/x").await?.text(), "first");
    site.file("deploy/app.wasm.new", version("second"))?;
    std::fs::rename(
        site.path().join("deploy/app.wasm.new"),
        site.path().join("deploy/app.wasm"),
    )?;
    assert!(eventually(WAIT, || text_is(&server, "/app/x", "second")).await);
    site.file("deploy/app.wasm", version("third"))?;
    assert!(eventually(WAIT, || text_is(&server, "/app/x", "third")).await);
    Ok(())
}

#[tokio::test]
async fn new_servlets_go_live_and_removed_ones_give_back_the_static_files() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/tool/index.html", "static tool page")?;
    let server = start(&site, "").await?;
    assert_eq!(server.get("/tool/").await?.text(), "static tool page");
    site.file("servlets/tool.wasm", version("dynamic tool"))?;
    assert!(eventually(WAIT, || text_is(&server, "/tool/", "dynamic tool")).await);
    std::fs::remove_file(site.path().join("servlets/tool.wasm"))?;
    assert!(eventually(WAIT, || text_is(&server, "/tool/", "static tool page")).await);
    assert!(
        eventually(WAIT, || status_is(
            &server,
            "/tool/x",
            StatusCode::NOT_FOUND
        ))
        .await
    );
    Ok(())
}

/// A link inside the root to the servlets folder there (never served)
/// leaves hot deploy working: links are not followed by the watcher.
/// Before, events in the servlets folder came back named through the link
/// and no servlet was ever reloaded.
#[tokio::test]
async fn a_link_to_the_servlets_folder_inside_the_root_leaves_deploys_working() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("www/servlets/old.wasm", version("old"))?;
    std::os::unix::fs::symlink("servlets", site.path().join("www/lnk"))?;
    let config = site.config("[[site]]\nroot = \"www\"\nservlets = \"www/servlets\"\n")?;
    let server = TestServer::start_watching(config).await?;
    assert_eq!(server.get("/old").await?.text(), "old");
    site.file("www/servlets/new.wasm", version("new"))?;
    assert!(eventually(WAIT, || text_is(&server, "/new", "new")).await);
    std::fs::remove_file(site.path().join("www/servlets/old.wasm"))?;
    assert!(eventually(WAIT, || status_is(&server, "/old", StatusCode::NOT_FOUND)).await);
    assert_eq!(
        server.get("/lnk/new.wasm").await?.status,
        StatusCode::NOT_FOUND
    );
    Ok(())
}

/// The atomic-deploy pattern: `root = "current/www"` with `current` a link
/// flipped to a new release (`ln -sfn`, here a rename over it), and a
/// route's file reached through the same link. The flip alone goes live;
/// before, a link in the middle of the path was resolved away and never
/// watched, so nothing changed until a file of the old release did.
#[tokio::test]
async fn flipping_a_release_link_in_the_middle_of_the_paths_goes_live() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    for (release, text) in [("r1", "one"), ("r2", "two")] {
        site.file(&format!("releases/{release}/www/index.html"), text)?;
        site.file(&format!("releases/{release}/app.wasm"), version(text))?;
    }
    std::os::unix::fs::symlink("releases/r1", site.path().join("current"))?;
    let config = site.config(
        "[[site]]\nroot = \"current/www\"\n[[site.route]]\npath = \"/app\"\nservlet = \"current/app.wasm\"\n",
    )?;
    let server = TestServer::start_watching(config).await?;
    assert_eq!(server.get("/").await?.text(), "one");
    assert_eq!(server.get("/app").await?.text(), "one");
    std::os::unix::fs::symlink("releases/r2", site.path().join("current.new"))?;
    std::fs::rename(site.path().join("current.new"), site.path().join("current"))?;
    assert!(eventually(WAIT, || text_is(&server, "/", "two")).await);
    assert!(eventually(WAIT, || text_is(&server, "/app", "two")).await);
    // And the new release is watched: an edit there goes live too.
    site.file("releases/r2/www/index.html", "two, edited")?;
    assert!(eventually(WAIT, || text_is(&server, "/", "two, edited")).await);
    Ok(())
}

/// A module copied in place (`cp`, `scp`: written into the file it
/// replaces) goes live when its writer closes it, not while it is open:
/// a prefix of a module can itself be a valid module that answers wrong.
/// Here the new bytes are all written but the file stays open for a
/// second: the old version answers until the close.
#[tokio::test]
async fn a_module_written_in_place_goes_live_when_its_writer_closes_it() -> Result<()> {
    let site = TestSite::new()?;
    let server = start(&site, "").await?;
    site.file("servlets/app.wasm", version("old"))?;
    assert!(eventually(WAIT, || text_is(&server, "/app", "old")).await);
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(site.path().join("servlets/app.wasm"))?;
    std::io::Write::write_all(&mut writer, &version("new"))?;
    std::io::Write::flush(&mut writer)?;
    // Writes to a module still open load nothing: no reload is recorded
    // for them, however many come.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reloads = server.app().observe.recent_reloads().len();
    for _ in 0..5 {
        std::io::Seek::seek(&mut writer, std::io::SeekFrom::Start(0))?;
        std::io::Write::write_all(&mut writer, &version("new"))?;
        std::io::Write::flush(&mut writer)?;
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    assert_eq!(server.app().observe.recent_reloads().len(), reloads);
    // A new module being written in place is not routed until closed.
    let mut fresh = std::fs::File::create(site.path().join("servlets/fresh.wasm"))?;
    std::io::Write::write_all(&mut fresh, &version("fresh"))?;
    std::io::Write::flush(&mut fresh)?;
    // Meanwhile the rest of the folder deploys as usual.
    site.file("servlets/other.wasm", version("other"))?;
    assert!(eventually(WAIT, || text_is(&server, "/other", "other")).await);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(server.get("/app").await?.text(), "old", "loaded while open");
        assert_eq!(
            server.get("/fresh").await?.status,
            http::StatusCode::NOT_FOUND
        );
    }
    drop(writer);
    assert!(eventually(WAIT, || text_is(&server, "/app", "new")).await);
    drop(fresh);
    assert!(eventually(WAIT, || text_is(&server, "/fresh", "fresh")).await);
    // A module created empty whose writer pauses before its first write
    // (as `scp` does) is not read empty: neither refused (a refused
    // module's path answers 500) nor routed until its writer closes it.
    let mut late = std::fs::File::create(site.path().join("servlets/late.wasm"))?;
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            server.get("/late").await?.status,
            http::StatusCode::NOT_FOUND
        );
        let refusals = server.refusals();
        assert!(
            !refusals.iter().any(|r| r.contains("late.wasm")),
            "{refusals:?}"
        );
    }
    std::io::Write::write_all(&mut late, &version("late"))?;
    drop(late);
    assert!(eventually(WAIT, || text_is(&server, "/late", "late")).await);
    Ok(())
}

/// A configuration mounted as Kubernetes mounts a ConfigMap: `swan.toml` a
/// link to `..data/swan.toml`, `..data` a link to the version folder, an
/// update a new folder and `..data` renamed over. The swap goes live, and
/// so do later swaps and edits of the new version; `ln -sfn` of the file
/// link itself too. Before, only the first target's folder was watched.
#[tokio::test]
async fn a_configuration_swapped_as_a_configmap_is_reloaded() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/a.txt", "a")?;
    let conf = site.path().join("conf");
    let version = |n: u32| -> Result<()> {
        site.file(
            &format!("conf/..v{n}/swan.toml"),
            format!("[[site]]\nroot = \"../www\"\ncache_control = \"v{n}\"\n"),
        )
        .map(drop)
    };
    let swap_data = |n: u32| -> Result<()> {
        std::os::unix::fs::symlink(format!("..v{n}"), conf.join("..data_tmp"))?;
        std::fs::rename(conf.join("..data_tmp"), conf.join("..data"))?;
        Ok(())
    };
    version(1)?;
    std::os::unix::fs::symlink("..v1", conf.join("..data"))?;
    std::os::unix::fs::symlink("..data/swan.toml", conf.join("swan.toml"))?;
    let config = swan::Config::load(Some(&conf.join("swan.toml")), &swan::Overrides::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let server = TestServer::start_watching(config).await?;
    let serves = |want: &'static str| {
        let server = &server;
        move || async move {
            server
                .get("/a.txt")
                .await
                .is_ok_and(|r| r.header("cache-control") == want)
        }
    };
    assert!(serves("v1")().await);
    for n in [2, 3] {
        version(n)?;
        swap_data(n)?;
        let want = if n == 2 { "v2" } else { "v3" };
        assert!(eventually(WAIT, serves(want)).await, "swap to ..v{n}");
    }
    // An edit of the version now named is seen, however soon after the
    // swap it comes (it is read again if it changed before its watch).
    site.file(
        "conf/..v3/swan.toml",
        "[[site]]\nroot = \"../www\"\ncache_control = \"v3 edited\"\n",
    )?;
    assert!(eventually(WAIT, serves("v3 edited")).await);
    // The file link itself flipped (`ln -sfn other.toml swan.toml`).
    site.file(
        "conf/other.toml",
        "[[site]]\nroot = \"../www\"\ncache_control = \"other\"\n",
    )?;
    std::os::unix::fs::symlink("other.toml", conf.join("swan.toml.new"))?;
    std::fs::rename(conf.join("swan.toml.new"), conf.join("swan.toml"))?;
    assert!(eventually(WAIT, serves("other")).await);
    Ok(())
}

#[tokio::test]
async fn configuration_changes_apply_and_invalid_ones_are_refused() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/a.txt", "a")?;
    let server = start(&site, "").await?;
    assert_eq!(server.get("/a.txt").await?.header("cache-control"), "");
    std::fs::write(
        site.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\ncache_control = \"max-age=42\"\n",
    )?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/a.txt")
                .await
                .is_ok_and(|r| r.header("cache-control") == "max-age=42")
        })
        .await
    );
    // An invalid file is refused whole; the previous configuration stays.
    std::fs::write(
        site.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\ncache_control = 5\nbogus = 1\n",
    )?;
    server.reload_config();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server.get("/a.txt").await?.header("cache-control"),
        "max-age=42"
    );
    // SIGHUP (here: the same call the signal handler makes) reads it again.
    std::fs::write(
        site.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\ncache_control = \"no-cache\"\n",
    )?;
    server.reload_config();
    assert!(
        eventually(WAIT, || async {
            server
                .get("/a.txt")
                .await
                .is_ok_and(|r| r.header("cache-control") == "no-cache")
        })
        .await
    );
    Ok(())
}

#[tokio::test]
async fn compiled_code_is_cached_on_disk_for_restarts_and_reverts() -> Result<()> {
    let site = TestSite::new()?;
    let nonce = format!("cache-{}-{}", std::process::id(), site.path().display());
    site.file(
        "servlets/cached.wasm",
        version(&nonce.replace(['/', '.'], "_")),
    )?;
    let dir = swan::engine::cache_dir()
        .expect("a cache folder")
        .join("code");
    let count = |d: &std::path::Path| walk_count(d);
    let before = count(&dir);
    let server = start(&site, "").await?;
    assert_eq!(server.get("/cached").await?.status, StatusCode::OK);
    assert!(
        eventually(WAIT, || async { count(&dir) > before }).await,
        "no compiled code was written under {}",
        dir.display()
    );
    Ok(())
}

fn walk_count(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| {
            if e.path().is_dir() {
                walk_count(&e.path())
            } else {
                1
            }
        })
        .sum()
}

#[tokio::test]
async fn a_changed_servlet_goes_live_on_the_baseline_compiler_then_gets_optimised_code()
-> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/tiered.wasm", version("first"))?;
    let server = start(&site, "").await?;
    let tier = |server: &TestServer| {
        server
            .app()
            .sites
            .load()
            .iter()
            .next()
            .and_then(|s| s.servlets.servlet_at("/tiered").map(|s| s.tier()))
    };
    // At start everything is compiled by Cranelift.
    assert_eq!(tier(&server), Some(swan::engine::Tier::Optimized));
    // The baseline compiler (Winch) handles these modules.
    let loader = server.app().loader.clone().expect("engine");
    let info = server
        .app()
        .sites
        .load()
        .iter()
        .next()
        .and_then(|s| s.servlets.servlet_at("/tiered").map(|s| s.info().clone()));
    let baseline = loader.load_servlet(info.expect("route"), swan::engine::Tier::Baseline)?;
    assert_eq!(baseline.tier(), swan::engine::Tier::Baseline);
    site.file("servlets/tiered.wasm", version("second"))?;
    assert!(eventually(WAIT, || text_is(&server, "/tiered", "second")).await);
    // The new version is swapped for Cranelift code shortly after, and
    // keeps answering the same throughout.
    assert!(
        eventually(WAIT, || async {
            tier(&server) == Some(swan::engine::Tier::Optimized)
        })
        .await
    );
    assert_eq!(server.get("/tiered").await?.text(), "second");
    // An optimising recompile is the same version: it goes on counting in
    // the stats of the one it replaces (metrics never go back); its
    // compile time is its own, shown only once it serves (the servlet
    // serving carries the time shown), never while it may yet be
    // discarded.
    let serving = server
        .app()
        .sites
        .load()
        .iter()
        .next()
        .and_then(|s| s.servlets.servlet_at("/tiered").cloned())
        .expect("route");
    let made = serving.stats().instantiated.get();
    assert!(made > 0);
    let shown = serving.compile_time();
    assert!(shown > std::time::Duration::ZERO);
    let again = loader.load_optimised(&serving)?;
    assert!(std::ptr::eq(again.stats(), serving.stats()));
    assert!(again.stats().instantiated.get() >= made);
    assert_eq!(serving.compile_time(), shown);
    assert!(again.compile_time() > std::time::Duration::ZERO);
    Ok(())
}

/// Deploying by replacing a whole folder (`mv www www.old; mv build www`)
/// keeps hot reload going: the new folder is served and then watched, for
/// the site root and the servlets folder alike.
#[tokio::test]
async fn a_replaced_site_or_servlets_folder_is_served_and_watched() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/index.html", "v1")?;
    site.file("servlets/a.wasm", version("a1"))?;
    let server = start(&site, "").await?;
    assert_eq!(server.get("/").await?.text(), "v1");
    assert_eq!(server.get("/a").await?.text(), "a1");
    for round in 2..4 {
        let (root, old) = (site.path().join("www"), site.path().join("www.old"));
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(&root, &old)?;
        std::fs::create_dir(&root)?;
        std::fs::write(root.join("index.html"), format!("v{round}"))?;
        let want = format!("v{round}");
        assert!(
            eventually(WAIT, || text_is(&server, "/", &want)).await,
            "round {round}"
        );
        // Edits inside the new folder are seen too.
        site.file("www/index.html", format!("v{round} edited"))?;
        site.file(&format!("www/new{round}.txt"), "new")?;
        let want = format!("v{round} edited");
        assert!(
            eventually(WAIT, || text_is(&server, "/", &want)).await,
            "round {round}"
        );
        let new = format!("/new{round}.txt");
        assert!(eventually(WAIT, || text_is(&server, &new, "new")).await);
    }
    let (dir, old) = (
        site.path().join("servlets"),
        site.path().join("servlets.old"),
    );
    std::fs::rename(&dir, &old)?;
    std::fs::create_dir(&dir)?;
    std::fs::write(dir.join("a.wasm"), version("a2"))?;
    assert!(eventually(WAIT, || text_is(&server, "/a", "a2")).await);
    site.file("servlets/b.wasm", version("b1"))?;
    assert!(eventually(WAIT, || text_is(&server, "/b", "b1")).await);
    Ok(())
}

/// A servlet deployed in the same moment as a configuration edit that is
/// refused still goes live (under the configuration that serves).
#[tokio::test]
async fn a_servlet_deployed_with_a_refused_configuration_edit_still_goes_live() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let server = start(&site, "").await?;
    std::fs::write(
        site.path().join("swan.toml"),
        "[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\ntimeout = 5\n",
    )?;
    site.file("servlets/fresh.wasm", version("fresh"))?;
    assert!(eventually(WAIT, || text_is(&server, "/fresh", "fresh")).await);
    assert_eq!(server.get("/").await?.text(), "home");
    Ok(())
}

/// A module refused because its start function loops to its deadline is
/// not tried again while it does not change: other deploys in its folder
/// go live at once, not after the refused one's deadline (twice: once per
/// compiler) on every event.
#[tokio::test]
async fn a_refused_module_is_not_tried_again_until_it_changes() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let server = start(&site, "[site.servlet]\ntimeout = \"2s\"\n").await?;
    let looping = wat::parse_str(
        r#"(module (memory (export "memory") 1)
  (func $spin (loop $l (br $l)))
  (start $spin)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    site.file("servlets/bad.wasm", looping)?;
    let refused = || {
        server.app().sites.load().iter().any(|s| {
            s.servlets
                .refused
                .iter()
                .any(|r| r.file.ends_with("bad.wasm"))
        })
    };
    assert!(eventually(Duration::from_secs(20), || async { refused() }).await);
    for name in ["g1", "g2", "g3"] {
        let started = std::time::Instant::now();
        site.file(&format!("servlets/{name}.wasm"), version(name))?;
        let path = format!("/{name}");
        assert!(eventually(WAIT, || text_is(&server, &path, name)).await);
        // Before, each deploy waited for bad.wasm's start function to run
        // to its deadline twice: 4 s.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{name} took {:?}",
            started.elapsed()
        );
        assert!(refused(), "bad.wasm is still listed as refused");
    }
    Ok(())
}

/// The cache's `budget` holds across reloads: files added before unchanged
/// ones (in the order a load walks them) take the room first, and the
/// unchanged ones are streamed from disk once it is gone, not kept on top
/// (10 MB held under a 1 MiB budget before). Compressed variants count too.
#[tokio::test]
async fn the_cache_budget_holds_across_reloads_and_counts_variants() -> Result<()> {
    let site = TestSite::new()?;
    site.file("www/m.bin", vec![b'm'; 600_000])?;
    let server = start(
        &site,
        "[site.cache]\nbudget = \"1 MiB\"\nmax_file_size = \"1 MiB\"\n",
    )
    .await?;
    let held = || {
        let sites = server.app().sites.load();
        sites
            .iter()
            .next()
            .map_or(0, |s| s.cache.stats().cached_bytes)
    };
    for n in (0..6).rev() {
        site.file(&format!("www/{n}.bin"), vec![b'0' + n; 1_000_000])?;
        let path = format!("/{n}.bin");
        assert!(eventually(WAIT, || status_is(&server, &path, StatusCode::OK)).await);
        assert!(held() <= 1 << 20, "{} bytes held after {n}.bin", held());
    }
    // Every file is still served whole, from memory or from disk.
    assert_eq!(server.get("/m.bin").await?.body.len(), 600_000);
    assert_eq!(server.get("/0.bin").await?.body.len(), 1_000_000);
    // A compressible file that fits alone, but not with its variants
    // (hex digits compress to about half): they are not kept. On a fresh
    // site: above, the budget was already spent, so nothing would be made.
    let fresh = TestSite::new()?;
    let mut x: u64 = 1;
    let text: String = (0..700_000)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            char::from(b"0123456789abcdef"[(x >> 60) as usize])
        })
        .collect();
    fresh.file("www/page.html", text)?;
    let server = start(
        &fresh,
        "[site.cache]\nbudget = \"1 MiB\"\nmax_file_size = \"1 MiB\"\n",
    )
    .await?;
    let sites = server.app().sites.load();
    let stats = sites.iter().next().map(|s| s.cache.stats());
    let stats = stats.expect("a site");
    assert_eq!(stats.cached_files, 1);
    assert!(
        stats.cached_bytes <= 1 << 20,
        "{} bytes held with variants",
        stats.cached_bytes
    );
    Ok(())
}
