//! Compiled code on disk, mapped into memory rather than copied.
//!
//! A guest compiles once into a wasmtime artifact under `<cache>/code/`,
//! named by a SHA-256 of its wasm bytes, its kind, the compiler tier and
//! the engine's compatibility hash. Loading maps that file
//! (`deserialize_file`) instead of copying it: the kernel brings pages of
//! machine code in as they first run, and processes that map the same
//! file share them. A guest carrying an interpreter (a JavaScript or
//! Python component compiles to 30-50 MB) then holds resident only the
//! code it runs, and a restart, or a revert to a module seen before,
//! compiles nothing.
//!
//! Files are written whole under a temporary name, flushed to disk and
//! renamed into place, and removed (never truncated) when the folder
//! outgrows its cap, so a mapped artifact never changes under a running
//! server. Beside each artifact is the SHA-256 of its bytes (`.sum`),
//! checked before the file is mapped: an artifact damaged on disk (a bad
//! block, a hand edit) is compiled again, never run. The folder is
//! created private to swan's user; a folder others can write to is not
//! used, and a file others could have written is compiled again.
//!
//! Loading compiled code is `unsafe` in wasmtime (the bytes become machine
//! code that runs): those invariants are this module's whole job, and the
//! only unsafe code in it. Measured, a server with one JavaScript
//! component: 20 instead of 55 MiB idle once its code is cached, 32
//! instead of 131 MiB right after compiling it (BENCHMARKS.md).
#![allow(unsafe_code, reason = "mapping compiled code; see the module doc")]

use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Module, Result};

use super::Tier;
use super::code_files::{hex, intact, owned, private_dir, publish, sum_path, touch};

/// Temporary files older than this are left over from a process that
/// died mid-write, and are removed.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

/// Something wasmtime compiles: a core module or a component.
pub(crate) trait Artifact: Sized {
    /// Names the kind in the file's key.
    const KIND: &'static str;
    /// Compiles `wasm` into an artifact's bytes.
    fn precompile(engine: &wasmtime::Engine, wasm: &[u8]) -> Result<Vec<u8>>;
    /// Maps an artifact file.
    ///
    /// # Safety
    /// The file must hold bytes `precompile` produced, and must not change
    /// while mapped.
    unsafe fn map(engine: &wasmtime::Engine, path: &Path) -> Result<Self>;
    /// Loads an artifact's bytes from memory.
    ///
    /// # Safety
    /// `bytes` must be what `precompile` produced.
    unsafe fn load(engine: &wasmtime::Engine, bytes: &[u8]) -> Result<Self>;
}

impl Artifact for Module {
    const KIND: &'static str = "module";
    fn precompile(engine: &wasmtime::Engine, wasm: &[u8]) -> Result<Vec<u8>> {
        engine.precompile_module(wasm)
    }
    unsafe fn map(engine: &wasmtime::Engine, path: &Path) -> Result<Self> {
        // SAFETY: passed on from the caller.
        unsafe { Module::deserialize_file(engine, path) }
    }
    unsafe fn load(engine: &wasmtime::Engine, bytes: &[u8]) -> Result<Self> {
        // SAFETY: passed on from the caller.
        unsafe { Module::deserialize(engine, bytes) }
    }
}

impl Artifact for Component {
    const KIND: &'static str = "component";
    fn precompile(engine: &wasmtime::Engine, wasm: &[u8]) -> Result<Vec<u8>> {
        engine.precompile_component(wasm)
    }
    unsafe fn map(engine: &wasmtime::Engine, path: &Path) -> Result<Self> {
        // SAFETY: passed on from the caller.
        unsafe { Component::deserialize_file(engine, path) }
    }
    unsafe fn load(engine: &wasmtime::Engine, bytes: &[u8]) -> Result<Self> {
        // SAFETY: passed on from the caller.
        unsafe { Component::deserialize(engine, bytes) }
    }
}

