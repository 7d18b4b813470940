//! Planning and running checks: the CI gate (every expectation in `specs/`) and explicit
//! model runs. Expectations on the same (model, profile, variant) share one exploration.

use super::run::{run, RunOpts, RunResult, Verdict};
use super::specs::Spec;
use crate::error::{KvmcError, Result};
use crate::model::KvModel;
use crate::props::{self, Kind};
use crate::report::counterexample;
pub use crate::report::rows::{Row, Status};
use crate::scope::Scope;
use crate::system::rules::{self, RULE_ROWS};
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
    /// A `[workload]` model: every workload of this run's shard is explored (`scope` is the
    /// first, named after the family).
    pub family: Option<Arc<crate::workload::Family>>,
}

/// The gate reads the models its specs name from `dir` (`--models`, default `./models`): the
/// specs are built into kvmc, the models are not, so outside a checkout the gate needs
/// `--models DIR` (docs/guide.md, "Where specs and models come from").
pub fn check_models_dir(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    Err(KvmcError::io(
        dir,
        "no models directory: the gate checks the models its specs name, read from ./models \
         (run `kvmc check` from the repository's root, or pass --models DIR)",
    ))
}

/// The connector's name as a model file writes it.
/// Why property `p` does not apply to `scope` (`props::applies` is false).
pub fn why_not(p: &props::PropDef, scope: &Scope) -> String {
    use props::NotApplicable as N;
    let cfg = &scope.cfg;
    let m = &scope.name;
    match p.on.why_not(cfg) {
        Some(N::NoRows) => format!("model '{m}' has no [router_replay] table"),
        Some(N::NoConnector) => format!("model '{m}' has no offload connector"),
        Some(N::NotArc) => format!("it speaks about the host tier's ARC policy and model '{m}' has none"),
        Some(N::Arc) => format!("model '{m}' evicts by ARC, for which {} has no reference", p.name),
        Some(N::Sync) => format!("it speaks about async scheduling and model '{m}' schedules synchronously"),
        Some(N::Connector) | None => {
            format!("model '{m}' runs connector = \"{}\", which it does not speak about", connector_name(cfg))
        }
    }
}

/// Every switch of the rules table is classified by `switch_read_by` (for a test).
pub fn unclassified_switches() -> Vec<&'static str> {
    let scope = Scope::parse(
        "x",
        Path::new("x.toml"),
        "[engine]\nblock_size = 2\ngpu_blocks = 2\nmax_num_batched_tokens = 1\n[[request]]\nname = \"A\"\nprompt = \"a\"\noutput = \"b\"\n",
    )
    .expect("a minimal scope");
    RULE_ROWS
        .iter()
        .filter(|r| rules::switch_read_by(r.name, &scope.cfg, scope.faults.load_failure).is_none())
        .map(|r| r.name)
        .collect()
}

/// Does `variant` change anything `scope` reads under `profile`? `Err` says why not.
pub fn variant_applies(scope: &Scope, profile: &str, variant: &str) -> std::result::Result<(), String> {
    rules::variant_applies_to(&scope.name, &scope.cfg, scope.faults.load_failure, profile, variant)
}

pub use crate::system::rules::{connector_name, variant_applies_to};

/// Plan the CI gate: every expectation of every spec.
pub fn plan_specs(specs: &[Spec], models_dir: &Path) -> Result<Vec<Job>> {
    plan_tier(specs, models_dir, false)
}

