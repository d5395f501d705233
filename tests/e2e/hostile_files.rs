//! Files in watched folders as an attacker (or a careless deploy) leaves
//! them: links out of the root, servlets folders inside a root, files
//! replaced while they are being downloaded, link loops. Expected: nothing
//! from outside the root is ever served, nothing of a servlets folder is
//! public, and every download is one version of the file, whole.

use std::os::unix::fs::symlink;
use std::time::Duration;

use anyhow::Result;
use http::StatusCode;
use swan_tests::{TestServer, TestSite, eventually};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn precompressed_siblings_obey_the_root_and_the_size_limit() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let page = "<p>page</p>".repeat(100);
    site.file("www/page.html", &page)?;
    site.file("secret.br", "SECRET OUTSIDE THE ROOT")?;
    symlink(
        site.path().join("secret.br"),
        site.path().join("www/page.html.br"),
    )?;
    site.file("www/big.html", "<p>big</p>".repeat(100))?;
    site.file("www/big.html.gz", vec![b'G'; 200 << 10])?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"100 KiB\"\ncompress = false\n",
    )?;
    let server = TestServer::start(config).await?;
    let r = server
        .get_with("/page.html", &[("accept-encoding", "br, gzip")])
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text().contains("SECRET"));
    assert_eq!(r.header("content-encoding"), "");
    assert_eq!(r.text(), page);
    // The link itself is not served either.
    assert_eq!(
        server.get("/page.html.br").await?.status,
        StatusCode::NOT_FOUND
    );
    // A sibling over max_file_size is not a variant.
    let r = server
        .get_with("/big.html", &[("accept-encoding", "gzip")])
        .await?;
    assert_eq!(r.header("content-encoding"), "");
    Ok(())
}

#[tokio::test]
async fn a_servlets_folder_inside_the_root_is_never_served() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file(
        "www/servlets/hello.wasm",
        wat::parse_str(
            r#"(module (import "swan" "response_write" (func $w (param i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "hi")
               (func (export "swan_abi_version") (result i32) i32.const 1)
               (func (export "swan_handle") (result i32) (drop (call $w (i32.const 0) (i32.const 2))) i32.const 0))"#,
        )?,
    )?;
    site.file("www/servlets/notes/main.c", "int secret_source;")?;
    // Links into the servlets folder, to a file and to a folder.
    symlink(
        site.path().join("www/servlets/hello.wasm"),
        site.path().join("www/e.wasm"),
    )?;
    symlink(
        site.path().join("www/servlets/notes"),
        site.path().join("www/notes-alias"),
    )?;
    let config = site.config(
        "[server]\nmax_instances = 8\n[[site]]\nroot = \"www\"\nservlets = \"www/servlets\"\n[site.servlet]\nprewarm = 0\n",
    )?;
    let server = TestServer::start_watching(config).await?;
    assert_eq!(server.get("/hello").await?.text(), "hi");
    for path in [
        "/servlets/hello.wasm",
        "/servlets/notes/main.c",
        "/servlets/",
        "/servlets",
        "/e.wasm",
        "/notes-alias/main.c",
        "/notes-alias/",
    ] {
        assert_eq!(
            server.get(path).await?.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    // After a reload too.
    site.file("www/servlets/added.wasm", b"not even wasm")?;
    site.file("www/new.txt", "new")?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/new.txt")
                .await
                .is_ok_and(|r| r.text() == "new")
        })
        .await
    );
    assert_eq!(
        server.get("/servlets/added.wasm").await?.status,
        StatusCode::NOT_FOUND
    );
    server.stop().await
}

#[test]
fn another_sites_servlets_folder_inside_a_root_is_a_configuration_error() -> Result<()> {
    let site = TestSite::new()?;
    site.dir("www/private")?;
    site.dir("other")?;
    let err = match site.config(
        "[[site]]\nroot = \"www\"\ndefault = true\n[[site]]\nhosts = [\"b.example\"]\nroot = \"other\"\nservlets = \"www/private\"\n",
    ) {
        Ok(_) => anyhow::bail!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("site[1].servlets"), "{err}");
    assert!(err.contains("inside the root"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_routes_module_inside_the_root_is_never_served() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file(
        "www/bin/api.wasm",
        wat::parse_str(
            r#"(module (import "swan" "response_write" (func $w (param i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "api")
               (func (export "swan_abi_version") (result i32) i32.const 1)
               (func (export "swan_handle") (result i32) (drop (call $w (i32.const 0) (i32.const 3))) i32.const 0))"#,
        )?,
    )?;
    // A link to it, elsewhere in the root.
    symlink(
        site.path().join("www/bin/api.wasm"),
        site.path().join("www/copy.wasm"),
    )?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/api\"\nservlet = \"www/bin/api.wasm\"\n",
    )?;
    let server = TestServer::start_watching(config).await?;
    assert_eq!(server.get("/api").await?.text(), "api");
    for path in ["/bin/api.wasm", "/copy.wasm"] {
        assert_eq!(
            server.get(path).await?.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    // The folder's other files are served, and the module stays private
    // after the files are read again.
    site.file("www/bin/readme.txt", "readme")?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/bin/readme.txt")
                .await
                .is_ok_and(|r| r.text() == "readme")
        })
        .await
    );
    assert_eq!(
        server.get("/bin/api.wasm").await?.status,
        StatusCode::NOT_FOUND
    );
    server.stop().await
}

