//! Conformance: drive the reference system with the inputs of an event log recorded from a
//! real implementation (arrivals, aborts, errors, sampled tokens, which transfers finished
//! when) and compare every decision it logged, step by step (docs/conformance.md).

mod compare;
pub mod death;
pub mod header;
pub mod kv_events;
pub mod log;
pub mod profile;
mod replay;
pub mod trail;
pub mod validate;

use crate::error::{KvmcError, Result};
use crate::scope::{Arrivals, Faults, Scope};
use crate::system::rules::Rules;
use crate::system::workload::{next_turn_spec, unrehashed_keys, EndKind, LaterInput, Layout, Offered, TurnInput};
use crate::system::{
    ConnectorConfig, EngineConfig, KvRole, LoadFailurePolicy, MooncakeConfig, OffloadConfig, RequestSpec,
    SimpleCpuConfig, Workload,
};
use log::{Ev, Header, Line};
use std::path::Path;
pub use validate::Partial;

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
    /// The orders of vLLM's sets under which the model made the decisions shown (empty when
    /// the step has no choice point), and how many resolutions of the step were tried (none
    /// matches).
    pub under: Vec<StepChoice>,
    pub tried: u32,
}

/// A choice point of the model (an order vLLM takes from a Python set; src/system/choice.rs)
/// and the order that matched the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepChoice {
    pub step: u32,
    /// vLLM's name of the set (`finished_req_ids`, `finish_requests`, `finished_recving`,
    /// `finished_sending`, 0.24's `TransferJobStatus.keys`).
    pub point: &'static str,
    /// The ids (request names, or host keys' labels) in the model's canonical order, and in
    /// the order that matched.
    pub canonical: Vec<String>,
    pub chosen: Vec<String>,
    /// How many orders the point has.
    pub orders: u32,
    /// Resolutions of the step's choice points tried from the model state, and how many of
    /// them matched the log.
    pub tried: u32,
    pub matching: u32,
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
    /// The log's SimpleCPU publishes its CPU pool's evictions as GPU removals and its CPU
    /// stores not at all (rule `scpu_cpu_kv_events` false: 0.24).
    pub kv_cpu_as_gpu: bool,
    /// The log is partial: the recorder stopped (its marker line says where and why), so a
    /// log that conforms conforms only as far as it goes.
    pub partial: Option<Partial>,
    /// Every choice point the matching run passed (steps in order), with the order that
    /// matched; for a divergence, those before the diverging step.
    pub choices: Vec<StepChoice>,
    /// The search over vLLM's orders was cut (too many orders or matching states): a
    /// divergence is then "no order found within the bound", not a verdict.
    pub search_bound: Option<String>,
    /// A partial log that ends with the implementation raising and conforms up to there:
    /// whether the model dies in its next step too ([`death::after`]).
    pub death: Option<death::DeathCheck>,
}

/// The token of the input that stands for one a partial log never sent (`scope_of`); never
/// sampled or sent, so its value only has to be a valid token id (0.34's `TokenBuffer`: below
/// 2^31).
const UNSENT_TOKEN: u32 = 0x7fff_fff0;

