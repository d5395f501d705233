//! The wasmtime side of the process: one wasmtime engine per compiler tier
//! (Cranelift, and Winch for fast hot reloads), and, in builds with the
//! `p3` feature, one more for components that use the component model's
//! concurrency (wasi 0.3), each with the pooling allocator and
//! copy-on-write memory images; async support (guests run on
//! fibers and yield to the reactor); epoch interruption driven by a ticker
//! thread; a small runtime thread for work off the request path; and the
//! process-wide instance budget (`max_instances`) shared by both tiers.
//!
//! What a guest may import (the linkers) is the servlet side's business.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::config::ServerConfig;

mod code_cache;
mod code_files;

use code_cache::{CodeCache, Compiler};

/// How often the epoch advances while a guest runs on past its first tick
/// (see [`spinning`]). A running guest yields to other tasks on its worker
/// at every tick after its first, and its run time is counted in ticks. A
/// worker polls its sockets once every guest that yielded has had its
/// slice, so N spinning guests on a worker delay its other connections by
/// N ticks at each step of theirs: at 5 ms, 8 spinners on 2 workers put
/// 10 ms on a static file's median answer, at 1 ms 2.7 ms (BENCHMARKS.md,
/// "Spinning servlets").
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How often the epoch advances while no guest runs that long. Ticking
/// every millisecond all the time cost the native hello 5-9% of its
/// request rate (a tick lands in one request of 25, and preempts a
/// worker on a 2-core machine); short requests never meet a second tick.
const IDLE_TICK: Duration = Duration::from_millis(5);

/// A guest ran past its first tick since the ticker last looked.
static SPINNING: AtomicBool = AtomicBool::new(false);

/// Called when a guest yields at a tick (it has run past its first one):
/// the ticker goes to [`EPOCH_TICK`] while such guests run.
pub(crate) fn spinning() {
    SPINNING.store(true, Ordering::Relaxed);
}

/// Bytes at the start of each linear memory slot kept mapped between
/// instances. With `PAGEMAP_SCAN` only the pages an instance dirtied are
/// reset, so a warm slot costs neither an `madvise` (and its TLB shootdown)
/// nor page faults on the next instance.
const MEMORY_KEEP_RESIDENT: usize = 2 << 20;
/// Same for tables and async stacks.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;
const STACK_KEEP_RESIDENT: usize = 128 << 10;

/// Core instances, memories and tables one component may hold (the
/// largest known toolchain output, componentize-py, links about 15 core
/// modules sharing one memory and one table).
const COMPONENT_CORE_INSTANCES: u32 = 64;
const COMPONENT_MEMORIES: u32 = 8;
const COMPONENT_TABLES: u32 = 16;

/// Which compiler made a guest's machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Winch, a single-pass compiler: about 6x faster to compile, slower
    /// code. Used to put a changed module live quickly on hot reload.
    Baseline,
    /// Cranelift, the optimising compiler: every module ends up here.
    Optimized,
}

/// The engine could not be created.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration (for example, not enough address
    /// space for the pooling allocator).
    #[error(
        "cannot create the wasm engine: {0} (each of server.max_instances reserves address space for its memories in each compiler tier: a lower server.max_instances needs less)"
    )]
    Wasmtime(String),
    /// A helper thread could not be started.
    #[error("cannot start the engine's threads")]
    Thread(#[source] std::io::Error),
}

