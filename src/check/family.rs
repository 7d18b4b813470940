//! The outer loop over a family's workloads: each workload of this run's shard is an ordinary
//! job explored by `gate::execute` (the gate's own function), and the rows are combined per
//! property: `violated` if any workload violates it (the first, smallest one gives the
//! counterexample; later workloads no longer check that property), else `incomplete` if any
//! exploration was cut short or the loop was stopped, else `holds`. Coverage is reported per
//! workload class (number of requests).

use crate::check::gate::{self, Job, Row};
use crate::check::{RunOpts, Verdict};
use crate::error::Result;
use crate::report::coverage::{ClassCoverage, Coverage, CxWorkload};
use crate::stop::{self, Watch};
use crate::workload::{Family, Workload};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

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

/// Slice `i` of `n` (1-based) of a plan: every family keeps the workloads `k` with
/// `k % n == i - 1` (a family with none there is dropped), and the other explorations are
/// dealt out by their index among themselves, as before families existed.
pub fn shard_jobs(jobs: Vec<Job>, i: usize, n: usize) -> Vec<Job> {
    let mut out = Vec::new();
    let mut plain = 0;
    for mut j in jobs {
        match &j.family {
            Some(f) => {
                if f.workloads.len() >= i {
                    let mut f = (**f).clone();
                    f.shard = (i, n);
                    j.family = Some(Arc::new(f));
                    out.push(j);
                }
            }
            None => {
                if plain % n == i - 1 {
                    out.push(j);
                }
                plain += 1;
            }
        }
    }
    out
}
