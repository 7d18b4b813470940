//! `kvmc reproduce`: a checker counterexample as a scenario for the conformance recorder
//! (tests/conformance/README.md, "Scenario format"), so that real vLLM can run the same
//! story and `kvmc conform --strict` can show the same property violated on its log.
//!
//! The counterexample is replayed on the model with events on, and everything the
//! environment decided becomes a scenario entry:
//! - `arrive X` / `abort X` / `error X` / `next input for S` before engine step `n` become an
//!   arrival, an `[[event]]` or a session input sent before the recorder's step `n` (the
//!   recorder applies aborts and errors, then arrivals, then session inputs, before
//!   `schedule()`, as the model does between steps);
//! - transfer timing: every store and async load the counterexample creates gets a
//!   `[[transfer_delay]]` of (the step whose worker output reports it) minus (the step that
//!   created it); the report step is the engine step after which the model's worker has
//!   delivered the job (`Phase::Reported`, or processed and gone). A copy that finishes
//!   between steps (`store copy done`) is reported by the next step, one that finishes within
//!   a step (`step (copies finish within it)`, a flush, a sync load) by that step. Jobs still
//!   in flight when the counterexample ends are reported in the step after it;
//! - faults: a failed load (`load fails from block k`, `step (sync load fails from block k)`)
//!   becomes a `[[load_failure]]` of that request's nth load from block k;
//! - preemption pressure comes from the pool sizes, which are copied;
//! - MooncakeStoreConnector: the pool's keys at start become `[mooncake] preload` sequences
//!   (prompt prefixes that spell them); save and load jobs are timed and failed as above;
//! - NixlConnector's P/D producer: `consumer reads X` becomes a `[[consumer_read]]`
//!   (src/report/reproduce_pd.rs).
//!
//! A requests-finish counterexample (deadlock or livelock) is written with `max_steps` 40 past
//! it: vLLM reproduces it by not finishing (the recorder's bound, or an idle engine with
//! requests left), every recorded step conforming.
//!
//! Prompts are the model's tokens, one segment per token (`"t97:1"` is token 0 of the stream
//! `t97`, i.e. one recorder token per model token; equal model tokens give equal recorder
//! tokens). Sampled tokens are the recorder's own (its fake model runner): where a prompt
//! spells a token the counterexample samples (another request's output), the scenario spells
//! the recorder's sampled token there (`spelled_outputs`).

use crate::model::{Action, KvModel};
use crate::props::{self, Kind};
use crate::system::connector::{Connector, Phase};
use crate::system::types::BlockHash;
use crate::system::workload::stop_outputs;
use crate::system::workload::Workload;
use crate::system::{ConnectorConfig, EngineConfig, Event, Events, Input, LoadFailurePolicy};
use stateright::Model;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The vLLM release a profile stands for (the recorder runs that version's code).
pub fn vllm_version(profile: &str) -> Option<&'static str> {
    match profile {
        "vllm-0.24" => Some("0.24.0"),
        "vllm-0.32" => Some("0.32.0"),
        "vllm-0.33" => Some("0.33.0"),
        "vllm-0.34" => Some("0.34.0"),
        _ => None,
    }
}

