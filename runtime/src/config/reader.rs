//! A typed reader over a spanned TOML document.
//!
//! serde stops at the first problem it meets; an operator fixing a config
//! file wants all of them at once, each with its line and column. So the
//! document is parsed into toml's spanned tree and read key by key here:
//! every getter records its own problems and carries on, and keys nobody
//! asked for are reported as unknown, with a suggestion when one is close.
//!
//! Over 400 lines on purpose: one type (the table reader) with a getter per
//! kind of value, each with its own wording, and the unit parsers they
//! share; split apart they would only import each other.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigError, Problem};
use super::units::{parse_duration, parse_size};

/// Collects problems while a document is read.
pub(crate) struct Diagnostics<'s> {
    file: &'s Path,
    source: &'s str,
    problems: Vec<Problem>,
    /// Every table and its keys: an unknown key that belongs to another
    /// table is told where it goes.
    homes: &'static [(&'static str, &'static [&'static str])],
}

impl<'s> Diagnostics<'s> {
    pub(crate) fn new(file: &'s Path, source: &'s str) -> Self {
        Diagnostics {
            file,
            source,
            problems: Vec::new(),
            homes: &[],
        }
    }

    /// Tells where a key found in the wrong table belongs, from `homes`
    /// (each table's name and keys).
    pub(crate) fn with_homes(
        mut self,
        homes: &'static [(&'static str, &'static [&'static str])],
    ) -> Self {
        self.homes = homes;
        self
    }

    /// The tables `key` belongs to, as a phrase ("[server] or [[store]]").
    fn home_of(&self, key: &str) -> Option<String> {
        let tables: Vec<&str> = self
            .homes
            .iter()
            .filter(|(_, keys)| keys.contains(&key))
            .map(|(table, _)| *table)
            .collect();
        (!tables.is_empty()).then(|| tables.join(" or "))
    }

    /// Records a problem at `span` (byte offsets into the source).
    pub(crate) fn error(
        &mut self,
        span: Range<usize>,
        key: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) {
        let (line, column) = line_column(self.source, span.start);
        self.problems.push(Problem {
            file: self.file.to_path_buf(),
            line,
            column,
            key: key.to_owned(),
            message: message.into(),
            hint,
        });
    }

    pub(crate) fn has_errors(&self) -> bool {
        !self.problems.is_empty()
    }

    /// Adds problems found elsewhere (already located).
    pub(crate) fn extend(&mut self, problems: impl IntoIterator<Item = Problem>) {
        self.problems.extend(problems);
    }

    /// All problems, in file order, when some were found.
    pub(crate) fn into_error(self) -> ConfigError {
        match self.into_result() {
            Err(e) => e,
            Ok(()) => ConfigError::new(Vec::new()),
        }
    }

    /// All problems, in file order.
    pub(crate) fn into_result(mut self) -> Result<(), ConfigError> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            self.problems.sort_by_key(|p| (p.line, p.column));
            Err(ConfigError::new(self.problems))
        }
    }
}

/// 1-based line and column of a byte offset.
pub(crate) fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// How a value with a unit is read and described in errors.
struct Unit<T> {
    what: &'static str,
    expected: &'static str,
    hint: &'static str,
    /// The value, or why it is not one ("is out of range ...").
    parse: fn(&str) -> Result<T, String>,
    /// How a bare integer converts, if one is allowed.
    integer: Option<fn(u64) -> T>,
}

