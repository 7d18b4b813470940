//! User-facing errors, each with its exit code (see docs/exit-codes.md).

use std::path::{Path, PathBuf};

/// Exit codes: a stable, documented table.
pub mod exit {
    /// Every verdict is as expected.
    pub const OK: i32 = 0;
    /// A bug in kvmc.
    pub const INTERNAL: i32 = 1;
    /// Bad usage or bad input (flag, file, model, spec, trace, log).
    pub const USAGE: i32 = 2;
    /// A verdict differs from its expectation (or a model is vacuous, or a conformance log
    /// diverges from the model).
    pub const VERDICT: i32 = 10;
    /// A bound or timeout stopped a run before it reached a verdict.
    pub const INCOMPLETE: i32 = 13;
    /// Ctrl-C stopped the run (its partial report was printed).
    pub const INTERRUPTED: i32 = 130;
}

#[derive(Debug, thiserror::Error)]
pub enum KvmcError {
    /// A file could not be read.
    #[error("{}: {msg}", path.display())]
    Io { path: PathBuf, msg: String },
    /// A file was read but is not valid (TOML syntax or meaning).
    #[error("{}:{line}: {msg}", path.display())]
    Input { path: PathBuf, line: usize, msg: String },
    /// A bad flag or argument combination.
    #[error("{0}")]
    Usage(String),
    /// Something kvmc itself got wrong.
    #[error("internal error: {0}")]
    Internal(String),
}

impl KvmcError {
    pub fn exit_code(&self) -> i32 {
        match self {
            KvmcError::Io { .. } | KvmcError::Input { .. } | KvmcError::Usage(_) => exit::USAGE,
            KvmcError::Internal(_) => exit::INTERNAL,
        }
    }

    /// What kind of error: `"io"`, `"input"`, `"usage"` or `"internal"`.
    pub fn kind(&self) -> &'static str {
        match self {
            KvmcError::Io { .. } => "io",
            KvmcError::Input { .. } => "input",
            KvmcError::Usage(_) => "usage",
            KvmcError::Internal(_) => "internal",
        }
    }

    /// The file and line it points at, if any.
    pub fn location(&self) -> (Option<&Path>, Option<usize>) {
        match self {
            KvmcError::Io { path, .. } => (Some(path), None),
            KvmcError::Input { path, line, .. } => (Some(path), Some(*line)),
            _ => (None, None),
        }
    }

    /// The message without the file and line.
    pub fn message(&self) -> String {
        match self {
            KvmcError::Io { msg, .. } | KvmcError::Input { msg, .. } | KvmcError::Usage(msg) => msg.clone(),
            KvmcError::Internal(msg) => format!("internal error: {msg}"),
        }
    }

    /// The error as a `--format json` report (docs/exit-codes.md, "Errors in JSON and JUnit").
    pub fn to_json(&self) -> serde_json::Value {
        let (file, line) = self.location();
        serde_json::json!({
            "schema_version": crate::util::SCHEMA_VERSION,
            "kvmc_version": env!("CARGO_PKG_VERSION"),
            "ok": false,
            "exit_code": self.exit_code(),
            // The check report's rows: none ran.
            "results": [],
            "error": {
                "kind": self.kind(),
                "message": self.message(),
                "file": file.map(|p| p.display().to_string()),
                "line": line,
                "text": self.to_string(),
            },
        })
    }

    /// The error as a `--format junit` report: one test case that errored, so that a CI
    /// test view shows it instead of an empty report.
    pub fn to_junit(&self) -> String {
        let esc = |s: &str| {
            s.chars()
                .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
                .collect::<String>()
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;")
        };
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvmc\">\n  <testsuite name=\"kvmc\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0.000\">\n    <testcase classname=\"kvmc\" name=\"{kind} error (exit {code})\" time=\"0.000\"><error type=\"{kind}\" message=\"{msg}\">{text}</error></testcase>\n  </testsuite>\n</testsuites>\n",
            kind = self.kind(),
            code = self.exit_code(),
            msg = esc(&self.message()),
            text = esc(&self.to_string()),
        )
    }

    pub fn io(path: &Path, e: impl std::fmt::Display) -> Self {
        KvmcError::Io { path: path.to_path_buf(), msg: e.to_string() }
    }

    pub fn input(path: &Path, line: usize, msg: impl Into<String>) -> Self {
        KvmcError::Input { path: path.to_path_buf(), line, msg: msg.into() }
    }
}

/// 1-based line of byte offset `off` in `text`.
pub fn line_of_offset(text: &str, off: usize) -> usize {
    text[..off.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Read a text file. Bytes that are not UTF-8 are an input error at their line, naming the
/// byte offset (models, specs, scenarios, traces and logs are all read through this).
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| KvmcError::io(path, e))?;
    text_of(path, bytes)
}

/// `bytes` as text, or an input error naming the line, column and byte offset of the first
/// byte that is not UTF-8.
pub fn text_of(path: &Path, bytes: Vec<u8>) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        let off = e.utf8_error().valid_up_to();
        let b = e.as_bytes();
        let line = b[..off].iter().filter(|&&c| c == b'\n').count() + 1;
        let col = off - b[..off].iter().rposition(|&c| c == b'\n').map_or(0, |p| p + 1) + 1;
        KvmcError::input(path, line, format!("not UTF-8: byte offset {off} (column {col}) is 0x{:02x}", b[off]))
    })
}

/// Convert a `toml` deserialization error into an input error with its line.
pub fn toml_error(path: &Path, text: &str, e: toml::de::Error) -> KvmcError {
    let line = e.span().map_or(1, |s| line_of_offset(text, s.start));
    let msg = e.message().trim().to_string();
    KvmcError::input(path, line, msg)
}

pub type Result<T> = std::result::Result<T, KvmcError>;
