//! Hot reload: watch site roots, servlet folders and the configuration
//! file; rebuild what changed off the request path; swap it in atomically.
//!
//! Events are debounced (a batch closes after `QUIET` without events, or
//! `MAX_BATCH` at the latest), then each touched site is refreshed with
//! reuse: unchanged files and servlets are carried over as they are, a
//! changed file is read whole before it replaces the old entry, and a
//! servlet whose new file fails to load under unchanged settings keeps its
//! old version (one refused under its route's new settings stops serving,
//! as after a restart). The new
//! `Sites` replaces the old one in one atomic store: a request sees either
//! the old state or the new one, never a mix, and requests already running
//! finish with what they started with.
//!
//! What is watched, and how events become a batch, is `watch`; this is
//! the reload loop and the three kinds of swap (files, servlets,
//! configuration).

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::config::{Config, Overrides};
use crate::file_stamp::FileStamp;
use crate::servlet::{Change, Loader, Servlet, log_changes};
use crate::site::{Refresh, Site, Sites};

mod restart;
mod watch;
pub use watch::ReloadError;
use watch::{Batch, Msg, Watched};

/// How soon watches that could not be made anew are tried again.
const RETRY_REWATCH: Duration = Duration::from_secs(10);
/// A batch of events closes after this long without a new one.
const QUIET: Duration = Duration::from_millis(10);
/// ... or after this long in any case (a file written continuously).
const MAX_BATCH: Duration = Duration::from_millis(500);
/// How long a configuration that fails to load is watched for a write
/// still coming before its refusal is reported.
const STILL_WRITTEN: Duration = Duration::from_millis(500);
/// How long a module written in place (`cp`, `scp`) may stay open before
/// it is loaded anyway: until its writer closes it, its site's servlets
/// keep their state (a prefix of a module can be a valid module that
/// answers wrong).
const WRITE_WAIT: Duration = Duration::from_secs(30);
/// How long a stop waits for a reload under way to finish.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Where the configuration comes from, so it can be read again.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// The file (`None`: built-in defaults; nothing to watch).
    pub file: Option<PathBuf>,
    /// Command-line overrides, applied again on every reload.
    pub overrides: Overrides,
}

/// Watches and reloads until dropped.
pub struct Reloader {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    loader: Option<Arc<Loader>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

impl Reloader {
    /// Starts watching everything `app` serves.
    pub fn start(app: Arc<App>, source: ConfigSource) -> Result<Reloader, ReloadError> {
        let (tx, rx) = mpsc::channel();
        let watched = Watched::new(&app, source.file.as_deref(), &tx)?;
        let thread_tx = tx.clone();
        let loader = app.loader.clone();
        let thread = std::thread::Builder::new()
            .name("swan-reload".to_owned())
            .spawn(move || run(app, source, watched, rx, thread_tx))
            .map_err(ReloadError::Thread)?;
        Ok(Reloader {
            tx,
            thread: Some(thread),
            loader,
        })
    }

    /// Reads the configuration again (SIGHUP).
    pub fn reload_config(&self) {
        let _ = self.tx.send(Msg::Config(None));
    }

    /// [`Reloader::reload_config`], and hears on the receiver once the
    /// configuration was read and applied or refused (or, if hot reload
    /// has stopped, that it never will be: the sender is gone).
    pub fn reload_config_reported(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (done, heard) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Msg::Config(Some(done)));
        heard
    }

    /// Stops watching; a source build running now (it could run for
    /// `build_timeout`, minutes) is killed, so the reload thread ends
    /// within moments, and dropping the last handle waits no longer.
    pub fn stop(&self) {
        if let Some(loader) = &self.loader {
            loader.stop_builds();
        }
        let _ = self.tx.send(Msg::Stop);
    }
}

impl Drop for Reloader {
    /// Waits [`STOP_WAIT`] at most for a reload under way (a large module
    /// compiling, a start function looping until its timeout): past that
    /// it is left to end with the process. What it writes (compiled code)
    /// is renamed into place whole, so nothing is left half-written.
    fn drop(&mut self) {
        self.stop();
        if let Some(t) = self.thread.take() {
            let waited = Instant::now();
            while !t.is_finished() && waited.elapsed() < STOP_WAIT {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            } else {
                tracing::info!(
                    "stopping with a reload under way: it is abandoned, what serves stays as it was"
                );
            }
        }
    }
}

