//! The repository's `models/` built into the binary (build.rs), so that `kvmc check` run
//! outside a checkout (an installed kvmc) checks the same models and gives the same verdicts.
//! They are written once to a directory under the system's temporary directory, named after
//! kvmc's version and the models' contents, and read from there like `--models DIR`.

use crate::error::{KvmcError, Result};
use std::path::{Path, PathBuf};

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_models.rs"));
}
pub use embedded::EMBEDDED;

/// FNV-1a over every (path, text): the directory's name changes with the contents.
fn digest() -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for (p, t) in EMBEDDED {
        for b in p.bytes().chain([0]).chain(t.bytes()).chain([0]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// The directory holding the built-in models, written on first use.
pub fn dir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("kvmc-{}-models-{:016x}", env!("CARGO_PKG_VERSION"), digest()));
    if d.join(".complete").is_file() {
        return Ok(d);
    }
    // Written into a private directory first and renamed, so that concurrent runs never read
    // half-written files.
    let tmp = d.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (rel, text) in EMBEDDED {
        let p = tmp.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| KvmcError::io(parent, e))?;
        }
        std::fs::write(&p, text).map_err(|e| KvmcError::io(&p, e))?;
    }
    std::fs::write(tmp.join(".complete"), "").map_err(|e| KvmcError::io(&tmp, e))?;
    if std::fs::rename(&tmp, &d).is_err() {
        // Another run got there first (or d is a stale partial copy: replace it).
        let _ = std::fs::remove_dir_all(&tmp);
        if !d.join(".complete").is_file() {
            return Err(KvmcError::io(&d, "cannot write the built-in models here; pass --models DIR"));
        }
    }
    Ok(d)
}

/// The models directory to read: `requested` if it exists; when it is the default
/// (`models`) and absent, the built-in models (with a note on stderr).
pub fn resolve(requested: &Path) -> Result<PathBuf> {
    if requested.is_dir() || requested != Path::new("models") {
        return Ok(requested.to_path_buf());
    }
    let d = dir()?;
    if !crate::util::quiet() {
        eprintln!(
            "note: no ./models here: checking the {} models built into this kvmc (copied to {}); --models DIR reads others",
            EMBEDDED.len(),
            d.display()
        );
    }
    Ok(d)
}
