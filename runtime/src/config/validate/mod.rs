//! Checks that involve several values or the filesystem, made once on the
//! whole configuration after reading and after command-line overrides.
//!
//! A finding names the value it is about structurally ([`At`]); the
//! positions recorded while reading ([`Positions`]) turn that into a file,
//! line and column, or into the command-line flag that set the value.

mod locate;
mod written;

use std::ops::Range;
use std::path::Path;

pub(crate) use locate::locate;

use super::store::{StoreConfig, StoreKind};
use super::types::{Config, SiteConfig};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Origin {
    /// Written in the file, at these byte offsets.
    File(Range<usize>),
    /// Given on the command line.
    CommandLine,
    /// Not written anywhere: a built-in default.
    #[default]
    Default,
}

/// Where the values of a configuration came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Positions {
    /// One per configured site, in order.
    pub(crate) sites: Vec<SitePositions>,
    /// Whether some `[[site]]` table could not be read at all (its problems
    /// are reported already; checks across sites would only add noise).
    pub(crate) dropped_sites: bool,
    /// One per configured `[[store]]`, in order.
    pub(crate) stores: Vec<StorePositions>,
    /// The `[server.tls]` table, if any.
    pub(crate) tls: Option<Range<usize>>,
    /// `[server.tls]`'s `cert` and `key` values.
    pub(crate) tls_files: [Option<Range<usize>>; 2],
    /// `[server.tls]`'s `redirect_http`, if written.
    pub(crate) redirect_http: Option<Range<usize>>,
    /// The `access` value of `[log]`, if written.
    pub(crate) access_log: Option<Range<usize>>,
    /// `[server]`'s `pid_file`, or `--pid-file`.
    pub(crate) pid_file: Origin,
    /// `swan new`: the default site's servlets folder may not exist yet.
    pub(crate) servlets_to_be_made: bool,
}

/// Where a store's values came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct StorePositions {
    /// The store's index among the `[[store]]` tables of the file.
    pub(crate) index: usize,
    /// The whole `[[store]]` table.
    pub(crate) table: Range<usize>,
    /// Its `name` value, when it has a readable one.
    pub(crate) name: Option<Range<usize>>,
    /// Its `path`, when it has one.
    pub(crate) path: Option<Range<usize>>,
}

/// Where a site's values came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct SitePositions {
    /// The site's index among the `[[site]]` tables of the file.
    pub(crate) index: usize,
    /// The whole `[[site]]` table.
    pub(crate) table: Range<usize>,
    /// Its `name` value, when written.
    pub(crate) name: Option<Range<usize>>,
    /// Each host name kept, in order.
    pub(crate) hosts: Vec<Range<usize>>,
    pub(crate) root: Origin,
    pub(crate) servlets: Origin,
    /// One per route read, in order.
    pub(crate) routes: Vec<RoutePositions>,
    /// Each name of `[site.servlet]`'s `stores`, in order.
    pub(crate) stores: Vec<Range<usize>>,
}

/// Where a route's values came from.
#[derive(Debug, Clone, Default)]
pub(crate) struct RoutePositions {
    /// The route's index among its site's `[[site.route]]` tables.
    pub(crate) index: usize,
    pub(crate) servlet: Origin,
    /// Each name of its `stores`, in order.
    pub(crate) stores: Vec<Range<usize>>,
}

/// The value a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum At {
    /// The `default` flag of site `n` (or the site as a whole).
    SiteDefault(usize),
    /// The name of site `n` (at its table).
    SiteName(usize),
    /// Host name `h` of site `n`.
    SiteHost(usize, usize),
    /// The root folder of site `n`.
    SiteRoot(usize),
    /// The servlets folder of site `n`.
    SiteServlets(usize),
    /// The servlet file of route `r` of site `n`.
    RouteServlet(usize, usize),
    /// Name `k` of the `stores` of site `n`'s servlets (route `r`, or the
    /// site's `[site.servlet]` for `None`).
    Stores(usize, Option<usize>, usize),
    /// Store `n` (its name).
    Store(usize),
    /// Store `n`'s file.
    StorePath(usize),
    /// `[server.tls]`: its certificate and key.
    Tls,
    /// `[server.tls]`'s `cert`.
    TlsCert,
    /// `[server.tls]`'s `key`.
    TlsKey,
    /// `[server.tls]`'s `redirect_http`.
    RedirectHttp,
    /// `access` in `[log]`.
    AccessLog,
    /// `pid_file` in `[server]`.
    PidFile,
}

/// A problem found by validation, not yet located.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    pub(crate) at: At,
    pub(crate) message: String,
    pub(crate) hint: String,
}

