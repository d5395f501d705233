//! What hot reload watches, and what one batch of file events touched:
//! each site's root and servlets folder (recursively), the folders that
//! hold them (a folder replaced), the configuration file, and the `.wasm`
//! file of each `[[site.route]]` (through its folder: a deploy renames a
//! new file over it).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;

use notify::event::{AccessKind, AccessMode};
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
    Config,
    /// Cranelift finished compiling a servlet that went live on the
    /// baseline compiler.
    TierUp {
        old: Arc<Servlet>,
        new: Arc<Servlet>,
    },
    Stop,
}

/// What is watched, with canonical paths for matching events.
pub(super) struct Watched {
    pub(super) sites: Vec<(Option<PathBuf>, Option<PathBuf>)>,
    pub(super) config: Option<PathBuf>,
    /// Each `[[site.route]]`'s `.wasm` (its site's index, and its path as
    /// its folder's watch names it): replacing one reloads that site's
    /// servlets, as a file in a servlets folder does.
    routes: Vec<(usize, PathBuf)>,
    /// Each site's root and servlets folder: a folder replaced (`mv build
    /// www`) or made later is watched anew.
    folders: Vec<Folder>,
    _watchers: Vec<notify::RecommendedWatcher>,
}

/// A site's root or servlets folder.
struct Folder {
    /// As configured.
    dir: PathBuf,
    /// The folder (device, inode) found there when the watches were made.
    id: Option<(u64, u64)>,
    /// Its path as events in its parent's watch name it.
    in_parent: Option<PathBuf>,
}

/// `path` as the watch on its folder names it: the folder canonical, the
/// name as written (a link stays a link).
fn in_parent(path: &Path) -> Option<PathBuf> {
    let path = std::path::absolute(path).ok()?;
    let parent = path.parent()?.canonicalize().ok()?;
    Some(parent.join(path.file_name()?))
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
        let mut watch = |path: &Path, mode: RecursiveMode| -> Result<(), ReloadError> {
            let tx = tx.clone();
            let mut w = notify::recommended_watcher(move |ev| {
                let _ = tx.send(Msg::Fs(ev));
            })
            .map_err(|source| ReloadError::Watch {
                path: path.to_path_buf(),
                source,
            })?;
            w.watch(path, mode).map_err(|source| ReloadError::Watch {
                path: path.to_path_buf(),
                source,
            })?;
            watchers.push(w);
            Ok(())
        };
        let mut sites = Vec::new();
        let mut folders = Vec::new();
        let mut routes = Vec::new();
        for (i, site) in app.sites.load().iter().enumerate() {
            for route in &site.config.routes {
                if let Some(file) = in_parent(&route.servlet) {
                    routes.push((i, file));
                }
            }
            for dir in std::iter::once(&site.config.root).chain(&site.config.servlets) {
                folders.push(Folder {
                    dir: dir.clone(),
                    id: folder_id(dir),
                    in_parent: in_parent(dir),
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
        let held = folders.iter().filter_map(|f| f.in_parent.as_deref());
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
            config,
            routes,
            folders,
            _watchers: watchers,
        })
    }

    /// Whether a site's folder is not the one watched: replaced, removed,
    /// or made since.
    pub(super) fn stale(&self) -> bool {
        self.folders.iter().any(|f| folder_id(&f.dir) != f.id)
    }
}

/// What one batch of events touched.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) config: bool,
    pub(super) sites: Vec<Refresh>,
}

impl Batch {
    pub(super) fn new(sites: usize) -> Batch {
        Batch {
            config: false,
            sites: vec![
                Refresh {
                    files: false,
                    servlets: false
                };
                sites
            ],
        }
    }

    pub(super) fn add(&mut self, msg: Msg, watched: &Watched) {
        let event = match msg {
            Msg::Config => {
                self.config = true;
                return;
            }
            Msg::Stop | Msg::TierUp { .. } => return,
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
        for path in &event.paths {
            if watched.config.as_deref() == Some(path.as_path()) {
                self.config = true;
            }
            if watched
                .folders
                .iter()
                .any(|f| f.in_parent.as_deref() == Some(path.as_path()))
            {
                self.touch_all();
            }
            for (i, _) in watched.routes.iter().filter(|(_, file)| file == path) {
                self.sites[*i].servlets = true;
            }
            for (i, (root, servlets)) in watched.sites.iter().enumerate() {
                if root.as_ref().is_some_and(|r| path.starts_with(r)) {
                    self.sites[i].files = true;
                }
                if let Some(dir) = servlets
                    && let Ok(rel) = path.strip_prefix(dir)
                    && !rel.components().any(|c| c.as_os_str() == "target")
                {
                    self.sites[i].servlets = true;
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
