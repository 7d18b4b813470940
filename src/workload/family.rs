//! The outer loop over a family's workloads: each workload of this run's shard is an ordinary
//! job explored by `gate::execute` (the gate's own function), and the rows are combined per
//! property: `violated` if any workload violates it (the first, smallest one gives the
//! counterexample; later workloads no longer check that property), else `incomplete` if any
//! exploration was cut short or the loop was stopped, else `holds`. Coverage is reported per
//! workload class (number of requests).

use super::{Family, Workload};
use crate::check::gate::{self, Job, Row};
use crate::check::{RunOpts, Verdict};
use crate::error::Result;
use crate::model::scope::Scope;
use crate::stop::{self, Watch};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// What one class of workloads (those with `requests` requests) covered for one property.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCoverage {
    pub requests: usize,
    /// Workloads explored for this property.
    pub workloads: usize,
    pub unique_states: usize,
    pub states: usize,
    pub violated: usize,
    pub incomplete: usize,
}

/// The workload that gave a family row its counterexample.
#[derive(Clone, Debug)]
pub struct CxWorkload {
    /// 0-based index in the family's workload list (`w{index+1}`).
    pub index: usize,
    pub summary: String,
    /// The workload as an ordinary model file.
    pub model_text: String,
    pub scope: Option<Arc<Scope>>,
}

/// What a family row covered.
#[derive(Clone, Debug)]
pub struct Coverage {
    pub family: String,
    /// Distinct workloads in the whole space, before sharding.
    pub total: usize,
    /// Workloads enumerated before deduplication, and dropped for not fitting.
    pub raw: u64,
    pub pruned: usize,
    pub shard: (usize, usize),
    /// Workloads of this shard, and how many of them were explored for this property.
    pub in_shard: usize,
    pub explored: usize,
    /// Workloads not explored for this property because it was already violated.
    pub skipped_after_violation: usize,
    pub classes: Vec<ClassCoverage>,
    pub cx: Option<CxWorkload>,
}

impl Coverage {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "family": self.family,
            "total": self.total,
            "raw": self.raw,
            "pruned": self.pruned,
            "shard": [self.shard.0, self.shard.1],
            "in_shard": self.in_shard,
            "explored": self.explored,
            "skipped_after_violation": self.skipped_after_violation,
            "classes": self.classes.iter().map(|c| serde_json::json!({
                "requests": c.requests, "workloads": c.workloads, "unique_states": c.unique_states,
                "states": c.states, "violated": c.violated, "incomplete": c.incomplete,
            })).collect::<Vec<_>>(),
            "counterexample_workload": self.cx.as_ref().map(|c| serde_json::json!({
                "index": c.index, "name": Family::label(c.index), "summary": c.summary, "model": c.model_text,
            })),
        })
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        let classes: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                let mut s = format!("{} req: {} workloads, {} states", c.requests, c.workloads, c.unique_states);
                if c.violated > 0 {
                    s.push_str(&format!(", {} violated", c.violated));
                }
                if c.incomplete > 0 {
                    s.push_str(&format!(", {} incomplete", c.incomplete));
                }
                s
            })
            .collect();
        let shard =
            if self.shard.1 > 1 { format!(" (shard {}/{})", self.shard.0, self.shard.1) } else { String::new() };
        let mut s = format!(
            "workloads {}/{} explored of {} distinct{shard}: {}",
            self.explored,
            self.in_shard,
            self.total,
            classes.join("; ")
        );
        if self.skipped_after_violation > 0 {
            s.push_str(&format!("; {} not explored after the first counterexample", self.skipped_after_violation));
        }
        if let Some(c) = &self.cx {
            s.push_str(&format!("; first counterexample in {}: {}", Family::label(c.index), c.summary));
        }
        s
    }
}

/// Per property: what the workloads so far found.
#[derive(Default)]
struct Agg {
    cx: Option<(usize, Row)>,
    incomplete: Option<String>,
    /// Guards unreached in every workload that held (None: no workload held yet).
    unreached: Option<BTreeSet<String>>,
    classes: BTreeMap<usize, ClassCoverage>,
    explored: usize,
    unique: usize,
    states: usize,
    depth: usize,
}