/// Build the engine scope a log describes: its configuration and its requests, whose tokens
/// are the prompt followed by every token the log says the request sampled.
/// `dropped` are the log lines of `sampled` events whose token the implementation discarded
/// (a request whose load failed in that step): they are not part of the request's tokens.
///
/// A streaming session (`"resumable": true`) gets one spec per input: its `sampled` tokens are
/// split where an input stops (`check_stop`: EOS, `max_tokens` of that input, or
/// `max_model_len`), and each later input's prompt is the previous one's tokens but the last
/// sampled one, followed by the `stream_input` tokens (`_update_request_as_session`).
/// Rule `session_max_tokens`: each input stops at its own `max_tokens`; false (0.24): at the
/// session's first input's. Rule `session_stop_drops_in_flight` false (0.24) or
/// `session_keeps_computed_only` (0.24, 0.32) under async scheduling: how each input is laid
/// out over the previous one is read from the log too ([`stale_session`]), and the workload
/// gets every other layout the model may take.
///
/// `unsent_next`: every session the log leaves open (no `stream_end`) also gets the placeholder
/// of a next input, which the death search ([`death::after`]) may send when the implementation
/// raised in the step after the log's last one: that step's input is not in the log (finding
/// 28's crash comes when a session's next input arrives). `check_text` asks for it only when
/// the plain replay finds no death.
pub fn scope_of(
    path: &Path,
    h: &Header,
    lines: &[Line],
    dropped: &[usize],
    rules: &Rules,
    unsent_next: bool,
) -> Result<Scope> {
    let input_max_tokens = rules.session_max_tokens;
    let offered = Offered {
        stale: !rules.session_stop_drops_in_flight && h.async_scheduling,
        lost: rules.session_keeps_computed_only && h.async_scheduling,
    };
    let mut specs: Vec<RequestSpec> = Vec::new();
    let mut sessions: Vec<Vec<RequestSpec>> = Vec::new();
    let mut later: Vec<Vec<LaterInput>> = Vec::new();
    let unsent: Vec<u32> = vec![UNSENT_TOKEN];
    for l in lines {
        if let Ev::Arrive { req, prompt, max_tokens, eos_token_id, resumable, .. } = &l.ev {
            let out: Vec<u32> = lines
                .iter()
                .filter_map(|x| match &x.ev {
                    Ev::Sampled { req: r, token, .. } if r == req && !dropped.contains(&x.no) => Some(*token),
                    _ => None,
                })
                .collect();
            if !*resumable {
                let eos_at = eos_token_id.and_then(|eos| out.iter().position(|&t| t == eos)).map(|i| i as u32);
                // More samples than max_tokens: some were dropped (found by replaying); the extra
                // tokens stay in the script but are never appended.
                specs.push(RequestSpec::with_limits(req, prompt.clone(), out, *max_tokens, eos_at, h.block_size));
                sessions.push(Vec::new());
                later.push(Vec::new());
                continue;
            }
            let inputs: Vec<(&Vec<u32>, u32, Option<u32>)> = lines
                .iter()
                .filter_map(|x| match &x.ev {
                    Ev::StreamInput { req: r, prompt, max_tokens, eos_token_id, .. } if r == req => {
                        Some((prompt, *max_tokens, *eos_token_id))
                    }
                    _ => None,
                })
                .collect();
            let mut inputs: Vec<_> = if input_max_tokens {
                inputs
            } else {
                inputs.into_iter().map(|(p, _, e)| (p, *max_tokens, e)).collect()
            };
            let ended = lines.iter().any(|x| matches!(&x.ev, Ev::StreamEnd { req: r, .. } if r == req));
            if inputs.is_empty() || (unsent_next && !ended) {
                // A partial log that ends before the session's next input (`log::parse` refuses
                // it in a whole log): the session parks, holding its blocks, and waits for an
                // input the log never sends; this one stands for it and is never sent.
                inputs.push((&unsent, *max_tokens, *eos_token_id));
            }
            if offered.stale || offered.lost {
                let (first, inputs) =
                    stale_session(req, (prompt, *max_tokens, *eos_token_id), &inputs, lines, dropped, h, offered);
                specs.push(first);
                sessions.push(Vec::new());
                later.push(inputs);
                continue;
            }
            let (first, turns) =
                session_specs(req, (prompt, *max_tokens, *eos_token_id), &inputs, &out, h.block_size, h.max_model_len);
            specs.push(first);
            sessions.push(turns);
            later.push(Vec::new());
        }
    }
    let connector = match h.connector.as_str() {
        "offloading" => ConnectorConfig::Offloading(OffloadConfig {
            host_chunks: h.host_chunks,
            blocks_per_chunk: h.blocks_per_chunk,
            offload_prompt_only: h.offload_prompt_only,
            sync_load_budget_tokens: h.sync_load_budget_tokens,
            eviction_policy: if h.eviction_policy == "arc" {
                crate::system::EvictionPolicy::Arc
            } else {
                crate::system::EvictionPolicy::Lru
            },
        }),
        "simple-cpu" => ConnectorConfig::SimpleCpu(SimpleCpuConfig { cpu_blocks: h.cpu_blocks, lazy: h.lazy_offload }),
        // The recorder runs vLLM's defaults (kv_both, lookups on; save_decode_cache as the
        // header says); the preload's keys are filled in once the workload can name them.
        "mooncake" => ConnectorConfig::Mooncake(MooncakeConfig {
            kv_role: KvRole::Both,
            save_decode_cache: h.mooncake.as_ref().is_some_and(|m| m.save_decode_cache),
            enable_lookup: true,
            preload: Vec::new(),
        }),
        // NixlConnector's producer in host-buffer mode (the recorder's nixlprod.py).
        "nixl" => ConnectorConfig::Nixl,
        _ => ConnectorConfig::None,
    };
    let threshold = crate::system::config::threshold_permille(h.cache_aware_admission_threshold)
        .map_err(|m| KvmcError::input(path, 1, m))?;
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
        reserve_full_isl: h.scheduler_reserve_full_isl,
        cache_aware_admission_window: h.cache_aware_admission_window,
        cache_aware_admission_threshold_permille: threshold,
        async_scheduling: h.async_scheduling,
        connector,
        router_replay: None,
    };
    let n = specs.len();
    let mut workload = if later.iter().any(|l| !l.is_empty()) {
        Workload::with_sessions(h.block_size, specs, sessions).with_layouts(&later, h.max_model_len, false, offered)
    } else {
        Workload::with_sessions(h.block_size, specs, sessions)
    };
    // Another instance's puts: the full blocks of each preloaded sequence, labelled `poolN.i`
    // (the first sequence that has the block), also where a request produces them, as the
    // recorder labels them: the log may name them before any request arrives.
    let mut cfg = cfg;
    if let ConnectorConfig::Mooncake(m) = &mut cfg.connector {
        for (i, toks) in h.mooncake.iter().flat_map(|x| &x.preload).enumerate() {
            let keep = m.preload.clone();
            for k in workload.register_extra_named(&format!("pool{}", i + 1), toks, &keep) {
                if !m.preload.contains(&k) {
                    m.preload.push(k);
                }
            }
        }
    }
    Ok(Scope {
        name: if h.scenario.is_empty() { "log".into() } else { h.scenario.clone() },
        path: path.to_path_buf(),
        description: format!("{} {} event log", h.implementation, h.version),
        profile: "vllm-0.33".into(),
        cfg,
        workload,
        after: vec![None; n],
        faults: Faults::default(),
        arrivals: Arrivals::Any,
        stream_input: crate::scope::StreamInput::Any,
        progress_steps: u32::MAX,
    })
}

