//! kvmc's counterexample explorer: a path through a model (a model file under a profile and
//! variant, and stateright's index path: the initial state's index, then one action index per
//! step) replayed step by step, each state as domain values (src/report/state.rs), every
//! always-property evaluated on every state, the story of each step and what it changed.
//! `kvmc explore` serves it as JSON to an embedded page (src/explorer/server.rs,
//! src/explorer/assets/); `kvmc check` prints, for each counterexample, the command and the
//! URL path ([`Target::command`], [`Target::url_path`]) that open it.
//!
//! A target names its model file by the path as given (relative to the directory `kvmc explore`
//! runs in); the server opens only `.toml` files under that directory.

pub mod conform;
pub mod server;

use crate::model::{Action, KvModel};
use crate::props::{self, Kind, PropDef};
pub use crate::report::link::Target;
use crate::report::state::state_json;
use crate::scope::Scope;
use crate::system::{display, Engine, Events};
use serde_json::{json, Value};
use stateright::Model;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The longest state path (steps after the initial state) the explorer opens or serves.
pub const MAX_PATH_STEPS: usize = 4096;

/// The model a target names, loaded with every applicable always-property.
pub fn load_model(file: &Path, profile: Option<&str>, variant: Option<&str>) -> crate::error::Result<KvModel> {
    use crate::error::KvmcError;
    let scope = Arc::new(Scope::load(file)?);
    let prof = profile.unwrap_or(&scope.profile).to_string();
    crate::system::rules::resolve(&prof, variant).map_err(KvmcError::Usage)?;
    if let Some(v) = variant {
        crate::system::rules::variant_applies_to(&scope.name, &scope.cfg, scope.faults.load_failure, &prof, v)
            .map_err(|why| KvmcError::Usage(format!("--variant {v}: {why}")))?;
    }
    let defs: Vec<&'static PropDef> =
        props::REGISTRY.iter().filter(|p| props::applies(p, &scope.cfg) && p.kind == Kind::Always).collect();
    KvModel::new(scope, profile, variant, defs).map_err(KvmcError::Usage)
}

/// Parse an index path and check it against the model: the first index names an initial
/// state, each later one an action of the state reached so far, at most [`MAX_PATH_STEPS`]
/// steps. The error names the first bad segment (1-based). Returns the actions.
pub fn resolve_path(model: &KvModel, p: &str) -> Result<Vec<Action>, String> {
    let p = if p.is_empty() { "0" } else { p };
    let segs: Vec<&str> = p.strip_suffix('/').unwrap_or(p).split('/').collect();
    if segs.len() > MAX_PATH_STEPS + 1 {
        return Err(format!("{} steps; the explorer opens paths of at most {MAX_PATH_STEPS} steps", segs.len() - 1));
    }
    let mut idx = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        match s.parse::<usize>() {
            Ok(n) => idx.push(n),
            Err(_) => {
                return Err(format!(
                    "segment {} ({s:?}) is not an index: neither a file nor an index path like 0/1/2",
                    i + 1
                ))
            }
        }
    }
    let inits = model.init_states();
    let mut state = inits.get(idx[0]).cloned().ok_or_else(|| {
        format!(
            "segment 1 ({}) names no initial state: the model has {} (index 0 to {})",
            idx[0],
            inits.len(),
            inits.len() - 1
        )
    })?;
    let mut out = Vec::with_capacity(idx.len() - 1);
    let mut actions = Vec::new();
    for (i, &n) in idx.iter().enumerate().skip(1) {
        actions.clear();
        model.actions(&state, &mut actions);
        let Some(a) = actions.get(n).cloned() else {
            let at = if i == 1 { "the initial state".to_string() } else { format!("the state after step {}", i - 1) };
            return Err(match actions.len() {
                0 => format!("segment {} ({n}): {at} has no action", i + 1),
                k => format!("segment {} ({n}) names no action of {at}: it has {k} (index 0 to {})", i + 1, k - 1),
            });
        };
        // An action without a next state leaves the state as it is (as stateright's Explorer).
        if let Some(next) = model.next_state(&state, a) {
            state = next;
        }
        out.push(a);
    }
    Ok(out)
}

