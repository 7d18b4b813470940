//! Parsing a conformance event log (docs/conformance-format.md): JSON Lines, one event per
//! line. Every malformed line is an input error naming the file and line.

pub use super::header::{Header, MooncakeHeader};
use crate::error::{KvmcError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct HostEntry {
    pub key: String,
    pub slot: u32,
    #[serde(rename = "ref")]
    pub ref_cnt: i32,
}

/// `ARCCachePolicy`'s state at the end of a step: T1, T2, B1 and B2 from LRU to MRU (key
/// labels; a ghost key no request names is `?` and its hash), and `target_t1_size`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArcSnapshot {
    pub t1: Vec<String>,
    pub t2: Vec<String>,
    pub b1: Vec<String>,
    pub b2: Vec<String>,
    pub target: f64,
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
        /// A streaming-input session (vLLM `Request.resumable`): `stream_input` lines follow.
        #[serde(default)]
        resumable: bool,
    },
    /// A session's next input (`Scheduler.add_request` with the session's id).
    StreamInput {
        step: u32,
        req: String,
        prompt: Vec<u32>,
        max_tokens: u32,
        #[serde(default)]
        eos_token_id: Option<u32>,
    },
    /// The end-of-session sentinel (`add_request` with a non-resumable request of that id).
    StreamEnd {
        step: u32,
        req: String,
    },
    /// The input (or sentinel) just sent waits in `streaming_queue`; `queued` is its length.
    StreamQueued {
        step: u32,
        req: String,
        queued: u32,
    },
    /// `_handle_stopped_request` on a session: its input `turn` (1-based) stopped.
    TurnEnd {
        step: u32,
        req: String,
        turn: u32,
        reason: String,
    },
    /// `_update_request_as_session`: the session takes its input `turn` (2, 3, ...).
    TurnStart {
        step: u32,
        req: String,
        turn: u32,
        num_computed: u32,
        num_prompt_tokens: u32,
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
        /// SimpleCPU: which stream's event (`"store"` or `"load"`; separate counters).
        #[serde(default)]
        kind: Option<String>,
    },
    TransferFailed {
        step: u32,
        job: u32,
        /// The job's unwritten blocks (`invalid_block_ids`, 0.24 to 0.33); absent: the job
        /// failed as a whole (0.34's `failed_jobs`, its request in `failed_recving`).
        #[serde(default)]
        invalid_blocks: Option<Vec<u32>>,
    },
    Lookup {
        step: u32,
        req: String,
        local: u32,
        external: Option<u32>,
        #[serde(rename = "async")]
        load_async: bool,
        /// SimpleCPU: the CPU blocks this lookup pinned (`_pending_cpu_hits`).
        #[serde(default)]
        pins: Option<Vec<u32>>,
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
        /// Negative when vLLM scheduled a request past `max_model_len` (0.24's sessions that
        /// outgrow it: the next `update_from_output` asserts, the log ends `partial`).
        scheduled: Vec<(String, i64)>,
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
        /// The ARC policy's lists (`eviction_policy = "arc"`; absent under LRU).
        #[serde(default)]
        arc: Option<ArcSnapshot>,
    },
    /// SimpleCPU: `_process_store_event`: store event `job`'s CPU blocks registered under keys.
    StoreCompleted {
        step: u32,
        job: u32,
        keys: Vec<String>,
        slots: Vec<u32>,
    },
    /// SimpleCPU: `_cleanup_load_request` for a request in `finished_recving` (load event `job`).
    LoadCompleted {
        step: u32,
        req: String,
        job: u32,
    },
    /// SimpleCPU, end of step: the CPU `BlockPool` (free queue head first, cached map, ref
    /// counts of referenced blocks) and the lookup pins still held, per request.
    Cpu {
        step: u32,
        free: Vec<u32>,
        cached: BTreeMap<String, Vec<u32>>,
        /// Block id (a JSON object key, so a string) -> ref count.
        refs: BTreeMap<String, u32>,
        pins: BTreeMap<String, Vec<u32>>,
    },
    /// Mooncake, end of step: the pool's keys (labels, sorted) and the save jobs' GPU block
    /// references (`_pinned_saves`: job id, a string, -> block ids).
    Mooncake {
        step: u32,
        pool: Vec<String>,
        pinned: BTreeMap<String, Vec<u32>>,
    },
    /// NIXL producer, `wait_for_save` -> `save_kv_to_host`: request `req`'s entry of the step's
    /// `reqs_to_save`, its GPU blocks copied to the host buffer after the forward pass, and how
    /// many leading positions of each held the request's KV when copied.
    NixlSave {
        step: u32,
        req: String,
        blocks: Vec<u32>,
        filled: Vec<u32>,
    },
    /// NIXL producer, an input before the step's `schedule()`: the decode instance reads
    /// `req`'s `remote_block_ids` (`blocks`, the first `cdiv(tokens, block_size)` used) over
    /// `remote_num_tokens` (`tokens`) from the host buffer and notifies the producer; `stale`:
    /// the blocks whose host copy did not hold the request's KV.
    ConsumerRead {
        step: u32,
        req: String,
        blocks: Vec<u32>,
        tokens: u32,
        stale: Vec<u32>,
    },
    /// NIXL producer, `get_finished`: `req` in the step's `finished_sending` (the consumer's
    /// notification arrived); the scheduler frees its blocks.
    FinishedSending {
        step: u32,
        req: String,
    },
    /// NIXL producer, end of step: `_reqs_need_save` (sorted) and the finished requests whose
    /// blocks wait for the consumer (`delay_free_blocks`), with their blocks.
    Nixl {
        step: u32,
        need_save: Vec<String>,
        held: BTreeMap<String, Vec<u32>>,
    },
}

