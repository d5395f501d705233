//! What hot reload watches, and what one batch of file events touched:
//! each site's root and servlets folder (recursively), the folders that
//! hold them (a folder replaced), the configuration file, and the `.wasm`
//! file of each `[[site.route]]` (through its folder: a deploy renames a
//! new file over it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{EventKind, RecursiveMode, Watcher};

use crate::app::App;
use crate::servlet::Servlet;
use crate::site::Refresh;

/// The watcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// notify refused.
    #[error("cannot watch {path}: {source}")]
    Watch {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: notify::Error,
    },
    /// The reload thread could not start.
    #[error("cannot start the reload thread")]
    Thread(#[source] std::io::Error),
}

pub(super) enum Msg {
    Fs(notify::Result<notify::Event>),
    /// Read the configuration again; then say so on the sender, if any.
    Config(Option<tokio::sync::oneshot::Sender<()>>),
    /// Cranelift finished compiling a servlet that went live on the
    /// baseline compiler.
    TierUp {
        old: Arc<Servlet>,
        new: Arc<Servlet>,
    },
    Stop,
    /// Time to look at modules still open for writing (none came).
    Tick,
}

/// What is watched, with canonical paths for matching events.
pub(super) struct Watched {
    pub(super) sites: Vec<(Option<PathBuf>, Option<PathBuf>)>,
    pub(super) config: Option<PathBuf>,
    /// The configuration file as named and every link on the way to it
    /// (as their folders' watches name them): one flipped is a change.
    config_along: Vec<PathBuf>,
    /// The configuration file as named, and the file it named when the
    /// watches were made: one that names another now is watched anew.
    config_file: Option<(PathBuf, Option<PathBuf>)>,
    /// Each `[[site.route]]`'s `.wasm` (its site's index, and its path as
    /// its folder's watch names it): replacing one reloads that site's
    /// servlets, as a file in a servlets folder does.
    routes: Vec<(usize, PathBuf)>,
    /// Each site's root and servlets folder: a folder replaced (`mv build
    /// www`) or made later is watched anew.
    folders: Vec<Folder>,
    /// Each `[[site.route]]`'s `.wasm` as configured, and the file it
    /// named when the watches were made: one that names another now (a
    /// link on the way flipped) is watched anew.
    route_files: Vec<(PathBuf, Option<PathBuf>)>,
    /// Folders a servlets folder links to (a source folder kept
    /// elsewhere, `servlets/api -> ~/code/api`), by site: links are not
    /// followed, so these are watched themselves (and watched anew when
    /// the links change).
    linked: Vec<(usize, PathBuf)>,
    /// Folders watched on their own because a folder inside could not be
    /// read.
    partial: Vec<Partial>,
    _watchers: Vec<notify::RecommendedWatcher>,
}

/// A site's root or servlets folder.
struct Folder {
    /// As configured.
    dir: PathBuf,
    /// The folder (device, inode) found there when the watches were made.
    id: Option<(u64, u64)>,
    /// Its path, and each link on the way to it, as events in their
    /// parents' watches name them.
    in_parents: Vec<PathBuf>,
}

/// `path` as the watch on its folder names it: the folder canonical, the
/// name as written (a link stays a link).
fn in_parent(path: &Path) -> Option<PathBuf> {
    let path = std::path::absolute(path).ok()?;
    let parent = path.parent()?.canonicalize().ok()?;
    Some(parent.join(path.file_name()?))
}

/// [`in_parent`] for `path` and for every link on the way to it: flipping
/// one (`ln -sfn releases/r2 current` for a root `current/www`) replaces
/// what `path` names, as replacing `path` itself does. A `path` that is a
/// link is followed the same way, link by link (Kubernetes mounts a
/// ConfigMap's `swan.toml` as a link to `..data/swan.toml`, and swaps the
/// `..data` link), and adds the file it names, which a deploy may rewrite.
fn along(path: &Path) -> Vec<PathBuf> {
    along_links(path, 8)
}

fn along_links(path: &Path, hops: u8) -> Vec<PathBuf> {
    let Ok(path) = std::path::absolute(path) else {
        return Vec::new();
    };
    let is_link = |p: &Path| {
        p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    };
    let mut found = Vec::new();
    let mut prefix = PathBuf::new();
    for c in path.components() {
        prefix.push(c);
        if prefix != path && is_link(&prefix) {
            found.extend(in_parent(&prefix));
        }
    }
    found.extend(in_parent(&path));
    if is_link(&path) {
        if let (Some(hops), Ok(link), Some(parent)) =
            (hops.checked_sub(1), path.read_link(), path.parent())
        {
            found.extend(along_links(&parent.join(link), hops));
        }
        if let Ok(target) = path.canonicalize()
            && target.is_file()
        {
            found.push(target);
        }
    }
    found.dedup();
    found
}