/// Why the recorder cannot drive this configuration, if it cannot.
pub fn unsupported(cfg: &EngineConfig) -> Option<String> {
    match &cfg.connector {
        ConnectorConfig::SimpleCpu(s) if s.lazy => {
            return Some(
                "SimpleCPU lazy-mode stores belong to no request, and the recorder times transfers per request \
                 ([[transfer_delay]] req)"
                    .into(),
            )
        }
        ConnectorConfig::Offloading(_) | ConnectorConfig::SimpleCpu(_) | ConnectorConfig::None => {}
        ConnectorConfig::Mooncake(m) => {
            // The recorder runs the MooncakeStoreConnector's defaults (mcstore.py).
            if m.kv_role != crate::system::config::KvRole::Both {
                return Some("the recorder runs the MooncakeStoreConnector as kv_both only".into());
            }
            if !m.enable_lookup {
                return Some("the recorder runs the MooncakeStoreConnector with its lookup on (enable_lookup)".into());
            }
        }
        // The producer alone: the recorder runs NixlConnector's scheduler side in host-buffer
        // mode and plays the decode instance's reads (nixlprod.py).
        ConnectorConfig::Nixl if cfg.router_replay.is_none() => {}
        ConnectorConfig::Nixl
        | ConnectorConfig::NixlDecode
        | ConnectorConfig::NixlStore(_)
        | ConnectorConfig::NixlDecodeStore(_) => {
            return Some(
                "a NixlConnector P/D pair (router replay) needs a decode instance reading over NIXL; the \
                 recorder drives the producer alone"
                    .into(),
            )
        }
    }
    if cfg.router_replay.is_some() {
        return Some("router replay (routed-expert rows) is not recorded".into());
    }
    if !cfg.enable_prefix_caching && matches!(cfg.connector, ConnectorConfig::SimpleCpu(_)) {
        return Some("SimpleCPU disables itself without prefix caching (the recorder refuses the scenario)".into());
    }
    None
}

