//! `kvmc merge REPORT...`: join the JSON reports of `kvmc check --shard I/N --format json`
//! into one verdict table and one exit code (docs/scaling.md). Rows are matched by (model,
//! profile, variant, property): a property is `violated` if any shard violated it (the
//! counterexample of the smallest workload is kept), else `incomplete` if any shard was
//! incomplete or the shards together did not cover a `[workload]` model's whole space, else
//! `holds`. Every shard 1..N must be given exactly once, all with the same N.

use crate::check::gate::{self, Row};
use crate::check::Verdict;
use crate::error::{read_text, KvmcError, Result};
use crate::report::counterexample::{Counterexample, CxStep};
use crate::report::coverage::{ClassCoverage, Coverage, CxWorkload};
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum MergeFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' JSON reports (`kvmc check --shard I/N --format json > shard-I.json`).
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Report format: text, or json (the layout of `kvmc check --format json`).
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: MergeFormat,
}

fn bad(p: &std::path::Path, msg: impl Into<String>) -> KvmcError {
    KvmcError::input(p, 1, msg)
}

fn verdict(s: &str) -> Option<Verdict> {
    match s {
        "holds" => Some(Verdict::Holds),
        "violated" => Some(Verdict::Violated),
        "incomplete" => Some(Verdict::Incomplete),
        _ => None,
    }
}