/// The specs of a session's first input and of its later ones, from its inputs (prompt,
/// `max_tokens`, EOS id) and everything it sampled, in order.
fn session_specs(
    name: &str,
    first: (&Vec<u32>, u32, Option<u32>),
    inputs: &[(&Vec<u32>, u32, Option<u32>)],
    sampled: &[u32],
    block_size: u32,
    max_model_len: u32,
) -> (RequestSpec, Vec<RequestSpec>) {
    let mut rest = sampled;
    // The outputs of one input: up to and including the token that stops it.
    let take = |rest: &mut &[u32], prompt_len: u32, max_tokens: u32, eos: Option<u32>| -> Vec<u32> {
        let n = until_stop(rest, prompt_len, max_tokens, eos, max_model_len);
        let (out, tail) = rest.split_at(n);
        *rest = tail;
        out.to_vec()
    };
    let spec_of = |prompt: Vec<u32>, out: Vec<u32>, max_tokens: u32, eos: Option<u32>, turn: usize| {
        let eos_at = eos.and_then(|e| out.iter().position(|&t| t == e)).map(|i| i as u32);
        let mut s = RequestSpec::with_limits(name, prompt, out, max_tokens, eos_at, block_size);
        s.turn = turn as u8;
        s
    };
    let (p, m, e) = first;
    let out = take(&mut rest, p.len() as u32, m, e);
    let mut prev_out = out.len() as u32;
    let spec = spec_of(p.clone(), out, m, e, 0);
    let mut turns: Vec<RequestSpec> = Vec::new();
    for (i, &(input, m, e)) in inputs.iter().enumerate() {
        let prev = turns.last().unwrap_or(&spec);
        // The model's rule for the kept tokens (all but the last sampled one).
        let tin = TurnInput { input: input.clone(), output: Vec::new(), end: EndKind::Length };
        let prompt = next_turn_spec(prev, prev_out, &tin, i + 1, block_size).tokens;
        let out = if i + 1 == inputs.len() { rest.to_vec() } else { take(&mut rest, prompt.len() as u32, m, e) };
        let n = out.len() as u32;
        let mut next = spec_of(prompt, out, m, e, i + 1);
        // 0.24's keys for it (used under `session_rehash = false`).
        next.unrehashed = unrehashed_keys(prev, prev_out, &next, block_size);
        prev_out = n;
        turns.push(next);
    }
    (spec, turns)
}

