//! `kvmc reproduce`: turn a checker counterexample of a released vLLM profile into a scenario
//! for the conformance recorder (src/report/reproduce.rs; scripts/reproduce.sh records it on
//! that release and runs `kvmc conform --strict`).
//!
//! ```text
//! kvmc reproduce CX.scenario.toml [-o OUT.toml]            # a counterexample (`check --out`)
//! kvmc reproduce MODEL.toml --property P [--profile X]     # the checker finds it first
//! kvmc reproduce --gate --out-dir DIR                      # every expected violation of a
//!                                                          # released profile in the gate
//! ```

use crate::check::run::{run as explore, RunOpts};
use crate::error::{KvmcError, Result};
use crate::model::KvModel;
use crate::props;
use crate::report::reproduce::{to_recorder, unsupported, vllm_version, Reproduction};
use crate::scope::scenario::{read_header, scenario_actions};
use crate::scope::Scope;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ReproduceArgs {
    /// A counterexample scenario (`kvmc check --out DIR` writes NAME.scenario.toml), or, with
    /// --property, a model file whose counterexample the checker finds first.
    #[arg(required_unless_present = "gate")]
    pub input: Option<PathBuf>,
    /// With a model file: the property whose (shortest) counterexample to reproduce.
    #[arg(long)]
    pub property: Option<String>,
    /// With a model file: the profile (default: the model's own).
    #[arg(long)]
    pub profile: Option<String>,
    /// Write the recorder scenario here (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// With a counterexample: the model file to use instead of the one it names (a `[workload]`
    /// model's counterexample names the family; `check --out` writes its workload as
    /// NAME.model.toml beside it).
    #[arg(long, conflicts_with = "property")]
    pub model: Option<PathBuf>,
    /// The scenario's name (the log's `scenario`; default: OUTPUT's or INPUT's file stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Every expected violation of a released profile (vllm-0.24, 0.32, 0.33, 0.34) in the gate:
    /// write one scenario per reproducible row into --out-dir, list the others and why.
    #[arg(long, requires = "out_dir", conflicts_with_all = ["input", "property", "profile", "output", "name", "model"])]
    pub gate: bool,
    /// With --gate: the directory the scenarios are written into.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
}

fn stem(p: &Path) -> String {
    let s = p.file_name().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    s.trim_end_matches(".toml").trim_end_matches(".scenario").to_string()
}

/// The shortest counterexample of `property` on `scope` under `profile`, if it is violated.
fn find_cx(
    scope: Arc<Scope>,
    profile: Option<&str>,
    property: &str,
) -> Result<Option<(KvModel, Vec<crate::model::Action>)>> {
    let p = props::find(property)
        .ok_or_else(|| KvmcError::Usage(format!("--property {property}: no such property (kvmc list)")))?;
    if !props::applies(p, &scope.cfg) {
        return Err(KvmcError::Usage(format!(
            "--property {property}: does not apply to {}: {}",
            scope.name,
            crate::check::gate::why_not(p, &scope)
        )));
    }
    if p.kind != props::Kind::Always && p.id != props::PropId::RequestsFinish {
        return Err(KvmcError::Usage(format!(
            "--property {property}: only safety properties (checked after every step by conform) and \
             requests-finish (a hang the recorder runs into its step bound) are reproduced"
        )));
    }
    let prof = profile.unwrap_or(&scope.profile);
    if vllm_version(prof).is_none() {
        return Err(KvmcError::Usage(format!(
            "cannot reproduce: profile {prof} is no vLLM release (reproducible: vllm-0.24, vllm-0.32, vllm-0.33, vllm-0.34)"
        )));
    }
    if let Some(why) = unsupported(&scope.cfg) {
        return Err(KvmcError::Usage(format!("cannot reproduce: {why}")));
    }
    let model = KvModel::new(scope.clone(), profile, None, vec![p]).map_err(KvmcError::Usage)?;
    let r = explore(KvModel::new(scope, profile, None, vec![p]).map_err(KvmcError::Usage)?, &RunOpts::default());
    Ok(r.outcome(property).and_then(|o| o.path.clone()).map(|path| (model, path)))
}

