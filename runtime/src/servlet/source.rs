//! Servlet sources: a folder in a servlets folder holding the sources of a
//! servlet in one of the languages of `crate::toolchain` (Rust, C,
//! AssemblyScript, Zig, Go as native servlets; Rust, JavaScript, Python as
//! components) is built by swan at start and whenever its sources change,
//! in development mode (or with `build_sources = true`): building runs
//! native tools, and a crate's build scripts, with swan's rights, so
//! production loads `.wasm` files only. Each build has a time limit
//! (`build_timeout`). The result lands in `SERVLETS/target/swan/NAME.wasm`
//! and is deployed like any dropped-in module. Build output streams to the
//! log, tagged with the servlet's name.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

use crate::file_stamp::FileStamp;

/// `swan.h`, written next to C sources' build so they need no SDK checkout.
const SWAN_H: &str = include_str!("../../../guest-sdk/c/swan.h");

/// How a source folder is built: its language.
pub(crate) use crate::toolchain::Lang as SourceKind;

/// A servlet source folder.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// The route name (the folder name).
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
    /// How it is built.
    pub kind: SourceKind,
}

/// A build that failed, with what the compiler said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("build of servlet {name} failed")]
pub struct BuildError {
    /// The servlet.
    pub name: String,
    /// Compiler output (stdout and stderr).
    pub output: String,
}

impl BuildError {
    /// One line for the log and the status page: why the build was
    /// killed (a timeout), else the compiler's first error (a line that
    /// starts with `error` or says `: error`, as rustc, clang, Zig and
    /// AssemblyScript write them; not `Compiling thiserror` or a warning
    /// that mentions an error type), else the output's last line (a
    /// missing tool), at most 300 characters.
    pub fn summary(&self) -> String {
        let lines = || self.output.lines().map(str::trim).filter(|l| !l.is_empty());
        let is_error = |l: &&str| {
            let lower = l.to_ascii_lowercase();
            lower.starts_with("error") || lower.contains(": error")
        };
        let line = lines()
            .find(|l| l.starts_with("build killed"))
            .or_else(|| lines().find(is_error))
            .or_else(|| lines().next_back())
            .unwrap_or("no output");
        let mut short: String = line.chars().take(300).collect();
        if short.len() < line.len() {
            short.push('…');
        }
        short
    }
}

/// The folder of a servlets folder that holds build output (Cargo's and
/// swan's): never a servlet's source, never watched.
pub const BUILD_FOLDER: &str = "target";

/// The folder where built modules go.
pub(crate) fn out_dir(servlets: &Path) -> PathBuf {
    servlets.join(BUILD_FOLDER).join("swan")
}

/// Source folders of a servlets folder.
pub(crate) fn find(servlets: &Path) -> Vec<Source> {
    let Ok(entries) = std::fs::read_dir(servlets) else {
        return Vec::new();
    };
    let mut found: Vec<Source> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter_map(|dir| {
            let name = dir.file_name()?.to_str()?.to_owned();
            if name == BUILD_FOLDER || name.starts_with('.') {
                return None;
            }
            let kind = SourceKind::detect(&dir)?;
            Some(Source { name, dir, kind })
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

fn c_files(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
}

/// A summary of a source folder's files, so a reload rebuilds only
/// folders whose sources changed. Lockfiles are summed apart: a build may
/// write one (`cargo build` makes `Cargo.lock`), and must not make its
/// folder look changed ([`SourceStamp::after_build`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SourceStamp {
    sources: FilesStamp,
    locks: FilesStamp,
}

/// Some files' count, total size and newest modification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct FilesStamp {
    files: u64,
    bytes: u64,
    newest_ns: u128,
    /// Every file's identity and change time, mixed: a file replaced by
    /// one of the same size with an older date (`cp -p`, `rsync -a`,
    /// `tar x`) changes it, where it changes neither of the others.
    identities: u64,
}

impl FilesStamp {
    fn add(&mut self, file: FileStamp) {
        self.files += 1;
        self.bytes += file.len;
        self.newest_ns = self.newest_ns.max(file.mtime_ns);
        self.identities = self.identities.wrapping_add(file.identity_bits());
    }
}

/// Files a language's build tool writes beside the sources.
const LOCKFILES: [&str; 5] = [
    "Cargo.lock",
    "package-lock.json",
    "go.sum",
    "yarn.lock",
    "pnpm-lock.yaml",
];

impl SourceStamp {
    /// The stamp to remember for a folder stamped `self` before its build:
    /// the folder as the build left it, if only its lockfiles changed
    /// meanwhile (so the next reload does not build it again for the
    /// `Cargo.lock` the build wrote); `self` if a source changed during the
    /// build (an edit the next reload must build).
    pub(crate) fn after_build(self, dir: &Path) -> SourceStamp {
        let now = stamp(dir);
        if now.sources == self.sources {
            now
        } else {
            self
        }
    }
}

/// The stamp of a source folder. Build output (`target/`, `.wasm` files),
/// installed packages (`node_modules/`), caches (`__pycache__/`) and hidden
/// files are left out: a build must not make its folder look changed.
pub(crate) fn stamp(dir: &Path) -> SourceStamp {
    let mut acc = SourceStamp::default();
    fn walk(dir: &Path, acc: &mut SourceStamp) {
        for entry in std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.')
                || name == BUILD_FOLDER
                || name == "node_modules"
                || name == "__pycache__"
                || name.ends_with(".wasm")
            {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                walk(&entry.path(), acc);
            } else if LOCKFILES.contains(&&*name) {
                acc.locks.add(FileStamp::from_meta(&meta));
            } else {
                acc.sources.add(FileStamp::from_meta(&meta));
            }
        }
    }
    walk(dir, &mut acc);
    acc
}

