//! Which servlet answers which path of a site: explicit `[[site.route]]`
//! entries first, then the folder convention (`NAME.wasm` answers `/NAME`
//! and everything below `/NAME/`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::build::{self, BuildError};
use super::{Info, LoadError, Servlet};
use crate::config::{RoutePath, SiteConfig};
use crate::engine::Engine;
use crate::engine::Tier;

/// Where a route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteOrigin {
    /// A `[[site.route]]` entry.
    Config,
    /// A `.wasm` file in the site's servlets folder.
    Folder,
    /// A source folder (Rust or C) in the servlets folder, built by swan.
    Source,
}

/// One servlet route.
#[derive(Debug, Clone)]
pub struct Route {
    /// Paths it answers.
    pub path: RoutePath,
    /// The servlet.
    pub servlet: Arc<Servlet>,
    /// Where it came from.
    pub origin: RouteOrigin,
    /// Size and modification time of the file the servlet was loaded from.
    stamp: Option<(u64, u128)>,
}

/// A site's servlet routes.
#[derive(Debug, Default)]
pub struct Routes {
    exact: HashMap<String, Arc<Servlet>>,
    /// Longest prefix first.
    prefixes: Vec<(String, Arc<Servlet>)>,
    all: Vec<Route>,
    /// Source folders built so far: what their sources looked like, and
    /// how the last build went.
    builds: HashMap<String, BuildRecord>,
    /// In development mode: routes whose last build failed, answered with
    /// the compiler's output.
    build_errors: Vec<(String, Arc<BuildError>)>,
}

#[derive(Debug, Clone)]
struct BuildRecord {
    stamp: (u64, u64, u128),
    error: Option<Arc<BuildError>>,
}

/// A servlet that could not be loaded (the rest of the site still is).
#[derive(Debug, Clone)]
pub struct Refused {
    /// The file.
    pub file: PathBuf,
    /// Why.
    pub error: Arc<LoadError>,
    /// Whether a previous version of it still serves.
    pub kept_previous: bool,
}