impl Ev {
    pub fn step(&self) -> u32 {
        match self {
            Ev::Header(_) => 0,
            Ev::Arrive { step, .. }
            | Ev::Abort { step, .. }
            | Ev::Error { step, .. }
            | Ev::StreamInput { step, .. }
            | Ev::StreamEnd { step, .. }
            | Ev::StreamQueued { step, .. }
            | Ev::TurnEnd { step, .. }
            | Ev::TurnStart { step, .. }
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
            | Ev::Host { step, .. }
            | Ev::StoreCompleted { step, .. }
            | Ev::LoadCompleted { step, .. }
            | Ev::Cpu { step, .. }
            | Ev::Mooncake { step, .. }
            | Ev::NixlSave { step, .. }
            | Ev::ConsumerRead { step, .. }
            | Ev::FinishedSending { step, .. }
            | Ev::Nixl { step, .. } => *step,
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
                | Ev::StreamInput { .. }
                | Ev::StreamEnd { .. }
                | Ev::Sampled { .. }
                | Ev::TransferDone { .. }
                | Ev::TransferFailed { .. }
                | Ev::ConsumerRead { .. }
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
/// request is named by an arrival before it is used. Only a session (`"resumable": true`)
/// gets further inputs, none after its end-of-session sentinel, and every session gets at
/// least one (kvmc models a session by its inputs), unless the log is `partial`: a run the
/// recorder stopped (an engine that hung or died) may end before a session's next input.
pub fn parse(path: &Path, text: &str, partial: bool) -> Result<(Header, Vec<Line>)> {
    let mut lines = Vec::new();
    let mut header = None;
    let mut last_step = 0;
    let mut known: Vec<String> = Vec::new();
    // Sessions: (name, arrive line, inputs sent, ended).
    let mut sessions: Vec<(String, usize, u32, bool)> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let no = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let ev: Ev =
            serde_json::from_str(raw).map_err(|e| KvmcError::input(path, no, format!("not a valid event: {e}")))?;
        match (&ev, header.is_some()) {
            (Ev::Header(h), false) => {
                super::header::check(path, no, h)?;
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
                    Ev::Arrive { req, prompt, max_tokens, resumable, .. } => {
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
                        if *resumable {
                            sessions.push((req.clone(), no, 0, false));
                        }
                    }
                    Ev::Abort { req, .. }
                    | Ev::Error { req, .. }
                    | Ev::Sampled { req, .. }
                    | Ev::Finish { req, .. }
                    | Ev::Lookup { req, .. }
                    | Ev::StreamInput { req, .. }
                    | Ev::StreamEnd { req, .. }
                    | Ev::StreamQueued { req, .. }
                    | Ev::TurnEnd { req, .. }
                    | Ev::TurnStart { req, .. }
                    | Ev::LoadCompleted { req, .. }
                    | Ev::NixlSave { req, .. }
                    | Ev::ConsumerRead { req, .. }
                    | Ev::FinishedSending { req, .. }
                        if !known.contains(req) =>
                    {
                        return Err(KvmcError::input(path, no, format!("request {req} is used before it arrives")));
                    }
                    Ev::StreamInput { req, .. } | Ev::StreamEnd { req, .. } => {
                        let Some(s) = sessions.iter_mut().find(|s| &s.0 == req) else {
                            return Err(KvmcError::input(
                                path,
                                no,
                                format!(
                                    "request {req} is not a streaming session (its arrive has no \"resumable\": true)"
                                ),
                            ));
                        };
                        if s.3 {
                            return Err(KvmcError::input(path, no, format!("session {req} was already ended")));
                        }
                        if let Ev::StreamInput { prompt, max_tokens, .. } = ev {
                            if prompt.is_empty() || *max_tokens == 0 {
                                return Err(KvmcError::input(
                                    path,
                                    no,
                                    format!("session {req}: an input with an empty prompt or max_tokens 0"),
                                ));
                            }
                            if s.2 >= 8 {
                                return Err(KvmcError::input(path, no, format!("session {req}: at most 9 inputs")));
                            }
                            s.2 += 1;
                        } else {
                            if s.2 == 0 {
                                return Err(KvmcError::input(
                                    path,
                                    no,
                                    format!("session {req} ends before its second input (not modelled)"),
                                ));
                            }
                            s.3 = true;
                        }
                    }
                    Ev::TurnEnd { req, turn, .. } | Ev::TurnStart { req, turn, .. } if *turn == 0 => {
                        return Err(KvmcError::input(path, no, format!("request {req}: turns count from 1")));
                    }
                    Ev::Cpu { refs, .. } => {
                        if let Some(k) = refs.keys().find(|k| k.parse::<u32>().is_err()) {
                            return Err(KvmcError::input(path, no, format!("refs key {k:?} is not a block id")));
                        }
                    }
                    Ev::Mooncake { pinned, .. } => {
                        if let Some(k) = pinned.keys().find(|k| k.parse::<u32>().is_err()) {
                            return Err(KvmcError::input(path, no, format!("pinned key {k:?} is not a save job id")));
                        }
                    }
                    _ => {}
                }
                let h = header.as_ref().expect("checked");
                if let Some(why) = super::validate::connector_mismatch(h, ev) {
                    return Err(KvmcError::input(path, no, why));
                }
            }
        }
        lines.push(Line { no, text: raw.to_string(), ev });
    }
    let header = header.ok_or_else(|| KvmcError::input(path, 1, "empty log: no header"))?;
    if let Some((req, no, _, _)) = sessions.iter().find(|s| s.2 == 0).filter(|_| !partial) {
        return Err(KvmcError::input(
            path,
            *no,
            format!("session {req} is sent no second input (kvmc models a session by its further inputs)"),
        ));
    }
    Ok((header, lines))
}