/// How long a build may run, and the switch that stops a server's builds
/// at once when it stops: a build never holds up its exit.
#[derive(Debug, Clone)]
pub(crate) struct BuildLimits {
    timeout: Duration,
    stopped: Arc<AtomicBool>,
}

impl BuildLimits {
    /// Builds of at most `timeout` each.
    pub(crate) fn new(timeout: Duration) -> BuildLimits {
        BuildLimits {
            timeout,
            stopped: Arc::default(),
        }
    }

    /// Kills the build running now, and fails every later one.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    fn stopping(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    fn within(&self, timeout: Duration) -> BuildLimits {
        BuildLimits {
            timeout,
            stopped: self.stopped.clone(),
        }
    }
}

/// Builds `source` into `out_dir(servlets)/NAME.wasm` (replaced only by a
/// successful build); a build running past its limits' timeout, or when
/// they are stopped, is killed (with every process it started) and fails.
pub(crate) fn build(
    source: &Source,
    servlets: &Path,
    limits: &BuildLimits,
) -> Result<PathBuf, BuildError> {
    let out = out_dir(servlets);
    let fail = |output: String| BuildError {
        name: source.name.clone(),
        output,
    };
    std::fs::create_dir_all(&out)
        .map_err(|e| fail(format!("cannot create {}: {e}", out.display())))?;
    let target = out.join(format!("{}.wasm", source.name));
    // Per process: `swan check` building beside a running server must not
    // rename the server's half-built file, nor the server its.
    let staging = out.join(format!(
        "{}.wasm.building-{}",
        source.name,
        std::process::id()
    ));
    tracing::info!(servlet = %source.name, dir = %source.dir.display(), kind = ?source.kind, "building servlet");
    let started = Instant::now();
    let built = build_with(source, servlets, &out, &staging, limits).map_err(fail)?;
    // Copy, then rename: the deployed file is never half-written.
    if built != staging {
        std::fs::copy(&built, &staging)
            .map_err(|e| fail(format!("cannot copy {}: {e}", built.display())))?;
    }
    std::fs::rename(&staging, &target)
        .map_err(|e| fail(format!("cannot install {}: {e}", target.display())))?;
    tracing::info!(
        servlet = %source.name,
        file = %target.display(),
        took_ms = started.elapsed().as_millis() as u64,
        "servlet built"
    );
    Ok(target)
}

