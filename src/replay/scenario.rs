//! `kvmc replay SCENARIO.toml`: a kvmc scenario (a path of action labels through a model, as
//! `kvmc check --out` and replay's violation export write them) run through the checker's own
//! system, every always-property evaluated over the whole state after every action.

use crate::error::{KvmcError, Result};
use crate::props::{self, Kind};
use crate::scope::scenario::{read_header, scenario_actions};
use crate::scope::Scope;
use crate::system::display;
use crate::system::events::Stats;
use crate::system::Events;
use std::path::{Path, PathBuf};

/// The outcome of a scenario replay.
#[derive(Clone, Debug)]
pub struct ScenarioOutcome {
    pub scenario: PathBuf,
    pub model: PathBuf,
    pub profile: String,
    pub variant: Option<String>,
    pub actions: usize,
    pub evaluations: u64,
    pub stats: Stats,
    /// The first violated property: (property, 1-based action, its label).
    pub violation: Option<(String, usize, String)>,
    /// One line per action: label and what the engine did.
    pub story: Vec<(String, String)>,
}

pub fn run_scenario(
    path: &Path,
    model_override: Option<&Path>,
    profile: Option<&str>,
    variant: Option<&str>,
) -> Result<ScenarioOutcome> {
    let h = read_header(path)?;
    // `--model` overrides the scenario's own `model` (resolved against the scenario's directory).
    let mpath = match model_override {
        Some(m) => m.to_path_buf(),
        None => h.model_path()?,
    };
    let scope = Scope::load(&mpath)?;
    let profile = profile.map(str::to_string).or(h.profile).unwrap_or_else(|| scope.profile.clone());
    if let Some(v) = variant {
        // As for `check`: a `--variant` that changes nothing this model reads is refused.
        crate::system::rules::resolve(&profile, Some(v)).map_err(KvmcError::Usage)?;
        crate::system::rules::variant_applies_to(&scope.name, &scope.cfg, scope.faults.load_failure, &profile, v)
            .map_err(|why| KvmcError::Usage(format!("--variant {v}: {why}")))?;
    }
    let variant = variant.map(str::to_string).or(h.variant);
    let defs: Vec<_> =
        props::REGISTRY.iter().filter(|p| p.kind == Kind::Always && props::applies(p, &scope.cfg)).collect();
    let sys = scope.system(Some(&profile), variant.as_deref()).map_err(KvmcError::Usage)?;
    let actions = scenario_actions(&sys, path)?;
    let mut ev = Events::on();
    ev.stats = Some(Box::default());
    let mut raw = sys.init();
    let mut story = Vec::new();
    let mut violation = None;
    let mut evaluations = 0u64;
    for (i, a) in actions.iter().enumerate() {
        ev.list.clear();
        let next = sys
            .apply(&raw, *a, &mut ev, false)
            .ok_or_else(|| KvmcError::Internal(format!("scenario action {} does not replay", i + 1)))?;
        story.push((display::action_label(&sys, a), display::step_story(&sys, &raw, &next, &ev.list)));
        raw = next;
        for p in &defs {
            evaluations += 1;
            if !(p.check)(&sys, &raw) {
                violation = Some((p.name.to_string(), i + 1, display::action_label(&sys, a)));
                break;
            }
        }
        if violation.is_some() {
            break;
        }
    }
    Ok(ScenarioOutcome {
        scenario: path.to_path_buf(),
        model: mpath,
        profile,
        variant,
        actions: story.len(),
        evaluations,
        stats: ev.stats.as_deref().cloned().unwrap_or_default(),
        violation,
        story,
    })
}