/// The wasmtime engines, their helper threads and the instance budget.
pub struct Engine {
    optimized: wasmtime::Engine,
    baseline: Option<wasmtime::Engine>,
    /// Cranelift with concurrency support (the async ABI, streams,
    /// futures: what wasi 0.3 components use). Kept apart because that
    /// support costs every store: 11-20% of a p2 component's requests.
    #[cfg(feature = "p3")]
    concurrent: wasmtime::Engine,
    budget: Arc<InstanceBudget>,
    /// Every servlet's pool of instances made ahead: when the budget is
    /// used up, one servlet's request (or trial at load) takes the place
    /// of another's idle instance.
    idle: std::sync::Mutex<Vec<std::sync::Weak<dyn IdleInstances>>>,
    background: tokio::runtime::Handle,
    ticker: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    background_stop: Option<tokio::sync::oneshot::Sender<()>>,
    code: CodeCache,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// Creates the engines for a server's limits.
    pub fn new(server: &ServerConfig) -> Result<Arc<Engine>, EngineError> {
        let (optimized, optimized_config) = wasmtime_engine(server, Tier::Optimized, false)?;
        let mut compilers = vec![(Tier::Optimized, Compiler::new(optimized_config))];
        #[cfg(feature = "p3")]
        let (concurrent, _) = wasmtime_engine(server, Tier::Optimized, true)?;
        // The baseline compiler is an optimisation of hot reload only: if
        // it cannot start, every module is compiled by Cranelift.
        let baseline = match wasmtime_engine(server, Tier::Baseline, false) {
            Ok((e, config)) => {
                compilers.push((Tier::Baseline, Compiler::new(config)));
                Some(e)
            }
            Err(e) => {
                tracing::warn!("{e}; hot reload compiles with Cranelift only");
                None
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            #[cfg(feature = "p3")]
            let concurrent = Some(&concurrent);
            #[cfg(not(feature = "p3"))]
            let concurrent: Option<&wasmtime::Engine> = None;
            let engines: Vec<wasmtime::Engine> = std::iter::once(&optimized)
                .chain(baseline.as_ref())
                .chain(concurrent)
                .cloned()
                .collect();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("swan-epoch".to_owned())
                .spawn(move || {
                    // Fast for a few ticks after a guest last yielded: it
                    // says so just after a tick, often after this thread
                    // has looked again.
                    let mut fast_left = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        if SPINNING.swap(false, Ordering::Relaxed) {
                            fast_left = 8;
                        }
                        fast_left = fast_left.saturating_sub(1);
                        std::thread::sleep(if fast_left > 0 { EPOCH_TICK } else { IDLE_TICK });
                        for engine in &engines {
                            engine.increment_epoch();
                        }
                    }
                })
                .map_err(EngineError::Thread)?
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(EngineError::Thread)?;
        let background = runtime.handle().clone();
        let (background_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("swan-background".to_owned())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(EngineError::Thread)?;
        Ok(Arc::new(Engine {
            optimized,
            baseline,
            #[cfg(feature = "p3")]
            concurrent,
            budget: Arc::new(InstanceBudget {
                max: server.max_instances,
                live: AtomicU32::new(0),
            }),
            idle: std::sync::Mutex::new(Vec::new()),
            background,
            ticker: Some(ticker),
            stop,
            background_stop: Some(background_stop),
            code: CodeCache::new(
                cache_dir().map(|d| d.join("code")),
                server.max_code_cache_bytes,
                compilers,
            ),
        }))
    }

    /// The wasmtime engine of a compiler tier, and the tier it really is
    /// (the optimising one when no baseline compiler is available).
    pub fn wasmtime(&self, tier: Tier) -> (&wasmtime::Engine, Tier) {
        match (tier, &self.baseline) {
            (Tier::Baseline, Some(e)) => (e, Tier::Baseline),
            _ => (&self.optimized, Tier::Optimized),
        }
    }

    /// Compiles a guest with a tier's compiler (the tier it really is is
    /// returned), or maps the code an earlier compile left on disk.
    pub(crate) fn compile<A: code_cache::Artifact>(
        &self,
        tier: Tier,
        wasm: &[u8],
    ) -> (wasmtime::Result<A>, Tier) {
        let (engine, tier) = self.wasmtime(tier);
        (self.code.compile(engine, tier, wasm), tier)
    }

    /// Compiles a component that uses the component model's concurrency,
    /// with Cranelift for the engine that supports it (and its cached code
    /// when an earlier compile left it).
    #[cfg(feature = "p3")]
    pub(crate) fn compile_concurrent<A: code_cache::Artifact>(
        &self,
        wasm: &[u8],
    ) -> wasmtime::Result<A> {
        self.code.compile(&self.concurrent, Tier::Optimized, wasm)
    }

    /// The engine with concurrency support.
    #[cfg(feature = "p3")]
    pub fn concurrent(&self) -> &wasmtime::Engine {
        &self.concurrent
    }

    /// A place for one more instance in the process-wide budget, or `None`
    /// when `max_instances` exist already. The place is given back when the
    /// ticket is dropped (with the instance's store).
    pub fn instance_ticket(&self) -> Option<InstanceTicket> {
        let budget = &self.budget;
        let mut live = budget.live.load(Ordering::Relaxed);
        loop {
            if live >= budget.max {
                return None;
            }
            match budget.live.compare_exchange_weak(
                live,
                live + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(InstanceTicket(budget.clone())),
                Err(now) => live = now,
            }
        }
    }

    /// Registers a pool whose idle instances give way when the budget is
    /// used up.
    pub(crate) fn register_idle(&self, pool: std::sync::Weak<dyn IdleInstances>) {
        let mut pools = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        pools.retain(|p| p.strong_count() > 0);
        pools.push(pool);
    }

    /// Drops one idle instance, of the pool with the most, other than
    /// `except` (the asking pool, by address): its place in the budget is
    /// free for the asker. False when no other pool has one.
    ///
    /// Without this, servlets whose prewarmed instances filled
    /// `max_instances` left the others 503 for good, and the ones loaded
    /// later refused.
    pub(crate) fn release_idle(&self, except: *const ()) -> bool {
        let pools: Vec<_> = {
            let mut pools = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            pools.retain(|p| p.strong_count() > 0);
            pools.iter().filter_map(std::sync::Weak::upgrade).collect()
        };
        let fullest = pools
            .iter()
            .filter(|p| !std::ptr::addr_eq(Arc::as_ptr(p), except))
            .max_by_key(|p| p.idle());
        let released = fullest.is_some_and(|p| p.idle() > 0 && p.drop_idle());
        if released {
            tracing::debug!("max_instances used up: an idle instance of another servlet gave way");
        }
        released
    }

    /// Instances alive in the whole process.
    pub fn live_instances(&self) -> u32 {
        self.budget.live.load(Ordering::Relaxed)
    }

    /// Spawns a task on the background thread.
    pub fn spawn_background(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.background.spawn(task);
    }

    /// Runs `task` on the background thread and waits for it; usable from
    /// synchronous code, inside or outside a tokio runtime.
    pub fn run_blocking<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.background.spawn(async move {
            let _ = tx.send(task.await);
        });
        rx.recv().ok()
    }
}

/// One value per compiler tier, made for each tier's engine (the linkers
/// of each guest kind); the optimising tier's stands in when there is no
/// baseline compiler.
pub(crate) struct PerTier<T> {
    optimized: T,
    baseline: Option<T>,
}

impl<T> PerTier<T> {
    /// `make`'s value for each tier's engine.
    pub(crate) fn new<E>(
        engine: &Engine,
        mut make: impl FnMut(&wasmtime::Engine) -> Result<T, E>,
    ) -> Result<PerTier<T>, E> {
        Ok(PerTier {
            optimized: make(&engine.optimized)?,
            baseline: engine.baseline.as_ref().map(&mut make).transpose()?,
        })
    }

