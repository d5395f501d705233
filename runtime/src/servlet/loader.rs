//! Loading a site's servlets, in three visible steps:
//!
//! 1. **list** the servlets folder and **plan** the routes (`plan`);
//! 2. **reuse** what has not changed: a planned servlet whose file, limits
//!    and settings are unchanged since the previous load is kept as it is;
//! 3. **compile** the rest, in parallel, and check each against its
//!    guest's contract. A servlet whose new file fails under unchanged
//!    settings keeps serving its previous version; one refused under its
//!    route's new settings stops serving, as after a restart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use super::native::{self, LoadError};
use super::plan::{self, BuildRecord, Listing, Planned, PlannedTarget};
use super::pool::InstancePool;
use super::progress::Progress;
pub use super::refused::Refused;
use super::refused::Tried;
use super::route::{Route, RouteTable, Target};
use super::source::{BuildError, BuildLimits};
use super::{Pool, component};
use super::{Servlet, ServletInfo};
use crate::config::{RoutePath, ServerConfig, SiteConfig};
use crate::engine::{Engine, EngineError, Tier};
use crate::file_stamp::FileStamp;
use crate::store::Stores;

/// Loads servlets: the engine and what guests may import.
pub struct Loader {
    engine: Arc<Engine>,
    stores: Arc<Stores>,
    native: native::Linkers,
    components: component::Linkers,
    development: bool,
    /// Time limit of a source build, when swan builds sources at all.
    builds: Option<BuildLimits>,
    /// Modules being written in place (see [`Loader::hold`]).
    held: std::sync::Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("development", &self.development)
            .finish_non_exhaustive()
    }
}

/// A site's servlets as loaded: the route table requests are matched
/// against, what could not be loaded, and what the next load reuses.
#[derive(Debug, Default)]
pub struct SiteServlets {
    /// Which path runs what.
    pub routes: RouteTable,
    /// Servlets that could not be loaded, with the reason.
    pub refused: Vec<Refused>,
    pub(super) loaded: Vec<Loaded>,
    builds: HashMap<String, BuildRecord>,
}

/// A loaded servlet at its route (the stamp of the file it came from is
/// the servlet's own).
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub(super) path: RoutePath,
    pub(super) servlet: Arc<Servlet>,
}

/// The loader could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoaderError {
    /// The engine could not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The host functions could not be linked.
    #[error("cannot link the host functions: {0}")]
    Link(String),
}

impl Loader {
    /// The engine for a server's limits, and the linkers.
    pub fn new(server: &ServerConfig, stores: Arc<Stores>) -> Result<Arc<Loader>, LoaderError> {
        let engine = Engine::new(server)?;
        let link = |e: wasmtime::Error| LoaderError::Link(format!("{e:#}"));
        let native = native::Linkers::new(&engine).map_err(link)?;
        let components = component::Linkers::new(&engine).map_err(link)?;
        Ok(Arc::new(Loader {
            engine,
            stores,
            native,
            components,
            development: server.development,
            builds: server
                .builds_sources()
                .then(|| BuildLimits::new(server.build_timeout)),
            held: std::sync::Mutex::default(),
        }))
    }