/// How many of `sampled` one input samples (`check_stop`): up to and including the token that
/// stops it (EOS, `max_tokens`, or `max_model_len`), or all of them.
fn until_stop(sampled: &[u32], prompt_len: u32, max_tokens: u32, eos: Option<u32>, max_model_len: u32) -> usize {
    let mut n = 0;
    while n < sampled.len() {
        let t = sampled[n];
        n += 1;
        if Some(t) == eos || n as u32 >= max_tokens || prompt_len + n as u32 >= max_model_len {
            break;
        }
    }
    n
}

/// [`session_specs`] for vLLM 0.24 and 0.32 under async scheduling, where the log says how each
/// input follows the previous one ([`Layout`]):
/// - a `turn_start` with no computed token (`Lost`, rule `session_keeps_computed_only`: the
///   session was preempted and keeps nothing; its counted prompt still grows);
/// - (0.24, a stopped input's in-flight output is not dropped) a token sampled after the stop
///   and before the next `turn_start` went to the parked session (`Kept`; it stays in the
///   previous input's tokens, past its stop);
/// - else (0.24) a `turn_start` whose prompt keeps every sampled token takes the in-flight
///   output, the session's next sampled token, as its first output (`KeptStale`);
/// - else every sampled token but the last is kept (`Dropped`).
///
/// Returns the first input's spec and the later inputs.
fn stale_session(
    name: &str,
    first: (&Vec<u32>, u32, Option<u32>),
    inputs: &[(&Vec<u32>, u32, Option<u32>)],
    lines: &[Line],
    dropped: &[usize],
    h: &Header,
    offered: Offered,
) -> (RequestSpec, Vec<LaterInput>) {
    // The session's sampled tokens, cut at each `turn_start` line (its counted prompt and
    // computed tokens).
    let mut segs: Vec<Vec<u32>> = vec![Vec::new()];
    let mut starts: Vec<(u32, u32)> = Vec::new();
    for l in lines {
        match &l.ev {
            Ev::Sampled { req, token, .. } if req == name && !dropped.contains(&l.no) => {
                segs.last_mut().expect("a segment").push(*token);
            }
            Ev::TurnStart { req, num_prompt_tokens, num_computed, .. } if req == name => {
                starts.push((*num_prompt_tokens, *num_computed));
                segs.push(Vec::new());
            }
            _ => {}
        }
    }
    // How many of `seg` one input samples: up to and including the token that stops it (the
    // last input: all).
    let take = |seg: &[u32], prompt_len: u32, max_tokens: u32, eos: Option<u32>, last: bool| -> usize {
        if last {
            seg.len()
        } else {
            until_stop(seg, prompt_len, max_tokens, eos, h.max_model_len)
        }
    };
    let eos_in = |out: &[u32], eos: Option<u32>| eos.and_then(|e| out.iter().position(|&t| t == e)).map(|i| i as u32);
    let seg = |i: usize| segs.get(i).map_or(&[][..], |s| s.as_slice());
    let (p, m, e) = first;
    // Input j's outputs up to its stop (`outs`, the in-flight token first under `KeptStale`),
    // the tokens that reached it parked after the stop (`extra`), and its layout.
    let mut outs: Vec<Vec<u32>> = Vec::new();
    let mut extra: Vec<Vec<u32>> = Vec::new();
    let mut layouts: Vec<Layout> = vec![Layout::Dropped];
    // The prompt the session holds and the one vLLM counts (`num_prompt_tokens`).
    let (mut prompt_len, mut counted) = (p.len() as u32, p.len() as u32);
    let (mut max_tokens, mut eos) = (m, e);
    for j in 0..=inputs.len() {
        let s = seg(j);
        let n = take(s, prompt_len, max_tokens, eos, j == inputs.len());
        outs.push(s[..n].to_vec());
        extra.push(s[n..].to_vec());
        let Some(&(input, mi, ei)) = inputs.get(j) else { break };
        let o = n as u32;
        let start = starts.get(j).copied();
        let layout = if offered.lost && start.is_some_and(|(_, c)| c == 0) {
            Layout::Lost
        } else if offered.stale && n < s.len() {
            Layout::Kept
        } else if offered.stale && start.map(|(p, _)| p) == Some(counted.max(prompt_len + o) + input.len() as u32) {
            Layout::KeptStale
        } else {
            Layout::Dropped
        };
        let held = match layout {
            Layout::Lost => 0,
            Layout::Dropped => prompt_len + o.saturating_sub(1),
            Layout::Kept | Layout::KeptStale => prompt_len + o,
        };
        counted = counted.max(held) + input.len() as u32;
        prompt_len = held + input.len() as u32;
        layouts.push(layout);
        (max_tokens, eos) = (mi, ei);
    }
    // The tokens of input j's spec: its outputs, then what reached it parked.
    let tokens = |j: usize| [outs[j].as_slice(), extra[j].as_slice()].concat();
    let first_spec = RequestSpec::with_limits(name, p.clone(), tokens(0), m, eos_in(&outs[0], e), h.block_size);
    let later = inputs
        .iter()
        .enumerate()
        .map(|(i, &(input, mi, ei))| {
            let j = i + 1;
            let stale = layouts[j] == Layout::KeptStale;
            // Its own outputs: after the in-flight token it took first.
            let skip = usize::from(stale).min(outs[j].len());
            LaterInput {
                input: input.clone(),
                outputs: tokens(j)[skip..].to_vec(),
                max_tokens: mi,
                eos_at: eos_in(&outs[j][skip..], ei),
                layout: layouts[j],
                stale: if stale {
                    outs[j].first().copied().unwrap_or(crate::system::workload::STALE_TOKEN)
                } else {
                    crate::system::workload::STALE_TOKEN - j as u32
                },
            }
        })
        .collect();
    (first_spec, later)
}

