//! Configuration: `swan.toml` and command-line flags turned into a
//! validated [`Config`].
//!
//! - `types`: what a configuration is, with every default (`store` and
//!   `outbound`: the `[[store]]` and outbound-HTTP parts);
//! - `reader`: a typed reader over toml's spanned tree, so that one run
//!   reports every problem with its line, column and a hint;
//! - `read`: the file read key by key into the types;
//! - `validate`: checks across values and against the filesystem, made
//!   once, after command-line overrides;
//! - `error`: the problems, as an operator reads them.
//!
//! Nothing is bound or loaded until the whole configuration is known to be
//! good.

mod error;
mod ops;
mod outbound;
mod read;
mod reader;
mod store;
mod types;
mod units;
mod validate;

use std::path::{Path, PathBuf};

pub use error::{ConfigError, Problem};
pub use ops::*;
pub use outbound::*;
pub use store::*;
pub use types::*;

use reader::Diagnostics;
use validate::{Origin, Positions, SitePositions};

impl Config {
    /// Loads the configuration: `file` if given, else `swan.toml` in the
    /// current folder if present, else the built-in defaults; then applies
    /// the overrides and validates the result.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let given = file.is_some();
        let file = match file {
            Some(f) => Some(f.to_path_buf()),
            None => {
                // Any entry by that name, a folder or a broken link too:
                // an error below, not the built-in defaults served instead.
                let default = PathBuf::from(DEFAULT_CONFIG_FILE);
                default.symlink_metadata().is_ok().then_some(default)
            }
        };
        let Some(path) = file else {
            let mut config = Config::defaults();
            // `swan new` puts servlets in `servlets/` when there is no
            // configuration: served when it exists (and no flag names the
            // site's folders).
            if overrides.root.is_none()
                && overrides.servlets.is_none()
                && Path::new(DEFAULT_SERVLETS).is_dir()
            {
                config.sites[0].servlets = Some(PathBuf::from(DEFAULT_SERVLETS));
            }
            let mut positions = Positions {
                sites: vec![SitePositions::default()],
                ..Positions::default()
            };
            config.apply(overrides, &mut positions)?;
            let findings = validate::check(&config, &positions);
            let problems = validate::locate(findings, &positions, None, None);
            return if problems.is_empty() {
                Ok(config)
            } else {
                Err(ConfigError::new(problems))
            };
        };
        let bytes = std::fs::read(&path).map_err(|e| {
            let hint = if given {
                "check the path given to --config"
            } else {
                "swan reads swan.toml in the current folder when there is one: make it a readable file, or remove it to use the built-in defaults"
            };
            ConfigError::single(
                &path,
                "(file)",
                format!("cannot read the configuration file: {e}"),
                Some(hint.to_owned()),
            )
        })?;
        let source = String::from_utf8(bytes).map_err(|e| {
            // Located at the first byte that is not UTF-8, in the text
            // before it.
            let good = e.utf8_error().valid_up_to();
            let before = std::str::from_utf8(&e.as_bytes()[..good]).unwrap_or_default();
            let mut diag = Diagnostics::new(&path, before);
            diag.error(
                good..good,
                "(file)",
                format!(
                    "the configuration file is not UTF-8 text: byte 0x{:02x} is not UTF-8",
                    e.as_bytes().get(good).copied().unwrap_or_default()
                ),
                Some("TOML files are UTF-8: save it as UTF-8 (a Latin-1 or UTF-16 editor setting, or a binary file at this path)".to_owned()),
            );
            diag.into_error()
        })?;
        let base = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Config::read(&source, &path, base, overrides)
    }

    /// Parses and validates `source`, read from `file`; relative paths in it
    /// are resolved against `base`.
    pub fn parse(source: &str, file: &Path, base: &Path) -> Result<Config, ConfigError> {
        Config::read(source, file, base, &Overrides::default())
    }

    fn read(
        source: &str,
        file: &Path,
        base: &Path,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut diag = Diagnostics::new(file, source).with_homes(read::HOMES);
        let Some((mut config, mut positions)) = read::document(source, file, base, &mut diag)
        else {
            return Err(diag.into_error());
        };
        config.apply(overrides, &mut positions)?;
        let findings = validate::check(&config, &positions);
        diag.extend(validate::locate(
            findings,
            &positions,
            Some(file),
            Some(source),
        ));
        diag.into_result()?;
        Ok(config)
    }

    /// Applies command-line overrides, noting which values they set.
    fn apply(
        &mut self,
        overrides: &Overrides,
        positions: &mut Positions,
    ) -> Result<(), ConfigError> {
        if !overrides.listen.is_empty() {
            let mut problems = Vec::new();
            let mut listen = Vec::new();
            for value in &overrides.listen {
                match read::parse_listen(value) {
                    Ok(addr) => listen.push(addr),
                    Err((message, hint)) => problems.push(Problem {
                        file: PathBuf::from("(command line)"),
                        line: 0,
                        column: 0,
                        key: "--listen".to_owned(),
                        message,
                        hint: Some(hint),
                    }),
                }
            }
            if !problems.is_empty() {
                return Err(ConfigError::new(problems));
            }
            // `--listen` replaces the plain listeners; TLS ones stay.
            self.server.listen.retain(|l| l.tls);
            let plain = listen.into_iter().map(ListenerConfig::plain);
            self.server.listen.splice(0..0, plain);
            // As in the file: no two listeners (the admin one included)
            // on one address.
            let all = &self.server.listen;
            let admin = self.admin.as_ref().map(|a| ("[admin] listen", a.listen));
            let named = all.iter().map(|l| ("a listener", l.addr)).chain(admin);
            for (i, (_, addr)) in named.clone().enumerate() {
                if let Some((what, other)) = named
                    .clone()
                    .take(i)
                    .find(|(_, other)| read::overlap(*other, addr))
                {
                    problems.push(Problem {
                        file: PathBuf::from("(command line)"),
                        line: 0,
                        column: 0,
                        key: "--listen".to_owned(),
                        message: format!("{addr} overlaps {what} on {other}"),
                        hint: Some("give each listener its own address and port".to_owned()),
                    });
                }
            }
            if !problems.is_empty() {
                return Err(ConfigError::new(problems));
            }
        }
        if overrides.dev {
            self.server.development = true;
        }
        if let Some(pid_file) = &overrides.pid_file {
            self.server.pid_file = Some(pid_file.clone());
            positions.pid_file = Origin::CommandLine;
        }
        positions.servlets_to_be_made = overrides.servlets_to_be_made;
        if let Some(i) = self.sites.iter().position(|s| s.default) {
            let site = &mut self.sites[i];
            let mut at = positions.sites.get_mut(i);
            if let Some(root) = &overrides.root {
                site.root = root.clone();
                if let Some(p) = at.as_deref_mut() {
                    p.root = Origin::CommandLine;
                }
            }
            if let Some(servlets) = &overrides.servlets {
                site.servlets = Some(servlets.clone());
                if let Some(p) = at {
                    p.servlets = Origin::CommandLine;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir();
        Config::parse(src, Path::new("swan.toml"), &dir)
    }

    fn text(result: Result<Config, ConfigError>) -> String {
        match result {
            Ok(_) => "(valid)".to_owned(),
            Err(e) => e.to_string(),
        }
    }

    /// Found by the config fuzz target: `""="{"` gave a problem with an
    /// empty key. Keys a dotted path cannot show are quoted.
    #[test]
    fn empty_and_odd_keys_are_named_quoted() {
        let text = text(parse(
            "\"\"=\"{\"\n[server]\n\"a b\" = 1\n[[site]]\nroot = \".\"\n",
        ));
        assert!(text.contains("swan.toml:1:1: \"\": unknown key"), "{text}");
        assert!(text.contains("server.\"a b\": unknown key"), "{text}");
    }

    #[test]
    fn every_problem_is_reported_with_line_and_column() {
        let text = text(parse(
            "[server]\nlisten = [\"127.0.0.1:70000\"]\nworkerz = 2\nmax_connections = \"many\"\n\n[[site]]\nroot = \".\"\n",
        ));
        assert!(
            text.starts_with("invalid configuration (3 problems)"),
            "{text}"
        );
        assert!(
            text.contains("swan.toml:2:11: server.listen[0]: port 70000 is out of range"),
            "{text}"
        );
        assert!(
            text.contains("swan.toml:3:1: server.workerz: unknown key"),
            "{text}"
        );
        assert!(text.contains("did you mean `workers`?"), "{text}");
        assert!(
            text.contains(
                "swan.toml:4:19: server.max_connections: expected a whole number, found string"
            ),
            "{text}"
        );
    }

    #[test]
    fn syntax_errors_point_at_the_place() {
        let text = text(parse("[server\n"));
        assert!(text.contains("swan.toml:1:"), "{text}");
        assert!(text.contains("(syntax)"), "{text}");
    }

    #[test]
    fn a_single_site_is_the_default() {
        let config = parse("[[site]]\nroot = \".\"\n");
        assert!(config.is_ok_and(|c| c.sites[0].default));
    }

    #[test]
    fn two_default_sites_are_refused() {
        let text = text(parse(
            "[[site]]\nroot = \".\"\ndefault = true\nhosts = [\"a\"]\n[[site]]\nroot = \".\"\ndefault = true\nhosts = [\"b\"]\n",
        ));
        assert!(text.contains("2 sites are marked default"), "{text}");
    }

    #[test]
    fn zero_budget_and_missing_root_are_refused() {
        let text = text(parse(
            "[[site]]\nroot = \"does-not-exist-swan\"\n[site.cache]\nbudget = 0\n",
        ));
        assert!(
            text.contains("site[0].cache.budget: a zero budget"),
            "{text}"
        );
        assert!(text.contains("swan.toml:2:8: site[0].root:"), "{text}");
        assert!(text.contains("is not a folder"), "{text}");
    }

    #[test]
    fn zero_workers_is_refused_like_every_other_zero_that_serves_nobody() {
        for key in ["workers", "max_connections", "max_instances"] {
            let text = text(parse(&format!(
                "[server]\n{key} = 0\n[[site]]\nroot = \".\"\n"
            )));
            assert!(text.contains("swan.toml:2:"), "{key}: {text}");
            assert!(text.contains(&format!("server.{key}")), "{key}: {text}");
        }
    }

    #[test]
    fn prewarm_past_max_instances_is_refused_where_it_is_set() {
        let refused = text(parse(
            "[server]\nmax_instances = 4\n[[site]]\nroot = \".\"\n[site.servlet]\nprewarm = 5\n[[site.route]]\npath = \"/x\"\nservlet = \"x.wasm\"\nprewarm = 100000\n",
        ));
        for needle in [
            "swan.toml:6:11: site[0].servlet.prewarm",
            "swan.toml:10:11: site[0].route[0].prewarm",
            "server.max_instances (4)",
            "use at most 4",
        ] {
            assert!(refused.contains(needle), "{needle}: {refused}");
        }
        let fine = text(parse(
            "[server]\nmax_instances = 4\n[[site]]\nroot = \".\"\n[site.servlet]\nprewarm = 4\n",
        ));
        assert!(!fine.contains("prewarm"), "{fine}");
    }

    #[test]
    fn problems_in_later_sites_keep_their_index_in_the_file() {
        let text = text(parse(
            "[[site]]\nhosts = [\"a\"]\n[[site]]\nroot = \".\"\nhosts = [\"b\"]\ndefault = true\n[[site.route]]\npath = \"/x\"\nservlet = \"nope.wasm\"\n",
        ));
        assert!(text.contains("site[0].root: missing key"), "{text}");
        assert!(
            text.contains("swan.toml:9:11: site[1].route[0].servlet:"),
            "{text}"
        );
    }

    #[test]
    fn overridden_folders_are_blamed_on_the_flag() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("swan.toml");
        std::fs::write(&file, "[[site]]\nroot = \".\"\n").expect("write");
        let overrides = Overrides {
            root: Some(dir.path().join("missing-root")),
            servlets: Some(dir.path().join("missing-servlets")),
            ..Overrides::default()
        };
        let text = text(Config::load(Some(&file), &overrides));
        assert!(text.contains("(command line): --root:"), "{text}");
        assert!(text.contains("(command line): --servlets:"), "{text}");
        assert!(text.contains("point --root at"), "{text}");
    }

    #[test]
    fn a_pid_file_flag_is_checked_and_blamed_on_the_flag() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("swan.toml");
        std::fs::write(&file, "[[site]]\nroot = \".\"\n").expect("write");
        let load = |pid_file: &str| {
            text(Config::load(
                Some(&file),
                &Overrides {
                    pid_file: Some(PathBuf::from(pid_file)),
                    ..Overrides::default()
                },
            ))
        };
        let missing = load(&dir.path().join("no/swan.pid").to_string_lossy());
        assert!(missing.contains("(command line): --pid-file:"), "{missing}");
        assert!(missing.contains("its folder"), "{missing}");
        let in_root = load(&dir.path().join("swan.pid").to_string_lossy());
        assert!(in_root.contains("inside the root of site"), "{in_root}");
        let empty = load("");
        assert!(empty.contains("--pid-file: an empty path"), "{empty}");
        // A rename over a device would replace it.
        let device = load("/dev/null");
        assert!(device.contains("is not a regular file"), "{device}");
        let folder = load(&std::env::temp_dir().to_string_lossy());
        assert!(folder.contains("is a folder"), "{folder}");
        let outside = tempfile::tempdir().expect("temp dir");
        let fine = load(&outside.path().join("swan.pid").to_string_lossy());
        assert_eq!(fine, "(valid)");
        // The flag replaces the file's value, an empty one included.
        std::fs::write(&file, "[server]\npid_file = \"\"\n[[site]]\nroot = \".\"\n")
            .expect("write");
        let replaced = load(&outside.path().join("swan.pid").to_string_lossy());
        assert_eq!(replaced, "(valid)");
    }

    #[test]
    fn a_file_that_is_not_utf8_is_refused_at_its_first_bad_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("swan.toml");
        std::fs::write(&file, b"[server]\n# caf\xe9\n[[site]]\nroot = \".\"\n").expect("write");
        let text = text(Config::load(Some(&file), &Overrides::default()));
        assert!(
            text.contains(
                "swan.toml:2:6: (file): the configuration file is not UTF-8 text: byte 0xe9"
            ),
            "{text}"
        );
    }

    #[test]
    fn route_paths_are_normalised_and_decoded_like_request_paths() {
        assert_eq!(
            RoutePath::parse("/caf%C3%A9/*"),
            Ok(RoutePath::Prefix("/café".to_owned()))
        );
        assert_eq!(RoutePath::parse("/*"), Ok(RoutePath::Prefix(String::new())));
        assert_eq!(
            RoutePath::parse("/a%20b"),
            Ok(RoutePath::Exact("/a b".to_owned()))
        );
        assert!(RoutePath::parse("/a/../b").is_err());
        for control in ["/a\nb", "/a\u{1b}[2J", "/a\u{7f}/*"] {
            let e = RoutePath::parse(control).expect_err(control);
            assert!(e.contains("control character"), "{e}");
        }
        assert_eq!(
            RoutePath::parse("/a%0Ab"),
            Ok(RoutePath::Exact("/a\nb".to_owned()))
        );
        assert!(RoutePath::parse("/a%2fb").is_err());
        assert!(RoutePath::parse("/x/%2e%2e/y").is_err());
        assert!(RoutePath::parse("/.hidden").is_err());
        assert!(RoutePath::parse("/a/.well-known/*").is_err());
        assert_eq!(
            RoutePath::parse("/.well-known/*"),
            Ok(RoutePath::Prefix("/.well-known".to_owned()))
        );
        assert!(RoutePath::parse("/a?b").is_err());
        assert!(RoutePath::parse("/a#b/*").is_err());
    }

    /// Every key a table lists as known is read, and every key read is
    /// listed: the lists cannot drift from the code.
    #[test]
    fn every_known_key_is_read_and_every_read_key_is_known() {
        reader::FINISHED.with(|f| f.borrow_mut().clear());
        let text = text(parse(
            "[server]\n[[site]]\nroot = \".\"\n[site.cache]\n[site.servlet]\n[[site.route]]\npath = \"/x\"\nservlet = \"x.wasm\"\n[site.route.settings]\n",
        ));
        assert!(text.contains("x.wasm does not exist"), "{text}");
        let finished = reader::FINISHED.with(|f| f.take());
        let tables: Vec<&str> = finished.iter().map(|(p, ..)| p.as_str()).collect();
        for expected in [
            "",
            "server",
            "site[0]",
            "site[0].cache",
            "site[0].servlet",
            "site[0].route[0]",
        ] {
            assert!(
                tables.contains(&expected),
                "{expected} not read: {tables:?}"
            );
        }
        for (path, known, asked) in finished {
            if path.ends_with(".settings") {
                continue; // free-form: every key present is read
            }
            let mut known = known.clone();
            let mut asked = asked.clone();
            known.sort();
            asked.sort();
            asked.dedup();
            assert_eq!(known, asked, "table `{path}`: known keys vs keys read");
        }
    }
}
