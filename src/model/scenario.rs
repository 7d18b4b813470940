//! Scenario files: a path through a model as action labels, as `kvmc check --out` writes
//! them and `kvmc explore --path` reads them.
//!
//! ```toml
//! model = "models/preempt-store.toml"
//! profile = "vllm-0.33"
//! variant = "pre-29870"
//! actions = ["arrive A", "arrive R", "step", "step"]
//! ```

use super::{Action, KvModel};
use crate::error::{line_of_offset, read_text, toml_error, KvmcError, Result};
use serde::Deserialize;
use stateright::Model;
use std::path::Path;
use toml::Spanned;

#[derive(Deserialize)]
#[allow(dead_code)]
struct RawScenario {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    actions: Vec<Spanned<String>>,
}

/// Resolve a scenario's action labels against `model`, step by step.
pub fn scenario_actions(model: &KvModel, path: &Path) -> Result<Vec<Action>> {
    let text = read_text(path)?;
    let raw: RawScenario = toml::from_str(&text).map_err(|e| toml_error(path, &text, e))?;
    let mut s = model.init();
    let mut out = Vec::new();
    for (i, l) in raw.actions.iter().enumerate() {
        let line = line_of_offset(&text, l.span().start);
        let label = l.get_ref();
        let mut acts = Vec::new();
        model.actions(&s, &mut acts);
        // Written by trace replay (store_steps = 0), never explored by the checker.
        acts.push(Action::StepStoresDrain);
        let a = acts.into_iter().find(|a| model.format_action(a) == *label).ok_or_else(|| {
            KvmcError::input(path, line, format!("action {} ({label:?}) is not enabled at that point", i + 1))
        })?;
        s = model.next_state(&s, a).ok_or_else(|| {
            KvmcError::input(path, line, format!("action {} ({label:?}) changes nothing at that point", i + 1))
        })?;
        out.push(a);
    }
    Ok(out)
}

/// What a scenario file says besides its actions.
#[derive(Clone, Debug, Default)]
pub struct ScenarioHeader {
    pub model: Option<String>,
    pub profile: Option<String>,
    pub variant: Option<String>,
    pub actions: usize,
}

/// Read a scenario's header (model, profile, variant) without resolving its actions.
pub fn read_header(path: &Path) -> Result<ScenarioHeader> {
    let text = read_text(path)?;
    let raw: RawScenario = toml::from_str(&text).map_err(|e| toml_error(path, &text, e))?;
    Ok(ScenarioHeader { model: raw.model, profile: raw.profile, variant: raw.variant, actions: raw.actions.len() })
}
