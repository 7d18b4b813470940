//! Conformance: drive the reference system with the inputs of an event log recorded from a
//! real implementation (arrivals, aborts, errors, sampled tokens, which transfers finished
//! when) and compare every decision it logged, step by step (docs/conformance.md).

mod compare;
pub mod kv_events;
pub mod log;

use crate::error::{KvmcError, Result};
use crate::model::scope::{Arrivals, Faults, Scope};
use crate::model::{KvModel, KvState};
use crate::props::{self, Kind};
use crate::system::engine::StepInput;
use crate::system::{ConnectorConfig, EngineConfig, Events, LoadFailurePolicy, OffloadConfig, RequestSpec, Workload};
use log::{Ev, Header, Line};
use std::path::Path;
use std::sync::Arc;

/// The first place where the model and the log disagree.
#[derive(Debug, Clone)]
pub struct Divergence {
    pub step: u32,
    /// The log line (1-based) of the first decision that differs (or the step's last line).
    pub line: usize,
    pub what: String,
    pub logged: String,
    pub model: String,
    /// The log lines before it (number, text).
    pub window: Vec<(usize, String)>,
}

/// The outcome of checking one log.
#[derive(Debug, Clone)]
pub struct Report {
    pub steps: u32,
    pub decisions: usize,
    pub divergence: Option<Divergence>,
    /// Invariants the run violated (property, step), even though the decisions matched.
    pub findings: Vec<(String, u32)>,
    /// Per step with any: blocks the model stored and removed, per medium (KV-event counts).
    pub kv_counts: Vec<(u32, kv_events::Counts)>,
}

/// Build the engine scope a log describes: its configuration and its requests, whose tokens
/// are the prompt followed by every token the log says the request sampled.
/// `dropped` are the log lines of `sampled` events whose token the implementation discarded
/// (a request whose load failed in that step): they are not part of the request's tokens.
pub fn scope_of(path: &Path, h: &Header, lines: &[Line], dropped: &[usize]) -> Result<Scope> {
    let mut specs: Vec<RequestSpec> = Vec::new();
    for l in lines {
        if let Ev::Arrive { req, prompt, max_tokens, eos_token_id, .. } = &l.ev {
            let out: Vec<u32> = lines
                .iter()
                .filter_map(|x| match &x.ev {
                    Ev::Sampled { req: r, token, .. } if r == req && !dropped.contains(&x.no) => Some(*token),
                    _ => None,
                })
                .collect();
            let eos_at = eos_token_id.and_then(|eos| out.iter().position(|&t| t == eos)).map(|i| i as u32);
            // More samples than max_tokens: some were dropped (found by replaying); the extra
            // tokens stay in the script but are never appended.
            specs.push(RequestSpec::with_limits(req, prompt.clone(), out, *max_tokens, eos_at, h.block_size));
        }
    }
    let connector = if h.connector == "offloading" {
        ConnectorConfig::Offloading(OffloadConfig {
            host_chunks: h.host_chunks,
            blocks_per_chunk: h.blocks_per_chunk,
            offload_prompt_only: h.offload_prompt_only,
            sync_load_budget_tokens: h.sync_load_budget_tokens,
        })
    } else {
        ConnectorConfig::None
    };
    let cfg = EngineConfig {
        block_size: h.block_size,
        num_gpu_blocks: h.num_gpu_blocks,
        max_num_batched_tokens: h.max_num_batched_tokens,
        max_num_seqs: h.max_num_seqs.max(1),
        max_model_len: h.max_model_len,
        long_prefill_token_threshold: h.long_prefill_token_threshold,
        load_failure_policy: if h.load_failure_policy == "recompute" {
            LoadFailurePolicy::Recompute
        } else {
            LoadFailurePolicy::Fail
        },
        enable_prefix_caching: h.enable_prefix_caching,
        async_scheduling: h.async_scheduling,
        connector,
        router_replay: None,
    };
    let n = specs.len();
    Ok(Scope {
        name: if h.scenario.is_empty() { "log".into() } else { h.scenario.clone() },
        path: path.to_path_buf(),
        description: format!("{} {} event log", h.implementation, h.version),
        profile: "vllm-0.33".into(),
        cfg,
        workload: Workload::new(h.block_size, specs),
        after: vec![None; n],
        faults: Faults::default(),
        arrivals: Arrivals::Any,
        stream_input: crate::model::scope::StreamInput::Any,
        progress_steps: u32::MAX,
    })
}

