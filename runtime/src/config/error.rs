//! Configuration errors: every problem found, each with file, line, column,
//! key and a hint.

use std::fmt;
use std::path::PathBuf;

/// One problem in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// Dotted key, such as `server.listen[0]` or `site[1].root`.
    pub key: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something useful to say.
    pub hint: Option<String>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.message)?;
        } else {
            write!(
                f,
                "{}:{}:{}: {}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.key,
                self.message
            )?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// A configuration that cannot be used, with every problem found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    problems: Vec<Problem>,
}

impl ConfigError {
    pub(crate) fn new(problems: Vec<Problem>) -> Self {
        ConfigError { problems }
    }

    /// A single problem that is not tied to a place in a file.
    pub(crate) fn single(
        file: impl Into<PathBuf>,
        key: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> Self {
        ConfigError::new(vec![Problem {
            file: file.into(),
            line: 0,
            column: 0,
            key: key.to_owned(),
            message: message.into(),
            hint,
        }])
    }

    /// Every problem, in the order found.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(
            f,
            "invalid configuration ({n} problem{})",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}