impl Routes {
    /// Loads the routes of a site: every `[[site.route]]`, then every valid
    /// `NAME.wasm` of the servlets folder that no route already covers.
    /// Modules that cannot load are returned separately, with the reason.
    ///
    /// With `previous`, a servlet whose file, limits and settings are
    /// unchanged is reused as it is, and one whose new version fails to
    /// load keeps serving its previous version.
    pub fn load(
        engine: &Arc<Engine>,
        site: &SiteConfig,
        previous: Option<&Routes>,
    ) -> (Routes, Vec<Refused>) {
        let mut planned: Vec<(RoutePath, Info, RouteOrigin)> = Vec::new();
        for route in &site.routes {
            planned.push((
                route.path.clone(),
                Info {
                    name: file_stem(&route.servlet),
                    file: route.servlet.clone(),
                    limits: route.limits.clone(),
                    settings: route.settings.clone(),
                },
                RouteOrigin::Config,
            ));
        }
        let mut builds = HashMap::new();
        let mut build_errors = Vec::new();
        if let Some(dir) = &site.servlets {
            for source in build::find(dir) {
                let stamp = build::stamp(&source.dir);
                let record = match previous.and_then(|p| p.builds.get(&source.name)) {
                    Some(r) if r.stamp == stamp => r.clone(),
                    _ => BuildRecord {
                        stamp,
                        error: build::build(&source, dir).err().map(|e| {
                            tracing::error!(servlet = %source.name, "build failed; the previous version (if any) keeps serving");
                            Arc::new(e)
                        }),
                    },
                };
                if let Some(error) = &record.error
                    && engine.development()
                {
                    build_errors.push((format!("/{}", source.name), error.clone()));
                }
                let file = build::out_dir(dir).join(format!("{}.wasm", source.name));
                let path = RoutePath::Prefix(format!("/{}", source.name));
                if file.is_file() && !planned.iter().any(|(p, ..)| *p == path) {
                    planned.push((
                        path,
                        Info {
                            name: source.name.clone(),
                            file,
                            limits: site.servlet_limits.clone(),
                            settings: Vec::new(),
                        },
                        RouteOrigin::Source,
                    ));
                }
                builds.insert(source.name, record);
            }
            for (name, file) in folder_servlets(dir) {
                let path = RoutePath::Prefix(format!("/{name}"));
                if planned.iter().any(|(p, ..)| *p == path) {
                    continue;
                }
                planned.push((
                    path,
                    Info {
                        name,
                        file,
                        limits: site.servlet_limits.clone(),
                        settings: Vec::new(),
                    },
                    RouteOrigin::Folder,
                ));
            }
        }
        // Reuse what has not changed; compile the rest in parallel (each
        // module's compilation is independent).
        let mut routes = Routes {
            builds,
            build_errors,
            ..Routes::default()
        };
        let mut refused = Vec::new();
        let mut to_load = Vec::new();
        for (path, info, origin) in planned {
            let stamp = file_stamp(&info.file);
            let old = previous.and_then(|p| {
                p.all
                    .iter()
                    .find(|r| r.path == path && r.servlet.info().file == info.file)
            });
            match old {
                Some(old)
                    if old.stamp == stamp
                        && old.servlet.info().limits == info.limits
                        && old.servlet.info().settings == info.settings =>
                {
                    routes.add(old.clone());
                }
                _ => to_load.push((path, info, origin, stamp, old.cloned())),
            }
        }
        let results: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = to_load
                .into_iter()
                .map(|(path, info, origin, stamp, old)| {
                    let file = info.file.clone();
                    let log_file = file.clone();
                    let handle = scope.spawn(move || {
                        let started = std::time::Instant::now();
                        // On reload, a changed module goes live on the
                        // baseline compiler; the reloader then compiles it
                        // with Cranelift and swaps that in.
                        let tier = if previous.is_some() { Tier::Baseline } else { Tier::Optimized };
                        let loaded = Servlet::load_tier(engine, info, tier);
                        tracing::debug!(file = %log_file.display(), took_ms = started.elapsed().as_millis() as u64, "servlet compiled and checked");
                        loaded
                    });
                    (path, origin, stamp, old, file, handle)
                })
                .collect();
            handles
                .into_iter()
                .map(|(path, origin, stamp, old, file, h)| {
                    (path, origin, stamp, old, file, h.join())
                })
                .collect()
        });
        for (path, origin, stamp, old, file, result) in results {
            match result {
                Ok(Ok(servlet)) => {
                    if old.is_some() {
                        tracing::info!(route = %path, file = %file.display(), "servlet updated");
                    }
                    routes.add(Route {
                        path,
                        servlet,
                        origin,
                        stamp,
                    });
                }
                Ok(Err(error)) => {
                    let kept_previous = old.is_some();
                    if let Some(old) = old {
                        tracing::warn!(route = %path, file = %file.display(), "new version refused; the previous version keeps serving");
                        routes.add(old);
                    }
                    refused.push(Refused {
                        file,
                        error: Arc::new(error),
                        kept_previous,
                    });
                }
                Err(_) => tracing::error!(file = %file.display(), "servlet loading panicked"),
            }
        }
        (routes, refused)
    }

    fn add(&mut self, route: Route) {
        match &route.path {
            RoutePath::Exact(p) => {
                self.exact
                    .entry(p.clone())
                    .or_insert_with(|| route.servlet.clone());
            }
            RoutePath::Prefix(p) => {
                if !self.prefixes.iter().any(|(q, _)| q == p) {
                    self.prefixes.push((p.clone(), route.servlet.clone()));
                    self.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
                }
            }
        }
        self.all.push(route);
    }

    /// Whether the site has no servlet at all (the common static-only case).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.all.is_empty() && self.build_errors.is_empty()
    }

    /// The servlet for a normalised path, and the part of the path after
    /// the route's prefix ("" for an exact match).
    pub fn find<'p>(&self, path: &'p str) -> Option<(&Arc<Servlet>, &'p str)> {
        if let Some(s) = self.exact.get(path) {
            return Some((s, ""));
        }
        let trimmed = path
            .strip_suffix('/')
            .filter(|t| !t.is_empty())
            .unwrap_or(path);
        self.prefixes.iter().find_map(|(prefix, servlet)| {
            if prefix.is_empty() {
                return Some((servlet, path));
            }
            let rest = trimmed.strip_prefix(prefix.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| (servlet, &path[prefix.len()..]))
        })
    }

    /// The last build of source folder `name`, if it failed (in any mode).
    pub fn failed_build(&self, name: &str) -> Option<&BuildError> {
        self.builds.get(name).and_then(|r| r.error.as_deref())
    }

    /// In development mode, the failed build answering `path`, if any.
    pub fn build_error(&self, path: &str) -> Option<&BuildError> {
        self.build_errors
            .iter()
            .find(|(prefix, _)| {
                path == prefix
                    || path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|r| r.starts_with('/'))
            })
            .map(|(_, e)| &**e)
    }

    /// Servlets still running baseline-compiled code.
    pub fn baseline_servlets(&self) -> Vec<Arc<Servlet>> {
        self.all
            .iter()
            .filter(|r| r.servlet.tier() == Tier::Baseline)
            .map(|r| r.servlet.clone())
            .collect()
    }

    /// The same routes with `old` replaced by `new`; `None` if no route
    /// uses `old` any more.
    pub fn with_servlet_replaced(&self, old: &Arc<Servlet>, new: &Arc<Servlet>) -> Option<Routes> {
        if !self.all.iter().any(|r| Arc::ptr_eq(&r.servlet, old)) {
            return None;
        }
        let mut routes = Routes {
            builds: self.builds.clone(),
            build_errors: self.build_errors.clone(),
            ..Routes::default()
        };
        for route in &self.all {
            let mut route = route.clone();
            if Arc::ptr_eq(&route.servlet, old) {
                route.servlet = new.clone();
            }
            routes.add(route);
        }
        Some(routes)
    }

    /// Every route, in load order.
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.all.iter()
    }
}

/// `NAME.wasm` files of a folder whose NAME is a valid URL segment.
fn folder_servlets(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        tracing::warn!(dir = %dir.display(), "cannot read the servlets folder");
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wasm"))
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_owned();
            if is_url_segment(&name) {
                Some((name, p))
            } else {
                tracing::warn!(file = %p.display(), "refused: the name is not a valid URL segment (use letters, digits, '-', '_', '.', '~'; not starting with '.')");
                None
            }
        })
        .collect();
    found.sort();
    found
}

/// Unreserved URL characters only, not starting with a dot.
pub(crate) fn is_url_segment(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
}

/// Size and modification time (ns) of a file, if it exists.
fn file_stamp(path: &Path) -> Option<(u64, u128)> {
    let meta = std::fs::metadata(path).ok()?;
    let nanos = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_nanos();
    Some((meta.len(), nanos))
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("servlet")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_segments() {
        assert!(is_url_segment("hello"));
        assert!(is_url_segment("json-api_v2.1~x"));
        assert!(!is_url_segment(".hidden"));
        assert!(!is_url_segment("with space"));
        assert!(!is_url_segment("caf\u{e9}"));
        assert!(!is_url_segment(""));
    }
}