fn run(
    app: Arc<App>,
    source: ConfigSource,
    mut watched: Watched,
    rx: mpsc::Receiver<Msg>,
    tx: mpsc::Sender<Msg>,
) {
    let mut tiering = HashSet::new();
    // Modules open for writing, by file and site: since when.
    let mut writing: HashMap<(PathBuf, usize), Instant> = HashMap::new();
    let mut rewatch_failed: Option<Instant> = None;
    loop {
        let next = if writing.is_empty() {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            rx.recv_timeout(Duration::from_secs(1))
        };
        let first = match next {
            Err(RecvTimeoutError::Timeout) => Msg::Tick,
            Ok(Msg::Stop) | Err(_) => return,
            Ok(Msg::TierUp { old, new }) => {
                tiering.remove(&(Arc::as_ptr(&old) as usize));
                tier_up(&app, &old, &new);
                continue;
            }
            Ok(m) => m,
        };
        let mut batch = Batch::new(watched.sites.len());
        batch.add(first, &watched);
        let started = Instant::now();
        loop {
            match rx.recv_timeout(QUIET) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Ok(Msg::TierUp { old, new }) => {
                    tiering.remove(&(Arc::as_ptr(&old) as usize));
                    tier_up(&app, &old, &new);
                }
                Ok(m) => batch.add(m, &watched),
                Err(RecvTimeoutError::Timeout) => break,
            }
            if started.elapsed() > MAX_BATCH {
                break;
            }
        }
        // A site whose servlets saw nothing but writes to modules still
        // open (an `scp` under way) has nothing to load yet: each such
        // batch would otherwise be a reload that changes nothing.
        for (site, writes_only) in batch.sites.iter_mut().zip(&batch.writes_only) {
            if *writes_only {
                site.servlets = false;
            }
        }
        note_writes(&mut batch, &mut writing);
        if batch.is_empty() {
            continue;
        }
        // What is still being written keeps its previous state; the rest
        // of its folder loads.
        if let Some(loader) = &app.loader {
            loader.hold(writing.keys().map(|(path, _)| path.clone()).collect());
        }
        // A bug in one reload must not end hot reload for good: the batch
        // is abandoned (the old state keeps serving) and the loop goes on.
        let applied = std::panic::catch_unwind(AssertUnwindSafe(|| {
            // A configuration refused leaves the sites' own changes of the
            // batch to apply under the configuration that serves.
            let config_file = source.file.as_deref();
            let read = config_file.and_then(FileStamp::of);
            let reloaded = batch.config && reload_config(&app, &source, read);
            // A replaced folder is watched before it is read, so nothing
            // written into it meanwhile goes unseen.
            // After a rewatch that failed (the watch limit reached), what
            // made the watches stale still does: they are tried again, and
            // every site read whole, at most every RETRY_REWATCH, not at
            // every batch.
            let stale = !reloaded
                && (batch.rewatch || watched.stale())
                && rewatch_failed.is_none_or(|at| at.elapsed() >= RETRY_REWATCH);
            if reloaded || stale {
                match Watched::new(&app, config_file, &tx) {
                    Ok(w) => {
                        watched = w;
                        rewatch_failed = None;
                    }
                    Err(e) => {
                        rewatch_failed = Some(Instant::now());
                        tracing::error!("{e}; hot reload may miss changes until restart")
                    }
                }
                // The configuration's new target is watched only now: one
                // changed since it was read is read again.
                if reloaded && config_file.and_then(FileStamp::of) != read {
                    let _ = tx.send(Msg::Config(None));
                }
            }
            if reloaded {
                // Sites may have moved: what is being written is seen
                // again at its close.
                writing.clear();
            } else {
                if stale {
                    batch.touch_all();
                }
                refresh_sites(&app, &batch.sites);
            }
            schedule_tier_up(&app, &tx, &mut tiering);
        }));
        if applied.is_err() {
            tracing::error!("reload panicked; the previous state keeps serving");
        }
        for waiter in batch.config_waiters.drain(..) {
            let _ = waiter.send(());
        }
    }
}

/// Notes which modules `batch` saw written to and closed, in order; one
/// open past [`WRITE_WAIT`] is given up on, and its site's servlets are
/// looked at again.
fn note_writes(batch: &mut Batch, writing: &mut HashMap<(PathBuf, usize), Instant>) {
    let now = Instant::now();
    for (path, site, open) in batch.writes.drain(..) {
        if open {
            writing.entry((path, site)).or_insert(now);
        } else {
            writing.remove(&(path, site));
        }
    }
    writing.retain(|(path, site), since| {
        let waited = now.duration_since(*since) >= WRITE_WAIT;
        if waited {
            tracing::warn!(file = %path.display(), "still open for writing after {} s: loaded as it is", WRITE_WAIT.as_secs());
            if let Some(r) = batch.sites.get_mut(*site) {
                r.servlets = true;
            }
        }
        !waited
    });
}