/// One result row of a report, back into a `Row`.
fn row_of(v: &Value, p: &std::path::Path) -> Result<Row> {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
    let (Some(model), Some(profile), Some(property), Some(vd)) =
        (s("model"), s("profile"), s("property"), s("verdict"))
    else {
        return Err(bad(p, "a result lacks model, profile, property or verdict: not a kvmc check JSON report"));
    };
    let variant = s("variant").filter(|v| v != "fixed");
    let counterexample = v.get("counterexample").filter(|c| !c.is_null()).map(|c| Counterexample {
        cycle_start: c.get("cycle_start").and_then(Value::as_u64).map(|k| k as usize),
        steps: c
            .get("steps")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|st| CxStep {
                        action: st.get("action").and_then(Value::as_str).unwrap_or("").to_string(),
                        summary: st.get("summary").and_then(Value::as_str).unwrap_or("").to_string(),
                        changes: st.get("changes").and_then(Value::as_str).unwrap_or("").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        path: c.get("path").and_then(Value::as_str).unwrap_or("").to_string(),
        actions: Vec::new(),
        final_state: String::new(),
        model_file: c.pointer("/explore/model").and_then(Value::as_str).map(str::to_string),
    });
    let coverage = v.get("workloads").filter(|w| !w.is_null()).map(|w| {
        let u = |k: &str| w.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
        let shard = w.get("shard").and_then(Value::as_array).map_or((1, 1), |a| {
            (
                a.first().and_then(Value::as_u64).unwrap_or(1) as usize,
                a.get(1).and_then(Value::as_u64).unwrap_or(1) as usize,
            )
        });
        Arc::new(Coverage {
            family: w.get("family").and_then(Value::as_str).unwrap_or("").to_string(),
            total: u("total"),
            raw: u("raw") as u64,
            pruned: u("pruned"),
            shard,
            in_shard: u("in_shard"),
            explored: u("explored"),
            skipped_after_violation: u("skipped_after_violation"),
            classes: w
                .get("classes")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            let g = |k: &str| c.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
                            ClassCoverage {
                                requests: g("requests"),
                                workloads: g("workloads"),
                                unique_states: g("unique_states"),
                                states: g("states"),
                                violated: g("violated"),
                                incomplete: g("incomplete"),
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
            cx: w.get("counterexample_workload").filter(|c| !c.is_null()).map(|c| CxWorkload {
                index: c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize,
                summary: c.get("summary").and_then(Value::as_str).unwrap_or("").to_string(),
                model_text: c.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
                scope: None,
            }),
        })
    });
    Ok(Row {
        model,
        profile,
        variant,
        property,
        expected: s("expected").as_deref().and_then(verdict),
        verdict: verdict(&vd).ok_or_else(|| bad(p, format!("unknown verdict {vd:?}")))?,
        unreached: v
            .get("unreached_guards")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
        unique_states: n("unique_states"),
        states: n("states"),
        max_depth: n("max_depth"),
        seconds: v.get("seconds").and_then(Value::as_f64).unwrap_or(0.0),
        cut_by: s("stopped_by"),
        counterexample,
        coverage,
    })
}

/// Combine the rows of one (model, profile, variant, property) from several shards.
fn combine(mut rows: Vec<Row>) -> Row {
    rows.sort_by_key(|r| r.coverage.as_ref().and_then(|c| c.cx.as_ref()).map_or(usize::MAX, |w| w.index));
    let verdict = if rows.iter().any(|r| r.verdict == Verdict::Violated) {
        Verdict::Violated
    } else if rows.iter().any(|r| r.verdict == Verdict::Incomplete) {
        Verdict::Incomplete
    } else {
        Verdict::Holds
    };
    let first_cx = rows.iter().position(|r| r.verdict == Verdict::Violated);
    let mut out = rows[first_cx.unwrap_or(0)].clone();
    out.verdict = verdict;
    out.unique_states = rows.iter().map(|r| r.unique_states).sum();
    out.states = rows.iter().map(|r| r.states).sum();
    out.max_depth = rows.iter().map(|r| r.max_depth).max().unwrap_or(0);
    out.seconds = rows.iter().map(|r| r.seconds).sum();
    out.unreached = if verdict == Verdict::Holds {
        let mut un: Vec<String> = rows[0].unreached.clone();
        un.retain(|g| rows.iter().all(|r| r.unreached.contains(g)));
        un
    } else {
        Vec::new()
    };
    out.cut_by = match verdict {
        Verdict::Incomplete => rows.iter().find(|r| r.verdict == Verdict::Incomplete).and_then(|r| r.cut_by.clone()),
        _ => None,
    };
    if rows.iter().all(|r| r.coverage.is_some()) {
        let covs: Vec<&Coverage> = rows.iter().filter_map(|r| r.coverage.as_deref()).collect();
        let mut classes: BTreeMap<usize, ClassCoverage> = BTreeMap::new();
        for c in covs.iter().flat_map(|c| &c.classes) {
            let e = classes
                .entry(c.requests)
                .or_insert_with(|| ClassCoverage { requests: c.requests, ..Default::default() });
            e.workloads += c.workloads;
            e.unique_states += c.unique_states;
            e.states += c.states;
            e.violated += c.violated;
            e.incomplete += c.incomplete;
        }
        let total = covs[0].total;
        let in_shards: usize = covs.iter().map(|c| c.in_shard).sum();
        let m = Coverage {
            family: covs[0].family.clone(),
            total,
            raw: covs[0].raw,
            pruned: covs[0].pruned,
            shard: (1, 1),
            in_shard: in_shards,
            explored: covs.iter().map(|c| c.explored).sum(),
            skipped_after_violation: covs.iter().map(|c| c.skipped_after_violation).sum(),
            classes: classes.into_values().collect(),
            cx: out.coverage.as_ref().and_then(|c| c.cx.clone()),
        };
        if in_shards < total && verdict != Verdict::Violated {
            out.verdict = Verdict::Incomplete;
            out.cut_by = Some(format!("the shards' reports cover {in_shards} of the {total} workloads"));
        }
        out.coverage = Some(Arc::new(m));
    }
    out
}

pub fn run(a: MergeArgs) -> Result<i32> {
    let mut count: Option<(usize, PathBuf)> = None;
    let mut seen: BTreeMap<usize, PathBuf> = BTreeMap::new();
    type Key = (String, String, Option<String>, String);
    let mut groups: Vec<(Key, Vec<Row>)> = Vec::new();
    for p in &a.reports {
        let text = read_text(p)?;
        let v: Value = serde_json::from_str(&text).map_err(|e| KvmcError::input(p, e.line().max(1), e.to_string()))?;
        let results = v
            .get("results")
            .and_then(Value::as_array)
            .ok_or_else(|| bad(p, "no \"results\": not a kvmc check JSON report"))?;
        let shard = v.get("run").and_then(|r| r.get("shard")).filter(|s| !s.is_null());
        let (i, n) = match shard {
            None => (1, 1),
            Some(s) => match (s.get("index").and_then(Value::as_u64), s.get("count").and_then(Value::as_u64)) {
                (Some(i), Some(n)) => (i as usize, n as usize),
                _ => return Err(bad(p, "run.shard lacks index or count")),
            },
        };
        match &count {
            Some((c, q)) if *c != n => {
                return Err(bad(p, format!("shard {i}/{n}, but {} is a shard of {c}", q.display())));
            }
            _ => count = Some((n, p.clone())),
        }
        if let Some(q) = seen.insert(i, p.clone()) {
            return Err(bad(p, format!("shard {i}/{n} is given twice (also {})", q.display())));
        }
        for r in results {
            let row = row_of(r, p)?;
            let key = (row.model.clone(), row.profile.clone(), row.variant.clone(), row.property.clone());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, rs)) => {
                    if rs[0].expected != row.expected {
                        return Err(bad(p, format!("{} on {}: the shards expect different verdicts", key.3, key.0)));
                    }
                    rs.push(row)
                }
                None => groups.push((key, vec![row])),
            }
        }
    }
    let n = count.map_or(0, |c| c.0);
    let missing: Vec<String> = (1..=n).filter(|i| !seen.contains_key(i)).map(|i| format!("{i}/{n}")).collect();
    if !missing.is_empty() {
        return Err(KvmcError::Usage(format!(
            "missing shard report(s): {} (every shard 1..{n} is needed)",
            missing.join(", ")
        )));
    }
    let rows: Vec<Row> = groups.into_iter().map(|(_, rs)| combine(rs)).collect();
    match a.format {
        MergeFormat::Text => print!("merged {n} shard report(s)\n{}", crate::report::text(&rows, false)),
        MergeFormat::Json => {
            let mut v = crate::report::json(&rows, None);
            v["merged"] = serde_json::json!({"shards": n, "reports": a.reports.iter().map(|p| p.display().to_string()).collect::<Vec<_>>()});
            println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        }
    }
    Ok(gate::exit_code(&rows))
}