/// Runs the language's build in the source folder; returns the file it
/// made.
fn build_with(
    source: &Source,
    servlets: &Path,
    out: &Path,
    staging: &Path,
    limits: &BuildLimits,
) -> Result<PathBuf, String> {
    let dir = &source.dir;
    let name = &source.name;
    let missing = |what: &str| {
        format!(
            "{what} not found; install it with: {}",
            source.kind.install_hint()
        )
    };
    let tool = |(program, args): crate::toolchain::Tool| {
        let mut cmd = Command::new(program);
        cmd.current_dir(dir).args(args);
        cmd
    };
    match source.kind {
        SourceKind::Rust | SourceKind::RustComponent => {
            let triple = if source.kind == SourceKind::Rust {
                "wasm32-wasip1"
            } else {
                "wasm32-wasip2"
            };
            let target_dir = servlets.join(BUILD_FOLDER).join("cargo");
            let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
            cmd.current_dir(dir)
                .args(["build", "--release", "--target", triple, "--color", "never"])
                .arg("--manifest-path")
                .arg(dir.join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&target_dir);
            run(name, cmd, limits)?;
            let artefact = rust_artefact(dir)?;
            Ok(target_dir.join(triple).join("release").join(artefact))
        }
        SourceKind::C => {
            let include = out.join("include");
            std::fs::create_dir_all(&include)
                .and_then(|()| std::fs::write(include.join("swan.h"), SWAN_H))
                .map_err(|e| format!("cannot write swan.h: {e}"))?;
            let mut cmd = Command::new("clang");
            cmd.current_dir(dir)
                .args([
                    "--target=wasm32-wasi",
                    "-O2",
                    "-mexec-model=reactor",
                    "-fdiagnostics-color=never",
                ])
                .arg("-I")
                .arg(&include)
                .arg("-o")
                .arg(staging)
                .args(c_files(dir));
            run(name, cmd, limits)?;
            Ok(staging.to_owned())
        }
        SourceKind::AssemblyScript | SourceKind::JsComponent => {
            let npm = crate::toolchain::on_path("npm").ok_or_else(|| missing("npm"))?;
            let started = Instant::now();
            if !dir.join("node_modules").is_dir() {
                let mut ci = Command::new(&npm);
                ci.current_dir(dir)
                    .args(["ci", "--no-audit", "--no-fund", "--no-progress"]);
                run(name, ci, limits)?;
            }
            let mut cmd = Command::new(&npm);
            cmd.current_dir(dir).args(["run", "--silent", "build"]);
            run(
                name,
                cmd,
                &limits.within(limits.timeout.saturating_sub(started.elapsed())),
            )?;
            // The templates' build scripts write NAME.wasm in the folder.
            npm_output(dir, name)
        }
        SourceKind::Zig => {
            let zig = crate::toolchain::zig().ok_or_else(|| missing("zig"))?;
            let mut cmd = tool(zig);
            cmd.args([
                "build-exe",
                "main.zig",
                "-target",
                "wasm32-freestanding",
                "-fno-entry",
                "--export=swan_abi_version",
                "--export=swan_handle",
                "-O",
                "ReleaseSmall",
            ])
            .arg(format!("-femit-bin={}", staging.display()));
            run(name, cmd, limits)?;
            Ok(staging.to_owned())
        }
        SourceKind::Go => {
            let go = crate::toolchain::go().ok_or_else(|| missing("go (1.24+)"))?;
            let mut cmd = tool(go);
            cmd.env("GOOS", "wasip1")
                .env("GOARCH", "wasm")
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-buildvcs=false")
                .env("GOPROXY", "off")
                .args(["build", "-buildmode=c-shared", "-o"])
                .arg(staging)
                .arg(".");
            run(name, cmd, limits)?;
            Ok(staging.to_owned())
        }
        SourceKind::PythonComponent => {
            let py =
                crate::toolchain::componentize_py().ok_or_else(|| missing("componentize-py"))?;
            let mut cmd = tool(py);
            // No bytecode next to the sources, no outer virtualenv.
            cmd.env_remove("VIRTUAL_ENV")
                .env("PYTHONDONTWRITEBYTECODE", "1")
                .args([
                    "-d",
                    "wit",
                    "-w",
                    "servlet",
                    "componentize",
                    "-p",
                    ".",
                    "app",
                    "-o",
                ])
                .arg(staging);
            run(name, cmd, limits)?;
            Ok(staging.to_owned())
        }
    }
}

