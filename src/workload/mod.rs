//! Workloads as a search dimension: a model file with a `[workload]` table instead of named
//! `[[request]]`s stands for every workload within its bounds (docs/models.md, "Workloads").
//!
//! The checker runs it as an outer loop: `gen` enumerates the workloads and keeps one per
//! isomorphism class; each becomes an ordinary model file (the file's own text, the
//! `[workload]` table commented out, pool sizes substituted in place, and one `[[request]]`
//! per generated request appended), parsed by `Scope::parse` and explored by the same
//! `gate::execute` as every hand-written scope (`family`). Lines are kept, so an error in the
//! file's other tables names its own line. A counterexample's workload is written out as that
//! model file (`kvmc check --out DIR`), which `kvmc check FILE` re-runs on its own.

pub mod bounds;
pub mod gen;

use crate::error::{line_of_offset, read_text, toml_error, KvmcError, Result};
use crate::scope::Scope;
use bounds::{Bounds, FileFacts, HostKey, RawWorkload};
pub use gen::Workload;
use gen::{Fit, Space};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use toml::Spanned;

/// What we read of a model file besides its `[workload]` table: the spans of the sizes a
/// workload may substitute, and the facts its bounds are validated against.
#[derive(Deserialize)]
struct Outline {
    #[serde(default)]
    workload: Option<Spanned<RawWorkload>>,
    #[serde(default)]
    engine: Option<EngineOutline>,
    #[serde(default)]
    offload: Option<SizeOutline>,
    #[serde(default)]
    simple_cpu: Option<CpuOutline>,
    #[serde(default)]
    mooncake: Option<MooncakeOutline>,
    #[serde(default)]
    router_replay: Option<toml::Value>,
    #[serde(default)]
    request: Option<Spanned<toml::Value>>,
    #[serde(default)]
    bounds: Option<BoundsOutline>,
}

#[derive(Deserialize)]
struct EngineOutline {
    #[serde(default)]
    connector: Option<String>,
    block_size: Option<Spanned<u32>>,
    gpu_blocks: Option<Spanned<u32>>,
    #[serde(default)]
    max_model_len: Option<u32>,
}