/// The index path of a list of actions (each must be enabled where it is taken).
pub fn index_path(model: &KvModel, actions: &[Action]) -> Option<String> {
    let mut s = model.init();
    let mut idx = vec!["0".to_string()];
    let mut acts = Vec::new();
    for a in actions {
        acts.clear();
        model.actions(&s, &mut acts);
        idx.push(acts.iter().position(|x| x == a)?.to_string());
        s = model.next_state(&s, *a)?;
    }
    Some(idx.join("/"))
}

/// One replayed step: the raw (not renumbered) engine after it, with its events.
pub struct Replayed {
    /// The engines: the initial state, then one per step.
    pub states: Vec<Engine>,
    /// Per step (index 0 = the initial state): action label, story, changes.
    pub steps: Vec<(String, String, String)>,
    /// Per state: the always-properties it violates.
    pub violated: Vec<Vec<&'static str>>,
    /// Per state: what the step's events say about each violation raised in it.
    pub texts: Vec<Vec<(&'static str, String)>>,
    /// The enabled actions at each state are computed on demand from `canon`.
    pub canon: Vec<crate::model::KvState>,
}

/// Replay `actions` with events on (the real engine for display, the checker's canonical
/// states for the action indices).
pub fn replay(model: &KvModel, actions: &[Action]) -> Replayed {
    let mut raw = model.init().engine;
    let mut canon = model.init();
    let eval = |e: &Engine| -> Vec<&'static str> {
        model.props.iter().filter(|p| !(p.check)(&model.sys, e)).map(|p| p.name).collect()
    };
    // Verdicts come from the checker's (canonical) states, as the checker decides them; the
    // page shows the real engine (job ids and ranks as vLLM numbers them).
    let mut r = Replayed {
        violated: vec![eval(&canon.engine)],
        states: vec![raw.clone()],
        steps: vec![("init".into(), "the initial state".into(), String::new())],
        texts: vec![Vec::new()],
        canon: vec![canon.clone()],
    };
    for a in actions {
        let mut ev = Events::on();
        let Some(next) = model.apply(&raw, *a, &mut ev, false) else { break };
        let story = display::step_story(&model.sys, &raw, &next, &ev.list);
        let changes = display::diff(&model.sys, &raw, &next);
        if let Some(c) = model.next_state(&canon, *a) {
            canon = c;
        }
        let v = eval(&canon.engine);
        let texts =
            v.iter().filter_map(|p| display::violation_text(&model.sys, &ev.list, p).map(|t| (*p, t))).collect();
        r.steps.push((model.format_action(a), story, changes));
        r.violated.push(v);
        r.texts.push(texts);
        r.states.push(next.clone());
        raw = next;
        r.canon.push(canon.clone());
    }
    liveness(model, &mut r);
    r
}

/// requests-finish's liveness half at the path's end (the checker finds it on the state graph,
/// not on one state): the last state has no action and not every request finished (a
/// deadlock), or it is an earlier state again (a lasso: the steps since repeat forever) and not
/// every request finished (a livelock).
fn liveness(model: &KvModel, r: &mut Replayed) {
    let Some(p) = model.props.iter().find(|p| p.name == "requests-finish") else { return };
    let last = r.states.len() - 1;
    if crate::props::progress::finished_or_dead(&model.sys, &r.states[last]) || r.violated[last].contains(&p.name) {
        return;
    }
    let mut acts = Vec::new();
    model.actions(&r.canon[last], &mut acts);
    let text = if acts.is_empty() {
        "a deadlock: no action is enabled and not every request has finished".to_string()
    } else if let Some(j) = (0..last).find(|&j| r.canon[j] == r.canon[last]) {
        format!(
            "a livelock: the state after step {last} is the state after step {j}; steps {} to {last} repeat forever \
             and never finish every request",
            j + 1
        )
    } else {
        return;
    };
    r.violated[last].push(p.name);
    r.texts[last].push((p.name, text));
}

/// The property's explanation (`kvmc explain`'s summary and description) from the built-in
/// specs.
pub fn explanation(property: &str) -> Value {
    let specs = crate::check::specs::load(None).unwrap_or_default();
    match specs.iter().find(|s| s.property == property) {
        Some(s) => {
            json!({"name": s.property, "summary": s.summary, "description": s.description.trim(), "bugs": s.bugs})
        }
        None => {
            json!({"name": property, "summary": props::find(property).map_or("", |p| p.doc), "description": "", "bugs": []})
        }
    }
}