/// Makes short-lived engines that compile for a long-lived one.
///
/// wasmtime keeps a compiler's scratch memory (Cranelift's contexts, sized
/// for the largest function it has compiled) for its engine's whole life:
/// about 70 MiB after a JavaScript component. A throwaway engine with the
/// same settings compiles instead, and its memory goes with it. Its output
/// loads into the long-lived engine when the two hash alike for
/// compatibility (checked at each compile, which is cheap next to the
/// compile; if they did not, the long-lived engine compiles itself). Made
/// only when something compiles: a start whose code is all cached makes
/// none.
#[derive(Debug)]
pub(crate) struct Compiler(wasmtime::Config);

impl Compiler {
    /// A compiler for the engine made from `config`.
    pub(crate) fn new(mut config: wasmtime::Config) -> Compiler {
        // The instance pool is the engine's, not the compiler's: a second
        // pool would reserve its address space again.
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::OnDemand);
        Compiler(config)
    }

    /// A fresh engine to compile for `engine` with, or `engine` itself.
    fn engine(&self, engine: &wasmtime::Engine) -> wasmtime::Engine {
        match wasmtime::Engine::new(&self.0) {
            Ok(fresh) if compatibility(&fresh) == compatibility(engine) => fresh,
            _ => {
                tracing::debug!(
                    "a separate compiler would not match the engine; compiling in place"
                );
                engine.clone()
            }
        }
    }
}

fn compatibility(engine: &wasmtime::Engine) -> [u8; 32] {
    let mut hasher = DigestHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.finalize().into()
}

/// The folder of compiled artifacts, or none (compile in memory), and the
/// compilers of each tier.
#[derive(Debug)]
pub(crate) struct CodeCache {
    dir: Option<PathBuf>,
    max_bytes: u64,
    compilers: Vec<(Tier, Compiler)>,
}

impl CodeCache {
    /// A cache in `dir`, holding at most about `max_bytes`; none when
    /// `dir` is `None` or `max_bytes` is zero.
    pub(crate) fn new(
        dir: Option<PathBuf>,
        max_bytes: u64,
        compilers: Vec<(Tier, Compiler)>,
    ) -> CodeCache {
        CodeCache {
            dir: dir.filter(|_| max_bytes > 0),
            max_bytes,
            compilers,
        }
    }

    /// Compiles `wasm` for `engine` into an artifact's bytes, in a
    /// throwaway engine when the tier has one.
    fn precompile<A: Artifact>(
        &self,
        engine: &wasmtime::Engine,
        tier: Tier,
        wasm: &[u8],
    ) -> Result<Vec<u8>> {
        let compiler = self
            .compilers
            .iter()
            .find(|(t, _)| *t == tier)
            .map_or_else(|| engine.clone(), |(_, c)| c.engine(engine));
        A::precompile(&compiler, wasm)
    }

    /// Compiles `wasm` and loads it from memory.
    fn compile_in_memory<A: Artifact>(
        &self,
        engine: &wasmtime::Engine,
        tier: Tier,
        wasm: &[u8],
    ) -> Result<A> {
        let bytes = self.precompile::<A>(engine, tier, wasm)?;
        // SAFETY: `bytes` is `precompile`'s output, for an engine with
        // `engine`'s compatibility hash (and wasmtime checks it again).
        unsafe { A::load(engine, &bytes) }
    }

