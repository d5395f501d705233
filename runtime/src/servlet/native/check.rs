//! Loading a servlet: compile, check the ABI contract, link, and try one
//! instantiation, so that a module that cannot serve is refused at load
//! with a message naming the file and the problem.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime::{ExternType, Module, ValType};

use super::abi::{self, ABI_VERSION};
use super::{Linkers, NativeGuest};
use crate::engine::{Engine, Tier};
use crate::servlet::guest::GuestError;
use crate::servlet::info::ServletInfo;

/// Import module of the swan ABI.
const SWAN_MODULE: &str = "swan";
/// Import module of WASI preview 1.
const WASI_MODULE: &str = "wasi_snapshot_preview1";

/// Why a servlet was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a valid WebAssembly module, or a valid one past the instance
    /// pool's limits (wasmtime's reason names which).
    #[error("{file}: {}: {reason}", invalid_what(.reason))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What wasmtime said.
        reason: String,
    },
    /// An import swan does not provide.
    #[error(
        "{file}: imports `{module}::{name}`, which swan does not provide (servlets may import only the `swan` ABI and `wasi_snapshot_preview1`)"
    )]
    Import {
        /// The file.
        file: PathBuf,
        /// Import module.
        module: String,
        /// Import name.
        name: String,
    },
    /// A component imports something swan does not provide.
    #[error(
        "{file}: imports `{missing}`, {why} (components may import WASI 0.2, `wasi:http` 0.2.x, `wasi:config/store@0.2.0-rc.1`, `wasi:keyvalue@0.2.0-draft` and `swan:keyvalue/extras@0.1.0`; WASI 0.3 and `wasi:http` 0.3.x where the route sets `wasi_http_p3`)"
    )]
    ComponentImport {
        /// The file.
        file: PathBuf,
        /// The import, as the component names it.
        missing: String,
        /// Why it does not link: "which swan does not provide to
        /// components", or what of it does not match what swan provides
        /// (a function swan's interface lacks, a wrong signature).
        why: String,
    },
    /// Its name cannot be a route (the folder's file or source name
    /// becomes `/NAME`).
    #[error(
        "{file}: its name is not a valid URL segment (use letters, digits, '-', '_', '.', '~'; not starting with '.'), so it cannot be a route: rename it"
    )]
    Name {
        /// The file (or source folder).
        file: PathBuf,
    },
    /// A source folder did not build.
    #[error("{file}: the build failed{}: {why}", if *.kept_previous { " (its previous build serves)" } else { "" })]
    Build {
        /// The source folder.
        file: PathBuf,
        /// The compiler's first error, or why the build stopped.
        why: String,
        /// An earlier build of it still serves.
        kept_previous: bool,
    },
    /// A required export is missing or has the wrong type.
    #[error("{file}: {problem}")]
    Export {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// Built for another ABI version.
    #[error("{file}: built for swan ABI version {found}, this swan speaks version {expected}")]
    AbiVersion {
        /// The file.
        file: PathBuf,
        /// What the module says.
        found: i32,
        /// What swan implements.
        expected: i32,
    },
    /// The trial instantiation found no free instance slot: the server
    /// was busy, the servlet may be fine.
    #[error("{file}: cannot be instantiated: {reason}")]
    Busy {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// The trial instance's start ran past the servlet's `timeout`: a
    /// start that loops, or one slowed by a busy machine.
    #[error("{file}: cannot be instantiated: {reason}")]
    Slow {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
    /// Linking or the trial instantiation failed.
    #[error("{file}: cannot be instantiated: {reason}")]
    Instantiate {
        /// The file.
        file: PathBuf,
        /// Why.
        reason: String,
    },
}

impl LoadError {
    /// Why a load's trial instance failed.
    pub(crate) fn trial(file: PathBuf, error: GuestError) -> Self {
        let reason = error.to_string();
        match error {
            GuestError::NoSlotToTry => LoadError::Busy { file, reason },
            GuestError::TimedOut(_) => LoadError::Slow { file, reason },
            GuestError::Failed(e) if e.is::<crate::servlet::deadline::DeadlineExceeded>() => {
                LoadError::Slow { file, reason }
            }
            _ => LoadError::Instantiate { file, reason },
        }
    }

    /// Whether loading the same file with the same settings would be
    /// refused again: not for a file that could not be read, or a trial
    /// instance that found no free slot (`max_instances` busy).
    pub fn is_lasting(&self) -> bool {
        !matches!(self, LoadError::Read { .. } | LoadError::Busy { .. })
    }

    /// Whether the same file with the same settings might load later: a
    /// start that ran out of time may have been slowed by the machine,
    /// and one that failed may have met a store that was down. A module
    /// that does not compile, or imports, exports or declares what swan
    /// refuses, is refused again untried.
    pub fn may_pass_later(&self) -> bool {
        matches!(self, LoadError::Slow { .. } | LoadError::Instantiate { .. })
    }

    /// The file refused.
    pub fn file(&self) -> &Path {
        match self {
            LoadError::Read { file, .. }
            | LoadError::Invalid { file, .. }
            | LoadError::Import { file, .. }
            | LoadError::ComponentImport { file, .. }
            | LoadError::Export { file, .. }
            | LoadError::Name { file }
            | LoadError::Build { file, .. }
            | LoadError::AbiVersion { file, .. }
            | LoadError::Busy { file, .. }
            | LoadError::Slow { file, .. }
            | LoadError::Instantiate { file, .. } => file,
        }
    }
}

/// What an [`LoadError::Invalid`] is, from wasmtime's `reason`: a module
/// past the pooling allocator's per-instance limits (two memories, a
/// table of 10 million elements) is valid WebAssembly, and the user must
/// hear that it is the limit that refuses it.
fn invalid_what(reason: &str) -> &'static str {
    if reason.contains("pooling allocator") || reason.contains("per-instance limit") {
        "a valid module past swan's per-instance limits (one memory and one table of at most 20,000 elements per core module)"
    } else {
        "not a valid WebAssembly module"
    }
}

/// Compiles `info.file` with the `tier` compiler, checks it against the
/// ABI contract, links it and makes one trial instance (start functions,
/// memory sizes against the limits, the ABI version), so that a module
/// that cannot serve is refused before any request.
pub(crate) fn load(
    engine: &Arc<Engine>,
    linkers: &Linkers,
    stores: &Arc<crate::store::Stores>,
    info: Arc<ServletInfo>,
    stats: Arc<crate::servlet::stats::ServletStats>,
    bytes: &[u8],
    tier: Tier,
) -> Result<(NativeGuest, Tier), LoadError> {
    let file = info.file.clone();
    let (module, tier) = engine.compile::<Module>(tier, bytes);
    let module = module.map_err(|e| LoadError::Invalid {
        file: file.clone(),
        reason: format!("{e:#}"),
    })?;
    check_imports(&module, &file)?;
    check_exports(&module, &file)?;
    let pre = linkers
        .get(tier)
        .instantiate_pre(&module)
        .map_err(|e| LoadError::Instantiate {
            file: file.clone(),
            reason: format!("{e:#}"),
        })?;
    let guest = NativeGuest {
        pre,
        outbound: Arc::new(crate::servlet::outbound::Outbound::new(&info, stats)),
        stores: stores.clone(),
        info,
        engine: engine.clone(),
    };
    let trial = {
        let (guest, budget) = (guest.clone(), engine.clone());
        engine.run_blocking(async move {
            let mut ready = crate::servlet::guest::trial_instance(&budget, &guest).await?;
            let version = ready
                .instance
                .get_typed_func::<(), i32>(&mut ready.store, "swan_abi_version")
                .map_err(GuestError::Failed)?;
            // The probe runs under the servlet's deadline, like everything
            // a guest does.
            let limit = guest.info.limits.timeout;
            ready.store.data_mut().deadline = crate::servlet::deadline::Deadline::after(limit);
            ready.store.set_epoch_deadline(1);
            let probe = async {
                version
                    .call_async(&mut ready.store, ())
                    .await
                    .map_err(GuestError::Failed)
            };
            crate::servlet::guest::started_within(limit, probe).await
        })
    };
    let found = match trial {
        Some(Ok(v)) => v,
        Some(Err(e)) => return Err(LoadError::trial(file, e)),
        None => {
            return Err(LoadError::Instantiate {
                file,
                reason: "the engine stopped".to_owned(),
            });
        }
    };
    if found != ABI_VERSION {
        return Err(LoadError::AbiVersion {
            file,
            found,
            expected: ABI_VERSION,
        });
    }
    Ok((guest, tier))
}

fn check_imports(module: &Module, file: &Path) -> Result<(), LoadError> {
    for import in module.imports() {
        let known = match import.module() {
            SWAN_MODULE => {
                abi::FUNCTIONS.contains(&import.name())
                    || super::kv::FUNCTIONS.contains(&import.name())
            }
            WASI_MODULE => true,
            _ => false,
        };
        if !known {
            return Err(LoadError::Import {
                file: file.to_path_buf(),
                module: import.module().to_owned(),
                name: import.name().to_owned(),
            });
        }
    }
    Ok(())
}

fn check_exports(module: &Module, file: &Path) -> Result<(), LoadError> {
    let err = |problem: String| LoadError::Export {
        file: file.to_path_buf(),
        problem,
    };
    match module.get_export("memory") {
        Some(ExternType::Memory(_)) => {}
        _ => return Err(err("does not export its memory as `memory`".to_owned())),
    }
    for name in ["swan_handle", "swan_abi_version"] {
        match module.get_export(name) {
            Some(ExternType::Func(f)) => {
                let ok = f.params().len() == 0
                    && f.results().len() == 1
                    && f.results().all(|r| matches!(r, ValType::I32));
                if !ok {
                    return Err(err(format!(
                        "export `{name}` must be a function () -> i32, found {f}"
                    )));
                }
            }
            Some(_) => return Err(err(format!("export `{name}` must be a function () -> i32"))),
            None => {
                return Err(err(format!(
                    "does not export `{name}`: not a swan servlet, or built without the SDK's export (see guest-sdk/ABI.md)"
                )));
            }
        }
    }
    // A reactor's `_initialize` must run before anything else: one of
    // another type would be skipped, leaving the guest uninitialised.
    match module.get_export("_initialize") {
        None => {}
        Some(ExternType::Func(f)) if f.params().len() == 0 && f.results().len() == 0 => {}
        Some(ExternType::Func(f)) => {
            return Err(err(format!(
                "export `_initialize` must be a function () -> (), found {f}"
            )));
        }
        Some(_) => {
            return Err(err(
                "export `_initialize` must be a function () -> ()".to_owned()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_that_found_no_slot_is_not_a_lasting_refusal() {
        let busy = LoadError::trial(PathBuf::from("s/a.wasm"), GuestError::NoSlotToTry);
        assert!(!busy.is_lasting());
        assert!(
            busy.to_string()
                .starts_with("s/a.wasm: cannot be instantiated: no free instance slot for 10 s"),
            "{busy}"
        );
        let trap = wasmtime::format_err!("wasm trap: unreachable");
        let failed = LoadError::trial(PathBuf::from("s/a.wasm"), GuestError::Failed(trap));
        assert!(failed.is_lasting());
        assert!(failed.may_pass_later());
        let slow = LoadError::trial(
            PathBuf::from("s/a.wasm"),
            GuestError::Failed(crate::servlet::deadline::DeadlineExceeded.into()),
        );
        assert!(slow.is_lasting() && slow.may_pass_later(), "{slow:?}");
        assert_eq!(
            slow.to_string(),
            "s/a.wasm: cannot be instantiated: servlet ran past its deadline"
        );
        assert_eq!(
            failed.to_string(),
            "s/a.wasm: cannot be instantiated: wasm trap: unreachable"
        );
    }
}
