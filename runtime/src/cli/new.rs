//! `swan new NAME --lang LANG [--kind native|component]`: a servlet source
//! folder from `templates/` (built into the binary), ready to build and
//! answer with no edits.

use std::path::{Path, PathBuf};

use anyhow::Context;
use include_dir::{Dir, include_dir};

use swan::toolchain::Lang;

static TEMPLATES: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../templates");

/// Prints the languages, what each needs, and whether it is installed
/// (to a pipe that may close early: `swan new --list | head`).
pub(crate) fn list() {
    use std::fmt::Write as _;
    let mut out = String::from("swan new NAME --lang LANG [--kind native|component]\n\n");
    let _ = writeln!(
        out,
        "{:<16} {:<10} {:<10} needs",
        "LANG", "KIND", "TOOLCHAIN"
    );
    for lang in Lang::ALL {
        let ok = lang.available();
        let kind = if lang.component() {
            "component"
        } else {
            "native"
        };
        let found = if ok { "found" } else { "missing" };
        let _ = writeln!(
            out,
            "{:<16} {kind:<10} {found:<10} {}",
            lang.name(),
            lang.needs()
        );
        if !ok {
            let _ = writeln!(out, "{:<38} install: {}", "", lang.install_hint());
        }
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
}

/// Creates `DIR/NAME` from the language's template. `dir` is the servlets
/// folder to create it in.
pub(crate) fn create(name: &str, lang: Lang, dir: &Path) -> anyhow::Result<PathBuf> {
    check_name(name)?;
    // A file where the servlets folder should be is the command's usage
    // (exit 2), not a failure to write.
    if dir.metadata().is_ok_and(|m| !m.is_dir()) {
        return Err(Refused(format!(
            "{} is a file, not a servlets folder: give --dir a folder (it is made if missing)",
            dir.display()
        ))
        .into());
    }
    let dest = dir.join(name);
    if dest.symlink_metadata().is_ok() {
        return Err(Refused(format!(
            "{} exists already: pick another name or remove it",
            dest.display()
        ))
        .into());
    }
    let template = TEMPLATES
        .get_dir(lang.template())
        .with_context(|| format!("no template {} in this build", lang.template()))?;
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let sdk = Path::new(SDK_FOLDER);
    write_dir(template, Path::new(lang.template()), &dest, name, sdk)?;
    if template
        .get_file(Path::new(lang.template()).join("Cargo.toml"))
        .and_then(|f| f.contents_utf8())
        .is_some_and(|t| t.contains("{{sdk_path}}"))
    {
        write_sdk(&dest.join(SDK_FOLDER))?;
    }
    Ok(dest)
}

/// Where a Rust servlet gets its copy of the SDK crate, inside its own
/// folder: the crate is not on crates.io, and a path into the source tree
/// this binary was built from would not exist where the binary is copied.
const SDK_FOLDER: &str = "swan-guest";

/// The Rust SDK's sources, built into the binary.
static SDK: Dir<'_> = include_dir!("$CARGO_MANIFEST_DIR/../guest-sdk/src");

/// Writes the SDK crate (this swan's version) into `dir`.
fn write_sdk(dir: &Path) -> anyhow::Result<()> {
    let manifest = format!(
        "# swan's Rust SDK for servlets, copied by `swan new` from swan {version}.\n\
         [package]\nname = \"swan-guest\"\nversion = \"{version}\"\nedition = \"2024\"\npublish = false\n\n[dependencies]\n",
        version = env!("CARGO_PKG_VERSION")
    );
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(dir.join("Cargo.toml"), manifest)
        .with_context(|| format!("cannot write {}", dir.display()))?;
    SDK.extract(dir.join("src"))
        .with_context(|| format!("cannot write {}", dir.join("src").display()))
}

/// A name `swan new` refuses, or one taken already: a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(String);

/// Names become a route, a file name, a Cargo and an npm package name: a
/// lower-case letter, then lower-case letters, digits, `-` or `_`.
fn check_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !first_ok || !rest_ok || name.len() > 64 {
        return Err(Refused(format!(
            "invalid servlet name {name:?}: use a lower-case letter, then lower-case letters, digits, '-' or '_', 64 characters at most (it becomes the route /{name})"
        ))
        .into());
    }
    if name == swan::servlet::BUILD_FOLDER {
        return Err(Refused(format!(
            "invalid servlet name {name:?}: `{name}/` in a servlets folder holds swan's build output, never a servlet; choose another name"
        ))
        .into());
    }
    Ok(())
}

fn write_dir(
    dir: &Dir<'_>,
    base: &Path,
    dest: &Path,
    name: &str,
    sdk: &Path,
) -> anyhow::Result<()> {
    for file in dir.files() {
        let relative = file.path().strip_prefix(base).unwrap_or(file.path());
        let target = dest.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let bytes = match file.contents_utf8() {
            Some(text) => text
                .replace("{{name}}", name)
                .replace("{{sdk_path}}", &sdk.display().to_string())
                .into_bytes(),
            None => file.contents().to_vec(),
        };
        std::fs::write(&target, bytes)
            .with_context(|| format!("cannot write {}", target.display()))?;
    }
    for sub in dir.dirs() {
        write_dir(sub, base, dest, name, sdk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_routes_and_package_names() {
        for ok in ["hello", "my-api", "v2_beta", "a"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Hello", "2fast", "../x", "a b", "a/b", "-x"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_language_has_its_template_built_in() {
        for lang in Lang::ALL {
            let dir = TEMPLATES.get_dir(lang.template()).expect("template");
            let main = Path::new(lang.template()).join(lang.main_file());
            assert!(dir.get_file(&main).is_some(), "{}", main.display());
        }
    }
}
