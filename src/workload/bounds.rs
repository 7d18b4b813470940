//! The `[workload]` table of a model file: the bounds of the workload space (docs/models.md,
//! "Workloads"). Parsed here into `Bounds`; `gen` enumerates the space.

use crate::error::{line_of_offset, KvmcError, Result};
use serde::Deserialize;
use std::path::Path;
use toml::{Spanned, Value};

/// The most distinct workloads a `[workload]` table may ask for (`max_workloads`).
pub const MAX_WORKLOADS: usize = 100_000;
/// The default of `max_workloads`: above this many distinct workloads the file is refused.
pub const DEFAULT_MAX_WORKLOADS: usize = 2_000;
/// The most workloads enumerated before deduplication (the raw product of the bounds).
pub const MAX_RAW: u64 = 5_000_000;
/// The most requests per workload (request names A..F; the canonical form tries every
/// permutation of the requests under `arrivals = "any"`).
pub const MAX_REQUESTS: u32 = 6;
/// The most block letters.
pub const MAX_ALPHABET: u32 = 6;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkload {
    requests: Spanned<Value>,
    #[serde(default)]
    alphabet: Option<Spanned<u32>>,
    #[serde(default)]
    prompt_blocks: Option<Spanned<Value>>,
    #[serde(default)]
    partial: Option<bool>,
    #[serde(default)]
    output: Option<Spanned<Value>>,
    #[serde(default)]
    end: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    arrivals: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    after: Option<bool>,
    #[serde(default)]
    sessions: Option<Spanned<u32>>,
    #[serde(default)]
    turns: Option<Spanned<Value>>,
    #[serde(default)]
    turn_blocks: Option<Spanned<Value>>,
    #[serde(default)]
    gpu_blocks: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    host_chunks: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    cpu_blocks: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    starts: Option<Spanned<Vec<u32>>>,
    #[serde(default)]
    max_workloads: Option<Spanned<u64>>,
}

/// Which pool a workload resizes besides G1.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum HostKey {
    None,
    HostChunks,
    CpuBlocks,
}

/// The bounds of a workload space, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Number of requests per workload, inclusive.
    pub requests: (u32, u32),
    /// Block letters a, b, ...: each letter is one full block of `block_size` tokens.
    pub alphabet: u32,
    /// Full blocks per prompt, inclusive.
    pub prompt_blocks: (u32, u32),
    /// Prompts (and inputs) may also end mid-block: 1..block_size-1 tokens of a letter.
    pub partial: bool,
    /// Sampled tokens per request (and per turn), inclusive.
    pub output: (u32, u32),
    /// How requests end, each listed one enumerated: 0 = length, 1 = stop (EOS), 2 = stop with
    /// one token of `max_tokens` left (a request's first input only: under async scheduling
    /// its next step is in flight when EOS stops it; a session's later inputs end by stop).
    pub ends: Vec<u8>,
    /// Arrival modes enumerated: false = in-order, true = any.
    pub arrivals: Vec<bool>,
    /// Also workloads where a request arrives only after an earlier one finished.
    pub after: bool,
    /// At most this many requests are streaming sessions.
    pub sessions: u32,
    /// Further inputs of a session, inclusive (at least 1).
    pub turns: (u32, u32),
    /// Full blocks per further input, inclusive.
    pub turn_blocks: (u32, u32),
    /// G1 sizes (`gpu_blocks`) enumerated.
    pub gpu_blocks: Vec<u32>,
    /// Host-tier sizes enumerated (`host_chunks` or `cpu_blocks`; empty: the file's own).
    pub host: Vec<u32>,
    pub host_key: HostKey,
    /// Router replay: `start` positions enumerated (each capped at the prompt's length).
    pub starts: Vec<u32>,
    pub max_workloads: usize,
    pub block_size: u32,
    /// Letters that keep their identity under renaming (they appear in a Mooncake preload).
    pub fixed_letters: Vec<u8>,
    /// The line of the `[workload]` table (for messages).
    pub line: usize,
}