    /// The value for `tier`.
    pub(crate) fn get(&self, tier: Tier) -> &T {
        match (tier, &self.baseline) {
            (Tier::Baseline, Some(v)) => v,
            _ => &self.optimized,
        }
    }
}

/// A servlet's instances made ahead of requests, as the engine sees them
/// (see [`Engine::release_idle`]).
pub(crate) trait IdleInstances: Send + Sync {
    /// Instances waiting for a request.
    fn idle(&self) -> usize;
    /// Drops one of them; whether there was one.
    fn drop_idle(&self) -> bool;
}

/// The process-wide count of live instances against `max_instances`. Each
/// tier's pooling allocator is sized for the whole budget (address space
/// only), and this count keeps the sum over both at the limit.
#[derive(Debug)]
struct InstanceBudget {
    max: u32,
    live: AtomicU32,
}

/// One place in the instance budget, held by an instance's store.
#[derive(Debug)]
pub struct InstanceTicket(Arc<InstanceBudget>);

impl Drop for InstanceTicket {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A tier's engine, with or without concurrency support, and the settings
/// it was made with.
fn wasmtime_engine(
    server: &ServerConfig,
    tier: Tier,
    concurrent: bool,
) -> Result<(wasmtime::Engine, wasmtime::Config), EngineError> {
    let mut pool = PoolingAllocationConfig::new();
    // `max_instances` guest instances, each a core module or a component.
    // A component is several core modules linked together (the program,
    // the WASI adapter, shims), usually with one memory: its core
    // instances, memories and tables come from the same pool. Instance and
    // table slots cost only address space; memory slots are the expensive
    // ones, so a component gets two on average.
    let n = server.max_instances;
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(COMPONENT_CORE_INSTANCES))
        .max_core_instances_per_component(COMPONENT_CORE_INSTANCES)
        .total_memories(n.saturating_mul(2))
        .max_memories_per_component(COMPONENT_MEMORIES)
        .total_tables(n.saturating_mul(4))
        .max_tables_per_component(COMPONENT_TABLES)
        .total_stacks(n)
        .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        .async_stack_keep_resident(STACK_KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto);
    let mut config = wasmtime::Config::new();
    config
        .epoch_interruption(true)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    #[cfg(feature = "p3")]
    config.concurrency_support(concurrent);
    #[cfg(not(feature = "p3"))]
    let _ = concurrent;
    match tier {
        Tier::Optimized => {
            config
                .strategy(wasmtime::Strategy::Cranelift)
                .cranelift_opt_level(wasmtime::OptLevel::Speed);
        }
        Tier::Baseline => {
            config.strategy(wasmtime::Strategy::Winch);
        }
    }
    wasmtime::Engine::new(&config)
        .map(|engine| (engine, config))
        .map_err(|e| EngineError::Wasmtime(format!("{tier:?} compiler: {e:#}")))
}

/// Where compiled code is cached: `$SWAN_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/swan`, else `~/.cache/swan`.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("SWAN_CACHE_DIR") {
        return Some(dir.into());
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
    Some(base.join("swan"))
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(stop) = self.background_stop.take() {
            let _ = stop.send(());
        }
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}
