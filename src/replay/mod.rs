//! Trace replay: the reference implementation over real traces, with metrics and every
//! invariant checked after every action (docs/replay.md).
//!
//! - [`trace`]: Mooncake JSONL (and its session/delta form) parsed and checked up front.
//! - [`config`]: the replay model (a model file with a `[replay]` table).
//! - `arrivals`: the arrival queue both drivers share (timed rows, fresh sessions, eligible
//!   rows, the closed loop's cap).
//! - `driver`: arrivals (timestamps or a closed loop), engine steps on a time model, copies
//!   completing a fixed number of steps after they were issued, one or more engines behind a
//!   router.
//! - [`invariants`]: the catalogue's always-properties, evaluated incrementally.
//! - `predicates`: which properties replay evaluates, and their forms over the whole state.
//! - `reached`: the catalogue's reachability guards a replay reached.
//! - `export`: a violation's history as a model file and a scenario (`kvmc replay` and
//!   `kvmc explore --path` re-run it).
//! - [`scenario`]: `kvmc replay` of a kvmc scenario file (the checker's own model and actions).
//! - [`pd`]: P/D pairs behind prime-rl's router (a model with `connector = "nixl"` and
//!   `[router_replay]`), per-instance metrics with the router-replay figures.

mod arrivals;
mod driver;
mod export;
pub mod invariants;
pub mod pd;
mod pool_checks;
mod predicates;
mod reached;
pub mod report;
pub(crate) mod route;
pub mod scenario;
pub mod trace;

use crate::error::{KvmcError, Result};
use crate::scope::replay::ReplayModel;
use crate::system::events::{ReqStats, Stats};
pub use driver::RowResult;
use std::path::{Path, PathBuf};
use trace::Trace;

/// How to run a replay.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub profile: Option<String>,
    pub variant: Option<String>,
    /// Overrides the model's `full_check_every`.
    pub full_check_every: Option<u64>,
    /// Where a violation's model and scenario are written (default: the current directory).
    pub out_dir: Option<PathBuf>,
    /// A progress bar on stderr.
    pub progress: bool,
    /// Always-properties not to evaluate (`--skip-property`), e.g. a known quality finding
    /// that every release violates.
    pub skip_properties: Vec<String>,
}

/// Engine-wide totals of one replay.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Metrics {
    pub requests: u64,
    pub finished: u64,
    /// Rows refused before reaching an engine (prompt of max_model_len tokens or more).
    pub rejected: u64,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Token positions first served from G1 prefix hits.
    pub g1_hit_tokens: u64,
    /// Token positions first served by host-tier loads.
    pub host_hit_tokens: u64,
    /// Token positions first computed by prefill (not served from any cache).
    pub prefill_tokens: u64,
    /// Token positions first computed by decode steps.
    pub decode_tokens: u64,
    /// Positions computed again after a preemption (prefill work on top of `prefill_tokens`).
    pub recomputed_tokens: u64,
    /// Positions served again by hits after a preemption.
    pub rehit_tokens: u64,
    pub store_jobs: u64,
    pub stored_chunks: u64,
    pub store_refusals: u64,
    pub load_jobs: u64,
    pub loaded_chunks: u64,
    pub g1_evictions: u64,
    pub host_evictions: u64,
    pub preemptions: u64,
    /// Tokens the engine computed over all steps, cache hits excluded: prefill passes (first
    /// time and again after preemptions) plus decode (the sum of vLLM's per-step
    /// `num_scheduled_tokens`).
    pub scheduled_tokens: u64,
    /// Times a request entered RUNNING: its first admission, and again after each preemption.
    pub admissions: u64,
    /// The most requests RUNNING after a step (one engine; over several, the largest).
    pub max_running: u64,
    pub steps: u64,
    pub actions: u64,
    /// Model time at the end (seconds).
    pub model_seconds: f64,
}

/// What the invariant checks did.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Checks {
    /// Always-properties evaluated after every action.
    pub properties: Vec<&'static str>,
    /// Property evaluations (properties × actions).
    pub evaluations: u64,
    /// Blocks, cached entries and host keys the incremental checks examined.
    pub examined: u64,
    /// Whole-state evaluations of every property (periodic and at the end).
    pub full: u64,
    /// Reachability guards whose situation occurred at least once.
    pub reached: Vec<&'static str>,
}

/// A violated invariant and where its history was written.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub property: String,
    pub detail: String,
    pub engine: usize,
    pub step: u64,
    pub action: u64,
    /// The model file and scenario that re-run it (None if they could not be written).
    pub model_file: Option<PathBuf>,
    pub scenario_file: Option<PathBuf>,
    /// Why no scenario was written, or a note about it.
    pub note: Option<String>,
    /// The scenario is a path of the checker's actions (it has no step in which stores finish
    /// within the step): the explorer opens it by an index path and offers other paths from
    /// it; otherwise it replays the scenario file as it is.
    pub explorable: bool,
}

