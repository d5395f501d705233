//! Configuration errors, as an operator sees them: each `tests/ui/*.toml`
//! is parsed and its messages compared with the `.err` file beside it.
//! Run with `SWAN_BLESS=1` to rewrite the `.err` files after a deliberate
//! change of wording.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ui")
}

#[test]
fn config_errors_match_their_snapshots() -> Result<()> {
    let dir = ui_dir();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 5, "ui cases missing from {}", dir.display());
    let bless = std::env::var_os("SWAN_BLESS").is_some();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case.file_name().context("name")?;
        let source = std::fs::read_to_string(case)?;
        let actual = match swan::Config::parse(&source, Path::new(name), &dir) {
            Ok(_) => "(valid)\n".to_owned(),
            Err(e) => format!("{e}\n"),
        }
        .replace(&*dir.to_string_lossy(), "$DIR");
        let expected_path = case.with_extension("err");
        if bless {
            std::fs::write(&expected_path, &actual)?;
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "--- {}\nexpected:\n{expected}\nactual:\n{actual}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn the_documented_example_config_is_valid() -> Result<()> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/swan.example.toml");
    let config = swan::Config::load(Some(&file), &swan::Overrides::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert!(config.sites.len() >= 2);
    assert_eq!(config.sites.iter().filter(|s| s.default).count(), 1);
    Ok(())
}

#[test]
fn the_repository_swan_toml_is_valid() -> Result<()> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../swan.toml");
    swan::Config::load(Some(&file), &swan::Overrides::default())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// `hsts` must carry the `max-age` browsers need (they ignore the header
/// without one), once, as a number of seconds; "" turns it off.
#[test]
fn hsts_without_a_max_age_is_refused() -> Result<()> {
    let site = swan_tests::TestSite::new()?;
    site.file("cert.pem", "")?;
    site.file("key.pem", "")?;
    let with = |hsts: &str| {
        site.config(&format!(
            "[server]\nlisten = [{{ addr = \"127.0.0.1:0\", tls = true }}]\n\
             [server.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\nhsts = {hsts:?}\n\
             [[site]]\nroot = \"www\"\n"
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    site.dir("www")?;
    for bad in [
        "includeSubDomains",
        "max-age=abc",
        "max-age=",
        "max-age=1; max-age=2",
        "maxage=300",
    ] {
        let err = with(bad);
        assert!(err.contains("server.tls.hsts"), "{bad}: {err}");
        assert!(err.contains("max-age"), "{bad}: {err}");
    }
    for good in [
        "",
        "max-age=0",
        "max-age=63072000; includeSubDomains",
        "MAX-AGE=\"300\"; preload",
        " includeSubDomains ; max-age=10 ",
    ] {
        let err = with(good);
        assert!(!err.contains("hsts"), "{good}: {err}");
    }
    Ok(())
}

/// An access log that cannot be created is a configuration error (what
/// `swan check` says, with the key's position), not a start that fails:
/// here its folder is a read-only mount (a tmpfs, as root), and one
/// that does not exist.
#[test]
fn an_access_log_that_cannot_be_created_is_a_configuration_error() -> Result<()> {
    let site = swan_tests::TestSite::new()?;
    site.dir("www")?;
    let ro = site.dir("ro")?;
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
        .arg(&ro)
        .status()?;
    anyhow::ensure!(mounted.success(), "mounting a tmpfs needs root");
    let config = |access: &str| {
        site.config(&format!(
            "[log]\naccess = \"{access}\"\n[[site]]\nroot = \"www\"\n"
        ))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
    };
    let read_only = config("ro/access.log");
    let missing = config("nowhere/access.log");
    let fine = config("access.log");
    let _ = std::process::Command::new("umount").arg(&ro).status();
    assert!(read_only.contains("log.access"), "{read_only}");
    assert!(read_only.contains("is not writable"), "{read_only}");
    assert!(missing.contains("does not exist"), "{missing}");
    assert!(fine.is_empty(), "{fine}");
    Ok(())
}