    /// Modules open for writing (copied in place, not renamed into
    /// place), which the next loads leave as they were: a previous
    /// version keeps serving, a new one is not routed yet. The rest of
    /// their folder loads as usual; each is loaded once its writer closes
    /// it (and is no longer held).
    pub fn hold(&self, files: Vec<PathBuf>) {
        let resolved = files.iter().map(|f| plan::resolved(f)).collect();
        *self.held.lock().unwrap_or_else(PoisonError::into_inner) = resolved;
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The stores servlets may open, fixed at start.
    pub fn stores(&self) -> &Arc<Stores> {
        &self.stores
    }

    /// Kills the source build running now, if any, and builds nothing
    /// more: the server is stopping.
    pub fn stop_builds(&self) {
        if let Some(limits) = &self.builds {
            limits.stop();
        }
    }

    /// Compiles, checks and links one servlet with the `tier` compiler (a
    /// module the baseline compiler cannot handle goes to Cranelift), and
    /// starts filling its pool.
    pub fn load_servlet(&self, info: ServletInfo, tier: Tier) -> Result<Arc<Servlet>, LoadError> {
        self.load_counting(info, tier, Counting::Fresh)
    }

    /// `old`'s file compiled again with the optimising compiler: the same
    /// version, so it goes on counting in `old`'s stats (a swap must not
    /// reset its metrics, nor forget its recent errors). Its compile time
    /// is its own ([`Servlet::compile_time`]), shown once it serves.
    pub fn load_optimised(&self, old: &Servlet) -> Result<Arc<Servlet>, LoadError> {
        self.load_counting(
            old.info().clone(),
            Tier::Optimized,
            Counting::Recompiling(old.stats.clone()),
        )
    }

    fn load_counting(
        &self,
        info: ServletInfo,
        tier: Tier,
        counting: Counting,
    ) -> Result<Arc<Servlet>, LoadError> {
        let started = std::time::Instant::now();
        let stats = match counting {
            Counting::Fresh => Arc::default(),
            Counting::Replacing(stats) | Counting::Recompiling(stats) => stats,
        };
        let info = Arc::new(info);
        let before = FileStamp::of(&info.file);
        let bytes = read_module(&info.file)?;
        let stamp = before.filter(|b| FileStamp::of(&info.file) == Some(*b));
        let (pool, tier) = if component::is_component(&bytes) {
            let (guest, tier) = with_fallback(tier, &info.name, |t| {
                component::load(
                    &self.engine,
                    &self.components,
                    &self.stores,
                    info.clone(),
                    stats.clone(),
                    &bytes,
                    t,
                )
            })?;
            let pool = InstancePool::new(&self.engine, guest, info.clone(), stats.clone());
            if info.limits.prewarm > 0 {
                self.engine.spawn_background(pool.clone().fill());
            }
            (Pool::Component(pool), tier)
        } else {
            let (guest, tier) = with_fallback(tier, &info.name, |t| {
                native::load(
                    &self.engine,
                    &self.native,
                    &self.stores,
                    info.clone(),
                    stats.clone(),
                    &bytes,
                    t,
                )
            })?;
            let pool = InstancePool::new(&self.engine, guest, info.clone(), stats.clone());
            if info.limits.prewarm > 0 {
                self.engine.spawn_background(pool.clone().fill());
            }
            (Pool::Native(pool), tier)
        };
        let compiled_in = started.elapsed();
        Ok(Arc::new(Servlet {
            info,
            tier,
            pool,
            stats,
            stamp,
            compiled_in,
        }))
    }

    /// Loads the servlets of a site. With `previous` (a reload), unchanged
    /// servlets are reused, changed ones go live on the baseline compiler,
    /// and one whose new version fails keeps its previous version.
    pub fn load_site(&self, site: &SiteConfig, previous: Option<&SiteServlets>) -> SiteServlets {
        let listing = match &site.servlets {
            Some(dir) => plan::list(dir, previous.map(|p| &p.builds), self.builds.as_ref())
                .without_route_modules(&site.routes),
            None => Listing::default(),
        };
        let builds = listing
            .sources
            .iter()
            .map(|(s, record, _)| (s.name.clone(), record.clone()))
            .collect();
        let held = self
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // A `[[site.route]]` module's path is as configured (`./x.wasm`),
        // a folder's resolved: compared resolved, as `hold` keeps them.
        let held = |file: &Path| !held.is_empty() && held.contains(&plan::resolved(file));
        let serving = |path: &RoutePath, file: &Path| {
            previous.is_some_and(|p| {
                p.loaded
                    .iter()
                    .any(|l| l.path == *path && l.servlet.info().file == file)
            })
        };
        // A module being written is routed only once a version serves.
        let planned: Vec<Planned> = plan::plan(site, &listing, self.development)
            .into_iter()
            .filter(|p| match &p.target {
                PlannedTarget::Servlet(info) if held(&info.file) => serving(&p.path, &info.file),
                _ => true,
            })
            .collect();
        let tier = if previous.is_some() {
            Tier::Baseline
        } else {
            Tier::Optimized
        };
        let (loaded, mut refused) = self.reuse_or_compile(planned.clone(), previous, tier, &held);
        // Unroutable names and failed builds: refused, shown and logged
        // like any other refusal (once, not at every reload).
        let refusals = listing.refusals(self.development, previous.map(|p| &p.builds));
        refused.extend(refusals.map(|(error, fresh)| {
            let known = || previous.is_some_and(|p| p.refused.iter().any(|r| r.file == error.file()));
            let fresh = fresh.unwrap_or_else(|| !known());
            Refused {
                file: error.file().to_path_buf(),
                kept_previous: matches!(error, LoadError::Build { kept_previous, .. } if kept_previous),
                error: Arc::new(error),
                fresh,
                tried: None,
            }
        }));
        let mut routes = RouteTable::default();
        let mut loaded_iter = loaded.iter();
        for p in planned {
            let target = match p.target {
                PlannedTarget::BuildFailed(e) => Target::BuildFailed(e),
                PlannedTarget::Servlet(info) => match loaded_iter.next() {
                    Some(Some(l)) => Target::Servlet(l.servlet.clone()),
                    // Refused with no earlier version to keep: its paths
                    // answer 500, a folder servlet's as a route's, never
                    // falling through to the files it shadows.
                    _ => Target::Refused(Arc::from(info.name.as_str())),
                },
            };
            let _ = routes.add(Route {
                path: p.path,
                target,
                origin: p.origin,
            });
        }
        let loaded: Vec<Loaded> = loaded.into_iter().flatten().collect();
        SiteServlets {
            routes,
            refused,
            loaded,
            builds,
        }
    }

    /// For each planned servlet, in order: the loaded servlet (reused,
    /// new, or the previous version kept after a failure), or `None`.
    fn reuse_or_compile(
        &self,
        planned: Vec<Planned>,
        previous: Option<&SiteServlets>,
        tier: Tier,
        held: &dyn Fn(&Path) -> bool,
    ) -> (Vec<Option<Loaded>>, Vec<Refused>) {
        enum Step<T> {
            /// Decided without compiling: what serves (reused, or the
            /// previous version beside a refusal), and a refusal.
            Ready(Option<Loaded>, Option<Refused>),
            /// To compile (`T`: what to compile, then its thread), with
            /// the version it replaces.
            Compile(T, Tried, Option<Loaded>),
        }
        let steps: Vec<(RoutePath, Step<Box<ServletInfo>>)> = planned
            .into_iter()
            .filter_map(|p| match p.target {
                PlannedTarget::Servlet(info) => Some((p.path, info)),
                PlannedTarget::BuildFailed(_) => None,
            })
            .map(|(path, info)| {
                let stamp = FileStamp::of(&info.file);
                let old = previous.and_then(|p| {
                    p.loaded
                        .iter()
                        .find(|l| l.path == path && l.servlet.info().file == info.file)
                });
                let refused_before = previous.and_then(|p| {
                    p.refused.iter().find(|r| {
                        r.tried.as_ref().is_some_and(|t| {
                            t.answers(&path, &info, stamp, r.error.may_pass_later())
                        })
                    })
                });
                let step = match (old, refused_before) {
                    (Some(old), _)
                        if *old.servlet.info() == *info
                            && (old.servlet.stamp == stamp || held(&info.file)) =>
                    {
                        Step::Ready(Some(old.clone()), None)
                    }
                    (old, Some(refused)) if stamp.is_some() => {
                        Step::Ready(old.cloned(), Some(refused.clone()))
                    }
                    (old, _) => {
                        let tried = Tried {
                            route: path.clone(),
                            info: info.clone(),
                            stamp,
                            at: std::time::Instant::now(),
                        };
                        Step::Compile(info, tried, old.cloned())
                    }
                };
                (path, step)
            })
            .collect();
        // Each module compiles independently: use every core.
        let compiles = steps.iter().filter(|(_, s)| matches!(s, Step::Compile(..)));
        let progress = Progress::new(compiles.count());
        std::thread::scope(|scope| {
            if progress.any() {
                scope.spawn(|| progress.log_until_done());
            }
            let _over = progress.waiting();
            let outcomes: Vec<_> = steps
                .into_iter()
                .map(|(path, step)| match step {
                    Step::Ready(l, r) => (path, Step::Ready(l, r)),
                    Step::Compile(info, tried, old) => {
                        let counting = old.as_ref().map_or(Counting::Fresh, |o| {
                            Counting::Replacing(o.servlet.stats.clone())
                        });
                        let progress = &progress;
                        let handle = scope.spawn(move || {
                            let _ended = progress.started();
                            let started = std::time::Instant::now();
                            let file = info.file.clone();
                            let loaded = self.load_counting(*info, tier, counting);
                            tracing::debug!(file = %file.display(), took_ms = started.elapsed().as_millis() as u64, "servlet compiled and checked");
                            loaded
                        });
                        (path, Step::Compile(handle, tried, old))
                    }
                })
                .collect();
            let mut loaded = Vec::new();
            let mut refused = Vec::new();
            for (path, outcome) in outcomes {
                let (handle, tried, old) = match outcome {
                    Step::Ready(serving, again) => {
                        loaded.push(serving);
                        refused.extend(again.map(|r| Refused { fresh: false, ..r }));
                        continue;
                    }
                    Step::Compile(handle, tried, old) => (handle, tried, old),
                };
                let stamp = tried.stamp;
                match handle.join() {
                    // Logged as replaced by the reload (`changes_since`).
                    Ok(Ok(servlet)) => loaded.push(Some(Loaded { path, servlet })),
                    Ok(Err(error)) => {
                        let file = error.file().to_path_buf();
                        let lasting = error.is_lasting();
                        // The previous version stands in for a broken file,
                        // not for settings the operator changed (turning
                        // `wasi_http_p3` off, lowering a limit): with those,
                        // it is what a restart would refuse.
                        let settings_changed = old
                            .as_ref()
                            .is_some_and(|o| *o.servlet.info() != *tried.info);
                        let old = if lasting && settings_changed {
                            tracing::warn!(route = %path, file = %file.display(), "refused under the route's new settings; the previous version, loaded under the old ones, stops serving");
                            None
                        } else {
                            old
                        };
                        let kept_previous = old.is_some();
                        // Tried again once its refusal was old enough (a
                        // start slowed by a busy machine), and refused the
                        // same: not news for the log or the counts.
                        let fresh = !previous.is_some_and(|p| {
                            p.refused.iter().any(|r| {
                                r.tried
                                    .as_ref()
                                    .is_some_and(|t| t.same(&path, &tried.info, stamp))
                            })
                        });
                        loaded.push(old);
                        refused.push(Refused {
                            file,
                            error: Arc::new(error),
                            kept_previous,
                            fresh,
                            tried: lasting.then_some(tried),
                        });
                    }
                    Err(_) => {
                        tracing::error!(route = %path, "servlet loading panicked");
                        loaded.push(old);
                    }
                }
            }
            (loaded, refused)
        })
    }
}

/// Whose counters a servlet being loaded counts in (see `ServletStats`).
enum Counting {
    /// Its own, from zero: a route new to the site.
    Fresh,
    /// Those of the version it replaces on the same route and file, so
    /// the route's servlet series and recent errors go on across a deploy
    /// (and never go down, as a copy would: the old version counts until
    /// it is swapped out). Instances a version makes count even if a
    /// reload abandons it: they were made.
    Replacing(Arc<super::stats::ServletStats>),
    /// Those of the same version, compiled again by the optimising
    /// compiler.
    Recompiling(Arc<super::stats::ServletStats>),
}

/// The largest module file swan reads (an interpreter carried in a
/// component is 13 to 40 MB): past it, a file is refused before it is
/// read, not held whole in memory to be found wrong.
const MAX_MODULE_BYTES: u64 = 256 << 20;

/// A servlet's bytes: binary WebAssembly of at most [`MAX_MODULE_BYTES`].
/// wasmtime would parse anything else as the text format, and its error
/// would quote the file (a symlink to a secret would reach the log and the
/// status page); the magic number is checked before the rest is read.
fn read_module(file: &std::path::Path) -> Result<Vec<u8>, LoadError> {
    use std::io::Read;
    let read_error = |source| LoadError::Read {
        file: file.to_path_buf(),
        source,
    };
    let invalid = |reason: String| LoadError::Invalid {
        file: file.to_path_buf(),
        reason,
    };
    // Without waiting: a FIFO put where the module was (after the folder
    // was listed) would otherwise hold this thread until a writer came.
    let mut f =
        crate::regular_file::open(file, crate::regular_file::Links::Follow).map_err(read_error)?;
    let len = f.metadata().map_err(read_error)?.len();
    if len > MAX_MODULE_BYTES {
        return Err(invalid(format!(
            "it is {len} bytes, over the {MAX_MODULE_BYTES} a servlet may be"
        )));
    }
    if len == 0 {
        return Err(invalid(
            "the file is empty (a copy still under way?)".to_owned(),
        ));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut magic = [0u8; 4];
    match f.read_exact(&mut magic) {
        Ok(()) if magic == *b"\0asm" => {}
        Err(e) if e.kind() != std::io::ErrorKind::UnexpectedEof => return Err(read_error(e)),
        _ => {
            return Err(invalid(
                "it does not start with the WebAssembly magic number (\\0asm); compile text (.wat) to a binary first".to_owned(),
            ));
        }
    }
    bytes.extend_from_slice(&magic);
    // A file still growing stops at the cap too.
    f.take(MAX_MODULE_BYTES - 4)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    Ok(bytes)
}

/// Loads with `tier`; a module the baseline compiler cannot compile goes
/// to Cranelift. Any other refusal (imports, exports, a start function
/// that fails or loops) would be the same there, and is not tried twice.
fn with_fallback<T>(
    tier: Tier,
    name: &str,
    load: impl Fn(Tier) -> Result<T, LoadError>,
) -> Result<T, LoadError> {
    match load(tier) {
        Err(e @ LoadError::Invalid { .. }) if tier == Tier::Baseline => {
            tracing::debug!(servlet = %name, error = %e, "baseline compiler refused; using Cranelift");
            load(Tier::Optimized)
        }
        other => other,
    }
}

impl SiteServlets {
    /// What this load refused (not refusals remembered from an earlier
    /// one): the news a reload logs and shows.
    pub fn fresh_refusals(&self) -> impl Iterator<Item = &Refused> {
        self.refused.iter().filter(|r| r.fresh)
    }

    /// The servlet answering a normalised path, if a servlet does.
    pub fn servlet_at(&self, path: &str) -> Option<&Arc<Servlet>> {
        match &self.routes.find(path)?.route.target {
            Target::Servlet(s) => Some(s),
            Target::BuildFailed(_) | Target::Refused(_) => None,
        }
    }

    /// The last build of source folder `name`, if it failed (in any mode).
    pub fn failed_build(&self, name: &str) -> Option<&BuildError> {
        self.builds.get(name).and_then(|r| r.error.as_deref())
    }

    /// Servlets still running baseline-compiled code.
    pub fn baseline_servlets(&self) -> Vec<Arc<Servlet>> {
        self.loaded
            .iter()
            .filter(|l| l.servlet.tier() == Tier::Baseline)
            .map(|l| l.servlet.clone())
            .collect()
    }

    /// The same servlets with `old` replaced by `new`; `None` if none uses
    /// `old` any more.
    pub fn with_servlet_replaced(
        &self,
        old: &Arc<Servlet>,
        new: &Arc<Servlet>,
    ) -> Option<SiteServlets> {
        if !self.loaded.iter().any(|l| Arc::ptr_eq(&l.servlet, old)) {
            return None;
        }
        let swap = |s: &Arc<Servlet>| {
            if Arc::ptr_eq(s, old) {
                new.clone()
            } else {
                s.clone()
            }
        };
        Some(SiteServlets {
            routes: self.routes.map(|r| match &r.target {
                Target::Servlet(s) => Target::Servlet(swap(s)),
                other => other.clone(),
            }),
            refused: self.refused.clone(),
            loaded: self
                .loaded
                .iter()
                .map(|l| Loaded {
                    servlet: swap(&l.servlet),
                    ..l.clone()
                })
                .collect(),
            builds: self.builds.clone(),
        })
    }
}
