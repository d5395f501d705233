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
