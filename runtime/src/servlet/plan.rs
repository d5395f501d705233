//! Step one of loading a site's servlets: **list** the servlets folder
//! (I/O: `NAME.wasm` files, and source folders, built when their sources
//! changed), then **plan** (pure: configuration + listing → the routes
//! wanted, in precedence order: `[[site.route]]` entries, failed builds in
//! development mode, built source folders, then `NAME.wasm` files).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::info::ServletInfo;
use super::native::LoadError;
use super::route::RouteOrigin;
use super::source::{self, BuildError, BuildLimits, Source, SourceStamp};
use crate::config::{RoutePath, SiteConfig};

/// How a source folder's last build went.
#[derive(Debug, Clone)]
pub(crate) struct BuildRecord {
    pub(crate) stamp: SourceStamp,
    pub(crate) error: Option<Arc<BuildError>>,
    /// A `NAME.wasm` lies beside the folder (and was warned about once).
    pub(crate) shadows: bool,
}

/// What the servlets folder holds.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// `NAME.wasm` files.
    pub(crate) wasm: Vec<(String, PathBuf)>,
    /// Source folders, with their last build and where its module is (if
    /// a build ever succeeded).
    pub(crate) sources: Vec<(Source, BuildRecord, Option<PathBuf>)>,
}

/// A route the configuration and folders ask for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub(crate) path: RoutePath,
    pub(crate) target: PlannedTarget,
    pub(crate) origin: RouteOrigin,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PlannedTarget {
    Servlet(Box<ServletInfo>),
    BuildFailed(Arc<BuildError>),
}

/// Lists a servlets folder, building the source folders whose sources
/// changed since `previous` saw them.
pub(crate) fn list(
    dir: &Path,
    previous: Option<&HashMap<String, BuildRecord>>,
    builds: Option<&BuildLimits>,
) -> Listing {
    // Tools run inside the source folder: every path handed to them must
    // be absolute.
    let dir = &dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Some(limits) = builds else {
        for source in source::find(dir) {
            tracing::warn!(servlet = %source.name, dir = %source.dir.display(), "source folder not built: production mode loads .wasm files only (set build_sources = true in [server] to build sources here)");
        }
        return Listing {
            wasm: wasm_files(dir),
            sources: Vec::new(),
        };
    };
    let wasm = wasm_files(dir);
    let sources: Vec<_> = source::find(dir)
        .into_iter()
        .map(|source| {
            let stamp = source::stamp(&source.dir);
            let before = previous.and_then(|p| p.get(&source.name));
            let mut record = match before {
                Some(r) if r.stamp == stamp => r.clone(),
                _ => {
                    let error = source::build(&source, dir, limits).err().map(|e| {
                        tracing::error!(servlet = %source.name, "build failed: in development mode its route answers with the compiler's output, else the previous version (if any) keeps serving");
                        Arc::new(e)
                    });
                    BuildRecord {
                        stamp: stamp.after_build(&source.dir),
                        error,
                        shadows: before.is_some_and(|r| r.shadows),
                    }
                }
            };
            // Said once, not at every reload while both stay.
            let shadows = wasm.iter().any(|(name, _)| *name == source.name);
            if shadows && !record.shadows {
                tracing::warn!(servlet = %source.name, dir = %dir.display(), "{}.wasm is not served: the source folder {}/ beside it builds the servlet of that route (remove one of them)", source.name, source.name);
            }
            record.shadows = shadows;
            let module = source::out_dir(dir).join(format!("{}.wasm", source.name));
            let module = module.is_file().then_some(module);
            (source, record, module)
        })
        .collect();
    Listing { wasm, sources }
}

impl Listing {
    /// Leaves out the `NAME.wasm` files a `[[site.route]]` names: the
    /// route serves that module, at its paths, with its limits and stores;
    /// the folder convention would serve it again at `/NAME/*` with the
    /// folder's (a login servlet given one store at `/login` reachable at
    /// `/login/x` with another).
    pub(crate) fn without_route_modules(
        mut self,
        routes: &[crate::config::RouteConfig],
    ) -> Listing {
        if routes.is_empty() {
            return self;
        }
        let named: Vec<PathBuf> = routes
            .iter()
            .filter_map(|r| r.servlet.canonicalize().ok())
            .collect();
        self.wasm.retain(|(name, file)| {
            let routed = file.canonicalize().is_ok_and(|f| named.contains(&f));
            if routed {
                tracing::debug!(servlet = %name, "served at its [[site.route]] only, not also at /{name}/*");
            }
            !routed
        });
        self
    }
}

/// `NAME.wasm` files of a folder.
fn wasm_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!(dir = %dir.display(), "cannot read the servlets folder");
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wasm"))
        // A name that is not UTF-8 keeps U+FFFD in its place, which no
        // route has: it is refused by name (`Listing::unroutable`), not
        // skipped unseen.
        .filter_map(|p| Some((p.file_stem()?.to_string_lossy().into_owned(), p)))
        .collect();
    found.sort();
    found
}

