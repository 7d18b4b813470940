//! P/D trace replay: a trace through prefill/decode pairs behind prime-rl's router, the
//! checker's own P/D system (`src/system/pd`) driven by a trace (docs/replay.md, "P/D
//! pairs"; docs/router-replay.md).
//!
//! Each pair is one [`System`] with P's configuration and workload and D's in `sys.pd`, and
//! one P engine carrying D and the router in `Engine.pd`, as `kvmc check` builds it. A trace
//! row arrives at the router, which picks a pair (sessions stay on their first turn's pair;
//! otherwise the `[replay]` router rule: round-robin, least-loaded or prefix) and sends it to
//! P with `max_tokens = 1` and `do_remote_decode`; once P answered, the router sends it to D
//! with P's `kv_transfer_params` (`PdInput::Send`); D's NIXL read of P's host buffer lands
//! `load_steps` D steps after D queued it (`PdInput::ReadDone`); when D answered, the router
//! merges the rows (`pd::sync`). The row is done when the router answered (merged rows or
//! HTTP 500). Request slots are shared by P and D (the router names a request by its slot on
//! both) and reused once both instances and the router are done with them.
//!
//! Every instance has its own clock (model time): a step that computes any prefill token
//! costs `prefill_ms`, one that only decodes `decode_ms`; D gets a request at P's clock when
//! P answered. The busy instance furthest behind steps next; an instance whose step computed
//! nothing and made no progress waits until something else happens in its pair (P holding
//! blocks for D's read, D waiting for P's answer). After every action the instance's
//! invariants are checked (P's after every action of its pair: D's reads and the router's
//! merge change P's state and ghost), as colocated replay does.

mod driver;
mod pair;

use super::trace::Trace;
use super::{Finding, Metrics, RequestRow};
use crate::error::Result;
use crate::scope::replay::ReplayModel;
use crate::system::events::Stats;
use crate::system::Rules;
use driver::PdDriver;

/// Router-replay figures of one instance, beside its replay metrics.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RowsMetrics {
    /// Routed-expert rows the frontend received from this instance.
    pub rows_emitted: u64,
    /// Rows the worker read back from the row store to emit them.
    pub rows_from_store: u64,
    /// External loads shortened (prime-rl's clamp, vLLM 0.33's all-or-nothing gate), and the
    /// tokens they gave up (recomputed instead).
    pub loads_clamped: u64,
    pub clamped_tokens: u64,
    /// Local prefix hits cut at a loaded block (prime-rl's cut), and the tokens they gave up
    /// (recomputed instead).
    pub hits_cut: u64,
    pub cut_tokens: u64,
    /// D: prompt tokens its NIXL reads brought from P (the remote hit that landed).
    pub remote_hit_tokens: u64,
}

/// One instance of a pair.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PdInstance {
    pub pair: u32,
    /// "prefill" or "decode".
    pub role: String,
    pub metrics: Metrics,
    pub rows: RowsMetrics,
}

/// What the router of one pair answered.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PdRouter {
    pub pair: u32,
    /// Requests the router answered with merged rows.
    pub merged: u64,
    /// HTTP 500 because the row merge refused (v0.2.2: D has fewer rows than P; v0.2.3: the
    /// overlap is out of range).
    pub http_500_merge: u64,
    /// HTTP 500 because a stage (P or D) finished with an error.
    pub http_500_stage: u64,
}

/// The P/D part of a replay report.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PdSummary {
    pub pairs: u32,
    /// How the router picks a pair for a request that is not a later session turn.
    pub routing: String,
    /// P then D of pair 0, P then D of pair 1, ...
    pub instances: Vec<PdInstance>,
    pub routers: Vec<PdRouter>,
}

/// The outcome of a P/D replay, for `run_trace`.
pub(crate) struct PdRun {
    pub summary: PdSummary,
    pub total: Metrics,
    pub checks: super::Checks,
    pub finding: Option<Finding>,
    pub requests: Vec<RequestRow>,
    pub interrupted: bool,
}

fn rows_of(s: &Stats) -> RowsMetrics {
    RowsMetrics {
        rows_emitted: s.rows_emitted,
        rows_from_store: s.rows_from_store,
        loads_clamped: s.loads_clamped,
        clamped_tokens: s.clamped_tokens,
        hits_cut: s.hits_cut,
        cut_tokens: s.cut_tokens,
        remote_hit_tokens: 0,
    }
}

