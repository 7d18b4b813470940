//! Parsing a conformance event log (docs/conformance-format.md): JSON Lines, one event per
//! line. Every malformed line is an input error naming the file and line.

use crate::error::{KvmcError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct Header {
    pub format: u32,
    pub implementation: String,
    pub version: String,
    #[serde(default)]
    pub scenario: String,
    pub connector: String,
    pub async_scheduling: bool,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    pub max_model_len: u32,
    #[serde(default)]
    pub long_prefill_token_threshold: u32,
    pub load_failure_policy: String,
    #[serde(default)]
    pub host_chunks: u32,
    #[serde(default = "one")]
    pub blocks_per_chunk: u32,
    #[serde(default = "yes")]
    pub offload_prompt_only: bool,
    #[serde(default)]
    pub eviction_policy: String,
    #[serde(default)]
    pub sync_load_budget_tokens: u32,
    #[serde(default = "yes")]
    pub enable_prefix_caching: bool,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct HostEntry {
    pub key: String,
    pub slot: u32,
    #[serde(rename = "ref")]
    pub ref_cnt: i32,
}

/// One line of a log.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Ev {
    Header(Header),
    Arrive {
        step: u32,
        req: String,
        prompt: Vec<u32>,
        max_tokens: u32,
        #[serde(default)]
        eos_token_id: Option<u32>,
    },
    Abort {
        step: u32,
        req: String,
    },
    Error {
        step: u32,
        req: String,
    },
    Sampled {
        step: u32,
        req: String,
        token: u32,
    },
    TransferDone {
        step: u32,
        job: u32,
    },
    TransferFailed {
        step: u32,
        job: u32,
        invalid_blocks: Vec<u32>,
    },
    Lookup {
        step: u32,
        req: String,
        local: u32,
        external: Option<u32>,
        #[serde(rename = "async")]
        load_async: bool,
    },
    Load {
        step: u32,
        job: u32,
        req: String,
        keys: Vec<String>,
        blocks: Vec<u32>,
        slots: Vec<u32>,
        sync: bool,
    },
    Store {
        step: u32,
        job: u32,
        req: String,
        keys: Vec<String>,
        blocks: Vec<u32>,
        slots: Vec<u32>,
    },
    StoreRefused {
        step: u32,
        req: String,
        keys: Vec<String>,
    },
    Evict {
        step: u32,
        medium: String,
        keys: Vec<String>,
    },
    Flush {
        step: u32,
        jobs: Vec<u32>,
    },
    Schedule {
        step: u32,
        scheduled: Vec<(String, u32)>,
        new: Vec<String>,
        resumed: Vec<String>,
        preempted: Vec<String>,
        finished: Vec<String>,
        tables: BTreeMap<String, Vec<u32>>,
    },
    Finish {
        step: u32,
        req: String,
        reason: String,
    },
    G1 {
        step: u32,
        free: Vec<u32>,
        cached: BTreeMap<String, Vec<u32>>,
    },
    Host {
        step: u32,
        entries: Vec<HostEntry>,
        order: Vec<String>,
    },
}

impl Ev {
    pub fn step(&self) -> u32 {
        match self {
            Ev::Header(_) => 0,
            Ev::Arrive { step, .. }
            | Ev::Abort { step, .. }
            | Ev::Error { step, .. }
            | Ev::Sampled { step, .. }
            | Ev::TransferDone { step, .. }
            | Ev::TransferFailed { step, .. }
            | Ev::Lookup { step, .. }
            | Ev::Load { step, .. }
            | Ev::Store { step, .. }
            | Ev::StoreRefused { step, .. }
            | Ev::Evict { step, .. }
            | Ev::Flush { step, .. }
            | Ev::Schedule { step, .. }
            | Ev::Finish { step, .. }
            | Ev::G1 { step, .. }
            | Ev::Host { step, .. } => *step,
        }
    }

    /// Inputs drive the model; everything else is a decision compared against it.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Ev::Header(_)
                | Ev::Arrive { .. }
                | Ev::Abort { .. }
                | Ev::Error { .. }
                | Ev::Sampled { .. }
                | Ev::TransferDone { .. }
                | Ev::TransferFailed { .. }
        )
    }
}