fn emit(r: &Reproduction, output: Option<&Path>) -> Result<()> {
    match output {
        Some(o) => std::fs::write(o, &r.toml).map_err(|e| KvmcError::io(o, e))?,
        None => print!("{}", r.toml),
    }
    eprintln!(
        "reproduce on vLLM {}: {} engine steps; the counterexample violates {}{}",
        r.version,
        r.steps,
        if r.violated.is_empty() { "no safety property".to_string() } else { r.violated.join(", ") },
        if r.unfinished.is_empty() { String::new() } else { format!("; never finishes: {}", r.unfinished.join(", ")) }
    );
    Ok(())
}

pub fn run(a: ReproduceArgs) -> Result<i32> {
    if a.gate {
        return gate(a.out_dir.as_deref().expect("required by clap"));
    }
    let input = a.input.as_deref().expect("required by clap");
    let name = a.name.clone().unwrap_or_else(|| stem(a.output.as_deref().unwrap_or(input)));
    let (model, actions, source) = if let Some(property) = &a.property {
        let scope = Arc::new(Scope::load(input)?);
        let source = format!("{} --property {property}", input.display());
        match find_cx(scope, a.profile.as_deref(), property)? {
            Some((m, p)) => (m, p, source),
            None => {
                return Err(KvmcError::Usage(format!(
                    "{property} holds on {} (no counterexample to reproduce)",
                    input.display()
                )))
            }
        }
    } else {
        if a.profile.is_some() {
            return Err(KvmcError::Usage("--profile goes with --property (a counterexample names its profile)".into()));
        }
        let h = read_header(input)?;
        let mpath = match &a.model {
            Some(m) => m.clone(),
            None => h.model_path()?,
        };
        let scope = Arc::new(Scope::load(&mpath)?);
        let model =
            KvModel::new(scope, h.profile.as_deref(), h.variant.as_deref(), Vec::new()).map_err(KvmcError::Usage)?;
        let actions = scenario_actions(&model.sys, input)?;
        if actions.contains(&crate::model::Action::StepStoresDrain) {
            return Err(KvmcError::input(
                input,
                1,
                "the scenario has steps in which only stores finish within the step (trace replay's \
                 store_steps = 0), which the recorder's fake worker does not offer",
            ));
        }
        (model, actions, input.display().to_string())
    };
    let hang = a.property.as_deref() == Some("requests-finish");
    let r = to_recorder(&model, &actions, &name, &source, hang)
        .map_err(|why| KvmcError::Usage(format!("cannot reproduce: {why}")))?;
    emit(&r, a.output.as_deref())?;
    Ok(crate::error::exit::OK)
}

/// `--gate`: every gate expectation `violated` on a released profile without a variant.
fn gate(dir: &Path) -> Result<i32> {
    std::fs::create_dir_all(dir).map_err(|e| KvmcError::io(dir, e))?;
    let specs = crate::check::specs::load_embedded()?;
    let models = Path::new("models");
    crate::check::gate::check_models_dir(models)?;
    let mut rows: Vec<(String, String, String)> = Vec::new();
    for spec in &specs {
        for x in spec.expects.iter().filter(|x| !x.deep && x.violated && x.variant.is_none()) {
            let path = models.join(format!("{}.toml", x.model));
            let scope = Arc::new(Scope::load(&path)?);
            let profile = x.profile.clone().unwrap_or_else(|| scope.profile.clone());
            if vllm_version(&profile).is_none() {
                continue;
            }
            let name = format!("{}__{}__{}", x.model, profile, spec.property);
            let outcome = if let Some(why) = unsupported(&scope.cfg) {
                Err(why)
            } else {
                match find_cx(scope, Some(&profile), &spec.property) {
                    Ok(Some((m, p))) => {
                        let source = format!("models/{}.toml --property {}", x.model, spec.property);
                        to_recorder(&m, &p, &name, &source, spec.property == "requests-finish")
                    }
                    Ok(None) => Err("the checker finds no counterexample (the gate expects one)".into()),
                    Err(e) => Err(e.message()),
                }
            };
            match outcome {
                Ok(r) => {
                    let out = dir.join(format!("{name}.toml"));
                    std::fs::write(&out, &r.toml).map_err(|e| KvmcError::io(&out, e))?;
                    rows.push((name, format!("vLLM {}", r.version), format!("-> {}", out.display())));
                }
                Err(why) => rows.push((name, "not reproducible".into(), why)),
            }
        }
    }
    rows.sort();
    for (n, v, w) in &rows {
        println!("{n:<58} {v:<16} {w}");
    }
    Ok(crate::error::exit::OK)
}
