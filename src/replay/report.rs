//! Replay output: a metrics table (text) or one JSON document, optionally with a row per
//! request.

use super::scenario::ScenarioOutcome;
use super::{Metrics, Outcome};
use std::fmt::Write;

pub use crate::util::thousands;

fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * a as f64 / b as f64)
    }
}

fn hms(secs: f64) -> String {
    let s = secs.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn metrics_lines(s: &mut String, m: &Metrics, indent: &str) {
    let row = |s: &mut String, k: &str, v: String| {
        let _ = writeln!(s, "{indent}{k:<26} {v}");
    };
    let rejected = if m.rejected > 0 {
        format!(", {} rejected (prompt of max_model_len tokens or more, or a refused session)", thousands(m.rejected))
    } else {
        String::new()
    };
    row(s, "requests", format!("{} finished of {}{rejected}", thousands(m.finished), thousands(m.requests)));
    row(s, "prompt tokens", thousands(m.prompt_tokens));
    let part = |n: u64| format!("{:>14}  {:>6}", thousands(n), pct(n, m.prompt_tokens));
    row(s, "  first reached: G1 hits", part(m.g1_hit_tokens));
    row(s, "  first reached: restored", part(m.host_hit_tokens));
    row(s, "  first reached: prefill", part(m.prefill_tokens));
    row(
        s,
        "recomputed (preemption)",
        format!(
            "{} tokens computed again after preemptions ({} served again from caches)",
            thousands(m.recomputed_tokens),
            thousands(m.rehit_tokens)
        ),
    );
    row(s, "output tokens", format!("{} ({} decode steps)", thousands(m.output_tokens), thousands(m.decode_tokens)));
    row(
        s,
        "stores",
        format!(
            "{} jobs, {} chunks ({} refused for lack of room)",
            thousands(m.store_jobs),
            thousands(m.stored_chunks),
            thousands(m.store_refusals)
        ),
    );
    row(s, "loads", format!("{} jobs, {} chunks", thousands(m.load_jobs), thousands(m.loaded_chunks)));
    row(
        s,
        "evictions",
        format!("G1 {} blocks, host {} chunks", thousands(m.g1_evictions), thousands(m.host_evictions)),
    );
    row(s, "preemptions", thousands(m.preemptions));
    row(
        s,
        "scheduled tokens",
        format!("{} computed in steps (prefill passes and decode, hits excluded)", thousands(m.scheduled_tokens)),
    );
    row(
        s,
        "admissions",
        format!("{} (requests entering RUNNING; max running {})", thousands(m.admissions), thousands(m.max_running)),
    );
    row(
        s,
        "engine steps",
        format!("{} ({} actions), model time {}", thousands(m.steps), thousands(m.actions), hms(m.model_seconds)),
    );
}

/// P/D pairs: each instance's metrics with its router-replay figures, each router's answers.
fn pd_lines(s: &mut String, pd: &super::pd::PdSummary) {
    let _ = writeln!(
        s,
        "  {:<26} {} pair{}, routing: {}",
        "P/D",
        pd.pairs,
        if pd.pairs == 1 { "" } else { "s" },
        pd.routing
    );
    for r in &pd.routers {
        let _ = writeln!(
            s,
            "  {:<26} {} merged, {} HTTP 500 from the row merge, {} HTTP 500 from a failed stage",
            format!("pair {} router", r.pair),
            thousands(r.merged),
            thousands(r.http_500_merge),
            thousands(r.http_500_stage)
        );
    }
    for i in &pd.instances {
        let _ = writeln!(s, "  pair {} {}:", i.pair, i.role);
        metrics_lines(s, &i.metrics, "    ");
        let x = &i.rows;
        let row = |s: &mut String, k: &str, v: String| {
            let _ = writeln!(s, "    {k:<26} {v}");
        };
        row(
            s,
            "rows emitted",
            format!("{} ({} read back from the row store)", thousands(x.rows_emitted), thousands(x.rows_from_store)),
        );
        row(
            s,
            "loads clamped",
            format!("{} ({} tokens given up, recomputed)", thousands(x.loads_clamped), thousands(x.clamped_tokens)),
        );
        row(
            s,
            "hits cut",
            format!("{} ({} tokens given up, recomputed)", thousands(x.hits_cut), thousands(x.cut_tokens)),
        );
        if i.role == "decode" {
            row(s, "remote hit (NIXL reads)", format!("{} tokens", thousands(x.remote_hit_tokens)));
        }
    }
}

/// The text report of a trace replay.
pub fn text(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kvmc replay {} ({}, {} requests) on {} ({}{}, {} engine{})",
        o.trace.display(),
        o.format,
        thousands(o.metrics.requests),
        o.model,
        o.profile,
        o.variant.as_ref().map_or(String::new(), |v| format!(" --variant {v}")),
        o.engines,
        if o.engines == 1 { "" } else { "s" }
    );
    let _ = writeln!(s, "  {:<26} {}", if o.engines == 1 { "pools" } else { "pools (each engine)" }, o.pools.text());
    if o.interrupted {
        let _ = writeln!(
            s,
            "  {:<26} interrupted (Ctrl-C) after {} of {} requests: the figures below are those reached",
            "INCOMPLETE",
            thousands(o.metrics.finished),
            thousands(o.metrics.requests)
        );
    }
    metrics_lines(&mut s, &o.metrics, "  ");
    if let Some(pd) = &o.pd {
        pd_lines(&mut s, pd);
    }
    if o.per_engine.len() > 1 {
        for (i, m) in o.per_engine.iter().enumerate() {
            let _ = writeln!(s, "  engine {i}:");
            metrics_lines(&mut s, m, "    ");
        }
    }
    let c = &o.checks;
    let _ = writeln!(
        s,
        "  {:<26} {} properties after each of {} actions: {} evaluations ({} blocks/keys examined), {} full-state checks",
        "invariants",
        c.properties.len(),
        thousands(o.metrics.actions),
        thousands(c.evaluations),
        thousands(c.examined),
        thousands(c.full)
    );
    match &o.finding {
        None => {
            let _ = writeln!(s, "  {:<26} none violated{}", "", if o.interrupted { " (so far)" } else { "" });
        }
        Some(f) => {
            let _ = writeln!(
                s,
                "  {:<26} VIOLATED: {} (engine {}, step {}, action {}): {}",
                "",
                f.property,
                f.engine,
                f.step,
                f.action,
                cut(&f.detail, 480) // JSON has it whole
            );
            if let (Some(m), Some(sc)) = (&f.model_file, &f.scenario_file) {
                let _ = writeln!(s, "  {:<26} history written: {} and {}", "", m.display(), sc.display());
                // The scenario names its profile and variant; explore needs them as flags.
                let mut flags = format!(" --profile {}", o.profile);
                if let Some(v) = &o.variant {
                    flags.push_str(&format!(" --variant {v}"));
                }
                // Opens in the explorer either way: by an index path, or (steps in which stores
                // finish, which the checker does not offer) replayed from the file.
                let _ = writeln!(
                    s,
                    "  {:<26} re-run: kvmc replay {}   |   kvmc explore {}{} --path {}",
                    "",
                    sc.display(),
                    m.display(),
                    flags,
                    sc.display()
                );
            }
            if let Some(n) = &f.note {
                let _ = writeln!(s, "  {:<26} note: {n}", "");
            }
        }
    }
    let _ = writeln!(
        s,
        "  {:<26} {:.2} s wall, peak RSS {}",
        "time",
        o.seconds,
        o.peak_rss_bytes.map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / 1048576.0))
    );
    if !c.reached.is_empty() {
        let _ = writeln!(s, "  {:<26} {}", "situations reached", c.reached.join(", "));
    }
    s
}