/// The module an npm build made: `NAME.wasm` in the folder, else the only
/// `.wasm` file there.
fn npm_output(dir: &Path, name: &str) -> Result<PathBuf, String> {
    let named = dir.join(format!("{name}.wasm"));
    if named.is_file() {
        return Ok(named);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "wasm"))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "`npm run build` made no .wasm file in {}",
            dir.display()
        )),
        _ => Err(format!(
            "`npm run build` left several .wasm files in {}; name the servlet's {name}.wasm",
            dir.display()
        )),
    }
}

/// How often a long build says it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Runs a build command in a process group of its own, logging its output
/// line by line as it comes; past `timeout` the whole group is killed.
fn run(name: &str, mut cmd: Command, limits: &BuildLimits) -> Result<(), String> {
    let timeout = limits.timeout;
    if limits.stopping() {
        return Err("not built: the server is stopping".to_owned());
    }
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot run {:?}: {e} (is the toolchain installed?)",
                cmd.get_program()
            )
        })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let collect = |stream: Option<Box<dyn std::io::Read + Send>>, name: String| {
        std::thread::spawn(move || {
            let mut all = String::new();
            if let Some(s) = stream {
                for line in BufReader::new(s).lines().map_while(Result::ok) {
                    tracing::info!(servlet = %name, "build: {line}");
                    all.push_str(&line);
                    all.push('\n');
                }
            }
            all
        })
    };
    let out = collect(
        stdout.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        name.to_owned(),
    );
    let err = collect(
        stderr.map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        name.to_owned(),
    );
    let started = Instant::now();
    let mut next_progress = PROGRESS_EVERY;
    let status = loop {
        if started.elapsed() >= next_progress {
            tracing::info!(
                servlet = %name,
                elapsed_s = next_progress.as_secs(),
                limit_s = timeout.as_secs(),
                "still building"
            );
            next_progress += PROGRESS_EVERY;
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() > timeout || limits.stopping() => {
                // The tool's own children (rustc under cargo, a build
                // script) are in the group too.
                if let Some(group) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) {
                    let _ = kill_process_group(group, Signal::KILL);
                }
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let output = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    match status {
        Some(s) if s.success() => Ok(()),
        Some(_) => Err(output),
        None if limits.stopping() => {
            tracing::info!(servlet = %name, "build killed: the server is stopping");
            Err(format!("{output}\nbuild killed: the server is stopping\n"))
        }
        None => {
            tracing::error!(servlet = %name, ?timeout, "build killed: it ran past build_timeout");
            Err(format!(
                "{output}\nbuild killed after {timeout:?} (build_timeout)\n"
            ))
        }
    }
}

/// The `.wasm` file name cargo produces for the package in `dir`.
fn rust_artefact(dir: &Path) -> Result<String, String> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).map_err(|e| e.to_string())?;
    let doc: toml::Table = manifest
        .parse()
        .map_err(|e: toml::de::Error| e.to_string())?;
    let name = doc
        .get("lib")
        .and_then(|l| l.get("name"))
        .or_else(|| doc.get("package").and_then(|p| p.get("name")))
        .and_then(|n| n.as_str())
        .ok_or("Cargo.toml has no package name")?;
    Ok(format!("{}.wasm", name.replace('-', "_")))
}

#[cfg(test)]
mod summary_tests {
    use super::BuildError;

    fn summary(output: &str) -> String {
        BuildError {
            name: "x".to_owned(),
            output: output.to_owned(),
        }
        .summary()
    }

    #[test]
    fn the_summary_is_the_first_real_error_or_the_kill() {
        assert_eq!(
            summary(
                "   Compiling thiserror v2.0.1\nwarning: unused import: `std::error::Error`\nerror[E0425]: cannot find value `x`\n --> src/lib.rs:3:5\n"
            ),
            "error[E0425]: cannot find value `x`"
        );
        assert_eq!(
            summary("main.c:1:13: error: expected parameter declarator\n1 error generated.\n"),
            "main.c:1:13: error: expected parameter declarator"
        );
        assert_eq!(
            summary("error: something\nbuild killed after 8s (build_timeout)\n"),
            "build killed after 8s (build_timeout)"
        );
        assert_eq!(
            summary("clang not found; install it"),
            "clang not found; install it"
        );
    }
}