/// Plan the expectations of one tier: the fast gate (`deep` false) or the deep tier.
pub fn plan_tier(specs: &[Spec], models_dir: &Path, deep: bool) -> Result<Vec<Job>> {
    type Loaded = (Arc<Scope>, Option<Arc<crate::workload::Family>>);
    let mut scopes: BTreeMap<String, Loaded> = BTreeMap::new();
    let mut jobs: BTreeMap<(String, Option<String>, Option<String>), Job> = BTreeMap::new();
    for spec in specs {
        for x in spec.expects.iter().filter(|x| x.deep == deep) {
            let (scope, family) = match scopes.get(&x.model) {
                Some(s) => s.clone(),
                None => {
                    let p = models_dir.join(format!("{}.toml", x.model));
                    if !p.exists() {
                        return Err(KvmcError::input(
                            &x.at.0,
                            x.at.1,
                            format!(
                                "no model '{}' ({} does not exist){}",
                                x.model,
                                p.display(),
                                crate::suggest::did_you_mean(
                                    &x.model,
                                    crate::suggest::model_names(models_dir).iter().map(String::as_str)
                                )
                            ),
                        ));
                    }
                    let (s, f, warnings) = crate::workload::load_model(&p, &x.model)?;
                    warnings.iter().for_each(|w| eprintln!("{w}"));
                    scopes.insert(x.model.clone(), (s.clone(), f.clone()));
                    (s, f)
                }
            };
            let p = props::find(&spec.property).expect("validated");
            if !props::applies(p, &scope.cfg) {
                return Err(KvmcError::input(
                    &x.at.0,
                    x.at.1,
                    format!("property '{}' does not apply here: {}", spec.property, why_not(p, &scope)),
                ));
            }
            if let Some(v) = &x.variant {
                variant_applies(&scope, x.profile.as_deref().unwrap_or(&scope.profile), v)
                    .map_err(|why| KvmcError::input(&x.at.0, x.at.1, why))?;
            }
            let key = (x.model.clone(), x.profile.clone(), x.variant.clone());
            let job = jobs.entry(key).or_insert_with(|| Job {
                scope,
                profile: x.profile.clone(),
                variant: x.variant.clone(),
                checks: Vec::new(),
                reach: BTreeMap::new(),
                family,
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
            _ => {
                return Err(KvmcError::Usage(format!(
                    "--property {n}: unknown property{}; kvmc list shows them",
                    crate::suggest::did_you_mean(
                        n,
                        crate::props::REGISTRY.iter().filter(|p| p.kind == Kind::Always).map(|p| p.name)
                    )
                )))
            }
        }
    }
    let mut jobs = Vec::new();
    // The --property names that apply to some model.
    let mut used: Vec<&String> = Vec::new();
    let mut skipped_variant = false;
    for p in paths {
        // `kvmc check models/*.toml`: replay models hold no requests; a lone one is an error.
        if paths.len() > 1 && crate::scope::is_replay_model(p) {
            eprintln!("{}: a replay model, skipped (kvmc replay TRACE --model {})", p.display(), p.display());
            continue;
        }
        let stem = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !p.exists() {
            return Err(KvmcError::io(p, format!("no such model file{}", crate::suggest::missing_model(p))));
        }
        let (scope, family, warnings) = crate::workload::load_model(p, &stem)?;
        warnings.iter().for_each(|w| eprintln!("{w}"));
        if let Some(v) = variant {
            if let Err(why) = variant_applies(&scope, profile.unwrap_or(&scope.profile), v) {
                if paths.len() == 1 {
                    return Err(KvmcError::Usage(format!("--variant {v}: {why}")));
                }
                eprintln!("{}: --variant {v} skipped here: {why}", p.display());
                skipped_variant = true;
                continue;
            }
        }
        let off = &scope.cfg;
        for n in only {
            let d = props::find(n).expect("validated");
            if props::applies(d, off) {
                used.push(n);
            } else if paths.len() == 1 {
                return Err(KvmcError::Usage(format!("--property {n} does not apply: {}", why_not(d, &scope))));
            } else {
                eprintln!("{}: --property {n} does not apply ({}), not checked there", p.display(), why_not(d, &scope));
            }
        }
        let mut checks = Vec::new();
        let mut reach = BTreeMap::new();
        for d in props::REGISTRY.iter().filter(|d| d.kind == Kind::Always && props::applies(d, off)) {
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
        if checks.is_empty() {
            continue; // none of --property applies (said above)
        }
        jobs.push(Job {
            scope,
            profile: profile.map(str::to_string),
            variant: variant.map(str::to_string),
            checks,
            reach,
            family,
        });
    }
    if let (Some(v), true, true) = (variant, skipped_variant, jobs.is_empty()) {
        return Err(KvmcError::Usage(format!("--variant {v} changes nothing in any of the models given")));
    }
    if let Some(n) = only.iter().find(|n| !used.contains(n)) {
        return Err(KvmcError::Usage(format!("--property {n} applies to none of the models given")));
    }
    if jobs.is_empty() {
        return Err(KvmcError::Usage("nothing to check: no model given has a property to check".into()));
    }
    Ok(jobs)
}

/// Run one job and turn it into rows.
pub fn execute(job: &Job, opts: &RunOpts) -> Result<Vec<Row>> {
    if let Some(f) = &job.family {
        return super::family::execute(job, f, opts);
    }
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
    // A profile or variant this scope cannot run under (an unknown name, a refused
    // combination): the message names the model file.
    let refused = |m: String| KvmcError::Usage(format!("{}: {m}", job.scope.path.display()));
    let model =
        KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), defs).map_err(refused)?;
    let profile = model.profile.clone();
    let display_model =
        KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), vec![]).map_err(refused)?;
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
                let mut cx = counterexample::build(&display_model, path).ok_or_else(|| {
                    KvmcError::Internal(format!("the counterexample for {p} on {} does not replay", job.scope.name))
                })?;
                cx.cycle_start = r.outcome(p).and_then(|o| o.cycle_start);
                Some(cx)
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
            coverage: None,
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