/// Context the table is validated against: what the rest of the model file says.
pub(super) struct FileFacts {
    pub block_size: u32,
    pub gpu_blocks: u32,
    pub host_key: HostKey,
    pub host: Option<u32>,
    pub nixl: bool,
    pub rows: bool,
    pub arrivals_any: bool,
    pub preload: Vec<String>,
}

/// `n` or `[min, max]`.
fn range(
    v: &Option<Spanned<Value>>,
    default: (u32, u32),
    key: &str,
    lo: u32,
    hi: u32,
    bad: &dyn Fn(std::ops::Range<usize>, String) -> KvmcError,
) -> Result<(u32, u32)> {
    let Some(v) = v else { return Ok(default) };
    let int = |x: &Value| x.as_integer().filter(|i| (0..=u32::MAX as i64).contains(i)).map(|i| i as u32);
    let r = match v.get_ref() {
        Value::Integer(_) => int(v.get_ref()).map(|n| (n, n)),
        Value::Array(a) if a.len() == 2 => match (int(&a[0]), int(&a[1])) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => None,
        },
        _ => None,
    };
    match r {
        Some((x, y)) if x <= y && x >= lo && y <= hi => Ok((x, y)),
        _ => Err(bad(v.span(), format!("{key} must be N or [MIN, MAX] with {lo} <= MIN <= MAX <= {hi}"))),
    }
}

impl RawWorkload {
    /// Does the table enumerate arrival modes itself?
    pub(super) fn enumerates_arrivals(&self) -> bool {
        self.arrivals.is_some()
    }