/// Compiles every baseline-compiled servlet again with Cranelift, each on
/// a thread of its own; the result comes back as `Msg::TierUp`.
/// Optimising compiles in the background run one at a time, so routes
/// sharing one file compile it once (the next finds its code in the code
/// cache), on a compile pool of one thread of their own: wasmtime compiles
/// a module's functions in parallel on the current rayon pool, and on the
/// global one a deploy's compile queued behind every function of a large
/// component being optimised (a small servlet waited 24-44 s behind three
/// routes of a JavaScript component).
static TIER_UP: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn tier_up_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "swan-tier-up-compile".to_owned())
            .build()
            .ok()
    })
    .as_ref()
}

fn schedule_tier_up(app: &App, tx: &mpsc::Sender<Msg>, tiering: &mut HashSet<usize>) {
    let Some(loader) = app.loader.clone() else {
        return;
    };
    for site in app.sites.load().iter() {
        for old in site.servlets.baseline_servlets() {
            if !tiering.insert(Arc::as_ptr(&old) as usize) {
                continue;
            }
            let (loader, tx) = (loader.clone(), tx.clone());
            let spawned = std::thread::Builder::new().name("swan-tier-up".to_owned()).spawn(move || {
                let _one_at_a_time = TIER_UP.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                // Replaced meanwhile (a reload): nobody serves it any more
                // but this thread.
                if Arc::strong_count(&old) == 1 {
                    return;
                }
                let load = || loader.load_optimised(&old);
                let loaded = match tier_up_pool() {
                    Some(pool) => pool.install(load),
                    None => load(),
                };
                match loaded {
                    Ok(new) => {
                        let _ = tx.send(Msg::TierUp { old, new });
                    }
                    Err(e) => tracing::warn!(servlet = %old.info().name, error = %e, "optimised compile failed; keeping baseline code"),
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start an optimising compile");
            }
        }
    }
}

/// Swaps an optimised servlet in for its baseline version, if that is still
/// the one serving.
fn tier_up(app: &App, old: &Arc<Servlet>, new: &Arc<Servlet>) {
    // The file changed since `old` read it (a new version being copied
    // in, which its own reload will load): this is not `old` optimised.
    if !old.same_file_as(new) {
        tracing::debug!(file = %old.info().file.display(), "changed since it went live: optimised code not swapped in");
        return;
    }
    let current = app.sites.load_full();
    let mut swapped = false;
    let sites = current
        .iter()
        .map(|site| match site.servlets.with_servlet_replaced(old, new) {
            Some(servlets) => {
                swapped = true;
                Arc::new(Site {
                    config: site.config.clone(),
                    cache: site.cache.clone(),
                    servlets: Arc::new(servlets),
                    counters: site.counters.clone(),
                    name: site.name.clone(),
                })
            }
            None => site.clone(),
        })
        .collect();
    if swapped {
        app.sites.store(Arc::new(Sites::new(sites)));
        tracing::info!(servlet = %new.info().name, "optimised code swapped in");
    }
}

/// Refreshes the touched sites and swaps the result in: changed files
/// first, then changed servlets, so that a static edit never waits for a
/// servlet to compile (or a module to time out at load).
fn refresh_sites(app: &App, touched: &[Refresh]) {
    let files: Vec<Refresh> = touched
        .iter()
        .map(|t| Refresh {
            files: t.files,
            servlets: false,
        })
        .collect();
    let servlets: Vec<Refresh> = touched
        .iter()
        .map(|t| Refresh {
            files: false,
            servlets: t.servlets,
        })
        .collect();
    refresh_sites_part(app, &files);
    refresh_sites_part(app, &servlets);
}

fn refresh_sites_part(app: &App, touched: &[Refresh]) {
    if touched.iter().all(|t| !t.files && !t.servlets) {
        return;
    }
    let started = Instant::now();
    let current = app.sites.load_full();
    let mut changed = false;
    let sites: Vec<Arc<Site>> = current
        .iter()
        .zip(touched.iter().chain(std::iter::repeat(&Refresh { files: false, servlets: false })))
        .map(|(site, what)| {
            if !what.files && !what.servlets {
                return site.clone();
            }
            let part = if what.files { "files" } else { "servlets" };
            let label = format!("{part} of site {}", site.config.name);
            match Site::refresh(&site.config, app.loader.as_ref(), Some(site), *what) {
                Ok(new) => {
                    changed = true;
                    // Only what this reload refused: a broken file left
                    // in the folder does not make every later deploy look
                    // refused.
                    let refused: Vec<String> = new
                        .servlets
                        .fresh_refusals()
                        .map(|r| r.error.to_string())
                        .collect();
                    // What changed: which routes were added, replaced,
                    // removed (none when only files were reloaded).
                    let changes = log_changes(
                        &new.config.name,
                        &new.servlets.changes_since(&site.servlets),
                    );
                    if what.servlets && !refused.is_empty() {
                        app.observe.reloaded(label, false, refused.join("; "));
                    } else {
                        app.observe.reloaded(label, true, changes.join("; "));
                    }
                    if what.servlets {
                        app.observe
                            .keep_only_routes(&new.config.name, &route_paths(&new));
                    }
                    Arc::new(new)
                }
                Err(e) => {
                    tracing::error!(site = %site.config.name, error = %e, "reload failed; the previous version keeps serving");
                    app.observe.reloaded(label, false, e.to_string());
                    site.clone()
                }
            }
        })
        .collect();
    if changed {
        app.sites.store(Arc::new(Sites::new(sites)));
        tracing::info!(took_ms = started.elapsed().as_millis() as u64, "reloaded");
    }
}

/// Whether the configuration file changes within [`STILL_WRITTEN`] of a
/// read that failed: an editor saving in more than one write was caught
/// half-way, and the change on its way is read again (no refusal to
/// report for a file nobody meant).
fn still_written(source: &ConfigSource, read: Option<FileStamp>) -> bool {
    let Some(file) = source.file.as_deref() else {
        return false;
    };
    let until = Instant::now() + STILL_WRITTEN;
    while Instant::now() < until {
        if FileStamp::of(file) != read {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The paths `site` routes to servlets (the keys of its route counters).
fn route_paths(site: &Site) -> Vec<String> {
    site.servlets
        .routes
        .iter()
        .map(|r| r.path.to_string())
        .collect()
}

/// Reads the configuration again; returns whether it was applied. `read`:
/// the file's stamp when the batch began.
fn reload_config(app: &App, source: &ConfigSource, read: Option<FileStamp>) -> bool {
    let config = match Config::load(source.file.as_deref(), &source.overrides) {
        Ok(c) => c,
        Err(_) if still_written(source, read) => {
            tracing::debug!("the configuration file changed while it was read: read again");
            return false;
        }
        Err(e) => {
            tracing::error!(
                "configuration change refused; the previous configuration stays in force\n{e}"
            );
            app.observe.reloaded("configuration", false, e.to_string());
            return false;
        }
    };
    // What the status page's entry for this reload says besides its
    // outcome: settings left for a restart, servlets refused.
    let mut notes = restart::needs_restart(app, &config);
    let current = app.sites.load_full();
    let mut sites = Vec::new();
    // Servlets this reload refused (a broken file left from before is
    // not news).
    let mut refused: Vec<String> = Vec::new();
    // Servlet routes added, replaced, removed, by site: logged once the
    // configuration is in force.
    let mut changes: Vec<(String, Vec<Change>)> = Vec::new();
    for site_config in &config.sites {
        let previous = current
            .iter()
            .find(|s| s.config.name == site_config.name && s.config.root == site_config.root);
        match Site::refresh(
            site_config,
            app.loader.as_ref(),
            previous.map(|p| &**p),
            Refresh::ALL,
        ) {
            Ok(site) => {
                refused.extend(site.servlets.fresh_refusals().map(|r| r.error.to_string()));
                if let Some(p) = previous {
                    changes.push((
                        site.config.name.clone(),
                        site.servlets.changes_since(&p.servlets),
                    ));
                }
                sites.push(Arc::new(site));
            }
            Err(e) => {
                tracing::error!(site = %site_config.name, error = %e, "configuration change refused; the previous configuration stays in force");
                app.observe.reloaded("configuration", false, e.to_string());
                return false;
            }
        }
    }
    let names: Vec<&str> = config.sites.iter().map(|s| s.name.as_str()).collect();
    app.observe.keep_only_sites(&names);
    for site in &sites {
        app.observe
            .keep_only_routes(&site.config.name, &route_paths(site));
    }
    app.sites.store(Arc::new(Sites::new(sites)));
    if let Some(loader) = &app.loader {
        // A store the configuration no longer has leaves the status page
        // and /metrics (an alert on its `swan_store_up` would fire for
        // nothing); it stays open until a restart, unused.
        for store in loader.stores().iter() {
            store.set_configured(config.stores.iter().any(|c| c.name == store.name()));
        }
    }
    tracing::info!(sites = config.sites.len(), "configuration reloaded");
    // Refused servlets make the entry "live in part": the rest went live.
    let ok = refused.is_empty();
    if !ok {
        notes.insert(0, format!("servlets refused: {}", refused.join("; ")));
    }
    let changes = changes
        .iter()
        .flat_map(|(site, changes)| log_changes(site, changes));
    notes.splice(0..0, changes);
    if ok {
        app.observe
            .reloaded("configuration", true, notes.join("; "));
    } else {
        app.observe
            .reloaded_in_part("configuration", notes.join("; "));
    }
    true
}