/// One finished trace row (`--per-request`).
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestRow {
    pub line: u32,
    pub session: Option<String>,
    pub turn: u32,
    pub engine: u16,
    pub arrival_ms: f64,
    pub finish_ms: f64,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub g1_hit_tokens: u64,
    pub host_hit_tokens: u64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub recomputed_tokens: u64,
    pub preemptions: u32,
}

/// The outcome of a trace replay.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub trace: PathBuf,
    pub format: &'static str,
    pub model: String,
    pub profile: String,
    pub variant: Option<String>,
    pub engines: u32,
    /// Each engine's pools, in usable units.
    pub pools: crate::scope::replay::Pools,
    pub metrics: Metrics,
    pub per_engine: Vec<Metrics>,
    pub checks: Checks,
    pub finding: Option<Finding>,
    pub requests: Vec<RequestRow>,
    pub seconds: f64,
    pub peak_rss_bytes: Option<u64>,
    /// Ctrl-C stopped the replay: the metrics and checks are those reached (incomplete).
    pub interrupted: bool,
    /// P/D pairs: each instance's metrics and each router's answers (None: colocated).
    pub pd: Option<pd::PdSummary>,
}

fn metrics_of(s: &Stats, steps: u64, actions: u64, clock: u64) -> Metrics {
    Metrics {
        g1_hit_tokens: s.g1_hit_tokens,
        host_hit_tokens: s.host_hit_tokens,
        prefill_tokens: s.prefill_tokens,
        decode_tokens: s.decode_tokens,
        recomputed_tokens: s.recomputed_tokens,
        rehit_tokens: s.rehit_tokens,
        store_jobs: s.store_jobs,
        stored_chunks: s.stored_chunks,
        store_refusals: s.store_refusals,
        load_jobs: s.load_jobs,
        loaded_chunks: s.loaded_chunks,
        g1_evictions: s.g1_evictions,
        host_evictions: s.host_evictions,
        preemptions: s.preemptions,
        scheduled_tokens: s.prefill_pass_tokens + s.decode_tokens,
        steps,
        actions,
        model_seconds: clock as f64 / 1e6,
        ..Default::default()
    }
}