impl Listing {
    /// What the folder holds that cannot serve, besides modules that fail
    /// to load: names that cannot be routes, and source folders whose last
    /// build failed (with whether an earlier build of theirs serves: not
    /// in development mode, where the route shows the compiler's output).
    /// Each with whether it is news against `previous` (the builds of the
    /// listing before): a build that ran again and failed is, whatever it
    /// said; `None` for a name, news unless that file was refused before.
    pub(crate) fn refusals<'a>(
        &'a self,
        development: bool,
        previous: Option<&'a HashMap<String, BuildRecord>>,
    ) -> impl Iterator<Item = (LoadError, Option<bool>)> + 'a {
        let unroutable = self.unroutable().map(|file| {
            let error = LoadError::Name {
                file: file.to_path_buf(),
            };
            (error, None)
        });
        let failed = self
            .sources
            .iter()
            .filter_map(move |(source, record, module)| {
                let error = record.error.as_ref()?;
                let before = previous
                    .and_then(|p| p.get(&source.name))
                    .and_then(|r| r.error.as_ref());
                let fresh = !before.is_some_and(|b| Arc::ptr_eq(b, error));
                let refusal = LoadError::Build {
                    file: source.dir.clone(),
                    why: error.summary(),
                    kept_previous: !development && module.is_some(),
                };
                Some((refusal, Some(fresh)))
            });
        unroutable.chain(failed)
    }

    /// Files and source folders whose names cannot be routes; hidden
    /// ones (`.x.wasm`, an editor's or macOS's `._x.wasm`) are left out,
    /// as they are of the routes.
    pub(crate) fn unroutable(&self) -> impl Iterator<Item = &Path> {
        let refused = |name: &str| !is_url_segment(name) && !name.starts_with('.');
        let wasm = self
            .wasm
            .iter()
            .filter(move |(name, _)| refused(name))
            .map(|(_, file)| file.as_path());
        let sources = self
            .sources
            .iter()
            .filter(move |(source, _, _)| refused(&source.name))
            .map(|(source, _, _)| source.dir.as_path());
        wasm.chain(sources)
    }
}

/// The routes a site's configuration and folder listing ask for, in
/// precedence order. Pure.
pub(crate) fn plan(site: &SiteConfig, listing: &Listing, development: bool) -> Vec<Planned> {
    let mut planned = Vec::new();
    let servlet = |name: &str, file: &Path, limits, settings| {
        PlannedTarget::Servlet(Box::new(ServletInfo {
            name: name.to_owned(),
            file: file.to_path_buf(),
            limits,
            settings,
            development,
        }))
    };
    for route in &site.routes {
        let name = route
            .servlet
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("servlet");
        planned.push(Planned {
            path: route.path.clone(),
            target: servlet(
                name,
                &route.servlet,
                route.limits.clone(),
                route.settings.clone(),
            ),
            origin: RouteOrigin::Config,
        });
    }
    let taken = |planned: &[Planned], path: &RoutePath| planned.iter().any(|p| p.path == *path);
    // Names that cannot be routes are refused by the loader
    // (`Listing::unroutable`).
    let folder_path =
        |name: &str| is_url_segment(name).then(|| RoutePath::Prefix(format!("/{name}")));
    if development {
        for (source, record, _) in &listing.sources {
            if let (Some(error), Some(path)) = (&record.error, folder_path(&source.name))
                && !taken(&planned, &path)
            {
                planned.push(Planned {
                    path,
                    target: PlannedTarget::BuildFailed(error.clone()),
                    origin: RouteOrigin::Source,
                });
            }
        }
    }
    for (source, _, module) in &listing.sources {
        if let (Some(module), Some(path)) = (module, folder_path(&source.name))
            && !taken(&planned, &path)
        {
            planned.push(Planned {
                path,
                target: servlet(
                    &source.name,
                    module,
                    site.servlet_limits.clone(),
                    Vec::new(),
                ),
                origin: RouteOrigin::Source,
            });
        }
    }
    for (name, file) in &listing.wasm {
        if let Some(path) = folder_path(name)
            && !taken(&planned, &path)
        {
            planned.push(Planned {
                path,
                target: servlet(name, file, site.servlet_limits.clone(), Vec::new()),
                origin: RouteOrigin::Folder,
            });
        }
    }
    planned
}

/// Unreserved URL characters only, not starting with a dot.
fn is_url_segment(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
}