/// A recorder scenario made from a counterexample.
#[derive(Clone, Debug)]
pub struct Reproduction {
    /// The scenario (TOML, with a comment header naming the counterexample).
    pub toml: String,
    /// The always-properties the counterexample's last state violates (what `conform
    /// --strict` should report on the recorded log).
    pub violated: Vec<&'static str>,
    /// The vLLM release to record it on.
    pub version: &'static str,
    /// Engine steps of the counterexample.
    pub steps: u32,
    /// A hang (requests-finish): the requests that arrived and never finish; the recorder
    /// runs until its step bound and must not see them finish.
    pub unfinished: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum JobKind {
    Store,
    Load,
}

#[derive(Debug)]
struct JobRec {
    kind: JobKind,
    id: u32,
    /// Requests with a part in it (OffloadingConnector: one), in event order.
    reqs: Vec<u16>,
    created: u32,
    sync: bool,
    blocks: usize,
    reported: Option<u32>,
    fail_from: Option<usize>,
}

/// Has the model's worker delivered job `id` (its completion is in a worker output)?
fn settled(e: &crate::system::Engine, kind: JobKind, id: u32) -> bool {
    match &e.conn {
        Connector::Offloading(oc) => oc.jobs.iter().find(|j| j.id == id).is_none_or(|j| j.phase == Phase::Reported),
        Connector::SimpleCpu(sc) => match kind {
            JobKind::Store => sc.stores.iter().find(|x| x.id == id).is_none_or(|x| x.phase == Phase::Reported),
            JobKind::Load => sc.loads.iter().find(|x| x.id == id).is_none_or(|x| x.phase == Phase::Reported),
        },
        Connector::Mooncake(mc) => match kind {
            JobKind::Store => mc.saves.iter().find(|x| x.id == id).is_none_or(|x| x.phase == Phase::Reported),
            // A finished or failed load leaves the list when the worker reports it.
            JobKind::Load => mc.loads.iter().all(|x| x.id != id),
        },
        _ => true,
    }
}

/// FNV-1a 64 over UTF-8, as tests/conformance/vllm/scenario.py computes token ids.
fn fnv1a64(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The recorder's token for segment `name`, index 0.
fn recorder_token(name: &str) -> u64 {
    3 + fnv1a64(&format!("{name}:0")) % 997
}

/// The recorder's output token `n` of request (or session input) `name` (scenario.py's
/// `sampled_token`, never at `eos_at`).
fn sampled_token(name: &str, n: u32) -> u64 {
    3 + fnv1a64(&format!("{name}#{n}")) % 997
}

/// A stream-name prefix under which the model's distinct tokens get distinct recorder tokens,
/// none of them one of `reserved` (the sampled tokens a prompt spells).
fn token_prefix(tokens: &BTreeSet<u32>, reserved: &BTreeSet<u64>) -> Result<&'static str, String> {
    for p in ["t", "u", "v", "w", "x", "y", "z", "tk", "tok"] {
        let ids: BTreeSet<u64> = tokens.iter().map(|t| recorder_token(&format!("{p}{t}"))).collect();
        if ids.len() == tokens.len() && ids.is_disjoint(reserved) {
            return Ok(p);
        }
    }
    Err("no stream prefix gives the model's tokens distinct recorder tokens".into())
}

/// A one-token segment whose token is the recorder token `want`.
fn segment_for(model_token: u32, want: u64) -> String {
    (0u32..)
        .map(|j| format!("o{model_token}_{j}"))
        .find(|name| recorder_token(name) == want)
        .expect("every token in [3, 999] is some segment's")
}

/// Model tokens that a request samples and some prompt spells, as the recorder's sampled
/// token at the same place: the recorder's fake model samples its own tokens (scenario.py), so
/// a prompt that spells another request's output (a block of sampled tokens that a later
/// prompt would hit) must spell the recorder's token there.
fn spelled_outputs(
    wl: &crate::system::workload::Workload,
    order: &[u16],
    in_prompts: &BTreeSet<u32>,
) -> Result<std::collections::BTreeMap<u32, u64>, String> {
    let mut map = std::collections::BTreeMap::new();
    for &r in order {
        let first = &wl.requests[r as usize];
        let inputs = std::iter::once(first).chain(wl.chain(r));
        for (k, spec) in inputs.enumerate() {
            // Input k >= 2 of a session samples under `S@k` (scenario.py).
            let name = if k == 0 { first.name.clone() } else { format!("{}@{}", first.name, k + 1) };
            for (n, &v) in spec.tokens[spec.prompt_len as usize..].iter().enumerate() {
                if !in_prompts.contains(&v) || spec.eos_at == Some(n as u32) {
                    continue;
                }
                let want = sampled_token(&name, n as u32);
                if *map.entry(v).or_insert(want) != want {
                    return Err(format!(
                        "a prompt spells model token {v}, which two outputs sample; the recorder samples \
                         different tokens there"
                    ));
                }
            }
        }
    }
    let targets: BTreeSet<u64> = map.values().copied().collect();
    if targets.len() != map.len() {
        return Err("two sampled tokens a prompt spells are one recorder token".into());
    }
    Ok(map)
}

fn segments(prefix: &str, tokens: &[u32], spelled: &std::collections::BTreeMap<u32, u64>) -> String {
    let v: Vec<String> = tokens
        .iter()
        .map(|t| match spelled.get(t) {
            Some(&want) => format!("\"{}:1\"", segment_for(*t, want)),
            None => format!("\"{prefix}{t}:1\""),
        })
        .collect();
    format!("[{}]", v.join(", "))
}

/// `[mooncake] preload`: the pool's keys at start as prompt prefixes (the recorder fills the
/// pool with a sequence's full blocks), of the requests that arrive first. A key no request's
/// blocks spell is left out: no lookup can find it and no put skips it.
fn mooncake_preload(preload: &[BlockHash], wl: &Workload, order: &[u16]) -> Result<Vec<Vec<u32>>, String> {
    let b = wl.block_size as usize;
    let mut covered: BTreeSet<BlockHash> = BTreeSet::new();
    let mut out: Vec<Vec<u32>> = Vec::new();
    let rest = (0..wl.requests.len() as u16).filter(|r| !order.contains(r));
    for r in order.iter().copied().chain(rest) {
        let spec = &wl.requests[r as usize];
        let full = spec.prompt_len as usize / b;
        let Some(last) = (0..full).rev().find(|&i| preload.contains(&spec.hashes[i])) else { continue };
        if let Some(i) = (0..last).find(|&i| !preload.contains(&spec.hashes[i])) {
            return Err(format!(
                "the pool holds block {last} of {}'s prompt but not block {i}, which a preload cannot spell",
                spec.name
            ));
        }
        if spec.hashes[..=last].iter().any(|h| !covered.contains(h)) {
            covered.extend(&spec.hashes[..=last]);
            out.push(spec.tokens[..(last + 1) * b].to_vec());
        }
    }
    // A key only a session's later input has would change what vLLM finds.
    for h in preload.iter().filter(|h| !covered.contains(h)) {
        if (0..wl.requests.len() as u16).flat_map(|r| wl.chain(r)).any(|t| t.hashes.contains(h)) {
            return Err(format!(
                "the pool starts with {}, which only a session's later input spells (no preload of \
                 prompt tokens gives it)",
                wl.label(*h)
            ));
        }
    }
    Ok(out)
}

/// The scenario that makes the recorder drive vLLM through `actions` (a counterexample of
/// `model`); `name` names it (the log's `scenario`), `source` says where it came from. With
/// `hang`, `actions` lead to a state from which the checker found that some request never
/// finishes (requests-finish): the scenario names those requests (`# expect-unfinished:`) and
/// lets the recorder step on past the counterexample to its step bound.
pub fn to_recorder(
    model: &KvModel,
    actions: &[Action],
    name: &str,
    source: &str,
    hang: bool,
) -> Result<Reproduction, String> {
    let version = vllm_version(&model.profile).ok_or_else(|| {
        format!(
            "profile {} is no vLLM release (reproducible: vllm-0.24, vllm-0.32, vllm-0.33, vllm-0.34)",
            model.profile
        )
    })?;
    if let Some(v) = &model.variant {
        return Err(format!(
            "variant {v} changes the rules of {}; vLLM {version} as released does not run it",
            model.profile
        ));
    }
    let sys = &model.sys;
    if let Some(why) = unsupported(&sys.cfg) {
        return Err(why);
    }
    let wl = &sys.workload;
    let n = wl.requests.len();
    let mut arrive: Vec<Option<u32>> = vec![None; n];
    let mut order: Vec<u16> = Vec::new();
    let mut sent: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut events: Vec<(&str, u16, u32)> = Vec::new();
    let mut jobs: Vec<JobRec> = Vec::new();
    let mut labels: Vec<(u32, String)> = Vec::new();
    let mut reads: Vec<(u16, u32)> = Vec::new();
    let mut engine = sys.init();
    let mut step = 0u32;
    for a in actions {
        let mut ev = Events::on();
        let next = model.apply(&engine, *a, &mut ev, false).ok_or("the counterexample does not replay on the model")?;
        labels.push((step + 1, model.format_action(a)));
        match *a {
            Input::Arrive(r) => {
                arrive[r as usize] = Some(step + 1);
                order.push(r);
            }
            Input::Abort(r) => events.push(("abort", r, step + 1)),
            Input::Error(r) => events.push(("error", r, step + 1)),
            // The recorder sends a session's inputs due before one step in order.
            Input::StreamInput(r) => sent[r as usize].push(step + 1),
            // NIXL P/D: the decode instance reads before the recorder's next step.
            Input::ConsumerRead(r) => reads.push((r, step + 1)),
            a if a.is_step() => step += 1,
            _ => {}
        }
        let created = if a.is_step() { step } else { step + 1 };
        for x in &ev.list {
            let (kind, job, req, blocks, sync) = match x {
                Event::StoreJob { job, req, blocks, .. } => (JobKind::Store, *job, *req, blocks.len(), false),
                Event::LoadJob { job, req, blocks, sync, .. } => (JobKind::Load, *job, *req, blocks.len(), *sync),
                Event::TransferFailed { job, invalid } => {
                    let j = jobs.iter_mut().find(|j| j.kind == JobKind::Load && j.id == *job).ok_or("failed job")?;
                    j.fail_from = Some(j.blocks - invalid.len());
                    continue;
                }
                _ => continue,
            };
            match jobs.iter_mut().find(|j| j.kind == kind && j.id == job) {
                Some(j) => {
                    j.blocks += blocks;
                    if !j.reqs.contains(&req) {
                        j.reqs.push(req)
                    }
                }
                None => jobs.push(JobRec {
                    kind,
                    id: job,
                    reqs: vec![req],
                    created,
                    sync,
                    blocks,
                    reported: None,
                    fail_from: None,
                }),
            }
        }
        engine = next;
        if a.is_step() {
            for j in jobs.iter_mut().filter(|j| j.reported.is_none()) {
                if settled(&engine, j.kind, j.id) {
                    j.reported = Some(step);
                }
            }
        }
    }
    let violated: Vec<&'static str> = props::REGISTRY
        .iter()
        .filter(|p| p.kind == Kind::Always && props::applies(p, &sys.cfg) && p.id != props::PropId::RequestsFinish)
        .filter(|p| !(p.check)(sys, &engine))
        .map(|p| p.name)
        .collect();

    let unfinished: Vec<String> = if hang {
        let u: Vec<String> = order
            .iter()
            .filter(|&&r| !engine.reqs[r as usize].status.is_finished())
            .map(|&r| wl.requests[r as usize].name.clone())
            .collect();
        if u.is_empty() {
            return Err("every request of the counterexample finishes: what never ends is work no request \
                        waits for (finding 27's kind), which the recorder ends as a finished run"
                .into());
        }
        u
    } else {
        Vec::new()
    };

    // Tokens: every prompt and session input of the requests that arrived.
    let mut inputs: Vec<Vec<Vec<u32>>> = vec![Vec::new(); n];
    for &r in &order {
        // The chain of inputs (every sampled token but the last kept); the layouts 0.24's
        // async sessions may take instead follow from the same inputs.
        let mut prev = &wl.requests[r as usize];
        for t in wl.chain(r) {
            let keep = (prev.prompt_len + stop_outputs(prev, sys.cfg.max_model_len)).saturating_sub(1) as usize;
            inputs[r as usize].push(t.tokens[keep.min(t.prompt_len as usize)..t.prompt_len as usize].to_vec());
            prev = t;
        }
    }
    let mut distinct: BTreeSet<u32> = BTreeSet::new();
    for &r in &order {
        let spec = &wl.requests[r as usize];
        distinct.extend(&spec.tokens[..spec.prompt_len as usize]);
        inputs[r as usize].iter().for_each(|i| distinct.extend(i));
    }
    let preload = match &sys.cfg.connector {
        ConnectorConfig::Mooncake(m) => mooncake_preload(&m.preload, wl, &order)?,
        _ => Vec::new(),
    };
    preload.iter().for_each(|t| distinct.extend(t));
    let spelled = spelled_outputs(wl, &order, &distinct)?;
    let unspelled: BTreeSet<u32> = distinct.iter().copied().filter(|t| !spelled.contains_key(t)).collect();
    let prefix = token_prefix(&unspelled, &spelled.values().copied().collect())?;

    let cfg = &sys.cfg;
    let mut s = String::new();
    let _ = writeln!(s, "# kvmc reproduce: a checker counterexample as a recorder scenario (docs/conformance.md)");
    let _ = writeln!(
        s,
        "# counterexample: {source} under {}, {} actions, {step} engine steps",
        model.profile,
        actions.len()
    );
    let _ = writeln!(s, "# vllm-version: {version}");
    let _ = writeln!(s, "# expect-violated: {}", violated.join(" "));
    if hang {
        let _ = writeln!(s, "# expect-unfinished: {}", unfinished.join(" "));
    }
    let _ = writeln!(s, "# actions (recorder step the action precedes or is):");
    for (i, (st, l)) in labels.iter().enumerate() {
        let _ = writeln!(s, "#   {:>2}. {l:<36} step {st}", i + 1);
    }
    let _ = writeln!(s, "name = {name:?}");
    let _ = writeln!(
        s,
        "description = {:?}",
        format!("kvmc reproduce: {source} ({}); violates {}", model.profile, violated.join(", "))
    );
    let _ = writeln!(s, "\n[engine]");
    let _ = writeln!(s, "profile = {:?}", model.profile);
    let _ = writeln!(s, "block_size = {}", cfg.block_size);
    let blocks = super::reproduce_pd::gpu_blocks(cfg.num_gpu_blocks, cfg.max_model_len, cfg.block_size);
    if blocks > cfg.num_gpu_blocks {
        let _ = writeln!(s, "# {} GPU blocks in the model: vLLM's pool must hold max_model_len", cfg.num_gpu_blocks);
    }
    let _ = writeln!(s, "gpu_blocks = {blocks}");
    let _ = writeln!(s, "max_num_batched_tokens = {}", cfg.max_num_batched_tokens);
    // vLLM refuses max_num_seqs above the token budget (SchedulerConfig); no step can
    // schedule more requests than tokens anyway.
    let _ = writeln!(s, "max_num_seqs = {}", cfg.max_num_seqs.min(cfg.max_num_batched_tokens));
    let _ = writeln!(s, "max_model_len = {}", cfg.max_model_len);
    let _ = writeln!(s, "long_prefill_token_threshold = {}", cfg.long_prefill_token_threshold);
    let policy = if cfg.load_failure_policy == LoadFailurePolicy::Recompute { "recompute" } else { "fail" };
    let _ = writeln!(s, "load_failure_policy = {policy:?}");
    if cfg.cache_aware_admission_window > 0 {
        let _ = writeln!(s, "cache_aware_admission_window = {}", cfg.cache_aware_admission_window);
        let t = f64::from(cfg.cache_aware_admission_threshold_permille) / 1000.0;
        let _ = writeln!(s, "cache_aware_admission_threshold = {t:?}");
    }
    if !cfg.enable_prefix_caching {
        let _ = writeln!(s, "enable_prefix_caching = false");
    }
    if !cfg.reserve_full_isl {
        let _ = writeln!(s, "scheduler_reserve_full_isl = false");
    }
    if cfg.async_scheduling {
        // AsyncScheduler + EngineCore.step_with_batch_queue (record.py); a model step is one
        // step_with_batch_queue call, as a recorder step is.
        let _ = writeln!(s, "async_scheduling = true");
    }
    match &cfg.connector {
        ConnectorConfig::Offloading(o) => {
            let _ = writeln!(s, "connector = \"offloading\"\n\n[offload]");
            let _ = writeln!(s, "host_chunks = {}", o.host_chunks);
            let _ = writeln!(s, "blocks_per_chunk = {}", o.blocks_per_chunk);
            let _ = writeln!(s, "offload_prompt_only = {}", o.offload_prompt_only);
            let _ = writeln!(s, "sync_load_budget_tokens = {}", o.sync_load_budget_tokens);
            if o.eviction_policy == crate::system::EvictionPolicy::Arc {
                let _ = writeln!(s, "eviction_policy = \"arc\"");
            }
        }
        ConnectorConfig::SimpleCpu(c) => {
            let _ = writeln!(s, "connector = \"simple-cpu\"\n\n[simple_cpu]\ncpu_blocks = {}", c.cpu_blocks);
        }
        ConnectorConfig::Mooncake(m) => {
            let _ = writeln!(s, "connector = \"mooncake\"");
            if !preload.is_empty() || m.save_decode_cache {
                let _ = writeln!(s, "\n[mooncake]");
            }
            if !preload.is_empty() {
                // Another instance's puts: the full blocks of each sequence.
                let seqs: Vec<String> = preload.iter().map(|t| segments(prefix, t, &spelled)).collect();
                let _ = writeln!(s, "preload = [{}]", seqs.join(", "));
            }
            if m.save_decode_cache {
                let _ = writeln!(s, "save_decode_cache = true");
            }
        }
        ConnectorConfig::Nixl => {
            let _ = writeln!(s, "connector = \"nixl\"");
        }
        _ => {
            let _ = writeln!(s, "connector = \"none\"");
        }
    }
    // A hang runs 40 steps past the counterexample: the recorder's bound, then its partial log.
    let max_steps = if hang { step + 40 } else { (step + 200).max(200) };
    let _ = writeln!(s, "\n[worker]\nstore_delay = 1\nload_delay = 1\nmax_steps = {max_steps}");
    for &r in &order {
        let spec = &wl.requests[r as usize];
        let _ = writeln!(s, "\n[[request]]\nname = {:?}", spec.name);
        let _ = writeln!(s, "prompt = {}", segments(prefix, &spec.tokens[..spec.prompt_len as usize], &spelled));
        let _ = writeln!(s, "max_tokens = {}", spec.max_tokens);
        if let Some(e) = spec.eos_at {
            let _ = writeln!(s, "eos_at = {e}");
        }
        let _ = writeln!(s, "arrive = {}", arrive[r as usize].expect("arrived"));
        let turns = wl.chain(r);
        let sends = &sent[r as usize];
        for (k, t) in turns.iter().enumerate() {
            let _ = writeln!(s, "\n[[request.input]]\nprompt = {}", segments(prefix, &inputs[r as usize][k], &spelled));
            let _ = writeln!(s, "max_tokens = {}", t.max_tokens);
            if let Some(e) = t.eos_at {
                let _ = writeln!(s, "eos_at = {e}");
            }
            match sends.get(k) {
                Some(st) => writeln!(s, "send = {st}"),
                None => writeln!(s, "send = \"parked\""),
            }
            .ok();
        }
        if !turns.is_empty() {
            match sends.get(turns.len()) {
                Some(st) => writeln!(s, "\n[[request.input]]\nend = true\nsend = {st}"),
                None => writeln!(s, "\n[[request.input]]\nend = true\nsend = \"parked\""),
            }
            .ok();
        }
    }
    for (kind, r, st) in &events {
        let _ = writeln!(s, "\n[[event]]\n{kind} = {:?}\nstep = {st}", wl.requests[*r as usize].name);
    }
    if matches!(cfg.connector, ConnectorConfig::Nixl) {
        s.push_str(&super::reproduce_pd::consumer_reads(&reads, &engine, step, wl));
    }
    // The nth job of its kind for a request, as the recorder's fake worker counts them (per
    // request; SimpleCPU: the nth event holding a part of it).
    let mut count: std::collections::BTreeMap<(u16, bool), u32> = Default::default();
    for j in &jobs {
        let mut nth_of_first = 0;
        for (i, &r) in j.reqs.iter().enumerate() {
            let c = count.entry((r, j.kind == JobKind::Store)).or_insert(0);
            *c += 1;
            if i == 0 {
                nth_of_first = *c;
            }
        }
        let who = &wl.requests[j.reqs[0] as usize].name;
        if let Some(k) = j.fail_from {
            let _ = writeln!(s, "\n[[load_failure]]\nreq = {who:?}\nnth = {nth_of_first}\nfrom_block = {k}");
        }
        if j.sync {
            continue;
        }
        let at = j.reported.unwrap_or(step + 1);
        let min =
            if j.kind == JobKind::Store && matches!(cfg.connector, ConnectorConfig::Offloading(_)) { 1 } else { 0 };
        let delay = at.saturating_sub(j.created).max(min);
        let kind = if j.kind == JobKind::Store { "store" } else { "load" };
        let _ =
            writeln!(s, "\n[[transfer_delay]]\nreq = {who:?}\nkind = {kind:?}\nnth = {nth_of_first}\ndelay = {delay}");
    }
    Ok(Reproduction { toml: s, violated, version, steps: step, unfinished })
}