/// The page's data for a target: header, timeline, the state at `at` (default: the first
/// state violating the target's property, else the last) and the one before it, the actions
/// enabled there, and the explanation of the property.
pub fn view(model: &KvModel, target: &Target, at: Option<usize>) -> Result<Value, String> {
    let actions = resolve_path(model, &target.path)?;
    view_of(model, target, &actions, at)
}

/// [`view`] of a list of actions (a scenario's): when they have no index path (a step in
/// which stores finish, which the checker does not offer), the page offers no next action.
pub fn view_of(model: &KvModel, target: &Target, actions: &[Action], at: Option<usize>) -> Result<Value, String> {
    let mut target = target.clone();
    if target.scenario.is_some() {
        target.path = index_path(model, actions).unwrap_or_default();
    }
    let target = &target;
    let r = replay(model, actions);
    let last = r.states.len() - 1;
    let watched = |v: &[&str]| match &target.property {
        Some(p) => v.iter().any(|x| x == p),
        None => !v.is_empty(),
    };
    let first_violation = r.violated.iter().position(|v| watched(v));
    let at = at.unwrap_or(first_violation.unwrap_or(last)).min(last);
    let segs: Vec<&str> = match target.path.as_str() {
        "" if target.scenario.is_some() => Vec::new(),
        "" => vec!["0"],
        p => p.split('/').collect(),
    };
    let steps: Vec<Value> = r
        .steps
        .iter()
        .enumerate()
        .map(|(i, (a, story, changes))| {
            json!({"index": i, "action": a, "story": story, "changes": changes, "violated": r.violated[i],
                "texts": r.texts[i].iter().map(|(p, t)| json!({"property": p, "text": t})).collect::<Vec<_>>(),
                "path": if segs.is_empty() { String::new() } else { segs[..=i.min(segs.len() - 1)].join("/") }})
        })
        .collect();
    let mut enabled = Vec::new();
    // Without an index path there is no permalink to extend.
    if !segs.is_empty() {
        model.actions(&r.canon[at], &mut enabled);
    }
    let next: Vec<Value> =
        enabled.iter().enumerate().map(|(i, a)| json!({"index": i, "label": model.format_action(a)})).collect();
    // The violation texts of the step where each property violated at `at` first broke.
    let mut why = Vec::new();
    for p in &r.violated[at] {
        let since = (0..=at).rev().take_while(|&i| r.violated[i].contains(p)).last().unwrap_or(at);
        let text = r.texts[since].iter().find(|(q, _)| q == p).map(|(_, t)| t.clone());
        why.push(json!({"property": p, "since": since, "text": text.unwrap_or_default(), "explain": explanation(p)}));
    }
    Ok(json!({
        "header": {
            "model": target.model,
            "scope": model.scope.name,
            "profile": model.profile,
            "variant": model.variant.clone().unwrap_or_else(|| "fixed".into()),
            "property": target.property.clone().unwrap_or_default(),
            "connector": crate::system::rules::connector_name(&model.scope.cfg),
        },
        "property": target.property.as_deref().map(explanation),
        "path": segs.join("/"),
        "steps": steps,
        "first_violation": first_violation.map_or(-1, |i| i as i64),
        "at": at,
        "state": state_json(&model.sys, &r.states[at]),
        "prev_state": if at > 0 { state_json(&model.sys, &r.states[at - 1]) } else { Value::Null },
        "violations": why,
        "next": next,
        "command": Target { path: segs.join("/"), ..target.clone() }.command(),
        "next_note": if segs.is_empty() { "the scenario has steps in which stores finish within the step, which the checker does not offer: no other path starts from here" } else { "" },
    }))
}

/// Where a target's model file is: under `root` only, a `.toml` file.
pub fn model_file(root: &Path, model: &str) -> Result<PathBuf, String> {
    let p = Path::new(model);
    if p.extension().is_none_or(|x| x != "toml") {
        return Err(format!("model {model:?}: not a .toml model file"));
    }
    let full = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
    let canon = full.canonicalize().map_err(|e| format!("model {model:?}: {e}"))?;
    let root = root.canonicalize().map_err(|e| format!("the explorer's directory: {e}"))?;
    if !canon.starts_with(&root) {
        return Err(format!("model {model:?}: outside the directory the explorer serves ({})", root.display()));
    }
    if !canon.is_file() {
        return Err(format!("model {model:?}: not a file"));
    }
    Ok(canon)
}