/// A parsed line with its 1-based line number and its text.
#[derive(Debug, Clone)]
pub struct Line {
    pub no: usize,
    pub text: String,
    pub ev: Ev,
}

/// Parse a whole log; the first line must be the header, steps never decrease, and every
/// request is named by an arrival before it is used.
pub fn parse(path: &Path, text: &str) -> Result<(Header, Vec<Line>)> {
    let mut lines = Vec::new();
    let mut header = None;
    let mut last_step = 0;
    let mut known: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let ev: Ev =
            serde_json::from_str(raw).map_err(|e| KvmcError::input(path, no, format!("not a valid event: {e}")))?;
        match (&ev, header.is_some()) {
            (Ev::Header(h), false) => {
                if h.format != 1 {
                    return Err(KvmcError::input(
                        path,
                        no,
                        format!("unsupported log format {} (kvmc reads format 1)", h.format),
                    ));
                }
                if !["offloading", "none"].contains(&h.connector.as_str()) {
                    return Err(KvmcError::input(
                        path,
                        no,
                        format!("connector {:?} is not modelled (offloading, none)", h.connector),
                    ));
                }
                if !["fail", "recompute"].contains(&h.load_failure_policy.as_str()) {
                    return Err(KvmcError::input(
                        path,
                        no,
                        format!("unknown load_failure_policy {:?}", h.load_failure_policy),
                    ));
                }
                if h.block_size == 0 || h.num_gpu_blocks < 2 || h.max_num_batched_tokens == 0 || h.blocks_per_chunk == 0
                {
                    return Err(KvmcError::input(path, no, "block_size, num_gpu_blocks (>= 2), max_num_batched_tokens and blocks_per_chunk must be positive"));
                }
                if h.connector == "offloading" && h.host_chunks == 0 {
                    return Err(KvmcError::input(
                        path,
                        no,
                        "host_chunks must be positive with the offloading connector",
                    ));
                }
                if !h.eviction_policy.is_empty() && h.eviction_policy != "lru" {
                    return Err(KvmcError::input(
                        path,
                        no,
                        format!("eviction_policy {:?} is not modelled (lru)", h.eviction_policy),
                    ));
                }
                header = Some(h.clone());
            }
            (Ev::Header(_), true) => return Err(KvmcError::input(path, no, "a second header")),
            (_, false) => return Err(KvmcError::input(path, no, "the first line must be the header")),
            (ev, true) => {
                let s = ev.step();
                if s == 0 {
                    return Err(KvmcError::input(path, no, "steps start at 1"));
                }
                if s < last_step {
                    return Err(KvmcError::input(
                        path,
                        no,
                        format!("step {s} after step {last_step}: steps never decrease"),
                    ));
                }
                last_step = s;
                match ev {
                    Ev::Arrive { req, prompt, max_tokens, .. } => {
                        if known.contains(req) {
                            return Err(KvmcError::input(path, no, format!("request {req} arrives twice")));
                        }
                        if prompt.is_empty() || *max_tokens == 0 {
                            return Err(KvmcError::input(
                                path,
                                no,
                                format!("request {req}: empty prompt or max_tokens 0"),
                            ));
                        }
                        known.push(req.clone());
                    }
                    Ev::Abort { req, .. }
                    | Ev::Error { req, .. }
                    | Ev::Sampled { req, .. }
                    | Ev::Finish { req, .. }
                    | Ev::Lookup { req, .. }
                        if !known.contains(req) =>
                    {
                        return Err(KvmcError::input(path, no, format!("request {req} is used before it arrives")));
                    }
                    _ => {}
                }
            }
        }
        lines.push(Line { no, text: raw.to_string(), ev });
    }
    let header = header.ok_or_else(|| KvmcError::input(path, 1, "empty log: no header"))?;
    Ok((header, lines))
}