#[test]
fn modules_another_site_would_serve_are_configuration_errors() -> Result<()> {
    let site = TestSite::new()?;
    site.dir("www")?;
    site.dir("other")?;
    site.file("www/api.wasm", wat::parse_str("(module)")?)?;
    let refused = |config: &str| match site.config(config) {
        Ok(_) => format!("accepted: {config}"),
        Err(e) => e.to_string(),
    };
    // Another site's route module inside this site's root.
    let err = refused(
        "[[site]]\nroot = \"www\"\ndefault = true\n[[site]]\nhosts = [\"b.example\"]\nroot = \"other\"\n\
         [[site.route]]\npath = \"/api\"\nservlet = \"www/api.wasm\"\n",
    );
    assert!(err.contains("site[1].route[0].servlet"), "{err}");
    assert!(err.contains("inside the root of site \"default\""), "{err}");
    // A servlets folder that is the site's root: nothing would be served.
    let err = refused("[[site]]\nroot = \"www\"\nservlets = \"www\"\n");
    assert!(err.contains("site[0].servlets"), "{err}");
    assert!(err.contains("the site's root itself"), "{err}");
    // The same through a link, and through `..`.
    symlink(site.path().join("www"), site.path().join("www-link"))?;
    let err = refused("[[site]]\nroot = \"www\"\nservlets = \"www-link\"\n");
    assert!(err.contains("the site's root itself"), "{err}");
    let err = refused("[[site]]\nroot = \"www\"\nservlets = \"other/../www\"\n");
    assert!(err.contains("the site's root itself"), "{err}");
    // A site's own route module inside its own root is fine (never served).
    site.config(
        "[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/api\"\nservlet = \"www/api.wasm\"\n",
    )?;
    // So are two sites sharing a root and both routing to the module
    // (neither serves it), and a module in a dot-folder of the other root.
    site.file("www/.modules/hidden.wasm", wat::parse_str("(module)")?)?;
    site.config(
        "[[site]]\nroot = \"www\"\ndefault = true\n[[site.route]]\npath = \"/api\"\nservlet = \"www/api.wasm\"\n\
         [[site]]\nhosts = [\"b.example\"]\nroot = \"www\"\n[[site.route]]\npath = \"/api\"\nservlet = \"www/api.wasm\"\n\
         [[site]]\nhosts = [\"c.example\"]\nroot = \"other\"\n[[site.route]]\npath = \"/h\"\nservlet = \"www/.modules/hidden.wasm\"\n",
    )?;
    Ok(())
}

/// Downloads `path` over and over while `replace` runs; every download
/// must be one of `versions`, whole.
async fn download_while_replacing(
    server: &TestServer,
    path: &str,
    versions: &[Vec<u8>],
    replace: impl Fn(usize) -> Result<()> + Send + 'static,
) -> Result<()> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<()> {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 400 {
                replace(i)?;
                i += 1;
                // Long enough for a reload between two renames (its quiet
                // window is 10 ms), short enough to race the downloads.
                std::thread::sleep(Duration::from_millis(25));
            }
            Ok(())
        })
    };
    let mut seen = [0usize; 2];
    for n in 0..60 {
        let r = server.get(path).await?;
        assert_eq!(r.status, StatusCode::OK, "download {n}");
        assert_eq!(
            r.header("content-length"),
            r.body.len().to_string(),
            "download {n}"
        );
        let which = versions
            .iter()
            .position(|v| v[..] == r.body[..])
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "download {n}: a mix or a truncation ({} bytes)",
                    r.body.len()
                )
            })?;
        seen[which] += 1;
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    assert!(seen[0] > 0 && seen[1] > 0, "{path}: versions seen {seen:?}");
    Ok(())
}

