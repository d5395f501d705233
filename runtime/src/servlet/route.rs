//! The route table of a site: which servlet answers which path. Pure: no
//! I/O, no loading; the loader decides what goes in, in precedence order.
//!
//! Paths are matched after normalisation (`request::path`), so both the
//! table and the request speak decoded, `.`/`..`-free paths. An exact
//! route answers one path; a prefix route `/p/*` answers `/p`, `/p/` and
//! everything below `/p/`, never `/px`. An exact match wins over any
//! prefix, and a longer prefix over a shorter one. When two routes claim
//! the same path, the one added first keeps it.

use std::collections::HashMap;
use std::sync::Arc;

use super::Servlet;
use super::source::BuildError;
use crate::config::RoutePath;

/// What answers a route.
#[derive(Debug, Clone)]
pub enum Target {
    /// A servlet.
    Servlet(Arc<Servlet>),
    /// Development mode: a source folder whose last build failed; the
    /// route answers with the compiler's output.
    BuildFailed(Arc<BuildError>),
    /// A `[[site.route]]` whose servlet was refused at load (and had no
    /// working version to keep): the route answers 500 rather than let
    /// its paths fall through to the site's files.
    Refused(Arc<str>),
}

/// Where a route came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteOrigin {
    /// A `[[site.route]]` entry.
    Config,
    /// A `.wasm` file in the site's servlets folder.
    Folder,
    /// A source folder in the servlets folder, built by swan.
    Source,
}

impl RouteOrigin {
    /// How `swan check` and the status page name it.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteOrigin::Config => "[[site.route]]",
            RouteOrigin::Folder => "servlets folder",
            RouteOrigin::Source => "built from source",
        }
    }
}

/// One route.
#[derive(Debug, Clone)]
pub struct Route<T = Target> {
    /// Paths it answers.
    pub path: RoutePath,
    /// What answers them.
    pub target: T,
    /// Where it came from.
    pub origin: RouteOrigin,
}

/// A match: the route, and the part of the path after its prefix (`""`
/// for an exact match or the prefix itself).
#[derive(Debug)]
pub struct RouteMatch<'t, 'p, T = Target> {
    /// The route.
    pub route: &'t Route<T>,
    /// The rest of the path, starting with `/` when not empty.
    pub path_info: &'p str,
}

/// The routes of a site.
#[derive(Debug, Clone)]
pub struct RouteTable<T = Target> {
    exact: HashMap<String, usize>,
    /// (prefix, route index), longest prefix first.
    prefixes: Vec<(String, usize)>,
    routes: Vec<Route<T>>,
}

impl<T> Default for RouteTable<T> {
    fn default() -> Self {
        RouteTable {
            exact: HashMap::new(),
            prefixes: Vec::new(),
            routes: Vec::new(),
        }
    }
}

impl<T> RouteTable<T> {
    /// Adds a route; if its path is taken already, the route is given back
    /// and the table is unchanged.
    pub fn add(&mut self, route: Route<T>) -> Result<(), Route<T>> {
        let index = self.routes.len();
        match &route.path {
            RoutePath::Exact(p) => {
                if self.exact.contains_key(p) {
                    return Err(route);
                }
                self.exact.insert(p.clone(), index);
            }
            RoutePath::Prefix(p) => {
                if self.prefixes.iter().any(|(q, _)| q == p) {
                    return Err(route);
                }
                let at = self
                    .prefixes
                    .iter()
                    .position(|(q, _)| q.len() < p.len())
                    .unwrap_or(self.prefixes.len());
                self.prefixes.insert(at, (p.clone(), index));
            }
        }
        self.routes.push(route);
        Ok(())
    }

