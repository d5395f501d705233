//! Servlet sources (G-WAN's edit-and-reload, safely): C and Rust folders in
//! a servlets folder are built by swan at start and rebuilt on change (in
//! development mode, or with `build_sources = true`); a failed build keeps
//! the old version, and in development mode the route shows the compiler's
//! errors. Production mode builds nothing by default, and every build has a
//! time limit.

use std::time::Duration;

use anyhow::Result;
use http::StatusCode;
use swan_tests::{TestServer, TestSite, eventually};

const WAIT: Duration = Duration::from_secs(120);

fn c_source(text: &str) -> String {
    format!(
        "#include \"swan.h\"\nstatic int handle(void) {{ swan_print(\"{text}\"); return 0; }}\nSWAN_SERVLET(handle)\n"
    )
}

/// `server` is the `[server]` table.
async fn start(site: &TestSite, server: &str) -> Result<TestServer> {
    swan_tests::init_logs();
    site.dir("www")?;
    site.dir("servlets")?;
    let config = site.config(&format!(
        "[server]\n{server}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n"
    ))?;
    TestServer::start_watching(config).await
}

async fn answer(server: &TestServer, path: &str) -> (StatusCode, String) {
    match server.get(path).await {
        Ok(r) => (r.status, r.text()),
        Err(e) => (StatusCode::IM_A_TEAPOT, e.to_string()),
    }
}

#[tokio::test]
async fn a_c_folder_is_built_at_start_rebuilt_on_change_and_a_broken_build_keeps_the_old_version()
-> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/greet/main.c", c_source("C version 1"))?;
    // Production mode builds sources only when told to.
    let server = start(&site, "mode = \"production\"\nbuild_sources = true").await?;
    assert_eq!(
        answer(&server, "/greet").await,
        (StatusCode::OK, "C version 1".to_owned())
    );
    site.file("servlets/greet/main.c", c_source("C version 2"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/greet").await.1 == "C version 2"
        })
        .await
    );
    // A syntax error: the build fails, version 2 keeps serving.
    site.file("servlets/greet/main.c", "int broken( {")?;
    assert!(
        eventually(WAIT, || async {
            server.app().sites.load().iter().any(|s| {
                s.servlets
                    .failed_build("greet")
                    .is_some_and(|e| e.output.contains("error"))
            })
        })
        .await
    );
    assert_eq!(
        answer(&server, "/greet").await,
        (StatusCode::OK, "C version 2".to_owned())
    );
    // The failure is shown, not only logged: a refusal naming the folder,
    // the compiler's first error and that the previous build serves (the
    // status page's list, `swan check`'s exit code, the banner's count),
    // and the reload's entry is "refused" with it.
    let refusals = server.refusals();
    assert!(
        refusals.iter().any(|r| r
            .contains("greet: the build failed (its previous build serves): ")
            && r.contains("error")),
        "{refusals:?}"
    );
    assert!(
        eventually(WAIT, || async {
            server
                .app()
                .observe
                .recent_reloads()
                .iter()
                .any(|r| !r.ok && r.detail.contains("greet: the build failed"))
        })
        .await,
        "{:?}",
        server.app().observe.recent_reloads()
    );
    // Production mode never shows compiler output.
    assert!(
        server
            .app()
            .sites
            .load()
            .iter()
            .all(|s| s.servlets.servlet_at("/greet").is_some())
    );
    Ok(())
}

#[tokio::test]
async fn in_development_mode_a_failed_build_shows_the_compiler_errors() -> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/page/main.c", c_source("working"))?;
    let server = start(&site, "mode = \"development\"").await?;
    assert_eq!(answer(&server, "/page").await.1, "working");
    site.file(
        "servlets/page/main.c",
        "int main(void) { return undefined_thing; }\n",
    )?;
    assert!(
        eventually(WAIT, || async {
            let (status, text) = answer(&server, "/page/sub").await;
            status == StatusCode::INTERNAL_SERVER_ERROR
                && text.contains("undefined_thing")
                && text.contains("failed to build")
        })
        .await
    );
    // Refused with the compiler's first error, and not "its previous
    // build serves": in development mode the route shows the errors.
    let refusals = server.refusals();
    assert!(
        refusals
            .iter()
            .any(|r| r.contains("page: the build failed: ")
                && r.contains("error")
                && r.contains("undefined_thing")),
        "{refusals:?}"
    );
    // Broken again, saying the same: a new failure all the same (a
    // "refused" reload entry each time, not an old one left unsaid).
    let refused_reloads = || {
        server
            .app()
            .observe
            .recent_reloads()
            .iter()
            .filter(|r| !r.ok && r.detail.contains("page: the build failed"))
            .count()
    };
    let before = refused_reloads();
    site.file(
        "servlets/page/main.c",
        "int main(void) { return undefined_thing; }\n/* edited */\n",
    )?;
    assert!(eventually(WAIT, || async { refused_reloads() > before }).await);
    site.file("servlets/page/main.c", c_source("repaired"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/page").await.1 == "repaired"
        })
        .await
    );
    Ok(())
}