/// One table being read: hands out values by key, remembers what was taken.
pub(crate) struct TableReader<'a, 'i> {
    path: String,
    span: Range<usize>,
    entries: Vec<(&'a str, Range<usize>, &'a Spanned<DeValue<'i>>, bool)>,
    /// Every key the code asked for, present or not (tests compare this
    /// with the list of known keys, so the two cannot drift apart).
    #[cfg(test)]
    asked: Vec<String>,
}

/// A finished table: its path, its known keys, the keys the code asked for.
#[cfg(test)]
pub(crate) type FinishedTable = (String, Vec<String>, Vec<String>);

#[cfg(test)]
thread_local! {
    /// Every table finished on this thread.
    pub(crate) static FINISHED: std::cell::RefCell<Vec<FinishedTable>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl<'a, 'i> TableReader<'a, 'i> {
    /// `path` is the dotted key of the table itself ("" for the root).
    pub(crate) fn new(path: impl Into<String>, span: Range<usize>, table: &'a DeTable<'i>) -> Self {
        let entries = table
            .iter()
            .map(|(k, v)| (k.get_ref().as_ref(), k.span(), v, false))
            .collect();
        TableReader {
            path: path.into(),
            span,
            entries,
            #[cfg(test)]
            asked: Vec::new(),
        }
    }

    /// Dotted name of `key` inside this table.
    pub(crate) fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The keys present, in file order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.entries.iter().map(|(k, ..)| *k)
    }

    /// Span of the table, for problems about a missing key.
    pub(crate) fn span(&self) -> Range<usize> {
        self.span.clone()
    }

    /// Reports `key` missing, with `hint`, unless it is there: a value of
    /// the wrong type was reported already, and "missing" would be false.
    pub(crate) fn missing(&self, diag: &mut Diagnostics<'_>, key: &str, hint: impl Into<String>) {
        if self.entries.iter().any(|(k, ..)| *k == key) {
            return;
        }
        diag.error(
            self.span(),
            &self.key_path(key),
            format!("missing key `{key}`"),
            Some(hint.into()),
        );
    }

    /// Takes the raw value of `key`, marking it as known.
    pub(crate) fn take(&mut self, key: &str) -> Option<&'a Spanned<DeValue<'i>>> {
        #[cfg(test)]
        self.asked.push(key.to_owned());
        self.entries
            .iter_mut()
            .find(|(k, ..)| *k == key)
            .map(|(_, _, v, used)| {
                *used = true;
                *v
            })
    }

    /// Reports every key that was not taken.
    pub(crate) fn finish(self, diag: &mut Diagnostics<'_>, known: &[&str]) {
        #[cfg(test)]
        FINISHED.with(|f| {
            f.borrow_mut().push((
                self.path.clone(),
                known.iter().map(|k| (*k).to_owned()).collect(),
                self.asked.clone(),
            ))
        });
        for (key, span, _, used) in &self.entries {
            if *used {
                continue;
            }
            let hint = match (closest(key, known), diag.home_of(key)) {
                (Some(k), _) => {
                    format!("did you mean `{k}`? known keys here: {}", known.join(", "))
                }
                (None, Some(home)) => format!(
                    "`{key}` is a key of {home}, not of this table; known keys here: {}",
                    known.join(", ")
                ),
                (None, None) => format!("known keys here: {}", known.join(", ")),
            };
            // A key a dotted path cannot show as it is (the empty key `""`,
            // found by the config fuzz target, or one with spaces) is
            // quoted.
            let plain = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            let shown = if plain {
                key.to_string()
            } else {
                format!("{key:?}")
            };
            diag.error(
                span.clone(),
                &self.key_path(&shown),
                "unknown key",
                Some(hint),
            );
        }
    }

    pub(crate) fn string(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
    ) -> Option<Spanned<String>> {
        let value = self.take(key)?;
        match value.get_ref() {
            DeValue::String(s) => Some(Spanned::new(value.span(), s.to_string())),
            other => {
                type_error(diag, value.span(), &self.key_path(key), "a string", other);
                None
            }
        }
    }

    pub(crate) fn bool(&mut self, diag: &mut Diagnostics<'_>, key: &str) -> Option<bool> {
        let value = self.take(key)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                type_error(
                    diag,
                    value.span(),
                    &self.key_path(key),
                    "true or false",
                    other,
                );
                None
            }
        }
    }

    /// A non-negative integer no larger than `max`.
    /// A whole number up to `max`. `least` is the smallest the key takes:
    /// the hint for a value out of range names it, and a value below it
    /// (but not negative) is returned for the caller to explain.
    pub(crate) fn uint(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
        least: u64,
        max: u64,
    ) -> Option<Spanned<u64>> {
        let value = self.take(key)?;
        let path = self.key_path(key);
        match value.get_ref() {
            DeValue::Integer(i) => match u64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) if n <= max => Some(Spanned::new(value.span(), n)),
                _ => {
                    diag.error(
                        value.span(),
                        &path,
                        format!("{} is out of range", i.as_str()),
                        Some(format!("use a whole number from {least} to {max}")),
                    );
                    None
                }
            },
            other => {
                type_error(diag, value.span(), &path, "a whole number", other);
                None
            }
        }
    }

    /// A size in bytes: an integer, or a string such as "64 KiB" or "1MB".
    pub(crate) fn size(&mut self, diag: &mut Diagnostics<'_>, key: &str) -> Option<Spanned<u64>> {
        self.with_unit(
            diag,
            key,
            Unit {
                what: "size",
                expected: "a size",
                hint: "write a byte count (65536) or a string with a unit: \"64 KiB\", \"1 MiB\", \"2 GB\"",
                parse: parse_size,
                integer: Some(|n| n),
            },
        )
    }

    /// A duration written as a string with a unit: "500ms", "10s", "2m", "1h".
    pub(crate) fn duration(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
    ) -> Option<Spanned<Duration>> {
        self.with_unit(
            diag,
            key,
            Unit {
                what: "duration",
                expected: "a duration string",
                hint: "write a string with a unit, from 1ms to a year: \"500ms\", \"10s\", \"2m\", \"1h\", \"1d\"",
                parse: parse_duration,
                integer: None,
            },
        )
    }

    /// A value written as a string with a unit (or, where `unit` allows
    /// it, a bare integer).
    fn with_unit<T>(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
        unit: Unit<T>,
    ) -> Option<Spanned<T>> {
        let value = self.take(key)?;
        let path = self.key_path(key);
        let parsed = match (value.get_ref(), unit.integer) {
            (DeValue::String(s), _) => (unit.parse)(s)
                .map_err(|why| format!("{s:?} is not a valid {}: it {why}", unit.what)),
            // TOML integers are 64-bit signed: a larger one is not TOML.
            (DeValue::Integer(i), Some(from_int)) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .and_then(|n| u64::try_from(n).ok())
                .map(from_int)
                .ok_or_else(|| format!("{} is not a valid {}", i.as_str(), unit.what)),
            (other, _) => Err(format!(
                "expected {}, found {}",
                unit.expected,
                other.type_str()
            )),
        };
        match parsed {
            Ok(v) => Some(Spanned::new(value.span(), v)),
            Err(message) => {
                diag.error(value.span(), &path, message, Some(unit.hint.to_owned()));
                None
            }
        }
    }

    /// A string or an array of strings.
    pub(crate) fn strings(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
    ) -> Option<Vec<Spanned<String>>> {
        let value = self.take(key)?;
        let path = self.key_path(key);
        match value.get_ref() {
            DeValue::String(s) => Some(vec![Spanned::new(value.span(), s.to_string())]),
            DeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (n, item) in items.iter().enumerate() {
                    match item.get_ref() {
                        DeValue::String(s) => out.push(Spanned::new(item.span(), s.to_string())),
                        other => type_error(
                            diag,
                            item.span(),
                            &format!("{path}[{n}]"),
                            "a string",
                            other,
                        ),
                    }
                }
                Some(out)
            }
            other => {
                type_error(
                    diag,
                    value.span(),
                    &path,
                    "a string or an array of strings",
                    other,
                );
                None
            }
        }
    }

    /// A sub-table.
    pub(crate) fn table(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
    ) -> Option<TableReader<'a, 'i>> {
        let value = self.take(key)?;
        let path = self.key_path(key);
        match value.get_ref() {
            DeValue::Table(t) => Some(TableReader::new(path, value.span(), t)),
            other => {
                type_error(diag, value.span(), &path, "a table", other);
                None
            }
        }
    }

    /// An array of tables (`[[key]]`).
    pub(crate) fn tables(
        &mut self,
        diag: &mut Diagnostics<'_>,
        key: &str,
    ) -> Vec<TableReader<'a, 'i>> {
        let Some(value) = self.take(key) else {
            return Vec::new();
        };
        let path = self.key_path(key);
        match value.get_ref() {
            DeValue::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(n, item)| match item.get_ref() {
                    DeValue::Table(t) => {
                        Some(TableReader::new(format!("{path}[{n}]"), item.span(), t))
                    }
                    other => {
                        type_error(diag, item.span(), &format!("{path}[{n}]"), "a table", other);
                        None
                    }
                })
                .collect(),
            other => {
                type_error(
                    diag,
                    value.span(),
                    &path,
                    &format!("an array of tables ([[{key}]])"),
                    other,
                );
                Vec::new()
            }
        }
    }
}