/// Check the log at `path` against profile `profile` (and `variant`).
///
/// `sampled` lines say what the fake model runner returned; the implementation drops the
/// output of a request whose load failed in that step. Which tokens were dropped is found by
/// running the model: a logged sample the model did not append is taken out of the request's
/// tokens and the log is replayed again, until nothing changes.
pub fn check(path: &Path, profile: &str, variant: Option<&str>, window: usize) -> Result<Report> {
    let text = crate::error::read_text(path)?;
    check_text(path, &text, profile, variant, window)
}

/// `check` on a log's text (`path` names it in messages).
///
/// A partial log (its last line is a recorder's `partial` marker) is checked up to the marker.
/// A `transfer_done` / `transfer_failed` that names a job the log never created, or one already
/// reported finished, is bad input at that line, unless the log diverges earlier (a deleted
/// `store` line leaves its job's report orphaned; the divergence at the deleted line comes first).
pub fn check_text(path: &Path, text: &str, profile: &str, variant: Option<&str>, window: usize) -> Result<Report> {
    let (text, partial) = validate::split_partial(path, text)?;
    let (h, lines) = log::parse(path, text, partial.is_some())?;
    if let (Some(p), Some(l)) = (&partial, lines.last()) {
        if p.step < l.ev.step() {
            return Err(KvmcError::input(
                path,
                p.line,
                format!("the partial-log marker names step {}, before the log's last step {}", p.step, l.ev.step()),
            ));
        }
    }
    let bad = validate::bad_transfer(&lines, ["simple-cpu", "mooncake"].contains(&h.connector.as_str()));
    if let Ok(rules) = crate::system::rules::resolve(profile, variant) {
        let offloading = h.connector == "offloading";
        if let Some(b) = validate::bad_failure_form(&lines, offloading, rules.failed_load_request_level) {
            return Err(KvmcError::input(path, b.line, b.why));
        }
    }
    let mut dropped: Vec<usize> = Vec::new();
    // The recorder stopped because the implementation raised (not a fault that never applied,
    // a hang or an idle engine): look for the model's own death after the last step.
    let raised = partial.as_ref().is_some_and(|p| {
        !p.error.is_empty() && !["never applied", "did not finish in", "went idle"].iter().any(|k| p.error.contains(k))
    });
    loop {
        let (mut report, newly) =
            replay::replay(path, &h, &lines, &dropped, profile, variant, window, bad.as_ref(), raised, false)?;
        if newly.is_empty() {
            // The model did not die after the last step: the input of the step that raised may
            // be a session's next input, which the log never shows. Replay once more with a
            // placeholder for it (it changes how a session without one ends, so only the death
            // search takes it, and only from a replay that conforms as well).
            let found = |r: &Report| r.death.as_ref().is_some_and(|d| d.found.is_some());
            if raised && report.divergence.is_none() && !found(&report) {
                let (again, _) =
                    replay::replay(path, &h, &lines, &dropped, profile, variant, window, bad.as_ref(), raised, true)?;
                if again.divergence.is_none() && found(&again) {
                    report.death = again.death;
                }
            }
            report.partial = partial;
            return Ok(report);
        }
        dropped.extend(newly);
    }
}