#[tokio::test]
async fn a_rust_crate_folder_is_built_and_its_compile_errors_shown_in_development() -> Result<()> {
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-sdk")
        .canonicalize()?;
    let site = TestSite::new()?;
    site.file(
        "servlets/rusty/Cargo.toml",
        format!(
            "[package]\nname = \"rusty-servlet\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n\n\
             [dependencies]\nswan-guest = {{ path = {:?} }}\n\n[workspace]\n",
            sdk.display().to_string()
        ),
    )?;
    // Pin the toolchain (the one scripts/setup gave the wasm target), as a
    // user's crate would: outside this repository rustup would otherwise
    // pick the machine's default toolchain.
    let pinned = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../rust-toolchain.toml"),
    )?;
    site.file("servlets/rusty/rust-toolchain.toml", pinned)?;
    let lib = |body: &str| {
        format!(
            "use swan_guest::{{Request, Response}};\nfn handle(_req: Request) -> Response {{ {body} }}\nswan_guest::servlet!(handle);\n"
        )
    };
    site.file(
        "servlets/rusty/src/lib.rs",
        lib("Response::text(\"from rust source\")"),
    )?;
    let server = start(&site, "mode = \"development\"").await?;
    assert_eq!(
        answer(&server, "/rusty").await,
        (StatusCode::OK, "from rust source".to_owned())
    );
    // The build wrote Cargo.lock into the folder: that is not an edit, so
    // the next reload (a C folder added) builds the C folder only.
    use std::os::unix::fs::MetadataExt;
    let built = site.path().join("servlets/target/swan/rusty.wasm");
    let first = std::fs::metadata(&built)?.ino();
    assert!(site.path().join("servlets/rusty/Cargo.lock").is_file());
    site.file("servlets/greet/main.c", c_source("C beside Rust"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/greet").await == (StatusCode::OK, "C beside Rust".to_owned())
        })
        .await
    );
    assert_eq!(
        std::fs::metadata(&built)?.ino(),
        first,
        "rebuilt for its Cargo.lock"
    );
    site.file(
        "servlets/rusty/src/lib.rs",
        lib("Response::text(not_defined_anywhere)"),
    )?;
    assert!(
        eventually(WAIT, || async {
            let (status, text) = answer(&server, "/rusty").await;
            status == StatusCode::INTERNAL_SERVER_ERROR && text.contains("not_defined_anywhere")
        })
        .await
    );
    Ok(())
}

#[tokio::test]
async fn production_mode_builds_no_sources_unless_told_to() -> Result<()> {
    let site = TestSite::new()?;
    site.file("servlets/greet/main.c", c_source("built"))?;
    let server = start(&site, "mode = \"production\"").await?;
    assert_eq!(answer(&server, "/greet").await.0, StatusCode::NOT_FOUND);
    assert!(!site.path().join("servlets/target").exists());
    // A change does not build it either.
    site.file("servlets/greet/main.c", c_source("built again"))?;
    site.file("www/marker.txt", "reloaded")?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/marker.txt").await.1 == "reloaded"
        })
        .await
    );
    assert_eq!(answer(&server, "/greet").await.0, StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test]
async fn a_hanging_build_is_killed_at_build_timeout_and_reload_goes_on() -> Result<()> {
    let site = TestSite::new()?;
    // clang blocks opening a FIFO nobody writes to: a build that hangs.
    site.file("servlets/stuck/main.c", "#include \"hang.h\"\nint x;\n")?;
    let fifo = site.path().join("servlets/stuck/hang.h");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status()?;
    anyhow::ensure!(made.success(), "mkfifo failed");
    site.file("servlets/ok/main.c", c_source("still served"))?;
    let started = std::time::Instant::now();
    let server = start(&site, "mode = \"development\"\nbuild_timeout = \"2s\"").await?;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let (status, text) = answer(&server, "/stuck").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(text.contains("build_timeout"), "{text}");
    assert_eq!(
        answer(&server, "/ok").await,
        (StatusCode::OK, "still served".to_owned())
    );
    site.file("www/after.txt", "reload still works")?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/after.txt").await.1 == "reload still works"
        })
        .await
    );
    Ok(())
}

/// A source folder kept elsewhere and linked into the servlets folder
/// (`servlets/api -> ../code/api`) is built, and rebuilt when its sources
/// change: the watcher follows no link, so the folder a link names is
/// watched itself, and so is one linked in later.
#[tokio::test]
async fn a_linked_source_folder_is_watched_where_it_is() -> Result<()> {
    let site = TestSite::new()?;
    site.file("code/api/main.c", c_source("linked 1"))?;
    site.file("code/later/main.c", c_source("later 1"))?;
    site.dir("servlets")?;
    std::os::unix::fs::symlink("../code/api", site.path().join("servlets/api"))?;
    let server = start(&site, "build_sources = true").await?;
    assert_eq!(answer(&server, "/api").await.1, "linked 1");
    site.file("code/api/main.c", c_source("linked 2"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/api").await.1 == "linked 2"
        })
        .await
    );
    std::os::unix::fs::symlink("../code/later", site.path().join("servlets/later"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/later").await.1 == "later 1"
        })
        .await
    );
    site.file("code/later/main.c", c_source("later 2"))?;
    assert!(
        eventually(WAIT, || async {
            answer(&server, "/later").await.1 == "later 2"
        })
        .await
    );
    Ok(())
}