fn type_error(
    diag: &mut Diagnostics<'_>,
    span: Range<usize>,
    path: &str,
    expected: &str,
    found: &DeValue<'_>,
) {
    // The key as written (`workers`, `hosts[2]`): what the hint shows;
    // tables by their TOML names (`site.cache`, not `site[0].cache`).
    let key = path.rsplit('.').next().unwrap_or(path);
    let bare = key.split('[').next().unwrap_or(key);
    let mut table = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            c if !in_index => table.push(c),
            _ => {}
        }
    }
    let hint = match expected {
        "a string" if key != bare => format!("put each entry of {bare} in double quotes"),
        "a string" => format!("put the value in double quotes: {key} = \"...\""),
        "a whole number" => format!("write the number without quotes: {key} = 4"),
        "true or false" => format!("write {key} = true or {key} = false, without quotes"),
        "a table" => {
            format!("write it as a table: [{table}] on a line of its own, with its keys below")
        }
        "a string or an array of strings" => {
            format!("write {bare} = \"...\" or {bare} = [\"...\", \"...\"]")
        }
        other if other.starts_with("an array of tables") => {
            format!("write each one as a [[{table}]] table, with its keys below")
        }
        _ => format!("see `{bare}` in docs/config.md"),
    };
    diag.error(
        span,
        path,
        format!("expected {expected}, found {}", found.type_str()),
        Some(hint),
    );
}

/// The known key nearest to `key` by edit distance, if any is close.
fn closest<'k>(key: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based() {
        let src = "a = 1\nbb = 2\n";
        assert_eq!(line_column(src, 0), (1, 1));
        assert_eq!(line_column(src, 6), (2, 1));
        assert_eq!(line_column(src, 11), (2, 6));
    }

    #[test]
    fn suggestions_find_near_misses() {
        assert_eq!(closest("listen", &["listen", "workers"]), Some("listen"));
        assert_eq!(closest("zzzzzz", &["listen", "workers"]), None);
    }
}
