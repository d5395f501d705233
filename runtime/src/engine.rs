//! The one wasmtime engine of the process: Cranelift, the pooling allocator
//! with copy-on-write memory images, async support (servlets run on fibers
//! and yield to the reactor), epoch interruption driven by a ticker thread,
//! and a small runtime thread that pre-instantiates servlets off the
//! request path.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Enabled, InstanceAllocationStrategy, Linker, PoolingAllocationConfig};

use crate::config::ServerConfig;
use crate::servlet::host::Host;

/// How often the epoch advances. A running servlet yields to other tasks
/// on its worker at every tick, and its deadline is counted in ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Bytes at the start of each linear memory slot kept mapped between
/// instances. With `PAGEMAP_SCAN` only the pages an instance dirtied are
/// reset, so a warm slot costs neither an `madvise` (and its TLB shootdown)
/// nor page faults on the next instance.
const MEMORY_KEEP_RESIDENT: usize = 2 << 20;
/// Same for tables and async stacks.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;
const STACK_KEEP_RESIDENT: usize = 128 << 10;

/// Which compiler made a servlet's machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    /// Winch, a single-pass compiler: about 6x faster to compile, slower
    /// code. Used to put a changed module live quickly on hot reload.
    Baseline,
    /// Cranelift, the optimising compiler: every module ends up here.
    Optimized,
}

/// One wasmtime engine (with its own pooling allocator) and its linker.
struct Compiler {
    tier: Tier,
    engine: wasmtime::Engine,
    linker: Linker<Host>,
}

impl Compiler {
    fn new(server: &ServerConfig, tier: Tier) -> Result<Compiler, EngineError> {
        let mut pool = PoolingAllocationConfig::new();
        let n = server.max_instances;
        pool.total_core_instances(n)
            .total_memories(n)
            .total_tables(n)
            .total_stacks(n)
            .total_component_instances(0)
            .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .async_stack_keep_resident(STACK_KEEP_RESIDENT)
            .pagemap_scan(Enabled::Auto);
        let mut config = wasmtime::Config::new();
        config.cache(compile_cache());
        config
            .epoch_interruption(true)
            .memory_init_cow(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
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
        let err = |e: wasmtime::Error| EngineError::Wasmtime(format!("{tier:?} compiler: {e:#}"));
        let engine = wasmtime::Engine::new(&config).map_err(err)?;
        let mut linker = Linker::new(&engine);
        crate::servlet::abi::add_to_linker(&mut linker).map_err(err)?;
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |h: &mut Host| &mut h.wasi)
            .map_err(err)?;
        Ok(Compiler {
            tier,
            engine,
            linker,
        })
    }
}

/// The engine could not be created.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// wasmtime refused the configuration (for example, not enough address
    /// space for the pooling allocator).
    #[error("cannot create the wasm engine: {0}")]
    Wasmtime(String),
    /// A helper thread could not be started.
    #[error("cannot start the engine's threads")]
    Thread(#[source] std::io::Error),
}

/// The engine, its linker, and its helper threads.
pub struct Engine {
    development: bool,
    optimized: Compiler,
    baseline: Option<Compiler>,
    prewarm: tokio::runtime::Handle,
    ticker: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    prewarm_stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Engine {
    /// Creates the engine for a server's limits.
    pub fn new(server: &ServerConfig) -> Result<Arc<Engine>, EngineError> {
        let optimized = Compiler::new(server, Tier::Optimized)?;
        // The baseline compiler is an optimisation of hot reload only: if
        // it cannot start, every module is compiled by Cranelift.
        let baseline = match Compiler::new(server, Tier::Baseline) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("{e}; hot reload compiles with Cranelift only");
                None
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engines: Vec<wasmtime::Engine> = std::iter::once(&optimized)
                .chain(baseline.as_ref())
                .map(|c| c.engine.clone())
                .collect();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("swan-epoch".to_owned())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
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
        let prewarm = runtime.handle().clone();
        let (prewarm_stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("swan-prewarm".to_owned())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(EngineError::Thread)?;
        Ok(Arc::new(Engine {
            development: server.development,
            optimized,
            baseline,
            prewarm,
            ticker: Some(ticker),
            stop,
            prewarm_stop: Some(prewarm_stop),
        }))
    }

    /// Whether the server runs in development mode.
    pub fn development(&self) -> bool {
        self.development
    }

    /// The wasmtime engine and linker of a compiler tier (the optimising
    /// one when no baseline compiler is available).
    pub(crate) fn compiler(&self, tier: Tier) -> (&wasmtime::Engine, &Linker<Host>, Tier) {
        let c = match tier {
            Tier::Baseline => self.baseline.as_ref().unwrap_or(&self.optimized),
            Tier::Optimized => &self.optimized,
        };
        (&c.engine, &c.linker, c.tier)
    }

    /// Spawns a background task on the pre-instantiation thread.
    pub(crate) fn spawn_background(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.prewarm.spawn(task);
    }

    /// Runs `task` on the pre-instantiation thread and waits for it; usable
    /// from synchronous code, inside or outside a tokio runtime.
    pub(crate) fn run_blocking<T: Send + 'static>(
        &self,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.prewarm.spawn(async move {
            let _ = tx.send(task.await);
        });
        rx.recv().ok()
    }
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

/// wasmtime's compiled-code cache, keyed by module content and engine
/// settings: a restart, or a revert to a module seen before, loads machine
/// code instead of compiling. Off (with a warning) if the folder is not
/// usable.
fn compile_cache() -> Option<wasmtime::Cache> {
    let dir = cache_dir()?.join("wasmtime");
    let mut config = wasmtime::CacheConfig::new();
    config.with_directory(&dir);
    match wasmtime::Cache::new(config) {
        Ok(cache) => Some(cache),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %format!("{e:#}"), "compiled-code cache disabled");
            None
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(stop) = self.prewarm_stop.take() {
            let _ = stop.send(());
        }
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}