/// Replay `trace` through `model`.
pub fn run_trace(trace: &Trace, model: &ReplayModel, opts: &Options) -> Result<Outcome> {
    let start = std::time::Instant::now();
    let profile = opts.profile.clone().unwrap_or_else(|| model.profile.clone());
    let rules = crate::system::rules::resolve(&profile, opts.variant.as_deref()).map_err(KvmcError::Usage)?;
    if let Some(why) = crate::scope::unmodelled(&model.cfg, &rules, &profile) {
        return Err(KvmcError::Usage(why));
    }
    let full_every = opts.full_check_every.unwrap_or(model.replay.full_check_every);
    let mut skip: Vec<crate::props::PropId> = Vec::new();
    for name in &opts.skip_properties {
        match crate::props::REGISTRY.iter().find(|p| p.name == name && p.kind == crate::props::Kind::Always) {
            Some(p) => skip.push(p.id),
            None => {
                return Err(KvmcError::Usage(format!(
                    "--skip-property {name}: no such always-property (kvmc list shows the catalogue)"
                )))
            }
        }
    }
    let bar = opts.progress.then(|| {
        let pb = indicatif::ProgressBar::new(trace.rows.len() as u64);
        pb.set_style(crate::util::progress_style("requests"));
        pb
    });
    if model.cfg.connector_kind() == crate::system::ConnectorKind::Nixl {
        let run = pd::run(trace, model, rules, &profile, full_every, skip, &mut |n| {
            if let Some(pb) = &bar {
                pb.set_position(u64::from(n));
            }
        })?;
        if let Some(pb) = bar {
            pb.finish_and_clear();
        }
        return Ok(Outcome {
            trace: trace.path.clone(),
            format: trace.format.name(),
            model: model.name.clone(),
            profile,
            variant: opts.variant.clone(),
            engines: 2 * model.replay.pairs,
            pools: crate::scope::replay::Pools::of(&model.cfg),
            metrics: run.total,
            per_engine: Vec::new(),
            checks: run.checks,
            finding: run.finding,
            requests: run.requests,
            seconds: start.elapsed().as_secs_f64(),
            peak_rss_bytes: crate::stop::peak_rss_bytes(),
            interrupted: run.interrupted,
            pd: Some(run.summary),
        });
    }
    let mut d = driver::Driver::new(trace, model, rules, full_every, skip)?;
    let found = d.run(&mut |n| {
        if let Some(pb) = &bar {
            pb.set_position(u64::from(n));
        }
    })?;
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    let mut per_engine = Vec::new();
    let mut total = Metrics::default();
    let mut checks = Checks::default();
    for inst in &d.inst {
        let s = inst.ev.stats.as_deref().cloned().unwrap_or_default();
        let mut m = metrics_of(&s, inst.steps, inst.actions, inst.clock);
        m.admissions = inst.admissions;
        m.max_running = inst.max_running;
        let rows = d.results.iter().filter(|r| r.arrived && usize::from(r.engine) == per_engine.len());
        m.requests = rows.clone().count() as u64;
        m.finished = rows.clone().filter(|r| r.finished).count() as u64;
        per_engine.push(m.clone());
        add(&mut total, &m);
        checks.evaluations += inst.checker.checks;
        checks.examined += inst.checker.examined;
        checks.full += inst.full_checks + inst.checker.full_runs;
        checks.properties = inst.checker.properties().to_vec();
    }
    total.model_seconds = d.inst.iter().map(|i| i.clock).max().unwrap_or(0) as f64 / 1e6;
    total.requests = trace.rows.len() as u64;
    total.finished = u64::from(d.finished - d.rejected);
    total.rejected = u64::from(d.rejected);
    for (i, r) in trace.rows.iter().enumerate() {
        if d.results[i].arrived {
            total.prompt_tokens += u64::from(r.prompt_len);
            total.output_tokens += u64::from(d.out_len[i]);
        }
    }
    for (pe, inst) in per_engine.iter_mut().zip(&d.inst) {
        for &r in &inst.arrived {
            pe.prompt_tokens += u64::from(trace.rows[r as usize].prompt_len);
            pe.output_tokens += u64::from(d.out_len[r as usize]);
        }
    }
    checks.reached = crate::props::REGISTRY
        .iter()
        .filter(|p| p.kind == crate::props::Kind::Sometimes)
        .filter(|p| d.inst.iter().any(|inst| inst.checker.reached.has(p)))
        .map(|p| p.name)
        .collect();
    let requests = d
        .results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.finished)
        .map(|(i, r)| request_row(trace, i as u32, r, d.out_len[i]))
        .collect();
    let finding = found.map(|f| export::write(&d, &f, &profile, opts.variant.as_deref(), opts.out_dir.as_deref()));
    Ok(Outcome {
        trace: trace.path.clone(),
        format: trace.format.name(),
        model: model.name.clone(),
        profile,
        variant: opts.variant.clone(),
        engines: model.replay.engines,
        pools: crate::scope::replay::Pools::of(&model.cfg),
        metrics: total,
        per_engine,
        checks,
        finding,
        requests,
        seconds: start.elapsed().as_secs_f64(),
        peak_rss_bytes: crate::stop::peak_rss_bytes(),
        interrupted: d.interrupted,
        pd: None,
    })
}

fn add(t: &mut Metrics, m: &Metrics) {
    t.scheduled_tokens += m.scheduled_tokens;
    t.admissions += m.admissions;
    t.max_running = t.max_running.max(m.max_running);
    t.g1_hit_tokens += m.g1_hit_tokens;
    t.host_hit_tokens += m.host_hit_tokens;
    t.prefill_tokens += m.prefill_tokens;
    t.decode_tokens += m.decode_tokens;
    t.recomputed_tokens += m.recomputed_tokens;
    t.rehit_tokens += m.rehit_tokens;
    t.store_jobs += m.store_jobs;
    t.stored_chunks += m.stored_chunks;
    t.store_refusals += m.store_refusals;
    t.load_jobs += m.load_jobs;
    t.loaded_chunks += m.loaded_chunks;
    t.g1_evictions += m.g1_evictions;
    t.host_evictions += m.host_evictions;
    t.preemptions += m.preemptions;
    t.steps += m.steps;
    t.actions += m.actions;
}

fn request_row(t: &Trace, i: u32, r: &RowResult, output: u32) -> RequestRow {
    let row = &t.rows[i as usize];
    let s: &ReqStats = &r.stats;
    RequestRow {
        line: row.line,
        session: row.session.map(|s| t.sessions[s as usize].clone()),
        turn: row.turn,
        engine: r.engine,
        arrival_ms: r.arrival_us as f64 / 1000.0,
        finish_ms: r.finish_us as f64 / 1000.0,
        prompt_tokens: row.prompt_len,
        output_tokens: output,
        g1_hit_tokens: s.g1_hit_tokens,
        host_hit_tokens: s.host_hit_tokens,
        prefill_tokens: s.prefill_tokens,
        decode_tokens: s.decode_tokens,
        recomputed_tokens: s.recomputed_tokens,
        preemptions: s.preemptions,
    }
}

/// Is `path` a kvmc scenario file (rather than a JSONL trace)?
pub fn is_scenario(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "toml")
}