/// Run a family job: its shard of the workloads, one exploration each.
pub fn execute(job: &Job, fam: &Family, opts: &RunOpts) -> Result<Vec<Row>> {
    let started = Instant::now();
    let outer = opts.watch.clone();
    let mut aggs: Vec<Agg> = job.checks.iter().map(|_| Agg::default()).collect();
    let mine: Vec<usize> = fam.mine().collect();
    let mut stopped: Option<String> = None;
    let (mut tot_unique, mut tot_states, mut tot_depth) = (0usize, 0usize, 0usize);
    for &k in &mine {
        let open: Vec<usize> = (0..job.checks.len()).filter(|&i| aggs[i].cx.is_none()).collect();
        if open.is_empty() {
            break;
        }
        if let Some(r) =
            outer.as_ref().and_then(|w| w.poll()).or(stop::interrupted().then_some(stop::StopReason::Interrupted))
        {
            stopped =
                Some(format!("{} after {} of {} workloads", opts.describe(r), aggs[open[0]].explored, mine.len()));
            break;
        }
        let scope = Arc::new(fam.scope(k)?);
        let checks: Vec<(String, Option<bool>)> = open.iter().map(|&i| job.checks[i].clone()).collect();
        let reach = job
            .reach
            .iter()
            .filter(|(p, _)| checks.iter().any(|(c, _)| c == *p))
            .map(|(p, g)| (p.clone(), g.clone()))
            .collect();
        let sub = Job {
            scope: scope.clone(),
            profile: job.profile.clone(),
            variant: job.variant.clone(),
            checks,
            reach,
            family: None,
        };
        let remaining = opts.timeout.map(|t| t.saturating_sub(started.elapsed()));
        let w = Watch::start(remaining, opts.max_memory);
        let rows = gate::execute(&sub, &RunOpts { watch: Some(w), ..opts.clone() })?;
        let class = fam.workloads[k].class();
        let (u, s, d) = rows.first().map_or((0, 0, 0), |r| (r.unique_states, r.states, r.max_depth));
        tot_unique += u;
        tot_states += s;
        tot_depth = tot_depth.max(d);
        if let Some(o) = &outer {
            o.publish(tot_unique, tot_states, tot_depth);
        }
        for (row, &i) in rows.into_iter().zip(&open) {
            let a = &mut aggs[i];
            a.explored += 1;
            a.unique += row.unique_states;
            a.states += row.states;
            a.depth = a.depth.max(row.max_depth);
            let c = a.classes.entry(class).or_insert_with(|| ClassCoverage { requests: class, ..Default::default() });
            c.workloads += 1;
            c.unique_states += row.unique_states;
            c.states += row.states;
            match row.verdict {
                Verdict::Violated => {
                    c.violated += 1;
                    a.cx = Some((k, row));
                }
                Verdict::Incomplete => {
                    c.incomplete += 1;
                    a.incomplete.get_or_insert_with(|| {
                        format!("{} in workload {}", row.cut_by.clone().unwrap_or_default(), Family::label(k))
                    });
                }
                Verdict::Holds => {
                    let un: BTreeSet<String> = row.unreached.iter().cloned().collect();
                    a.unreached = Some(match a.unreached.take() {
                        None => un,
                        Some(prev) => prev.intersection(&un).cloned().collect(),
                    });
                }
            }
        }
    }
    if let Some(o) = &outer {
        o.finish();
    }
    let seconds = started.elapsed().as_secs_f64();
    let profile = job.profile.clone().unwrap_or_else(|| job.scope.profile.clone());
    let mut out = Vec::new();
    for ((p, expected), a) in job.checks.iter().zip(aggs) {
        let skipped = if a.cx.is_some() { mine.len() - a.explored } else { 0 };
        let verdict = if a.cx.is_some() {
            Verdict::Violated
        } else if a.incomplete.is_some() || stopped.is_some() || a.explored < mine.len() {
            Verdict::Incomplete
        } else {
            Verdict::Holds
        };
        let cut_by = match verdict {
            Verdict::Incomplete => Some(a.incomplete.clone().or(stopped.clone()).unwrap_or_else(|| "stopped".into())),
            _ => None,
        };
        let cx_w = a.cx.as_ref().map(|(k, _)| cx_workload(fam, *k));
        let coverage = Coverage {
            family: fam.name.clone(),
            total: fam.workloads.len(),
            raw: fam.raw,
            pruned: fam.pruned,
            shard: fam.shard,
            in_shard: mine.len(),
            explored: a.explored,
            skipped_after_violation: skipped,
            classes: a.classes.into_values().collect(),
            cx: cx_w,
        };
        out.push(Row {
            model: fam.name.clone(),
            profile: profile.clone(),
            variant: job.variant.clone(),
            property: p.clone(),
            expected: expected.map(|v| if v { Verdict::Violated } else { Verdict::Holds }),
            verdict,
            unreached: if verdict == Verdict::Holds {
                a.unreached.unwrap_or_default().into_iter().collect()
            } else {
                vec![]
            },
            unique_states: a.unique,
            states: a.states,
            max_depth: a.depth,
            seconds,
            cut_by,
            counterexample: a.cx.and_then(|(_, r)| r.counterexample),
            coverage: Some(Arc::new(coverage)),
        });
    }
    Ok(out)
}

fn cx_workload(fam: &Family, k: usize) -> CxWorkload {
    let w: &Workload = &fam.workloads[k];
    CxWorkload {
        index: k,
        summary: w.summary(fam.bounds.block_size),
        model_text: fam.model_text(k, true),
        scope: fam.scope(k).ok().map(Arc::new),
    }
}