    /// Validate against the rest of the file. `at` is the table's line.
    pub(super) fn bounds(&self, path: &Path, text: &str, line: usize, f: &FileFacts) -> Result<Bounds> {
        let bad = |sp: std::ops::Range<usize>, msg: String| {
            KvmcError::input(path, if sp.is_empty() { line } else { line_of_offset(text, sp.start) }, msg)
        };
        let at_table = |msg: String| KvmcError::input(path, line, msg);
        let requests = range(&Some(self.requests.clone()), (1, 1), "requests", 1, MAX_REQUESTS, &bad)?;
        let alphabet = match &self.alphabet {
            None => 2,
            Some(a) if (1..=MAX_ALPHABET).contains(a.get_ref()) => *a.get_ref(),
            Some(a) => return Err(bad(a.span(), format!("alphabet must be 1..={MAX_ALPHABET} block letters"))),
        };
        let prompt_blocks = range(&self.prompt_blocks, (1, 2), "prompt_blocks", 0, 8, &bad)?;
        let partial = self.partial.unwrap_or(false) && f.block_size > 1;
        if prompt_blocks.1 == 0 && !partial {
            return Err(at_table("prompt_blocks = 0 needs partial = true (a prompt has at least one token)".into()));
        }
        let output = range(&self.output, (1, 1), "output", 1, 8, &bad)?;
        let ends = match &self.end {
            None => vec![0],
            Some(e) => list(e, &["length", "stop", "stop-early"], "end", &bad)?.into_iter().map(|i| i as u8).collect(),
        };
        let arrivals = match &self.arrivals {
            None => vec![f.arrivals_any],
            Some(a) => list(a, &["in-order", "any"], "arrivals", &bad)?.into_iter().map(|i| i == 1).collect(),
        };
        let sessions = match &self.sessions {
            None => 0,
            Some(s) if *s.get_ref() <= requests.1 => *s.get_ref(),
            Some(s) => return Err(bad(s.span(), format!("sessions must be 0..={} (the most requests)", requests.1))),
        };
        let turns = range(&self.turns, (1, 1), "turns", 1, 8, &bad)?;
        let turn_blocks = range(&self.turn_blocks, (1, 1), "turn_blocks", 0, 8, &bad)?;
        if sessions > 0 && turn_blocks.1 == 0 && !partial {
            return Err(at_table("turn_blocks = 0 needs partial = true (an input has at least one token)".into()));
        }
        if f.nixl && (output != (1, 1) || sessions > 0) {
            return Err(at_table(
                "with connector = \"nixl\" every request is a P/D prefill request: output = 1 and sessions = 0".into(),
            ));
        }
        let sizes = |v: &Option<Spanned<Vec<u32>>>, key: &str, lo: u32, hi: u32| -> Result<Option<Vec<u32>>> {
            let Some(v) = v else { return Ok(None) };
            let mut xs = v.get_ref().clone();
            xs.sort_unstable();
            xs.dedup();
            if xs.is_empty() || xs.len() > 8 || xs.iter().any(|x| !(lo..=hi).contains(x)) {
                return Err(bad(v.span(), format!("{key} must list 1 to 8 sizes, each {lo}..={hi}")));
            }
            Ok(Some(xs))
        };
        let gpu_blocks = sizes(&self.gpu_blocks, "gpu_blocks", 2, 64)?.unwrap_or(vec![f.gpu_blocks]);
        let (host, host_key) = match (&self.host_chunks, &self.cpu_blocks, f.host_key) {
            (Some(_), _, k) if k != HostKey::HostChunks => {
                return Err(at_table("host_chunks needs connector = \"offloading\" and an [offload] table".into()))
            }
            (_, Some(_), k) if k != HostKey::CpuBlocks => {
                return Err(at_table("cpu_blocks needs connector = \"simple-cpu\" and a [simple_cpu] table".into()))
            }
            (Some(_), _, _) => (sizes(&self.host_chunks, "host_chunks", 1, 64)?.unwrap_or_default(), f.host_key),
            (_, Some(_), _) => (sizes(&self.cpu_blocks, "cpu_blocks", 2, 64)?.unwrap_or_default(), f.host_key),
            _ => (f.host.into_iter().collect(), f.host_key),
        };
        let starts = match &self.starts {
            None => vec![0],
            Some(_) if !f.rows => return Err(at_table("starts needs a [router_replay] table".into())),
            Some(s) => {
                let mut xs = s.get_ref().clone();
                xs.sort_unstable();
                xs.dedup();
                if xs.is_empty() || xs.len() > 8 || xs.iter().any(|x| *x > 64) {
                    return Err(bad(s.span(), "starts must list 1 to 8 token positions, each 0..=64".into()));
                }
                xs
            }
        };
        let max_workloads = match &self.max_workloads {
            None => DEFAULT_MAX_WORKLOADS,
            Some(m) if (1..=MAX_WORKLOADS as u64).contains(m.get_ref()) => *m.get_ref() as usize,
            Some(m) => return Err(bad(m.span(), format!("max_workloads must be 1..={MAX_WORKLOADS}"))),
        };
        let mut fixed_letters: Vec<u8> = f
            .preload
            .iter()
            .flat_map(|p| p.bytes())
            .filter(|c| (b'a'..b'a' + alphabet as u8).contains(c))
            .map(|c| c - b'a')
            .collect();
        fixed_letters.sort_unstable();
        fixed_letters.dedup();
        Ok(Bounds {
            requests,
            alphabet,
            prompt_blocks,
            partial,
            output,
            ends,
            arrivals,
            after: self.after.unwrap_or(false),
            sessions,
            turns,
            turn_blocks,
            gpu_blocks,
            host,
            host_key,
            starts,
            max_workloads,
            block_size: f.block_size,
            fixed_letters,
            line,
        })
    }
}

/// A list of names from `allowed`, as indices (sorted, deduplicated, not empty).
fn list(
    v: &Spanned<Vec<String>>,
    allowed: &[&str],
    key: &str,
    bad: &dyn Fn(std::ops::Range<usize>, String) -> KvmcError,
) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for s in v.get_ref() {
        match allowed.iter().position(|a| a == s) {
            Some(i) => out.push(i),
            None => {
                let names: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
                return Err(bad(v.span(), format!("{key} lists {s:?}; it accepts {}", names.join(", "))));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(bad(v.span(), format!("{key} must list at least one value")));
    }
    Ok(out)
}
