//! `swan new` for every language, through the real binary: the new folder
//! builds and answers in development mode with no edits, and an edit to
//! its source is live on the next requests. Toolchains come from
//! scripts/setup (Rust targets, clang, npm, PyPI Zig/Go/componentize-py).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{get, start, stop, swan};

/// Polls `path` until its body contains `want` (builds take a while the
/// first time: npm ci, cargo fetch).
fn wait_for(addr: &str, path: &str, want: &str, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < limit {
        last = get(addr, path);
        if last.starts_with("HTTP/1.1 200") && last.contains(want) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(format!(
        "no {want:?} at {path} within {limit:?}; last reply:\n{last}"
    ))
}

/// `swan new NAME --lang LANG [--kind KIND]`, serve with --dev, request,
/// edit, request again.
fn new_builds_answers_and_rebuilds(name: &str, lang: &str, kind: Option<&str>, limit: Duration) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("www")).expect("www");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nbuild_timeout = \"600s\"\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n",
    )
    .expect("config");
    // The servlets folder comes from swan.toml in the current folder.
    let mut new = swan();
    new.current_dir(dir.path())
        .args(["new", name, "--lang", lang]);
    if let Some(kind) = kind {
        new.args(["--kind", kind]);
    }
    let out = new.output().expect("swan new");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let folder = dir.path().join("servlets").join(name);
    assert!(folder.is_dir(), "{said}");
    let main = said
        .split("edit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(|p| dir.path().join(p))
        .unwrap_or_else(|| panic!("no file to edit in {said:?}"));
    assert!(main.is_file(), "{}", main.display());

    let running = start(
        dir.path(),
        &["--dev", "--config", "swan.toml", "--listen", "127.0.0.1:0"],
        false,
    );
    let addr = running.urls[0].clone();
    let path = format!("/{name}?name=Ada");
    let first = wait_for(&addr, &path, &format!("Hello, Ada! GET /{name}"), limit);
    if let Err(e) = first {
        let log = stop(running.child);
        panic!("{lang}: {e}\nlog:\n{log}");
    }
    // A long query (past any fixed buffer) with the name at its end, and
    // a name that is encoded.
    let long = format!("/{name}?pad={}&name=Ada%20Lovelace", "x".repeat(5000));
    let reply = get(&addr, &long);
    if !reply.contains(&format!("Hello, Ada Lovelace! GET /{name}")) {
        let log = stop(running.child);
        panic!("{lang}: a long query:\n{reply}\nlog:\n{log}");
    }
    let source = std::fs::read_to_string(&main).expect("read source");
    std::fs::write(&main, source.replace("Hello, ", "Howdy, ")).expect("edit source");
    let second = wait_for(&addr, &path, &format!("Howdy, Ada! GET /{name}"), limit);
    let log = stop(running.child);
    if let Err(e) = second {
        panic!("{lang} after the edit: {e}\nlog:\n{log}");
    }
    // Build times are reported per build.
    assert!(
        log.contains("servlet built") && log.contains("took_ms"),
        "{log}"
    );
}

#[test]
fn rust_native() {
    new_builds_answers_and_rebuilds("hello-rs", "rust", None, Duration::from_secs(300));
}

#[test]
fn rust_component() {
    new_builds_answers_and_rebuilds(
        "hello-rsc",
        "rust",
        Some("component"),
        Duration::from_secs(300),
    );
}

#[test]
fn c() {
    new_builds_answers_and_rebuilds("hello-c", "c", None, Duration::from_secs(120));
}

#[test]
fn assemblyscript() {
    new_builds_answers_and_rebuilds("hello-as", "assemblyscript", None, Duration::from_secs(300));
}

#[test]
fn zig() {
    new_builds_answers_and_rebuilds("hello-zig", "zig", None, Duration::from_secs(180));
}

#[test]
fn go() {
    new_builds_answers_and_rebuilds("hello-go", "go", None, Duration::from_secs(240));
}

#[test]
fn javascript_component() {
    new_builds_answers_and_rebuilds("hello-js", "js", None, Duration::from_secs(400));
}

#[test]
fn python_component() {
    new_builds_answers_and_rebuilds("hello-py", "python", None, Duration::from_secs(300));
}