/// What the model did in one step, counted the way vLLM's KV events count it.
/// `cpu_as_gpu` (0.24's SimpleCPU, `Report::kv_cpu_as_gpu`): CPU stores publish nothing and
/// CPU evictions count as GPU removals. `pool_puts` false (Mooncake): the store's puts are not
/// counted; the real MooncakeStoreWorker publishes them through `KVConnectorOutput`'s
/// `kv_cache_events`, which the recorder's fake worker does not build.
fn model_counts(events: &[crate::system::Event], cpu_as_gpu: bool, pool_puts: bool) -> kv_events::Counts {
    use crate::system::Event;
    let mut c = kv_events::Counts::new();
    let cpu = if cpu_as_gpu { "GPU" } else { "CPU" };
    for e in events {
        match e {
            Event::G1Cached { .. } => c.entry("GPU".into()).or_default().0 += 1,
            Event::G1Evicted { .. } => c.entry("GPU".into()).or_default().1 += 1,
            Event::HostStored { .. } if cpu_as_gpu || !pool_puts => {}
            Event::HostStored { keys } => c.entry("CPU".into()).or_default().0 += keys.len(),
            Event::HostEvicted { .. } => c.entry(cpu.into()).or_default().1 += 1,
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
    let cpu_as_gpu = report.is_some_and(|r| r.kv_cpu_as_gpu);
    if let Some((b, why)) = kv_events::consistency(&batches, cpu_as_gpu) {
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