#[derive(Deserialize)]
struct SizeOutline {
    host_chunks: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
struct CpuOutline {
    cpu_blocks: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
struct MooncakeOutline {
    #[serde(default)]
    preload: Vec<String>,
}

#[derive(Deserialize)]
struct BoundsOutline {
    #[serde(default)]
    arrivals: Option<Spanned<String>>,
}

/// A model file's workload space, ready to realize workloads from.
#[derive(Clone, Debug)]
pub struct Family {
    /// The model's name as the specs write it (`deep/offload-sync`).
    pub name: String,
    pub path: PathBuf,
    pub bounds: Bounds,
    /// Every canonical workload, smallest first; workload `k` is named `w{k+1}`.
    pub workloads: Vec<Workload>,
    pub raw: u64,
    pub pruned: usize,
    /// This run explores workloads `k` with `k % shard.1 == shard.0 - 1`.
    pub shard: (usize, usize),
    /// The file's text with the `[workload]` table commented out (same lines).
    base: String,
    /// Byte spans of `gpu_blocks` and of `host_chunks` / `cpu_blocks` in `base`.
    gpu_span: std::ops::Range<usize>,
    host_span: Option<std::ops::Range<usize>>,
    /// Where the workload's arrival mode goes when `[workload] arrivals` enumerates it: the
    /// offset in `base` after the `[bounds]` header line, or `usize::MAX` (no `[bounds]`:
    /// a table is appended); None when the file's own mode applies to every workload.
    arrivals_at: Option<usize>,
}

/// Does this model file have a `[workload]` table?
pub fn is_workload_model(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("workload"))
}

/// A loaded model: its scope (a family's first workload), its family if any, its warnings.
pub type Loaded = (Arc<Scope>, Option<Arc<Family>>, Vec<String>);

/// Load a model file: a plain scope, or (with `[workload]`) a family and its representative
/// scope (its first workload, named after the family). `name` is the model's name.
pub fn load_model(path: &Path, name: &str) -> Result<Loaded> {
    let text = read_text(path)?;
    if !is_workload_model(&text) {
        let (mut s, w) = Scope::parse_warn(&file_stem(path), path, &text)?;
        if name != s.name {
            s.name = name.to_string();
        }
        return Ok((Arc::new(s), None, w));
    }
    let fam = Family::parse(name, path, &text)?;
    let mut rep = fam.scope(0)?;
    rep.name = name.to_string();
    Ok((Arc::new(rep), Some(Arc::new(fam)), Vec::new()))
}

fn file_stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Is this line a table header (`[name]` or `[[name]]`)?
fn is_header(l: &str) -> bool {
    let t = l.trim();
    let t = t.split('#').next().unwrap_or("").trim_end();
    t.starts_with('[')
        && t.ends_with(']')
        && t.trim_matches(|c| c == '[' || c == ']').trim().starts_with(|c: char| c.is_alphabetic())
}

/// The line (0-based) of the `[name]` table header.
fn table_line(text: &str, name: &str) -> Option<usize> {
    text.lines().position(|l| {
        let t = l.split('#').next().unwrap_or("").trim();
        t.strip_prefix('[').and_then(|t| t.strip_suffix(']')).is_some_and(|t| t.trim() == name)
    })
}

/// The lines of the `[workload]` table: from its header to the next table header.
fn workload_lines(text: &str) -> Option<(usize, usize)> {
    let start = table_line(text, "workload")?;
    let lines: Vec<&str> = text.lines().collect();
    let end = (start + 1..lines.len()).find(|&i| is_header(lines[i])).unwrap_or(lines.len());
    Some((start, end))
}

impl Family {
    /// Parse a model file with a `[workload]` table.
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Family> {
        let o: Outline = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
        let Some(w) = &o.workload else {
            return Err(KvmcError::input(path, 1, "no [workload] table"));
        };
        let line = line_of_offset(text, w.span().start);
        if let Some(r) = &o.request {
            return Err(KvmcError::input(
                path,
                line_of_offset(text, r.span().start),
                "a model has either [[request]]s or a [workload] table, not both",
            ));
        }
        let Some((first, end)) = workload_lines(text) else {
            return Err(KvmcError::input(path, line, "write the workload bounds as a [workload] table"));
        };
        // Comment the table out, keeping every line (and so every other table's line number).
        let mut base = String::with_capacity(text.len() + 64);
        for (i, l) in text.split_inclusive('\n').enumerate() {
            if (first..end).contains(&i) {
                base.push_str("# ");
            }
            base.push_str(l);
        }
        let mut before: toml::Table = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
        before.remove("workload");
        match toml::from_str::<toml::Table>(&base) {
            Ok(after) if after == before => {}
            _ => {
                return Err(KvmcError::input(
                    path,
                    line,
                    "the [workload] table must be one table of its own (its values on its own lines, up to the next table header)",
                ))
            }
        }
        let engine = o.engine.as_ref().ok_or_else(|| KvmcError::input(path, 1, "missing table [engine]"))?;
        let (Some(bs), Some(gb)) = (&engine.block_size, &engine.gpu_blocks) else {
            // Scope::parse names the missing key.
            return Err(Scope::parse(&file_stem(path), path, &base)
                .err()
                .unwrap_or_else(|| KvmcError::input(path, 1, "[engine] needs block_size and gpu_blocks")));
        };
        let connector = engine.connector.clone().unwrap_or_default();
        let (host_key, host_span, host) = match (connector.as_str(), &o.offload, &o.simple_cpu) {
            ("offloading", Some(SizeOutline { host_chunks: Some(h) }), _) => {
                (HostKey::HostChunks, Some(h.span()), Some(*h.get_ref()))
            }
            ("simple-cpu", _, Some(CpuOutline { cpu_blocks: Some(c) })) => {
                (HostKey::CpuBlocks, Some(c.span()), Some(*c.get_ref()))
            }
            _ => (HostKey::None, None, None),
        };
        let facts = FileFacts {
            block_size: *bs.get_ref(),
            gpu_blocks: *gb.get_ref(),
            host_key,
            host,
            nixl: connector == "nixl",
            rows: o.router_replay.is_some(),
            arrivals_any: o.bounds.as_ref().and_then(|b| b.arrivals.as_ref()).is_some_and(|a| a.get_ref() == "any"),
            preload: o.mooncake.map(|m| m.preload).unwrap_or_default(),
        };
        let bounds = w.get_ref().bounds(path, text, line, &facts)?;
        let arrivals_at = if w.get_ref().enumerates_arrivals() {
            if let Some(a) = o.bounds.as_ref().and_then(|b| b.arrivals.as_ref()) {
                return Err(KvmcError::input(
                    path,
                    line_of_offset(text, a.span().start),
                    "[bounds] arrivals and [workload] arrivals both set the arrival mode: keep one",
                ));
            }
            match table_line(&base, "bounds") {
                Some(l) => Some(base.split_inclusive('\n').take(l + 1).map(str::len).sum()),
                None => Some(usize::MAX),
            }
        } else {
            None
        };
        let err = |m: String| KvmcError::input(path, line, m);
        let Space { workloads, raw, pruned } =
            gen::enumerate(&bounds, &Fit { max_model_len: engine.max_model_len }, &err)?;
        // Offsets in `base`: every commented line before the span adds two bytes.
        let shift = |sp: std::ops::Range<usize>| {
            let l = line_of_offset(text, sp.start) - 1;
            let add = 2 * (first..end).filter(|&i| i < l).count();
            sp.start + add..sp.end + add
        };
        let fam = Family {
            name: name.to_string(),
            path: path.to_path_buf(),
            bounds,
            workloads,
            raw,
            pruned,
            shard: (1, 1),
            gpu_span: shift(gb.span()),
            host_span: host_span.map(shift),
            arrivals_at,
            base,
        };
        // The base tables are checked once, with the first workload: their errors name the
        // file's own lines.
        let text0 = fam.model_text(0, false);
        Scope::parse(&file_stem(path), path, &text0)?;
        fam.scope(0)?;
        Ok(fam)
    }