#[test]
fn bad_names_languages_and_existing_folders_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |args: &[&str]| {
        swan()
            .current_dir(dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("swan new")
    };
    // Usage errors: exit 2.
    let bad = run(&["new", "Bad Name", "--lang", "rust", "--dir", "s"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("invalid servlet name"));
    // `target/` holds build output: such a servlet would never be built.
    let target = run(&["new", "target", "--lang", "c", "--dir", "s"]);
    assert_eq!(target.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&target.stderr).contains("build output"));
    assert!(!dir.path().join("s/target").exists());
    let cobol = run(&["new", "x", "--lang", "cobol", "--dir", "s"]);
    assert_eq!(cobol.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&cobol.stderr).contains("swan new --list"));
    let zig_component = run(&[
        "new",
        "x",
        "--lang",
        "zig",
        "--kind",
        "component",
        "--dir",
        "s",
    ]);
    assert_eq!(zig_component.status.code(), Some(2));
    assert!(
        run(&["new", "x", "--lang", "c", "--dir", "s"])
            .status
            .success()
    );
    let again = run(&["new", "x", "--lang", "c", "--dir", "s"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));
    // --dir naming a file, not a folder.
    let file = run(&["new", "z", "--lang", "c", "--dir", "s/x/servlet.c"]);
    assert_eq!(file.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&file.stderr).contains("not a servlets folder"));
    // A configuration that cannot be read is said, not passed over for
    // ./servlets.
    let missing = run(&["new", "y", "--lang", "c", "--config", "nowhere.toml"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nowhere.toml"));
    std::fs::write(dir.path().join("broken.toml"), "[[site]]\nroot = 3\n").expect("write");
    let broken = run(&["new", "y", "--lang", "c", "--config", "broken.toml"]);
    assert_eq!(broken.status.code(), Some(2));
    assert!(!dir.path().join("servlets/y").exists());
    // --list names every language and how to get its toolchain.
    let list = run(&["new", "--list"]);
    let text = String::from_utf8_lossy(&list.stdout);
    for lang in ["rust", "c", "assemblyscript", "zig", "go", "js", "python"] {
        assert!(text.contains(lang), "{text}");
    }
}

/// The README's first run, in an empty folder with no configuration:
/// `swan new`, then `swan serve --dev` as it says, then the request.
#[test]
fn the_first_run_works_in_an_empty_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = swan()
        .current_dir(dir.path())
        .args(["new", "hello-world", "--lang", "c"])
        .output()
        .expect("swan new");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("run:  swan serve --dev\n"), "{said}");
    assert!(dir.path().join("www").is_dir(), "the site folder is made");
    let running = start(dir.path(), &["--dev", "--listen", "127.0.0.1:0"], false);
    let answer = wait_for(
        &running.urls[0],
        "/hello-world?name=Ada",
        "Hello, Ada! GET /hello-world",
        Duration::from_secs(120),
    );
    let log = stop(running.child);
    if let Err(e) = answer {
        panic!("{e}\nlog:\n{log}");
    }
}

/// A Rust servlet carries its own copy of the SDK: nothing points into
/// the source tree the binary was built from.
#[test]
fn a_rust_servlet_carries_its_sdk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = swan()
        .current_dir(dir.path())
        .args(["new", "r", "--lang", "rust", "--dir", "s"])
        .output()
        .expect("swan new");
    assert!(out.status.success());
    let manifest = std::fs::read_to_string(dir.path().join("s/r/Cargo.toml")).expect("manifest");
    assert!(
        manifest.contains("swan-guest = { path = \"swan-guest\" }"),
        "{manifest}"
    );
    let sdk = dir.path().join("s/r/swan-guest");
    assert!(sdk.join("src/lib.rs").is_file() && sdk.join("src/ffi.rs").is_file());
    let sdk_manifest = std::fs::read_to_string(sdk.join("Cargo.toml")).expect("sdk manifest");
    assert!(!sdk_manifest.contains("workspace"), "{sdk_manifest}");
    assert!(
        sdk_manifest.contains(env!("CARGO_PKG_VERSION")),
        "{sdk_manifest}"
    );
}

#[test]
fn version_help_and_completions() {
    let version = swan().arg("--version").output().expect("version");
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("swan "));
    let help = swan().arg("help").output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Examples:") && help.contains("swan new"),
        "{help}"
    );
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef swan"),
        ("fish", "complete -c swan"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_swan"))
            .args(["completions", shell])
            .output()
            .expect("completions");
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(marker) && text.contains("new"),
            "{shell}: {text}"
        );
    }
    // Colours only on a terminal: a log written to a pipe has no escape
    // codes (its INFO lines would be coloured on a terminal).
    let site = support::site();
    let running = start(
        site.path(),
        &["--listen", "127.0.0.1:0", "--root", "www"],
        false,
    );
    let log = stop(running.child);
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

/// `/deep`: traps three calls down, in named functions.
const TRAPPING: &str = r#"(module
  (memory (export "memory") 1)
  (func $parse_the_order (result i32) unreachable)
  (func $check_the_basket (result i32) (call $parse_the_order))
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (call $check_the_basket)))"#;

#[test]
fn a_trap_in_development_mode_shows_the_trap_and_a_backtrace() {
    let dir = support::site();
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::write(
        dir.path().join("servlets/deep.wasm"),
        wat::parse_str(TRAPPING).expect("wat"),
    )
    .expect("deep");
    for (dev, shown) in [(true, true), (false, false)] {
        let mut args = support::SITE_ARGS.to_vec();
        if dev {
            args.push("--dev");
        }
        let running = start(dir.path(), &args, false);
        let reply = get(&running.urls[0], "/deep");
        let log = stop(running.child);
        assert!(reply.starts_with("HTTP/1.1 500"), "{reply}");
        for needle in [
            "trapped",
            "unreachable",
            "parse_the_order",
            "check_the_basket",
        ] {
            assert_eq!(
                reply.contains(needle),
                shown,
                "dev={dev}: {needle} in\n{reply}"
            );
        }
        // The log has the trap either way.
        assert!(log.contains("trap"), "{log}");
    }
}

#[test]
fn the_zig_and_go_examples_build_from_source_and_answer() {
    let dir = support::site();
    let servlets = dir.path().join("servlets");
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let status = Command::new(repo.join("examples/build-native.sh"))
        .arg(&servlets)
        .status()
        .expect("run examples/build-native.sh");
    assert!(status.success(), "examples/build-native.sh failed");
    let running = start(dir.path(), &support::SITE_ARGS, false);
    let zig = get(&running.urls[0], "/hello-zig?name=Ada");
    let go = get(&running.urls[0], "/hello-go?name=Ada");
    stop(running.child);
    assert!(zig.ends_with("Hello, Ada! (zig)\nGET /hello-zig"), "{zig}");
    assert!(go.ends_with("Hello, Ada! (go)\nGET /hello-go"), "{go}");
}