/// Replay `trace` through the P/D pairs of `model`.
pub(crate) fn run(
    trace: &Trace,
    model: &ReplayModel,
    rules: Rules,
    profile: &str,
    full_every: u64,
    skip: Vec<crate::props::PropId>,
    tick: &mut dyn FnMut(u32),
) -> Result<PdRun> {
    let mut d = PdDriver::new(trace, model, rules, profile, full_every, skip)?;
    let found = d.run(tick)?;
    let mut instances = Vec::new();
    let mut total = Metrics::default();
    let mut checks = super::Checks::default();
    for (k, pair) in d.pairs.iter().enumerate() {
        for (role, side) in [("prefill", &pair.p), ("decode", &pair.d)] {
            let s = side.stats();
            let mut m = super::metrics_of(&s, side.steps, side.actions, side.clock);
            m.admissions = side.admissions;
            m.max_running = side.max_running;
            let rows = d.rows.iter().filter(|r| r.arrived && usize::from(r.pair) == k);
            m.requests = if role == "prefill" { rows.clone().count() as u64 } else { side.arrived.len() as u64 };
            m.finished = rows.filter(|r| r.finished).count() as u64;
            for &r in &side.arrived {
                m.prompt_tokens += u64::from(trace.rows[r as usize].prompt_len);
                m.output_tokens += if role == "prefill" { 1 } else { u64::from(d.out_len[r as usize]) };
            }
            let mut rows = rows_of(&s);
            if role == "decode" {
                // D has no host tier: every external hit it loads is P's prompt KV.
                rows.remote_hit_tokens = s.host_hit_tokens;
            }
            super::add(&mut total, &m);
            checks.evaluations += side.checker.checks;
            checks.examined += side.checker.examined;
            checks.full += side.full_checks + side.checker.full_runs;
            for p in side.checker.properties() {
                if !checks.properties.contains(p) {
                    checks.properties.push(p);
                }
            }
            instances.push(PdInstance { pair: k as u32, role: role.into(), metrics: m, rows });
        }
    }
    // A request's prompt is first reached on P, its completion on D (D's own hits, remote
    // hits and its recomputed last prompt token are in its instance's figures).
    let on_p = instances.iter().filter(|i| i.role == "prefill");
    total.g1_hit_tokens = on_p.clone().map(|i| i.metrics.g1_hit_tokens).sum();
    total.host_hit_tokens = on_p.clone().map(|i| i.metrics.host_hit_tokens).sum();
    total.prefill_tokens = on_p.clone().map(|i| i.metrics.prefill_tokens).sum();
    total.rehit_tokens = on_p.map(|i| i.metrics.rehit_tokens).sum();
    total.model_seconds = d.pairs.iter().flat_map(|p| [p.p.clock, p.d.clock]).max().unwrap_or(0) as f64 / 1e6;
    total.requests = trace.rows.len() as u64;
    total.finished = u64::from(d.finished - d.rejected);
    total.rejected = u64::from(d.rejected);
    for (i, r) in trace.rows.iter().enumerate() {
        if d.rows[i].arrived {
            total.prompt_tokens += u64::from(r.prompt_len);
            total.output_tokens += u64::from(d.out_len[i]);
        }
    }
    checks.reached = crate::props::REGISTRY
        .iter()
        .filter(|p| p.kind == crate::props::Kind::Sometimes)
        .filter(|p| d.pairs.iter().any(|x| x.p.checker.reached.has(p) || x.d.checker.reached.has(p)))
        .map(|p| p.name)
        .collect();
    let requests = d
        .rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.finished)
        .map(|(i, r)| {
            let row = &trace.rows[i];
            RequestRow {
                line: row.line,
                session: row.session.map(|s| trace.sessions[s as usize].clone()),
                turn: row.turn,
                engine: r.pair,
                arrival_ms: r.arrival_us as f64 / 1000.0,
                finish_ms: r.finish_us as f64 / 1000.0,
                prompt_tokens: row.prompt_len,
                output_tokens: d.out_len[i],
                g1_hit_tokens: r.p.g1_hit_tokens,
                host_hit_tokens: r.d.host_hit_tokens,
                prefill_tokens: r.p.prefill_tokens,
                decode_tokens: r.d.decode_tokens,
                recomputed_tokens: r.p.recomputed_tokens + r.d.recomputed_tokens,
                preemptions: r.p.preemptions + r.d.preemptions,
            }
        })
        .collect();
    let finding = found.map(|f| {
        let (k, role) = (f.instance / 2, if f.instance % 2 == 0 { "P" } else { "D" });
        let detail = match &d.pairs[k].router_violation {
            Some(x) if f.violation.property == "pd-equals-colocated" => x.clone(),
            _ => f.violation.detail.clone(),
        };
        Finding {
            property: f.violation.property.to_string(),
            detail: format!("pair {k}, {role}: {detail}"),
            engine: f.instance,
            step: f.step,
            action: f.action,
            model_file: None,
            scenario_file: None,
            note: Some(
                "P/D replay writes no history files yet (a P/D scope with the requests that arrived would re-run it in kvmc check)".into(),
            ),
            explorable: false,
        }
    });
    let routers = d.pairs.iter().map(|p| p.router.clone()).collect();
    Ok(PdRun {
        summary: PdSummary {
            pairs: model.replay.pairs,
            routing: if model.replay.pairs == 1 {
                "one pair".into()
            } else {
                format!("{} (a session's later turns go to its first turn's pair)", model.replay.router.name())
            },
            instances,
            routers,
        },
        total,
        checks,
        finding,
        requests,
        interrupted: d.interrupted,
    })
}