/// The per-request table (text).
pub fn requests_text(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>7} {:>10} {:>4} {:>3} {:>12} {:>12} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7}",
        "line",
        "session",
        "turn",
        "eng",
        "arrival_ms",
        "finish_ms",
        "prompt",
        "output",
        "g1_hit",
        "restored",
        "computed",
        "recomp",
        "preempt"
    );
    for r in &o.requests {
        let _ = writeln!(
            s,
            "{:>7} {:>10} {:>4} {:>3} {:>12.1} {:>12.1} {:>8} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7}",
            r.line,
            r.session.as_deref().unwrap_or("-"),
            r.turn,
            r.engine,
            r.arrival_ms,
            r.finish_ms,
            r.prompt_tokens,
            r.output_tokens,
            r.g1_hit_tokens,
            r.host_hit_tokens,
            r.prefill_tokens,
            r.recomputed_tokens,
            r.preemptions
        );
    }
    s
}

/// One session's totals (`--per-session`): its turns' rows added up.
#[derive(Clone, Debug, Default, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRow {
    /// The trace's `session_id`, or `line N` for a row without one.
    pub session: String,
    pub turns: u32,
    pub prompt_tokens: u64,
    pub g1_hit_tokens: u64,
    pub host_hit_tokens: u64,
    pub prefill_tokens: u64,
    pub recomputed_tokens: u64,
    pub preemptions: u32,
}

