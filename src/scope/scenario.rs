//! Scenario files: a path through a model as action labels, as `kvmc check --out` and replay's
//! violation export write them, `kvmc replay SCENARIO` and `kvmc explore --path` read them.
//!
//! ```toml
//! model = "../models/preempt-store.toml"   # relative to this file's own directory
//! profile = "vllm-0.33"
//! variant = "pre-29870"
//! actions = ["arrive A", "arrive R", "step", "step"]
//! ```
//!
//! Unknown keys, an unknown profile or variant, and a `model` that names no file are input
//! errors at their line.

use crate::error::{line_of_offset, read_text, toml_error, KvmcError, Result};
use crate::system::display::action_label;
use crate::system::events::Events;
use crate::system::rules;
use crate::system::{Input, System};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    profile: Option<Spanned<String>>,
    #[serde(default)]
    variant: Option<Spanned<String>>,
    actions: Vec<Spanned<String>>,
}

/// Read and check a scenario file: its keys, profile and variant.
fn parse(path: &Path) -> Result<(String, RawScenario)> {
    let text = read_text(path)?;
    let raw: RawScenario = toml::from_str(&text).map_err(|e| toml_error(path, &text, e))?;
    let at = |s: &Spanned<String>| line_of_offset(&text, s.span().start);
    if let Some(p) = raw.profile.as_ref().filter(|p| rules::profile(p.get_ref()).is_none()) {
        return Err(KvmcError::input(path, at(p), rules::resolve(p.get_ref(), None).unwrap_err()));
    }
    if let Some(v) = raw.variant.as_ref().filter(|v| rules::variant(v.get_ref()).is_none()) {
        return Err(KvmcError::input(path, at(v), rules::resolve("vllm-0.33", Some(v.get_ref())).unwrap_err()));
    }
    Ok((text, raw))
}

/// Resolve a scenario's action labels against `sys`, step by step.
pub fn scenario_actions(sys: &System, path: &Path) -> Result<Vec<Input>> {
    let (text, raw) = parse(path)?;
    let mut s = sys.init();
    let mut out = Vec::new();
    for (i, l) in raw.actions.iter().enumerate() {
        let line = line_of_offset(&text, l.span().start);
        let label = l.get_ref();
        let mut acts = Vec::new();
        sys.inputs(&s, &mut acts);
        // Written by trace replay (store_steps = 0), never explored by the checker.
        acts.push(Input::StepStoresDrain);
        let a = acts.into_iter().find(|a| action_label(sys, a) == *label).ok_or_else(|| {
            KvmcError::input(path, line, format!("action {} ({label:?}) is not enabled at that point", i + 1))
        })?;
        s = sys.apply(&s, a, &mut Events::off(), true).ok_or_else(|| {
            KvmcError::input(path, line, format!("action {} ({label:?}) changes nothing at that point", i + 1))
        })?;
        out.push(a);
    }
    Ok(out)
}

/// What a scenario file says besides its actions.
#[derive(Clone, Debug, Default)]
pub struct ScenarioHeader {
    /// The scenario file.
    pub path: PathBuf,
    /// `model` as written, and its line.
    pub model: Option<(String, usize)>,
    pub profile: Option<String>,
    pub variant: Option<String>,
    pub actions: usize,
}

impl ScenarioHeader {
    /// The model file: `model` resolved against the scenario file's own directory (an
    /// absolute path as it is). An input error at the `model` line if no file is there.
    pub fn model_path(&self) -> Result<PathBuf> {
        let Some((m, line)) = &self.model else {
            return Err(KvmcError::input(&self.path, 1, "the scenario names no model; pass --model MODEL"));
        };
        let p = Path::new(m);
        let resolved = if p.is_absolute() { p.to_path_buf() } else { self.dir().join(p) };
        if !resolved.is_file() {
            return Err(KvmcError::input(
                &self.path,
                *line,
                format!(
                    "model {m:?} names no file (resolved against the scenario's own directory: {})",
                    resolved.display()
                ),
            ));
        }
        Ok(resolved)
    }

    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }
}

/// Read a scenario's header (model, profile, variant) without resolving its actions.
pub fn read_header(path: &Path) -> Result<ScenarioHeader> {
    let (text, raw) = parse(path)?;
    Ok(ScenarioHeader {
        path: path.to_path_buf(),
        model: raw.model.map(|m| (m.get_ref().clone(), line_of_offset(&text, m.span().start))),
        profile: raw.profile.map(|p| p.into_inner()),
        variant: raw.variant.map(|v| v.into_inner()),
        actions: raw.actions.len(),
    })
}

/// How a scenario written into `scenario_dir` names `model`: relative to that directory
/// (where readers resolve it), or absolute when no relative path leads there.
pub fn model_ref(scenario_dir: &Path, model: &Path) -> String {
    let (Ok(d), Ok(m)) = (scenario_dir.canonicalize(), model.canonicalize()) else {
        return model.display().to_string();
    };
    let (dc, mc): (Vec<_>, Vec<_>) = (d.components().collect(), m.components().collect());
    let common = dc.iter().zip(&mc).take_while(|(a, b)| a == b).count();
    // Only the root in common: the absolute path says more than a climb to it.
    if common <= 1 {
        return m.display().to_string();
    }
    let mut r = PathBuf::new();
    for _ in common..dc.len() {
        r.push("..");
    }
    for c in &mc[common..] {
        r.push(c);
    }
    r.display().to_string()
}