/// Check the log at `path` against profile `profile` (and `variant`).
///
/// `sampled` lines say what the fake model runner returned; the implementation drops the
/// output of a request whose load failed in that step. Which tokens were dropped is found by
/// running the model: a logged sample the model did not append is taken out of the request's
/// tokens and the log is replayed again, until nothing changes.
pub fn check(path: &Path, profile: &str, variant: Option<&str>, window: usize) -> Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|e| KvmcError::io(path, e))?;
    check_text(path, &text, profile, variant, window)
}

/// `check` on a log's text (`path` names it in messages).
pub fn check_text(path: &Path, text: &str, profile: &str, variant: Option<&str>, window: usize) -> Result<Report> {
    let (h, lines) = log::parse(path, text)?;
    let mut dropped: Vec<usize> = Vec::new();
    loop {
        let (report, newly) = replay(path, &h, &lines, &dropped, profile, variant, window)?;
        if newly.is_empty() {
            return Ok(report);
        }
        dropped.extend(newly);
    }
}

/// One replay of the log; also returns the sampled lines the model did not append before the
/// first divergence (if any), which the next replay leaves out.
#[allow(clippy::too_many_arguments)]
fn replay(
    path: &Path,
    h: &Header,
    lines: &[Line],
    dropped: &[usize],
    profile: &str,
    variant: Option<&str>,
    window: usize,
) -> Result<(Report, Vec<usize>)> {
    let scope = Arc::new(scope_of(path, h, lines, dropped)?);
    let safety: Vec<_> = props::CATALOGUE
        .iter()
        .filter(|p| p.kind == Kind::Always && props::applies(p, &scope.cfg) && p.name != "requests-finish")
        .collect();
    let model = KvModel::new(scope.clone(), Some(profile), variant, safety.clone()).map_err(KvmcError::Usage)?;
    let ctx = model.ctx();
    let idx = |name: &str| scope.workload.requests.iter().position(|r| r.name == name).expect("validated") as u16;
    let mut engine = model.init().engine;
    let last = lines.last().map_or(0, |l| l.ev.step());
    let snapshots: Vec<&str> = [
        ("schedule", lines.iter().any(|l| matches!(l.ev, Ev::Schedule { .. }))),
        ("g1", lines.iter().any(|l| matches!(l.ev, Ev::G1 { .. }))),
        ("host", lines.iter().any(|l| matches!(l.ev, Ev::Host { .. }))),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(k, _)| *k)
    .collect();
    let mut findings: Vec<(String, u32)> = Vec::new();
    let mut kv_counts: Vec<(u32, kv_events::Counts)> = Vec::new();
    let mut decisions = 0;
    for step in 1..=last {
        let this: Vec<&Line> = lines.iter().filter(|l| l.ev.step() == step && !dropped.contains(&l.no)).collect();
        let mut ev = Events::on();
        let mut input = StepInput::default();
        for l in &this {
            match &l.ev {
                Ev::Arrive { req, .. } => engine.arrive(ctx, idx(req), &mut ev),
                Ev::Abort { req, .. } => engine.abort(ctx, idx(req), &mut ev),
                Ev::Error { req, .. } => engine.error(ctx, idx(req), &mut ev),
                Ev::TransferDone { job, .. } => input.complete.push(*job),
                Ev::TransferFailed { job, invalid_blocks, .. } => {
                    input.fail_blocks.push((*job, invalid_blocks.clone()))
                }
                _ => {}
            }
        }
        engine.step(ctx, &input, &mut ev);
        decisions += this.iter().filter(|l| !l.ev.is_input()).count();
        let appended: Vec<String> = ev
            .list
            .iter()
            .filter_map(|e| match e {
                crate::system::Event::Sampled { req, .. } => Some(scope.workload.requests[*req as usize].name.clone()),
                _ => None,
            })
            .collect();
        let newly: Vec<usize> = this
            .iter()
            .filter(|l| matches!(&l.ev, Ev::Sampled { req, .. } if !appended.contains(req)))
            .map(|l| l.no)
            .collect();
        if !newly.is_empty() {
            return Ok((Report { steps: step, decisions, divergence: None, findings, kv_counts: Vec::new() }, newly));
        }
        if let Some(mut d) = compare::step(&scope, &engine, step, &this, &ev.list, &snapshots) {
            let first = d.line;
            d.window = lines
                .iter()
                .filter(|l| l.no < first)
                .rev()
                .take(window)
                .map(|l| (l.no, l.text.clone()))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Ok((
                Report { steps: step, decisions, divergence: Some(d), findings, kv_counts: Vec::new() },
                Vec::new(),
            ));
        }
        let c = model_counts(&ev.list);
        if !c.is_empty() {
            kv_counts.push((step, c));
        }
        let state = KvState { engine: engine.clone(), scope: scope.clone() };
        for p in &safety {
            if !(p.check)(&model, &state) && !findings.iter().any(|(n, _)| n == p.name) {
                findings.push((p.name.to_string(), step));
            }
        }
        engine.ghost.marks = 0;
    }
    Ok((Report { steps: last, decisions, divergence: None, findings, kv_counts }, Vec::new()))
}