/// Whether notify's error is a folder inside `dir` (not `dir` itself)
/// that may not be read: its recursive walk stopped there. Anything else
/// (the watch limit reached) fails the watch as before, so the watches
/// already made keep serving.
fn unreadable_inside(e: &notify::Error, dir: &Path) -> bool {
    is_denied(e) && e.paths.iter().any(|p| p != dir && p.starts_with(dir))
}

fn is_denied(e: &notify::Error) -> bool {
    matches!(&e.kind, notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied)
}

/// A folder watched alone because a folder inside could not be read:
/// only a recursive watch adds the folders made in it later, so a folder
/// made, removed or renamed in it (its event, see `Batch::add`), or one
/// skipped becoming readable, has the watches made anew.
struct Partial {
    dir: PathBuf,
    /// Its folders when watched.
    inside: Vec<PathBuf>,
    /// Those that could not be watched.
    skipped: Vec<PathBuf>,
}

impl Partial {
    /// Whether `path` is, or was when watched, a folder right inside.
    fn holds_folder(&self, path: &Path) -> bool {
        path.parent() == Some(self.dir.as_path())
            && (path.is_dir() || self.inside.iter().any(|d| d == path))
    }

    /// Whether a folder it skipped can be read now (a `chmod` is an
    /// attribute change, not a folder made).
    fn skipped_readable(&self) -> bool {
        self.skipped.iter().any(|d| std::fs::read_dir(d).is_ok())
    }
}

/// Watches `dir` recursively; where a folder inside cannot be read, `dir`
/// alone and each of its folders the same way instead (recorded in
/// `partial`).
fn watch_tree(
    w: &mut notify::RecommendedWatcher,
    dir: &Path,
    partial: &mut Vec<Partial>,
) -> notify::Result<()> {
    match w.watch(dir, RecursiveMode::Recursive) {
        Err(e) if unreadable_inside(&e, dir) => {
            let _ = w.unwatch(dir);
            watch_around(w, dir, partial)
        }
        other => other,
    }
}

/// [`watch_tree`] for a folder that cannot be watched whole; a folder in
/// it that cannot be watched at all is skipped with a warning.
fn watch_around(
    w: &mut notify::RecommendedWatcher,
    dir: &Path,
    partial: &mut Vec<Partial>,
) -> notify::Result<()> {
    w.watch(dir, RecursiveMode::NonRecursive)?;
    let inside = subfolders(dir);
    let mut skipped = Vec::new();
    for sub in &inside {
        match watch_tree(w, sub, partial) {
            Ok(()) => {}
            Err(e) if is_denied(&e) => {
                tracing::warn!(
                    "cannot watch {}: {e}; changes there are seen once it can be read",
                    sub.display()
                );
                skipped.push(sub.clone());
            }
            Err(e) => {
                tracing::warn!(
                    "cannot watch {}: {e}; changes there are not seen",
                    sub.display()
                );
            }
        }
    }
    partial.push(Partial {
        dir: dir.to_path_buf(),
        inside,
        skipped,
    });
    Ok(())
}

/// The folders in `dir` (not links to folders: those are not followed).
fn subfolders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// The folders outside `servlets` its entries link to (canonical).
fn linked_folders(servlets: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(servlets) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
        .filter_map(|e| e.path().canonicalize().ok())
        .filter(|target| target.is_dir() && !target.starts_with(servlets))
        .collect()
}

/// The folder at `path`'s device and inode.
fn folder_id(path: &Path) -> Option<(u64, u64)> {
    path.is_dir()
        .then(|| crate::file_stamp::identity(path))
        .flatten()
}