/// The finished requests grouped by session, in order of first appearance.
pub fn sessions(o: &Outcome) -> Vec<SessionRow> {
    let mut out: Vec<SessionRow> = Vec::new();
    let mut index: std::collections::HashMap<String, usize> = Default::default();
    for r in &o.requests {
        let key = r.session.clone().unwrap_or_else(|| format!("line {}", r.line));
        let i = *index.entry(key.clone()).or_insert_with(|| {
            out.push(SessionRow { session: key, ..Default::default() });
            out.len() - 1
        });
        let s = &mut out[i];
        s.turns += 1;
        s.prompt_tokens += u64::from(r.prompt_tokens);
        s.g1_hit_tokens += r.g1_hit_tokens;
        s.host_hit_tokens += r.host_hit_tokens;
        s.prefill_tokens += r.prefill_tokens;
        s.recomputed_tokens += r.recomputed_tokens;
        s.preemptions += r.preemptions;
    }
    out
}

/// The per-session table (text), with a total row.
pub fn sessions_text(o: &Outcome) -> String {
    let rows = sessions(o);
    let mut s = String::new();
    let line = |s: &mut String, name: &str, r: &SessionRow| {
        let _ = writeln!(
            s,
            "{:>12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
            name,
            r.turns,
            r.prompt_tokens,
            r.g1_hit_tokens,
            r.host_hit_tokens,
            r.prefill_tokens,
            r.recomputed_tokens,
            r.preemptions
        );
    };
    let _ = writeln!(
        s,
        "{:>12} {:>5} {:>10} {:>10} {:>10} {:>10} {:>8} {:>7}",
        "session", "turns", "prompt", "g1_hit", "restored", "prefill", "recomp", "preempt"
    );
    let mut total = SessionRow::default();
    for r in &rows {
        line(&mut s, &r.session, r);
        total.turns += r.turns;
        total.prompt_tokens += r.prompt_tokens;
        total.g1_hit_tokens += r.g1_hit_tokens;
        total.host_hit_tokens += r.host_hit_tokens;
        total.prefill_tokens += r.prefill_tokens;
        total.recomputed_tokens += r.recomputed_tokens;
        total.preemptions += r.preemptions;
    }
    line(&mut s, "total", &total);
    s
}

/// The JSON report of a trace replay.
pub fn json(o: &Outcome, per_request: bool, per_session: bool) -> serde_json::Value {
    serde_json::json!({
        "schema_version": crate::util::SCHEMA_VERSION,
        "kvmc_version": env!("CARGO_PKG_VERSION"),
        "ok": o.finding.is_none() && !o.interrupted,
        "incomplete": o.interrupted,
        "trace": o.trace.display().to_string(),
        "format": o.format,
        "model": o.model,
        "profile": o.profile,
        "variant": o.variant,
        "engines": o.engines,
        "pools": o.pools,
        "metrics": o.metrics,
        "per_engine": if o.per_engine.len() > 1 { serde_json::to_value(&o.per_engine).unwrap_or_default() } else { serde_json::Value::Null },
        "checks": o.checks,
        "violation": o.finding,
        "seconds": o.seconds,
        "peak_rss_bytes": o.peak_rss_bytes,
        "requests": if per_request { serde_json::to_value(&o.requests).unwrap_or_default() } else { serde_json::Value::Null },
        "sessions": if per_session { serde_json::to_value(sessions(o)).unwrap_or_default() } else { serde_json::Value::Null },
        "pd": o.pd,
    })
}