    /// Workload `k`'s label.
    pub fn label(k: usize) -> String {
        crate::report::coverage::workload_label(k)
    }

    /// The indices this run explores (its shard of the space).
    pub fn mine(&self) -> impl Iterator<Item = usize> + '_ {
        let (i, n) = self.shard;
        (0..self.workloads.len()).filter(move |k| k % n == i - 1)
    }

    /// Workload `k` as an ordinary model file.
    /// With `arrivals`, the workload's arrival mode is written into `[bounds]` when
    /// `[workload] arrivals` enumerates it (that adds a line after `[bounds]`).
    pub fn model_text(&self, k: usize, arrivals: bool) -> String {
        let w = &self.workloads[k];
        let b = self.bounds.block_size;
        let mut edits: Vec<(std::ops::Range<usize>, String)> = vec![(self.gpu_span.clone(), w.gpu_blocks.to_string())];
        if let Some(h) = &self.host_span {
            edits.push((h.clone(), w.host.to_string()));
        }
        let arrivals_at = self.arrivals_at.filter(|_| arrivals);
        if let Some(pos) = arrivals_at.filter(|&p| p != usize::MAX) {
            edits.push((pos..pos, format!("arrivals = \"{}\"\n", if w.any { "any" } else { "in-order" })));
        }
        edits.sort_by_key(|e| std::cmp::Reverse(e.0.start));
        let mut t = self.base.clone();
        for (sp, s) in edits {
            t.replace_range(sp, &s);
        }
        if !t.ends_with('\n') {
            t.push('\n');
        }
        t.push_str(&format!(
            "\n# ---- workload {} of {} ({} of {}; generated by kvmc from the [workload] table above) ----\n",
            Self::label(k),
            self.name,
            k + 1,
            self.workloads.len()
        ));
        t.push_str(&format!("# {}\n", w.summary(b)));
        let out_char = |i: usize| char::from(b'P' + i as u8);
        for (i, r) in w.reqs.iter().enumerate() {
            t.push_str(&format!("\n[[request]]\nname = \"{}\"\n", gen::name(i)));
            t.push_str(&format!("prompt = \"{}\"\n", r.prompt.text(b)));
            t.push_str(&format!("output = \"{}\"\n", out_char(i).to_string().repeat(r.output as usize)));
            if r.stop {
                t.push_str("end = \"stop\"\n");
            }
            if r.room {
                t.push_str(&format!("max_tokens = {}\n", r.output + 1));
            }
            if let Some(a) = r.after {
                t.push_str(&format!("after = \"{}\"\n", gen::name(a as usize)));
            }
            if self.bounds.starts != [0] {
                t.push_str(&format!("start = {}\n", r.start));
            }
            for tn in &r.turns {
                t.push_str(&format!("[[request.turn]]\ninput = \"{}\"\n", tn.input.text(b)));
                t.push_str(&format!("output = \"{}\"\n", out_char(i).to_string().repeat(tn.output as usize)));
                if tn.stop {
                    t.push_str("end = \"stop\"\n");
                }
            }
        }
        if let Some(pos) = arrivals_at {
            if pos == usize::MAX {
                t.push_str(&format!("\n[bounds]\narrivals = \"{}\"\n", if w.any { "any" } else { "in-order" }));
            }
        }
        t
    }

    /// Workload `k` as a scope (named `NAME#wK`).
    pub fn scope(&self, k: usize) -> Result<Scope> {
        let text = self.model_text(k, true);
        let name = format!("{}#{}", self.name, Self::label(k));
        Scope::parse(&name, &self.path, &text).map_err(|e| match e {
            // An error past the file's own lines is in a generated request: say which.
            KvmcError::Input { line, msg, .. } if line > self.base.lines().count() => KvmcError::input(
                &self.path,
                self.bounds.line,
                format!(
                    "generated workload {} ({}) is refused: {msg}",
                    Self::label(k),
                    self.workloads[k].summary(self.bounds.block_size)
                ),
            ),
            e => e,
        })
    }
}
