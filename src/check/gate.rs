//! Planning and running checks: the CI gate (every expectation in `specs/`) and explicit
//! model runs. Expectations on the same (model, profile, variant) share one exploration.

use super::run::{run, RunOpts, RunResult, Verdict};
use super::specs::Spec;
use crate::error::{KvmcError, Result};
use crate::model::scope::Scope;
use crate::model::KvModel;
use crate::props::{self, Kind};
use crate::report::counterexample::{self, Counterexample};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One exploration: a model under a rule set, with the properties to check.
#[derive(Clone, Debug)]
pub struct Job {
    pub scope: Arc<Scope>,
    pub profile: Option<String>,
    pub variant: Option<String>,
    /// (property, expected violated?) — `None` for explicit runs (expected to hold).
    pub checks: Vec<(String, Option<bool>)>,
    /// Guards whose examples must be found for a `holds` to count (per property).
    pub reach: BTreeMap<String, Vec<String>>,
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    pub model: String,
    pub profile: String,
    pub variant: Option<String>,
    pub property: String,
    /// From a spec; `None` for explicit runs.
    pub expected: Option<Verdict>,
    pub verdict: Verdict,
    /// Guards of this property that were never reached (a `holds` over nothing).
    pub unreached: Vec<String>,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    pub cut_by: Option<String>,
    pub counterexample: Option<Counterexample>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Status {
    Ok,
    /// The verdict differs from the expectation, or a `holds` is vacuous.
    Mismatch,
    Incomplete,
}

impl Row {
    pub fn status(&self) -> Status {
        let want = self.expected.unwrap_or(Verdict::Holds);
        match self.verdict {
            Verdict::Incomplete => Status::Incomplete,
            Verdict::Holds if !self.unreached.is_empty() => Status::Mismatch,
            v if v == want => Status::Ok,
            _ => Status::Mismatch,
        }
    }
}

/// Plan the CI gate: every expectation of every spec.
pub fn plan_specs(specs: &[Spec], models_dir: &Path) -> Result<Vec<Job>> {
    let mut scopes: BTreeMap<String, Arc<Scope>> = BTreeMap::new();
    let mut jobs: BTreeMap<(String, Option<String>, Option<String>), Job> = BTreeMap::new();
    for spec in specs {
        for x in &spec.expects {
            let scope = match scopes.get(&x.model) {
                Some(s) => s.clone(),
                None => {
                    let p = models_dir.join(format!("{}.toml", x.model));
                    if !p.exists() {
                        return Err(KvmcError::input(
                            &x.at.0,
                            x.at.1,
                            format!("no model '{}' ({} does not exist)", x.model, p.display()),
                        ));
                    }
                    let (s, warnings) = Scope::load_warn(&p)?;
                    warnings.iter().for_each(|w| eprintln!("{w}"));
                    let s = Arc::new(s);
                    scopes.insert(x.model.clone(), s.clone());
                    s
                }
            };
            let p = props::find(&spec.property).expect("validated");
            if !props::applies(p, &scope.cfg) {
                let why = if p.rows_only {
                    format!("model '{}' has no [router_replay] table", x.model)
                } else if scope.cfg.has_connector() {
                    format!("model '{}' runs another connector", x.model)
                } else {
                    format!("model '{}' has no offload connector", x.model)
                };
                return Err(KvmcError::input(
                    &x.at.0,
                    x.at.1,
                    format!("property '{}' does not apply here: {why}", spec.property),
                ));
            }
            let key = (x.model.clone(), x.profile.clone(), x.variant.clone());
            let job = jobs.entry(key).or_insert_with(|| Job {
                scope,
                profile: x.profile.clone(),
                variant: x.variant.clone(),
                checks: Vec::new(),
                reach: BTreeMap::new(),
            });
            if job.checks.iter().any(|(n, _)| n == &spec.property) {
                return Err(KvmcError::input(
                    &x.at.0,
                    x.at.1,
                    "duplicate expectation for this (model, profile, variant)",
                ));
            }
            job.checks.push((spec.property.clone(), Some(x.violated)));
            let reach: Vec<String> = x
                .reach
                .clone()
                .unwrap_or_else(|| spec.reach.clone())
                .into_iter()
                .filter(|g| props::applies(props::find(g).expect("validated"), &job.scope.cfg))
                .collect();
            job.reach.insert(spec.property.clone(), reach);
        }
    }
    Ok(jobs.into_values().collect())
}

/// Plan explicit runs: every applicable property of each model (or `only` these).
pub fn plan_paths(
    paths: &[PathBuf],
    profile: Option<&str>,
    variant: Option<&str>,
    only: &[String],
    specs: &[Spec],
) -> Result<Vec<Job>> {
    for n in only {
        match props::find(n) {
            Some(p) if p.kind == Kind::Always => {}
            _ => return Err(KvmcError::Usage(format!("--property {n}: unknown property (see kvmc list)"))),
        }
    }
    let mut jobs = Vec::new();
    for p in paths {
        // `kvmc check models/*.toml`: replay models hold no requests; a lone one is an error.
        if paths.len() > 1 && crate::model::scope::is_replay_model(p) {
            eprintln!("{}: a replay model, skipped (kvmc replay TRACE --model {})", p.display(), p.display());
            continue;
        }
        let (scope, warnings) = Scope::load_warn(p)?;
        warnings.iter().for_each(|w| eprintln!("{w}"));
        let scope = Arc::new(scope);
        let off = &scope.cfg;
        let mut checks = Vec::new();
        let mut reach = BTreeMap::new();
        for d in props::CATALOGUE.iter().filter(|d| d.kind == Kind::Always && props::applies(d, off)) {
            if only.is_empty() || only.iter().any(|o| o == d.name) {
                checks.push((d.name.to_string(), None));
                let r: Vec<String> =
                    specs.iter().find(|s| s.property == d.name).map(|s| s.reach.clone()).unwrap_or_default();
                reach.insert(
                    d.name.to_string(),
                    r.into_iter().filter(|g| props::applies(props::find(g).unwrap(), off)).collect(),
                );
            }
        }
        jobs.push(Job {
            scope,
            profile: profile.map(str::to_string),
            variant: variant.map(str::to_string),
            checks,
            reach,
        });
    }
    Ok(jobs)
}

/// Run one job and turn it into rows.
pub fn execute(job: &Job, opts: &RunOpts) -> Result<Vec<Row>> {
    let mut names: Vec<&'static str> = Vec::new();
    for (p, _) in &job.checks {
        names.push(props::find(p).expect("validated").name);
    }
    for gs in job.reach.values() {
        for g in gs {
            let n = props::find(g).expect("validated").name;
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let defs: Vec<_> = names.iter().map(|n| props::find(n).unwrap()).collect();
    let model = KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), defs)
        .map_err(KvmcError::Usage)?;
    let profile = model.profile.clone();
    let display_model = KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), vec![])
        .map_err(KvmcError::Usage)?;
    let r: RunResult = run(model, opts);
    let mut rows = Vec::new();
    for (p, expected) in &job.checks {
        let verdict = r.verdict(p);
        let unreached: Vec<String> = if verdict == Verdict::Holds {
            job.reach
                .get(p)
                .map(|gs| gs.iter().filter(|g| r.reached(g) == Some(false)).cloned().collect())
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let counterexample = match r.outcome(p).and_then(|o| o.path.as_ref()) {
            Some(path) if verdict == Verdict::Violated => {
                Some(counterexample::build(&display_model, path).ok_or_else(|| {
                    KvmcError::Internal(format!("the counterexample for {p} on {} does not replay", job.scope.name))
                })?)
            }
            _ => None,
        };
        rows.push(Row {
            model: job.scope.name.clone(),
            profile: profile.clone(),
            variant: job.variant.clone(),
            property: p.clone(),
            expected: expected.map(|v| if v { Verdict::Violated } else { Verdict::Holds }),
            verdict,
            unreached,
            unique_states: r.unique_states,
            states: r.states,
            max_depth: r.max_depth,
            seconds: r.seconds,
            cut_by: r.cut_by.clone(),
            counterexample,
        });
    }
    Ok(rows)
}

/// The process exit code for a set of rows.
pub fn exit_code(rows: &[Row]) -> i32 {
    use crate::error::exit;
    if rows.iter().any(|r| r.status() == Status::Mismatch) {
        exit::VERDICT
    } else if rows.iter().any(|r| r.status() == Status::Incomplete) {
        exit::INCOMPLETE
    } else {
        exit::OK
    }
}