impl Watched {
    pub(super) fn new(
        app: &App,
        config_file: Option<&Path>,
        tx: &mpsc::Sender<Msg>,
    ) -> Result<Watched, ReloadError> {
        let mut watchers = Vec::new();
        let mut partial = Vec::new();
        let mut watch = |path: &Path, mode: RecursiveMode| -> Result<(), ReloadError> {
            let tx = tx.clone();
            // Links are not followed: one inside a root names a folder
            // that is watched already (inotify gives one watch per
            // folder, so events would come back named through the link,
            // outside the servlets folder), or one outside, which is not
            // served and must not cost watches.
            let mut w = notify::RecommendedWatcher::new(
                move |ev| {
                    let _ = tx.send(Msg::Fs(ev));
                },
                notify::Config::default().with_follow_symlinks(false),
            )
            .map_err(|source| ReloadError::Watch {
                path: path.to_path_buf(),
                source,
            })?;
            // One folder inside that cannot be read (a `lost+found`, a
            // folder the server's user may not read) costs that folder's
            // changes, not hot reload for the whole tree.
            let watched = match mode {
                RecursiveMode::Recursive => watch_tree(&mut w, path, &mut partial),
                RecursiveMode::NonRecursive => w.watch(path, mode),
            };
            watched.map_err(|source| ReloadError::Watch {
                path: path.to_path_buf(),
                source,
            })?;
            watchers.push(w);
            Ok(())
        };
        let mut sites = Vec::new();
        let mut folders = Vec::new();
        let mut routes = Vec::new();
        let mut route_files = Vec::new();
        let mut linked = Vec::new();
        for (i, site) in app.sites.load().iter().enumerate() {
            for route in &site.config.routes {
                routes.extend(along(&route.servlet).into_iter().map(|file| (i, file)));
                route_files.push((route.servlet.clone(), route.servlet.canonicalize().ok()));
            }
            for dir in std::iter::once(&site.config.root).chain(&site.config.servlets) {
                folders.push(Folder {
                    dir: dir.clone(),
                    id: folder_id(dir),
                    in_parents: along(dir),
                });
            }
            let root = site.config.root.canonicalize().ok();
            if let Some(root) = &root {
                watch(root, RecursiveMode::Recursive)?;
            }
            let servlets = site
                .config
                .servlets
                .as_ref()
                .and_then(|s| s.canonicalize().ok());
            if let Some(dir) = &servlets
                && !root.as_ref().is_some_and(|r| dir.starts_with(r))
            {
                watch(dir, RecursiveMode::Recursive)?;
            }
            for target in servlets.as_deref().map(linked_folders).unwrap_or_default() {
                match watch(&target, RecursiveMode::Recursive) {
                    Ok(()) => linked.push((i, target)),
                    Err(e) => tracing::warn!("{e}; changes there are not seen"),
                }
            }
            sites.push((root, servlets));
        }
        // Editors replace files by renaming over them, which a watch on the
        // file itself would not survive: watch its folder. So for the
        // sites' folders: their parents show one replaced or made.
        let config = config_file.and_then(|f| f.canonicalize().ok());
        let mut parents: Vec<PathBuf> = config
            .as_ref()
            .and_then(|f| f.parent())
            .map(Path::to_path_buf)
            .into_iter()
            .collect();
        // The configuration as named, and every link on the way to it.
        let config_along = config_file.map(along).unwrap_or_default();
        let held = folders
            .iter()
            .flat_map(|f| f.in_parents.iter().map(PathBuf::as_path))
            .chain(config_along.iter().map(PathBuf::as_path));
        for path in held.chain(routes.iter().map(|(_, file)| file.as_path())) {
            if let Some(parent) = path.parent()
                && !parents.iter().any(|p| p == parent)
            {
                parents.push(parent.to_path_buf());
            }
        }
        // The configuration's folder is needed; a site folder's parent
        // only tells of the folder being replaced, and may not be readable.
        for (i, parent) in parents.iter().enumerate() {
            match watch(parent, RecursiveMode::NonRecursive) {
                Err(e) if i > 0 || config.is_none() => {
                    tracing::warn!(
                        "{e}; a replaced site folder or route servlet there is noticed at the next change elsewhere"
                    );
                }
                watched => watched?,
            }
        }
        Ok(Watched {
            sites,
            config_file: config_file.map(|f| (f.to_path_buf(), config.clone())),
            config,
            config_along,
            routes,
            folders,
            route_files,
            linked,
            partial,
            _watchers: watchers,
        })
    }

    /// Whether a site's folder is not the one watched: replaced, removed,
    /// or made since.
    pub(super) fn stale(&self) -> bool {
        let links_changed = self.sites.iter().enumerate().any(|(i, (_, servlets))| {
            let now = servlets.as_deref().map(linked_folders).unwrap_or_default();
            let then = self.linked.iter().filter(|(s, _)| *s == i).map(|(_, d)| d);
            !now.iter().eq(then)
        });
        links_changed
            || self.partial.iter().any(Partial::skipped_readable)
            || self.folders.iter().any(|f| folder_id(&f.dir) != f.id)
            || self
                .route_files
                .iter()
                .chain(&self.config_file)
                .any(|(file, named)| file.canonicalize().ok() != *named)
    }
}

