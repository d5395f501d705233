//! Virtual hosts: which site answers a request, by its Host header, and
//! what a site is (its files and its servlets).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use crate::config::{Config, SiteConfig};
use crate::observe::SiteCounters;
use crate::servlet::{Loader, SiteServlets, Target};
use crate::static_files::{CacheError, SiteCache};

/// Longest host name looked up; longer ones go to the default site.
const MAX_HOST_LEN: usize = 255;

/// One site: its settings, its files and its servlets.
#[derive(Debug)]
pub struct Site {
    /// Settings from the configuration.
    pub config: SiteConfig,
    /// Static files.
    pub cache: Arc<SiteCache>,
    /// Servlet routes, and servlets that could not be loaded.
    pub servlets: Arc<SiteServlets>,
    /// The counters of the site's static files, looked up on first use.
    pub counters: OnceLock<Arc<SiteCounters>>,
    /// The site's name, shared (access log lines carry it).
    pub name: Arc<str>,
}

impl Site {
    /// Loads a site's files and servlets. Servlets that cannot load are
    /// listed in `servlets.refused` with the reason; the rest of the site
    /// serves.
    pub fn load(config: &SiteConfig, loader: Option<&Arc<Loader>>) -> Result<Site, CacheError> {
        Site::refresh(config, loader, None, Refresh::ALL)
    }

    /// Builds the site again from `config`, reusing what `previous` already
    /// holds: unchanged files are not read again, unchanged servlets are
    /// not compiled again, and a servlet whose new version fails to load
    /// keeps serving its previous version. `what` says which parts may have
    /// changed; the others are taken from `previous` as they are.
    pub fn refresh(
        config: &SiteConfig,
        loader: Option<&Arc<Loader>>,
        previous: Option<&Site>,
        what: Refresh,
    ) -> Result<Site, CacheError> {
        let cache = match previous {
            Some(p) if !what.files => p.cache.clone(),
            Some(p) => Arc::new(p.cache.reload(config)?),
            None => Arc::new(SiteCache::load(config)?),
        };
        let servlets = match (loader, previous) {
            (_, Some(p)) if !what.servlets => p.servlets.clone(),
            (Some(loader), p) => Arc::new(loader.load_site(config, p.map(|p| &*p.servlets))),
            (None, _) => Arc::new(SiteServlets::default()),
        };
        if what.servlets {
            for r in servlets.fresh_refusals() {
                let previous = if r.kept_previous {
                    "; the previous version keeps serving"
                } else {
                    ""
                };
                match r.route() {
                    Some(route) => {
                        tracing::error!(site = %config.name, %route, "servlet refused: {}{previous}", r.error);
                    }
                    None => {
                        tracing::error!(site = %config.name, "servlet refused: {}{previous}", r.error)
                    }
                }
            }
        }
        if what.servlets || previous.is_none() {
            warn_shadowed(config, &cache, &servlets);
        }
        Ok(Site {
            config: config.clone(),
            cache,
            servlets,
            counters: OnceLock::new(),
            name: Arc::from(config.name.as_str()),
        })
    }
}

/// Says once which servlet routes hide static files.
fn warn_shadowed(config: &SiteConfig, cache: &SiteCache, servlets: &SiteServlets) {
    let counts = servlets.routes.shadowed(cache.paths());
    for (route, shadowed) in servlets.routes.iter().zip(counts) {
        if shadowed > 0 && matches!(route.target, Target::Servlet(_)) {
            tracing::warn!(
                site = %config.name,
                route = %route.path,
                shadowed,
                "servlet route shadows static files under the same path"
            );
        }
    }
}

/// Which parts of a site to read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    /// The static files.
    pub files: bool,
    /// The servlets.
    pub servlets: bool,
}

impl Refresh {
    /// Everything.
    pub const ALL: Refresh = Refresh {
        files: true,
        servlets: true,
    };
}

/// All sites, indexed by host name.
#[derive(Debug)]
pub struct Sites {
    sites: Vec<Arc<Site>>,
    by_host: HashMap<Box<str>, usize>,
    default: usize,
}

impl Sites {
    /// Loads every site of a configuration; `loader` loads the servlets
    /// (`None`: static files only).
    pub fn load(config: &Config, loader: Option<&Arc<Loader>>) -> Result<Sites, CacheError> {
        let sites = config
            .sites
            .iter()
            .map(|s| Site::load(s, loader).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Sites::new(sites))
    }

    /// Indexes already loaded sites.
    pub fn new(sites: Vec<Arc<Site>>) -> Sites {
        let mut by_host = HashMap::new();
        for (i, site) in sites.iter().enumerate() {
            for host in &site.config.hosts {
                by_host.insert(host.as_str().into(), i);
            }
        }
        let default = sites.iter().position(|s| s.config.default).unwrap_or(0);
        Sites {
            sites,
            by_host,
            default,
        }
    }

    /// The site for a Host value (port ignored, case-insensitive); the
    /// default site for a missing or unknown host.
    pub fn for_host(&self, host: Option<&[u8]>) -> &Arc<Site> {
        let index = host
            .and_then(|h| {
                let name = strip_port(h);
                if name.is_empty() || name.len() > MAX_HOST_LEN {
                    return None;
                }
                let mut buf = [0u8; MAX_HOST_LEN];
                let lower = &mut buf[..name.len()];
                lower.copy_from_slice(name);
                lower.make_ascii_lowercase();
                let lower = std::str::from_utf8(lower).ok()?;
                self.by_host.get(lower.trim_end_matches('.')).copied()
            })
            .unwrap_or(self.default);
        &self.sites[index]
    }

    /// Every site, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Site>> {
        self.sites.iter()
    }
}

/// `example.com:8080` → `example.com`; `[::1]:8080` → `[::1]`.
fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        return match host.iter().position(|b| *b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|b| *b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped() {
        assert_eq!(strip_port(b"example.com:8080"), b"example.com");
        assert_eq!(strip_port(b"example.com"), b"example.com");
        assert_eq!(strip_port(b"[::1]:8080"), b"[::1]");
    }
}