/// `file` with its folder resolved (links, `.`), as the reload's file
/// events and a servlets folder's listing name it.
pub(super) fn resolved(file: &Path) -> PathBuf {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (dir.canonicalize(), file.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => file.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RouteConfig, ServletLimits};
    use crate::servlet::source::SourceKind;

    #[test]
    fn a_lockfile_its_build_wrote_does_not_mark_a_folder_changed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
        write("Cargo.toml", "[package]").expect("write");
        let before = source::stamp(dir.path());
        // The build writes Cargo.lock: remembered as the build left it.
        write("Cargo.lock", "# lock").expect("write");
        let after = before.after_build(dir.path());
        assert_ne!(after, before);
        assert_eq!(after, source::stamp(dir.path()));
        // A source edited during the build: the stamp from before it is
        // kept, so the next reload builds the edit.
        let before = source::stamp(dir.path());
        write("Cargo.toml", "[package]\nname = \"x\"").expect("write");
        assert_eq!(before.after_build(dir.path()), before);
        // A lockfile changed later (`cargo update`) is a change.
        let built = source::stamp(dir.path());
        write("Cargo.lock", "# lock, updated").expect("write");
        assert_ne!(source::stamp(dir.path()), built);
    }

    #[test]
    fn url_segments() {
        assert!(is_url_segment("hello"));
        assert!(is_url_segment("json-api_v2.1~x"));
        assert!(!is_url_segment(".hidden"));
        assert!(!is_url_segment("with space"));
        assert!(!is_url_segment("caf\u{e9}"));
        assert!(!is_url_segment(""));
    }

    fn site() -> SiteConfig {
        let mut site = SiteConfig::new("test", PathBuf::from("/srv/www"));
        site.servlets = Some(PathBuf::from("/srv/servlets"));
        site
    }

    fn source(name: &str, failed: bool, built: bool) -> (Source, BuildRecord, Option<PathBuf>) {
        (
            Source {
                name: name.to_owned(),
                dir: PathBuf::from(format!("/srv/servlets/{name}")),
                kind: SourceKind::C,
            },
            BuildRecord {
                stamp: SourceStamp::default(),
                error: failed.then(|| {
                    Arc::new(BuildError {
                        name: name.to_owned(),
                        output: "error: nope".to_owned(),
                    })
                }),
                shadows: false,
            },
            built.then(|| PathBuf::from(format!("/srv/servlets/target/swan/{name}.wasm"))),
        )
    }

    fn summary(planned: &[Planned]) -> Vec<(String, &'static str, RouteOrigin)> {
        planned
            .iter()
            .map(|p| {
                let what = match &p.target {
                    PlannedTarget::Servlet(_) => "servlet",
                    PlannedTarget::BuildFailed(_) => "build failed",
                };
                (p.path.to_string(), what, p.origin)
            })
            .collect()
    }

    #[test]
    fn explicit_routes_come_first_and_the_folder_fills_the_rest() {
        let mut site = site();
        site.routes.push(RouteConfig {
            path: RoutePath::Prefix("/hello".to_owned()),
            servlet: PathBuf::from("/srv/other.wasm"),
            limits: ServletLimits::default(),
            settings: vec![("K".to_owned(), "v".to_owned())],
        });
        let listing = Listing {
            wasm: vec![
                (
                    "hello".to_owned(),
                    PathBuf::from("/srv/servlets/hello.wasm"),
                ),
                (
                    "world".to_owned(),
                    PathBuf::from("/srv/servlets/world.wasm"),
                ),
                (
                    "bad name".to_owned(),
                    PathBuf::from("/srv/servlets/bad name.wasm"),
                ),
            ],
            sources: Vec::new(),
        };
        let planned = plan(&site, &listing, false);
        assert_eq!(
            summary(&planned),
            vec![
                ("/hello/*".to_owned(), "servlet", RouteOrigin::Config),
                ("/world/*".to_owned(), "servlet", RouteOrigin::Folder),
            ]
        );
        let PlannedTarget::Servlet(info) = &planned[0].target else {
            panic!("a servlet")
        };
        assert_eq!(info.name, "other");
        assert_eq!(info.settings.len(), 1);
    }

    #[test]
    fn failed_builds_show_only_in_development_and_shadow_the_old_module() {
        let listing = Listing {
            wasm: vec![("c".to_owned(), PathBuf::from("/srv/servlets/c.wasm"))],
            sources: vec![
                source("c", true, true),
                source("ok", false, true),
                source("new", true, false),
            ],
        };
        let dev = plan(&site(), &listing, true);
        assert_eq!(
            summary(&dev),
            vec![
                ("/c/*".to_owned(), "build failed", RouteOrigin::Source),
                ("/new/*".to_owned(), "build failed", RouteOrigin::Source),
                ("/ok/*".to_owned(), "servlet", RouteOrigin::Source),
            ]
        );
        let prod = plan(&site(), &listing, false);
        assert_eq!(
            summary(&prod),
            vec![
                ("/c/*".to_owned(), "servlet", RouteOrigin::Source),
                ("/ok/*".to_owned(), "servlet", RouteOrigin::Source),
            ]
        );
    }
}