    /// Compiles `wasm`, or maps the artifact an earlier compile left.
    /// Errors are the compiler's (an invalid module); a cache that cannot
    /// be used costs a warning and a compile in memory, never a refusal.
    pub(crate) fn compile<A: Artifact>(
        &self,
        engine: &wasmtime::Engine,
        tier: Tier,
        wasm: &[u8],
    ) -> Result<A> {
        let Some(dir) = &self.dir else {
            return self.compile_in_memory(engine, tier, wasm);
        };
        match private_dir(dir) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(dir = %dir.display(), "the compiled-code folder is writable by other users; compiling in memory");
                return self.compile_in_memory(engine, tier, wasm);
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot use the compiled-code folder; compiling in memory");
                return self.compile_in_memory(engine, tier, wasm);
            }
        }
        let path = artifact_path::<A>(dir, engine, tier, wasm);
        let present = fs::metadata(&path).is_ok_and(|m| owned(&m));
        if present && !intact(&path) {
            // No checksum at all: written by a swan from before they were.
            if sum_path(&path).exists() {
                tracing::warn!(file = %path.display(), "cached code does not match its checksum; compiling again");
            }
        } else if present {
            // SAFETY: files under this name are only ever written whole by
            // `publish` from `precompile`'s output, and removed (never
            // truncated) by `evict`; the file and its folder are writable
            // by swan's user only, and its bytes are those `publish` wrote
            // (`intact`).
            match unsafe { A::map(engine, &path) } {
                Ok(artifact) => {
                    touch(&path);
                    return Ok(artifact);
                }
                // Another wasmtime build, or a damaged file: compile again
                // and replace it.
                Err(e) => {
                    tracing::debug!(file = %path.display(), error = %format!("{e:#}"), "cached code unusable; compiling again")
                }
            }
        }
        let bytes = self.precompile::<A>(engine, tier, wasm)?;
        match publish(dir, &path, &bytes) {
            Ok(()) => {
                self.evict(dir, &path);
                // SAFETY: `publish` just wrote `precompile`'s output there,
                // in a folder only swan's user can write to.
                match unsafe { A::map(engine, &path) } {
                    Ok(artifact) => return Ok(artifact),
                    Err(e) => {
                        // SAFETY: `bytes` is `precompile`'s output.
                        let loaded = unsafe { A::load(engine, &bytes) };
                        if loaded.is_ok() {
                            tracing::warn!(file = %path.display(), error = %format!("{e:#}"), "cannot map compiled code; loaded it in memory");
                        } else {
                            // Refused either way (a module past the
                            // pool's limits): the file is of no use.
                            let _ = fs::remove_file(&path);
                            let _ = fs::remove_file(sum_path(&path));
                        }
                        return loaded;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot write compiled code; loading it in memory")
            }
        }
        // SAFETY: `bytes` is `precompile`'s output.
        unsafe { A::load(engine, &bytes) }
    }

    /// Removes the least recently used artifacts while the folder holds
    /// more than `max_bytes`, and temporary files a crash left behind.
    /// `keep` (just written) stays. Removing a mapped file is safe: its
    /// pages live until the last mapping goes.
    fn evict(&self, dir: &Path, keep: &Path) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let now = SystemTime::now();
        let mut artifacts = Vec::new();
        let mut total = 0u64;
        for entry in entries.filter_map(std::result::Result::ok) {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            let modified = meta.modified().unwrap_or(now);
            match path.extension().and_then(|e| e.to_str()) {
                Some("cwasm") => {
                    total += meta.len();
                    if path != keep {
                        artifacts.push((modified, meta.len(), path));
                    }
                }
                Some("tmp")
                    if now.duration_since(modified).unwrap_or_default() > ABANDONED_AFTER =>
                {
                    let _ = fs::remove_file(&path);
                }
                _ => {}
            }
        }
        artifacts.sort();
        for (_, len, path) in artifacts {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                let _ = fs::remove_file(sum_path(&path));
                tracing::debug!(file = %path.display(), "compiled code evicted");
                total = total.saturating_sub(len);
            }
        }
    }
}

/// Where `wasm` compiled by `engine` is kept in `dir`.
fn artifact_path<A: Artifact>(
    dir: &Path,
    engine: &wasmtime::Engine,
    tier: Tier,
    wasm: &[u8],
) -> PathBuf {
    dir.join(format!("{}.cwasm", key::<A>(engine, tier, wasm)))
}

/// The file name of `wasm` compiled by `engine`: the same bytes under a
/// compatible engine map the same artifact.
fn key<A: Artifact>(engine: &wasmtime::Engine, tier: Tier, wasm: &[u8]) -> String {
    let mut hasher = DigestHasher(Sha256::new());
    A::KIND.hash(&mut hasher);
    format!("{tier:?}").hash(&mut hasher);
    env!("CARGO_PKG_VERSION").hash(&mut hasher);
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.0.update(wasm);
    hex(&hasher.0.finalize())
}