    /// The route for a normalised path.
    pub fn find<'p>(&self, path: &'p str) -> Option<RouteMatch<'_, 'p, T>> {
        if let Some(&i) = self.exact.get(path) {
            return Some(RouteMatch {
                route: &self.routes[i],
                path_info: "",
            });
        }
        let trimmed = path
            .strip_suffix('/')
            .filter(|t| !t.is_empty())
            .unwrap_or(path);
        self.prefixes.iter().find_map(|(prefix, i)| {
            let rest = trimmed.strip_prefix(prefix.as_str())?;
            (rest.is_empty() || rest.starts_with('/') || prefix.is_empty()).then(|| RouteMatch {
                route: &self.routes[*i],
                path_info: &path[prefix.len()..],
            })
        })
    }

    /// Whether there is no route at all (the common static-only case).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// Every route, in the order added.
    pub fn iter(&self) -> impl Iterator<Item = &Route<T>> {
        self.routes.iter()
    }

    /// For each route, how many of `paths` it answers (and so hides from
    /// the static files), in the order added.
    pub fn shadowed<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Vec<usize> {
        let mut counts = vec![0; self.routes.len()];
        for path in paths {
            if let Some(m) = self.find(path) {
                let i = self
                    .routes
                    .iter()
                    .position(|r| std::ptr::eq(r, m.route))
                    .unwrap_or(0);
                counts[i] += 1;
            }
        }
        counts
    }

    /// The same routes with each target passed through `f`.
    pub fn map<U>(&self, mut f: impl FnMut(&Route<T>) -> U) -> RouteTable<U> {
        RouteTable {
            exact: self.exact.clone(),
            prefixes: self.prefixes.clone(),
            routes: self
                .routes
                .iter()
                .map(|r| Route {
                    path: r.path.clone(),
                    target: f(r),
                    origin: r.origin,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(routes: &[(&str, &'static str, RouteOrigin)]) -> RouteTable<&'static str> {
        let mut t = RouteTable::default();
        for (path, name, origin) in routes {
            let path = RoutePath::parse(path).expect("route path");
            let _ = t.add(Route {
                path,
                target: *name,
                origin: *origin,
            });
        }
        t
    }

    fn find(t: &RouteTable<&'static str>, path: &str) -> Option<(&'static str, String)> {
        t.find(path)
            .map(|m| (m.route.target, m.path_info.to_owned()))
    }

    #[test]
    fn exact_routes_answer_one_path_and_prefixes_everything_below() {
        let t = table(&[
            ("/login", "login", RouteOrigin::Config),
            ("/api/*", "api", RouteOrigin::Config),
        ]);
        assert_eq!(find(&t, "/login"), Some(("login", String::new())));
        assert_eq!(find(&t, "/login/"), None);
        assert_eq!(find(&t, "/login/x"), None);
        assert_eq!(find(&t, "/api"), Some(("api", String::new())));
        assert_eq!(find(&t, "/api/"), Some(("api", "/".to_owned())));
        assert_eq!(
            find(&t, "/api/users/7"),
            Some(("api", "/users/7".to_owned()))
        );
        assert_eq!(find(&t, "/apix"), None);
        assert_eq!(find(&t, "/ap"), None);
        assert_eq!(find(&t, "/"), None);
    }

    #[test]
    fn exact_beats_prefix_and_longer_prefixes_beat_shorter_ones() {
        let t = table(&[
            ("/*", "all", RouteOrigin::Config),
            ("/api/*", "api", RouteOrigin::Config),
            ("/api/v2/*", "v2", RouteOrigin::Config),
            ("/api/health", "health", RouteOrigin::Config),
        ]);
        assert_eq!(find(&t, "/api/health").map(|m| m.0), Some("health"));
        assert_eq!(find(&t, "/api/health/x").map(|m| m.0), Some("api"));
        assert_eq!(find(&t, "/api/v2/x").map(|m| m.0), Some("v2"));
        assert_eq!(find(&t, "/api/v2").map(|m| m.0), Some("v2"));
        assert_eq!(find(&t, "/api/v20").map(|m| m.0), Some("api"));
        assert_eq!(find(&t, "/other"), Some(("all", "/other".to_owned())));
        assert_eq!(find(&t, "/"), Some(("all", "/".to_owned())));
    }

    #[test]
    fn the_first_route_added_for_a_path_keeps_it() {
        // The loader adds explicit routes before the folder convention.
        let t = table(&[
            ("/hello/*", "configured", RouteOrigin::Config),
            ("/hello/*", "folder", RouteOrigin::Folder),
            ("/hello", "exact", RouteOrigin::Config),
        ]);
        assert_eq!(find(&t, "/hello/x").map(|m| m.0), Some("configured"));
        assert_eq!(find(&t, "/hello").map(|m| m.0), Some("exact"));
        assert_eq!(t.iter().count(), 2);
        let mut t = t;
        let refused = t.add(Route {
            path: RoutePath::Exact("/hello".to_owned()),
            target: "again",
            origin: RouteOrigin::Folder,
        });
        assert!(refused.is_err_and(|r| r.target == "again"));
    }

    #[test]
    fn trailing_slashes_match_the_prefix_itself() {
        let t = table(&[("/docs/*", "docs", RouteOrigin::Folder)]);
        assert_eq!(find(&t, "/docs/"), Some(("docs", "/".to_owned())));
        assert_eq!(find(&t, "/docs/a/"), Some(("docs", "/a/".to_owned())));
    }

    #[test]
    fn percent_encoded_route_paths_match_decoded_request_paths() {
        let t = table(&[
            ("/caf%C3%A9/*", "cafe", RouteOrigin::Config),
            ("/a%20b", "space", RouteOrigin::Config),
        ]);
        let path = crate::request::path::normalize("/caf%c3%a9/menu").expect("path");
        assert_eq!(find(&t, &path), Some(("cafe", "/menu".to_owned())));
        let path = crate::request::path::normalize("/a%20b").expect("path");
        assert_eq!(find(&t, &path).map(|m| m.0), Some("space"));
    }

    #[test]
    fn shadowed_static_paths_are_counted_per_route() {
        let t = table(&[
            ("/hello/*", "hello", RouteOrigin::Folder),
            ("/x", "x", RouteOrigin::Config),
        ]);
        let counts = t.shadowed(["/hello/a.txt", "/hello", "/index.html", "/x", "/x/y"]);
        assert_eq!(counts, vec![2, 1]);
    }
}