/// What one batch of events touched.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) config: bool,
    /// Who asked for the configuration to be read again and waits to hear
    /// that it was (whatever came of it).
    pub(super) config_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    pub(super) sites: Vec<Refresh>,
    /// `.wasm` files of a servlets folder written to (`true`) or closed
    /// after writing (`false`), with their site, in the order they came: a
    /// module copied in place is loaded once its writer closes it, never
    /// half-written.
    pub(super) writes: Vec<(PathBuf, usize, bool)>,
    /// Per site: its servlets saw only writes to modules still open
    /// (data written, no close, nothing else).
    pub(super) writes_only: Vec<bool>,
    /// A folder was made or removed where only a watch made anew sees
    /// into it (see [`Partial`]).
    pub(super) rewatch: bool,
}

impl Batch {
    pub(super) fn new(sites: usize) -> Batch {
        Batch {
            sites: vec![
                Refresh {
                    files: false,
                    servlets: false
                };
                sites
            ],
            writes_only: vec![false; sites],
            ..Batch::default()
        }
    }

    pub(super) fn add(&mut self, msg: Msg, watched: &Watched) {
        let event = match msg {
            Msg::Config(waiter) => {
                self.config = true;
                self.config_waiters.extend(waiter);
                return;
            }
            Msg::Stop | Msg::TierUp { .. } | Msg::Tick => return,
            Msg::Fs(Err(e)) => {
                tracing::warn!(error = %e, "file watcher error");
                return;
            }
            Msg::Fs(Ok(event)) => event,
        };
        if let EventKind::Access(kind) = event.kind
            && kind != AccessKind::Close(AccessMode::Write)
        {
            return;
        }
        let made_or_gone = matches!(
            event.kind,
            EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
        );
        for path in &event.paths {
            if watched.config.as_deref() == Some(path.as_path())
                || watched.config_along.contains(path)
            {
                self.config = true;
            }
            // A folder made, removed or renamed in a folder watched alone:
            // only a watch made anew covers it (a folder replaced under
            // its name may even keep its inode).
            if made_or_gone && watched.partial.iter().any(|p| p.holds_folder(path)) {
                self.rewatch = true;
            }
            if watched
                .folders
                .iter()
                .any(|f| f.in_parents.iter().any(|p| p == path))
            {
                self.touch_all();
            }
            for (i, _) in watched.routes.iter().filter(|(_, file)| file == path) {
                self.sites[*i].servlets = true;
            }
            for (i, _) in watched
                .linked
                .iter()
                .filter(|(_, dir)| path.starts_with(dir))
            {
                self.sites[*i].servlets = true;
                self.writes_only[*i] = false;
            }
            for (i, (root, servlets)) in watched.sites.iter().enumerate() {
                if root.as_ref().is_some_and(|r| path.starts_with(r)) {
                    self.sites[i].files = true;
                }
                if let Some(dir) = servlets
                    && let Ok(rel) = path.strip_prefix(dir)
                    && !rel
                        .components()
                        .any(|c| c.as_os_str() == crate::servlet::BUILD_FOLDER)
                {
                    let first = !self.sites[i].servlets;
                    self.sites[i].servlets = true;
                    let mut write = false;
                    if path.extension().is_some_and(|e| e == "wasm") {
                        // A write, or a file created empty: its writer
                        // has not written yet (`scp` pauses after the
                        // create; so may `cp` on a busy machine), and it
                        // would be read empty or half-written. A link, or
                        // a file renamed into place, is created whole.
                        let created_empty = || {
                            std::fs::symlink_metadata(path)
                                .is_ok_and(|m| m.is_file() && m.len() == 0)
                        };
                        match event.kind {
                            EventKind::Access(_) => self.writes.push((path.clone(), i, false)),
                            EventKind::Modify(ModifyKind::Data(_)) => {
                                self.writes.push((path.clone(), i, true));
                                write = true;
                            }
                            EventKind::Create(_) if created_empty() => {
                                self.writes.push((path.clone(), i, true));
                                write = true;
                            }
                            _ => {}
                        }
                    }
                    self.writes_only[i] = write && (first || self.writes_only[i]);
                }
            }
        }
    }

    /// Every site's files and servlets, looked at again.
    pub(super) fn touch_all(&mut self) {
        for site in &mut self.sites {
            *site = Refresh::ALL;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.config && self.sites.iter().all(|r| !r.files && !r.servlets)
    }
}