/// Feeds `Hash` values into SHA-256.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn engine() -> wasmtime::Engine {
        wasmtime::Engine::default()
    }

    const WAT: &str = r#"(module (func (export "f") (result i32) i32.const 7))"#;

    /// A cache in a temporary folder that has compiled [`WAT`] once.
    struct Cached {
        _dir: tempfile::TempDir,
        code: PathBuf,
        cache: CodeCache,
        engine: wasmtime::Engine,
        wasm: Vec<u8>,
        /// The artifact that compile left.
        file: PathBuf,
    }

    impl Cached {
        fn new() -> Result<Cached> {
            let dir = tempfile::tempdir()?;
            let code = dir.path().join("code");
            let cache = CodeCache::new(Some(code.clone()), 1 << 30, Vec::new());
            let wasm = wat::parse_str(WAT)?;
            let engine = engine();
            let _: Module = cache.compile(&engine, Tier::Optimized, &wasm)?;
            let file = fs::read_dir(&code)?
                .filter_map(std::result::Result::ok)
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|e| e == "cwasm"))
                .expect("an artifact");
            Ok(Cached {
                _dir: dir,
                code,
                cache,
                engine,
                wasm,
                file,
            })
        }

        /// Compiles [`WAT`] again, and checks the module works.
        fn compile_again(&self, tier: Tier) -> Result<Module> {
            let module: Module = self.cache.compile(&self.engine, tier, &self.wasm)?;
            assert!(module.get_export("f").is_some());
            Ok(module)
        }
    }

    #[test]
    fn a_compiled_module_is_mapped_from_disk_the_second_time() -> Result<()> {
        let c = Cached::new()?;
        assert_eq!(
            fs::read_dir(&c.code)?.count(),
            2,
            "one artifact and its checksum, no temporary file left"
        );
        assert_eq!(fs::metadata(&c.code)?.mode() & 0o777, 0o700);
        // Held while the maps are read: dropped, it is unmapped.
        let _second = c.compile_again(Tier::Optimized)?;
        let maps = fs::read_to_string("/proc/self/maps")?;
        assert!(
            maps.contains(&*c.file.to_string_lossy()),
            "the artifact is mapped, not copied"
        );
        // Another tier, another kind of key: another file.
        c.compile_again(Tier::Baseline)?;
        assert_eq!(fs::read_dir(&c.code)?.count(), 4);
        Ok(())
    }

    /// swan's own engines (pooling allocator, both tiers) get a separate
    /// compiler, and what it compiles loads into them.
    #[test]
    fn swan_engines_compile_in_a_throwaway_engine() -> Result<()> {
        let server = crate::config::ServerConfig::defaults();
        let wasm = wat::parse_str(WAT)?;
        for tier in [Tier::Optimized, Tier::Baseline] {
            let (engine, config) = super::super::wasmtime_engine(&server, tier, false)
                .map_err(|e| wasmtime::Error::msg(e.to_string()))?;
            let compiler = Compiler::new(config);
            let separate = compiler.engine(&engine);
            assert!(
                !wasmtime::Engine::same(&separate, &engine),
                "{tier:?}: no separate compiler"
            );
            let cache = CodeCache::new(None, 0, vec![(tier, compiler)]);
            let module: Module = cache.compile(&engine, tier, &wasm)?;
            assert!(module.get_export("f").is_some());
        }
        Ok(())
    }

    #[test]
    fn a_damaged_artifact_is_compiled_again_and_replaced() -> Result<()> {
        let c = Cached::new()?;
        let good = fs::read(&c.file)?;
        for damaged in [
            Vec::new(),
            b"not an artifact".to_vec(),
            good[..good.len() / 2].to_vec(),
            // The same size, its code changed: wasmtime would map it and
            // run it (a crash at the first call, before the checksum).
            good.iter()
                .enumerate()
                .map(|(i, b)| if i > good.len() / 2 { !b } else { *b })
                .collect(),
        ] {
            fs::write(&c.file, &damaged)?;
            c.compile_again(Tier::Optimized)?;
            assert_eq!(fs::read(&c.file)?, good, "the damaged file is replaced");
        }
        Ok(())
    }

    #[test]
    fn an_invalid_module_is_an_error_and_leaves_nothing() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let code = dir.path().join("code");
        let cache = CodeCache::new(Some(code.clone()), 1 << 30, Vec::new());
        let e = engine();
        assert!(
            cache
                .compile::<Module>(&e, Tier::Optimized, b"\0asm\x01\0\0\0\x99")
                .is_err()
        );
        assert!(
            cache
                .compile::<Module>(&e, Tier::Optimized, b"garbage")
                .is_err()
        );
        assert_eq!(fs::read_dir(&code).map(|d| d.count()).unwrap_or(0), 0);
        Ok(())
    }

    #[test]
    fn an_unusable_folder_or_no_cache_still_compiles() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let blocker = dir.path().join("file");
        fs::write(&blocker, b"in the way")?;
        let wasm = wat::parse_str(WAT)?;
        let e = engine();
        for cache in [
            CodeCache::new(Some(blocker.join("code")), 1 << 30, Vec::new()),
            CodeCache::new(Some(dir.path().join("off")), 0, Vec::new()),
            CodeCache::new(None, 1 << 30, Vec::new()),
        ] {
            let module: Module = cache.compile(&e, Tier::Optimized, &wasm)?;
            assert!(module.get_export("f").is_some());
        }
        assert!(
            !dir.path().join("off").exists(),
            "a zero cap writes nothing"
        );
        Ok(())
    }

    #[test]
    fn a_file_others_could_write_is_compiled_again() -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let c = Cached::new()?;
        let good = fs::read(&c.file)?;
        fs::write(&c.file, b"planted by someone else")?;
        fs::set_permissions(&c.file, fs::Permissions::from_mode(0o666))?;
        c.compile_again(Tier::Optimized)?;
        assert_eq!(fs::read(&c.file)?, good);
        assert_eq!(fs::metadata(&c.file)?.mode() & 0o777, 0o600);
        Ok(())
    }

    #[test]
    fn a_folder_others_can_write_to_is_not_used() -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let code = dir.path().join("code");
        fs::create_dir(&code)?;
        fs::set_permissions(&code, fs::Permissions::from_mode(0o777))?;
        let cache = CodeCache::new(Some(code.clone()), 1 << 30, Vec::new());
        let module: Module = cache.compile(&engine(), Tier::Optimized, &wat::parse_str(WAT)?)?;
        assert!(module.get_export("f").is_some());
        assert_eq!(fs::read_dir(&code)?.count(), 0, "nothing written there");
        Ok(())
    }

    #[test]
    fn the_least_recently_used_artifacts_go_past_the_cap() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let code = dir.path().join("code");
        let e = engine();
        let wasms: Vec<Vec<u8>> = (0..4)
            .map(|i| {
                wat::parse_str(format!(
                    r#"(module (func (export "f") (result i32) i32.const {i}))"#
                ))
            })
            .collect::<std::result::Result<_, _>>()?;
        let unbounded = CodeCache::new(Some(code.clone()), 1 << 30, Vec::new());
        let _: Module = unbounded.compile(&e, Tier::Optimized, &wasms[0])?;
        let one = fs::metadata(artifact_path::<Module>(
            &code,
            &e,
            Tier::Optimized,
            &wasms[0],
        ))?
        .len();
        // Room for about two artifacts.
        let cache = CodeCache::new(Some(code.clone()), one * 2 + one / 2, Vec::new());
        for wasm in &wasms[1..] {
            std::thread::sleep(Duration::from_millis(20));
            let _: Module = cache.compile(&e, Tier::Optimized, wasm)?;
        }
        let left: Vec<PathBuf> = fs::read_dir(&code)?
            .map(|e| e.map(|e| e.path()))
            .collect::<std::io::Result<_>>()?;
        // Two artifacts, each with its checksum: an evicted one's goes too.
        assert_eq!(left.len(), 4, "{left:?}");
        let path = |wasm| artifact_path::<Module>(&code, &e, Tier::Optimized, wasm);
        assert!(left.contains(&path(&wasms[3])), "the newest stays");
        assert!(!left.contains(&path(&wasms[0])), "the oldest goes");
        Ok(())
    }
}