/// The text report of a scenario replay.
pub fn scenario_text(o: &ScenarioOutcome, verbose: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "kvmc replay {} on {} ({}{}): {} actions, {} property evaluations",
        o.scenario.display(),
        o.model.display(),
        o.profile,
        o.variant.as_ref().map_or(String::new(), |v| format!(" --variant {v}")),
        o.actions,
        o.evaluations
    );
    let st = &o.stats;
    let _ = writeln!(
        s,
        "  G1 hit tokens {}, restored from host {}, computed (prefill) {}, recomputed {}, decode {}, stores {} ({} chunks), loads {}, preemptions {}",
        st.g1_hit_tokens,
        st.host_hit_tokens,
        st.prefill_tokens,
        st.recomputed_tokens,
        st.decode_tokens,
        st.store_jobs,
        st.stored_chunks,
        st.load_jobs,
        st.preemptions
    );
    let from = if verbose { 0 } else { o.story.len().saturating_sub(8) };
    if from > 0 {
        let _ = writeln!(s, "  ... ({from} earlier actions; --verbose shows all)");
    }
    for (i, (a, st)) in o.story.iter().enumerate().skip(from) {
        let st = if verbose { st.clone() } else { abridge(st) };
        let _ = writeln!(s, "  {:>6}. {:<28} {}", i + 1, a, st);
    }
    match &o.violation {
        None => {
            let _ = writeln!(s, "  every invariant holds after every action");
        }
        Some((p, i, a)) => {
            let _ = writeln!(s, "  VIOLATED: {p} after action {i} ({a})");
        }
    }
    s
}

/// `t` cut to at most `n` bytes (at a character boundary), saying how much was left out.
fn cut(t: &str, n: usize) -> String {
    if t.len() <= n {
        return t.to_string();
    }
    let mut end = n;
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} ... ({} more characters)", &t[..end], t.len() - end)
}

/// A step of a large engine can tell thousands of events (every block a finish frees, every
/// hash an allocation evicts). Without `--verbose` a long story keeps its first events and
/// every violation note, each cut to a readable length, and says how many it left out.
pub fn abridge(story: &str) -> String {
    const LONG: usize = 600;
    const ITEM: usize = 240;
    if story.len() <= LONG {
        return story.to_string();
    }
    let items: Vec<&str> = story.split("; ").collect();
    let mut kept = Vec::new();
    let mut left = 0usize;
    for (i, t) in items.iter().enumerate() {
        if t.contains("VIOLATION") {
            kept.push(cut(t, 2 * ITEM));
        } else if i < 4 {
            kept.push(cut(t, ITEM));
        } else {
            left += 1;
        }
    }
    if left > 0 {
        kept.push(format!("... {left} more events (--verbose shows all)"));
    }
    kept.join("; ")
}

pub fn scenario_json(o: &ScenarioOutcome) -> serde_json::Value {
    serde_json::json!({
        "schema_version": crate::util::SCHEMA_VERSION,
        "kvmc_version": env!("CARGO_PKG_VERSION"),
        "ok": o.violation.is_none(),
        "scenario": o.scenario.display().to_string(),
        "model": o.model.display().to_string(),
        "profile": o.profile,
        "variant": o.variant,
        "actions": o.actions,
        "evaluations": o.evaluations,
        "metrics": {
            "g1_hit_tokens": o.stats.g1_hit_tokens,
            "host_hit_tokens": o.stats.host_hit_tokens,
            "prefill_tokens": o.stats.prefill_tokens,
            "recomputed_tokens": o.stats.recomputed_tokens,
            "decode_tokens": o.stats.decode_tokens,
            "store_jobs": o.stats.store_jobs,
            "stored_chunks": o.stats.stored_chunks,
            "load_jobs": o.stats.load_jobs,
            "preemptions": o.stats.preemptions,
        },
        "violation": o.violation.as_ref().map(|(p, i, a)| serde_json::json!({"property": p, "action": i, "label": a})),
    })
}