#[tokio::test]
async fn files_replaced_during_downloads_are_served_whole_old_or_new() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let big = [vec![b'a'; 3 << 20], vec![b'b'; (3 << 20) + 4096]];
    let small = [
        b"small version one".to_vec(),
        b"small version two!!".to_vec(),
    ];
    site.file("www/big.bin", &big[0])?;
    site.file("www/small.txt", &small[0])?;
    let config =
        site.config("[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"1 MiB\"\n")?;
    let server = TestServer::start_watching(config).await?;
    for (path, versions) in [("/big.bin", big.clone()), ("/small.txt", small.clone())] {
        let dir = site.path().join("www");
        let name = path.trim_start_matches('/').to_owned();
        let v = versions.clone();
        download_while_replacing(&server, path, &versions, move |i| {
            // Write a temporary file and rename it over: an atomic deploy.
            let tmp = dir.join(format!(".{name}.{i}.tmp"));
            std::fs::write(&tmp, &v[i % 2])?;
            std::fs::rename(&tmp, dir.join(&name))?;
            Ok(())
        })
        .await?;
    }
    server.stop().await
}

#[tokio::test]
async fn a_streamed_file_replaced_by_a_link_out_of_the_root_is_not_followed() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/big.bin", vec![b'a'; 2 << 20])?;
    site.file("outside.bin", "OUTSIDE")?;
    let config =
        site.config("[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"1 MiB\"\n")?;
    // Not watched: the link is in place while the old entry is cached.
    let server = TestServer::start(config).await?;
    assert_eq!(server.get("/big.bin").await?.body.len(), 2 << 20);
    std::fs::remove_file(site.path().join("www/big.bin"))?;
    symlink(
        site.path().join("outside.bin"),
        site.path().join("www/big.bin"),
    )?;
    let r = server.get("/big.bin").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!r.text().contains("OUTSIDE"));
    Ok(())
}

/// The same for a folder on the way replaced by a link out of the root,
/// and for a streamed file replaced by a FIFO: a FIFO's open would wait
/// for a writer for good (the request, its connection, a blocking thread,
/// and the process at its stop); it is a 404 at once.
#[tokio::test]
async fn a_folder_replaced_by_a_link_out_or_a_file_by_a_fifo_is_not_served() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/sub/f.bin", vec![b'a'; 2 << 20])?;
    site.file("www/big.bin", vec![b'b'; 2 << 20])?;
    site.file("outside/f.bin", vec![b'O'; 2 << 20])?;
    let config =
        site.config("[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"1 MiB\"\n")?;
    // Not watched: the swaps are in place while the old entries are cached.
    let server = TestServer::start(config).await?;
    assert_eq!(server.get("/sub/f.bin").await?.body.len(), 2 << 20);
    assert_eq!(server.get("/big.bin").await?.body.len(), 2 << 20);
    std::fs::rename(site.path().join("www/sub"), site.path().join("sub.away"))?;
    symlink(site.path().join("outside"), site.path().join("www/sub"))?;
    let r = server.get("/sub/f.bin").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(!r.body.contains(&b'O'));
    std::fs::remove_file(site.path().join("www/big.bin"))?;
    let made = std::process::Command::new("mkfifo")
        .arg(site.path().join("www/big.bin"))
        .status()?;
    assert!(made.success());
    let r = tokio::time::timeout(Duration::from_secs(5), server.get("/big.bin")).await??;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    server.stop().await
}

#[tokio::test]
async fn link_loops_and_links_to_parents_do_not_hang_or_escape() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("secret.txt", "SECRET")?;
    site.dir("www/d")?;
    symlink(site.path().join("www/d"), site.path().join("www/d/again"))?;
    symlink(
        site.path().join("www/loop-a"),
        site.path().join("www/loop-b"),
    )?;
    symlink(
        site.path().join("www/loop-b"),
        site.path().join("www/loop-a"),
    )?;
    symlink(site.path(), site.path().join("www/parent"))?;
    // One folder under three names (one link sorts before it, one after,
    // one relative): each name serves it.
    site.file("www/x/hi.txt", "hi")?;
    symlink(site.path().join("www/x"), site.path().join("www/a"))?;
    symlink("../www/x", site.path().join("www/x2"))?;
    // A link to a dotfile does not serve it.
    site.file("www/.env", "SECRET=1")?;
    symlink(
        site.path().join("www/.env"),
        site.path().join("www/env.txt"),
    )?;
    let config = site.config("[[site]]\nroot = \"www\"\n")?;
    let server = tokio::time::timeout(Duration::from_secs(10), TestServer::start(config)).await??;
    assert_eq!(server.get("/").await?.text(), "home");
    for path in ["/a/hi.txt", "/x/hi.txt", "/x2/hi.txt"] {
        assert_eq!(server.get(path).await?.text(), "hi", "{path}");
    }
    for path in [
        "/parent/secret.txt",
        "/loop-a",
        "/d/again/again/x",
        "/env.txt",
    ] {
        let r = server.get(path).await?;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert!(!r.text().contains("SECRET"));
    }
    Ok(())
}