/// What the model did in one step, counted the way vLLM's KV events count it.
fn model_counts(events: &[crate::system::Event]) -> kv_events::Counts {
    use crate::system::Event;
    let mut c = kv_events::Counts::new();
    for e in events {
        match e {
            Event::G1Cached { .. } => c.entry("GPU".into()).or_default().0 += 1,
            Event::G1Evicted { .. } => c.entry("GPU".into()).or_default().1 += 1,
            Event::HostStored { keys } => c.entry("CPU".into()).or_default().0 += keys.len(),
            Event::HostEvicted { .. } => c.entry("CPU".into()).or_default().1 += 1,
            _ => {}
        }
    }
    c
}

/// Check a KV-event stream on its own, and against `report`'s replay of the same run when
/// `steps` (the step that published each batch) is known. Returns the first problem.
pub fn check_kv_events(path: &Path, report: Option<&Report>, steps: Option<&[u32]>) -> Result<Option<String>> {
    let bytes = std::fs::read(path).map_err(|e| KvmcError::io(path, e))?;
    let batches = kv_events::parse(path, &bytes)?;
    if let Some((b, why)) = kv_events::consistency(&batches) {
        return Ok(Some(format!("batch {b}: {why}")));
    }
    let (Some(r), Some(steps)) = (report, steps) else { return Ok(None) };
    if steps.len() != batches.len() {
        return Err(KvmcError::input(path, 1, format!("{} batches but {} step numbers", batches.len(), steps.len())));
    }
    let logged: Vec<(u32, kv_events::Counts)> =
        batches.iter().zip(steps).map(|(b, s)| (*s, kv_events::counts(b))).collect();
    for (i, (step, c)) in logged.iter().enumerate() {
        match r.kv_counts.iter().find(|(s, _)| s == step) {
            Some((_, m)) if m == c => {}
            Some((_, m)) => {
                return Ok(Some(format!(
                    "batch {} (step {step}): the implementation stored/removed {c:?}, the model {m:?}",
                    i + 1
                )))
            }
            None => {
                return Ok(Some(format!(
                    "batch {} (step {step}): the implementation published {c:?}; the model stored and removed nothing",
                    i + 1
                )))
            }
        }
    }
    if let Some((s, m)) = r.kv_counts.iter().find(|(s, _)| !steps.contains(s)) {
        return Ok(Some(format!("step {s}: the model stored/removed {m:?}, but no batch was published")));
    }
    Ok(None)
}