/// Checks what involves several sites or the filesystem.
pub(crate) fn check(config: &Config, positions: &Positions) -> Vec<Finding> {
    let mut found = Vec::new();
    let mut finding = |at, message: String, hint: &str| {
        found.push(Finding {
            at,
            message,
            hint: hint.to_owned(),
        })
    };
    let defaults: Vec<usize> = (0..config.sites.len())
        .filter(|&i| config.sites[i].default)
        .collect();
    match defaults.as_slice() {
        // Without sites (reported while reading) or with some unreadable,
        // a count of defaults would only add noise.
        _ if positions.dropped_sites || config.sites.is_empty() => {}
        [_] => {}
        [] => finding(
            At::SiteDefault(0),
            format!(
                "{} sites are configured and none is the default",
                config.sites.len()
            ),
            "set `default = true` on the site that answers unknown or missing Host headers",
        ),
        [_, second, ..] => finding(
            At::SiteDefault(*second),
            format!(
                "{} sites are marked default: {}",
                defaults.len(),
                defaults
                    .iter()
                    .map(|&i| config.sites[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "exactly one site may have `default = true`",
        ),
    }
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for (i, site) in config.sites.iter().enumerate() {
        // Metrics, the status page and reloads know a site by its name.
        if config.sites[..i].iter().any(|s| s.name == site.name) {
            finding(
                At::SiteName(i),
                format!("two sites are named {:?}", site.name),
                "give every [[site]] its own `name` (unnamed, a site is named after its first host, else \"default\")",
            );
        }
        for (h, host) in site.hosts.iter().enumerate() {
            match seen.iter().find(|(h, _)| h == host) {
                Some(&(_, other)) if other == i => finding(
                    At::SiteHost(i, h),
                    format!("host {host:?} is listed twice"),
                    "list each host name once (names are compared without case)",
                ),
                Some(&(_, other)) => finding(
                    At::SiteHost(i, h),
                    format!(
                        "host {host:?} is also served by site {:?}",
                        config.sites[other].name
                    ),
                    "each host name may belong to one site only",
                ),
                None => {}
            }
            seen.push((host, i));
        }
        let from_flag = |origin: Option<&Origin>| matches!(origin, Some(Origin::CommandLine));
        let at = positions.sites.get(i);
        if !site.root.is_dir() {
            finding(
                At::SiteRoot(i),
                format!("{} is not a folder", site.root.display()),
                if from_flag(at.map(|p| &p.root)) {
                    "create it, or point --root at the folder of static files"
                } else {
                    "create it, or point `root` at the folder of static files (relative paths start at the config file's folder)"
                },
            );
        } else if let Err(e) = std::fs::read_dir(&site.root) {
            finding(
                At::SiteRoot(i),
                format!("{} cannot be read: {e}", site.root.display()),
                "let the user swan runs as read and search it (and its files)",
            );
        }
        if let Some(servlets) = &site.servlets
            && !servlets.is_dir()
            && !(site.default && positions.servlets_to_be_made)
        {
            finding(
                At::SiteServlets(i),
                format!("{} is not a folder", servlets.display()),
                if from_flag(at.map(|p| &p.servlets)) {
                    "create it, or point --servlets at the folder of .wasm servlets"
                } else {
                    "create it, or point `servlets` at the folder of .wasm servlets"
                },
            );
        }
        if let Some(servlets) = site.servlets.as_ref().and_then(|d| d.canonicalize().ok()) {
            if site.root.canonicalize().is_ok_and(|root| root == servlets) {
                finding(
                    At::SiteServlets(i),
                    format!(
                        "{} is the site's root itself: a servlets folder is never served, so none of the root's files would be",
                        site.servlets
                            .as_ref()
                            .map_or(String::new(), |d| d.display().to_string()),
                    ),
                    "give the servlets a folder of their own, beside the root (servlets = \"servlets\") or inside it",
                );
            }
            for (j, other) in config.sites.iter().enumerate() {
                let Ok(root) = other.root.canonicalize() else {
                    continue;
                };
                if j != i && servlets.starts_with(&root) {
                    finding(
                        At::SiteServlets(i),
                        format!(
                            "{} is inside the root of site {:?}, which would serve its modules as static files",
                            site.servlets
                                .as_ref()
                                .map_or(String::new(), |d| d.display().to_string()),
                            other.name
                        ),
                        "keep servlets folders outside every site's root (a site's own servlets folder inside its own root is never served)",
                    );
                }
            }
        }
        let known = |name: &String| config.stores.iter().any(|s| &s.name == name);
        for (k, name) in site.servlet_limits.stores.iter().enumerate() {
            if known(name) {
                continue;
            }
            finding(
                At::Stores(i, None, k),
                format!("no store is named {name:?}"),
                "declare it with a [[store]] table, or list one of the configured stores",
            );
        }
        for (r, route) in site.routes.iter().enumerate() {
            for (k, name) in route.limits.stores.iter().enumerate() {
                if !known(name) && !site.servlet_limits.stores.contains(name) {
                    finding(
                        At::Stores(i, Some(r), k),
                        format!("no store is named {name:?}"),
                        "declare it with a [[store]] table, or list one of the configured stores",
                    );
                }
            }
        }
        for (r, route) in site.routes.iter().enumerate() {
            let file = &route.servlet;
            let problem = if !file.exists() {
                "does not exist"
            } else if file.extension().is_none_or(|e| e != "wasm") || !file.is_file() {
                "is not a .wasm file"
            } else {
                // A site's own route modules inside its root are never
                // served; another site would serve them.
                let file = file.canonicalize().ok();
                for (j, other) in config.sites.iter().enumerate() {
                    let served = file.as_deref().is_some_and(|f| would_serve(other, f));
                    if j != i && served {
                        finding(
                            At::RouteServlet(i, r),
                            format!(
                                "{} is inside the root of site {:?}, which would serve the module as a static file",
                                route.servlet.display(),
                                other.name
                            ),
                            "keep a route's module outside every other site's root (a site's own route modules inside its own root are never served)",
                        );
                    }
                }
                continue;
            };
            finding(
                At::RouteServlet(i, r),
                format!("{} {problem}", file.display()),
                "point `servlet` at a compiled module, relative to the config file's folder",
            );
        }
    }
    let used = config.stores_used();
    for (n, store) in config.stores.iter().enumerate() {
        if config.stores[..n].iter().any(|s| s.name == store.name) {
            finding(
                At::Store(n),
                format!("two stores are named {:?}", store.name),
                "give every [[store]] its own name",
            );
        }
        // Compared as the files they would be: `x/../x/s.redb` and a path
        // through a link to the same folder are one file.
        let path_of = |s: &StoreConfig| match &s.kind {
            StoreKind::Embedded { path } => Some(resolved(path)),
            StoreKind::Redis { .. } => None,
        };
        let shared = path_of(store).and_then(|path| {
            let other = config.stores[..n]
                .iter()
                .find(|s| path_of(s).as_ref() == Some(&path))?;
            Some((other, path))
        });
        if let StoreKind::Embedded { path } = &store.kind
            && let Some(problem) = written::store_file_unusable(path, used.contains(&store.name))
        {
            finding(
                At::StorePath(n),
                problem,
                "point `path` at a file to create or an existing database, in a folder (relative paths start at the config file's folder)",
            );
        }
        if let Some((other, path)) = shared {
            finding(
                At::Store(n),
                format!(
                    "stores {:?} and {:?} share the file {}",
                    other.name,
                    store.name,
                    path.display()
                ),
                "give every embedded store its own `path`",
            );
        }
    }
    written::check(config, &mut finding);
    if let Some(tls) = &config.server.tls {
        let problems = crate::certs::problems(&tls.cert, &tls.key);
        if let Some(e) = problems.cert {
            finding(
                At::TlsCert,
                format!("cannot serve this certificate: {e}"),
                "give a PEM certificate chain (leaf first) in `cert`",
            );
        }
        if let Some(e) = problems.key {
            finding(
                At::TlsKey,
                format!("cannot serve with this key: {e}"),
                "give the certificate's private key (PKCS#8, PKCS#1 or SEC1 PEM) in `key`",
            );
        }
        if let Some(e) = problems.pair {
            finding(
                At::TlsKey,
                format!("cannot serve this certificate: {e}"),
                "give a PEM certificate chain (leaf first) in `cert` and its private key in `key`",
            );
        }
        if !config.server.listen.iter().any(|l| l.tls) {
            finding(
                At::Tls,
                "[server.tls] is set but no listener has tls = true".to_owned(),
                "mark one: listen = [\"127.0.0.1:8080\", { addr = \"0.0.0.0:8443\", tls = true }]",
            );
        }
        if tls.redirect_http
            && config.server.listen.iter().any(|l| l.tls)
            && config.server.listen.iter().all(|l| l.tls)
        {
            finding(
                At::RedirectHttp,
                "redirect_http = true, but every listener has tls = true: there is no plain listener to redirect from".to_owned(),
                "add one, listen = [\"0.0.0.0:80\", { addr = \"0.0.0.0:443\", tls = true }], or drop redirect_http",
            );
        }
    }
    found
}

/// Whether `site` would serve `file` (resolved) as a static file: inside
/// its root, and not one it keeps private (its servlets folder, its own
/// route modules, a dotfile or dot-folder).
fn would_serve(site: &SiteConfig, file: &Path) -> bool {
    let Ok(root) = site.root.canonicalize() else {
        return false;
    };
    let Ok(inside) = file.strip_prefix(&root) else {
        return false;
    };
    let hidden = crate::request::path::hidden_below(inside);
    let in_servlets = site
        .servlets
        .as_ref()
        .and_then(|d| d.canonicalize().ok())
        .is_some_and(|d| file.starts_with(d));
    let own_route = site
        .routes
        .iter()
        .any(|r| r.servlet.canonicalize().is_ok_and(|f| f == file));
    !hidden && !in_servlets && !own_route
}

/// `path` with its longest existing ancestor resolved (links, `..`), the
/// rest as written: where a file that may not exist yet would be.
fn resolved(path: &std::path::Path) -> std::path::PathBuf {
    let mut rest = Vec::new();
    let mut base = path;
    loop {
        if let Ok(real) = base.canonicalize() {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                base = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}
