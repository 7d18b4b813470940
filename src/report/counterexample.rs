//! Counterexamples: the path a run found, replayed step by step with the real (not
//! renumbered) engine, as a story; and its exports (JSON steps, ITF, DOT, scenario).

use crate::model::{Action, KvModel};
use crate::system::display;
use crate::system::{Engine, Events};
use serde::Serialize;
use stateright::Model;

#[derive(Clone, Debug, Serialize)]
pub struct CxStep {
    /// The environment action ("step", "arrive A", "store copy done", ...).
    pub action: String,
    /// What the engine did, in vLLM's order.
    pub summary: String,
    /// What changed in G1, G2 and the requests.
    pub changes: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct Counterexample {
    pub steps: Vec<CxStep>,
    /// stateright's action-index path ("0/2/0/1"), stable for a deterministic model: open it
    /// with `kvmc explore MODEL --path P`.
    pub path: String,
    #[serde(skip)]
    pub actions: Vec<Action>,
    /// A lasso (requests-finish's livelock): the 0-based step where its cycle starts; the
    /// steps from there on lead back to the state before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_start: Option<usize>,
    /// The last state, rendered as tables.
    #[serde(skip)]
    pub final_state: String,
    /// The model file the path runs through, as the run named it (None: a workload of a
    /// `[workload]` model, which has no file of its own).
    #[serde(skip)]
    pub model_file: Option<String>,
}

/// Replay `actions` with events on. None if the path does not replay (a bug in kvmc).
pub fn build(model: &KvModel, actions: &[Action]) -> Option<Counterexample> {
    let mut raw: Engine = model.init().engine;
    let mut canon = model.init();
    let mut steps = Vec::new();
    let mut idx = vec!["0".to_string()];
    for a in actions {
        let mut acts = Vec::new();
        model.actions(&canon, &mut acts);
        idx.push(acts.iter().position(|x| x == a)?.to_string());
        let mut ev = Events::on();
        let next = model.apply(&raw, *a, &mut ev, false)?;
        let story = display::step_story(&model.sys, &raw, &next, &ev.list);
        let changes = display::diff(&model.sys, &raw, &next);
        steps.push(CxStep { action: model.format_action(a), summary: story, changes });
        raw = next;
        canon = model.next_state(&canon, *a)?;
    }
    Some(Counterexample {
        steps,
        path: idx.join("/"),
        actions: actions.to_vec(),
        cycle_start: None,
        final_state: display::render(&model.sys, &raw),
        model_file: model.scope.path.is_file().then(|| model.scope.path.display().to_string()),
    })
}

/// The story as text, one line per step.
pub fn to_text(cx: &Counterexample) -> String {
    let mut s = String::new();
    for (i, st) in cx.steps.iter().enumerate() {
        if cx.cycle_start == Some(i) {
            s.push_str(&format!("  -- the cycle: steps {} to {} repeat forever --\n", i + 1, cx.steps.len()));
        }
        s.push_str(&format!("  {:>2}. {:<24} {}\n", i + 1, st.action, st.summary));
        if !st.changes.is_empty() {
            s.push_str(&format!("      {:<24} {}\n", "", st.changes));
        }
    }
    s
}

/// ITF (the Informal Trace Format of Apalache/Quint): one state per step.
pub fn to_itf(model: &KvModel, cx: &Counterexample) -> serde_json::Value {
    let mut states = vec![serde_json::json!({"#meta": {"index": 0}, "action": "init", "summary": "", "changes": ""})];
    for (i, st) in cx.steps.iter().enumerate() {
        states.push(serde_json::json!({"#meta": {"index": i + 1}, "action": st.action, "summary": st.summary, "changes": st.changes}));
    }
    serde_json::json!({
        "#meta": {"format": "ITF", "source": model.scope.path.display().to_string(), "description": "kvmc counterexample",
                   "profile": model.profile, "variant": model.variant, "path": cx.path},
        "vars": ["action", "summary", "changes"],
        "states": states,
    })
}

/// The path as a DOT graph (one node per state).
pub fn to_dot(cx: &Counterexample) -> String {
    use petgraph::dot::{Config, Dot};
    use petgraph::graph::DiGraph;
    let mut g: DiGraph<String, String> = DiGraph::new();
    let mut prev = g.add_node("init".to_string());
    for (i, st) in cx.steps.iter().enumerate() {
        let n = g.add_node(format!("{}: {}", i + 1, st.changes.replace('"', "'")));
        g.add_edge(prev, n, st.action.clone());
        prev = n;
    }
    format!("{:?}", Dot::with_config(&g, &[Config::GraphContentOnly]))
        .lines()
        .fold(String::from("digraph counterexample {\n"), |acc, l| acc + l + "\n")
        + "}\n"
}

/// A scenario file (`kvmc explore --path FILE` re-runs it), to be written into `dir` (its
/// `model` is relative to that directory).
pub fn to_scenario(model: &KvModel, cx: &Counterexample, dir: &std::path::Path) -> String {
    let mut s = String::new();
    s.push_str("# kvmc scenario: the actions of a counterexample, in order\n");
    s.push_str(&format!("model = {:?}\n", crate::scope::scenario::model_ref(dir, &model.scope.path)));
    s.push_str(&format!("profile = {:?}\n", model.profile));
    if let Some(v) = &model.variant {
        s.push_str(&format!("variant = {v:?}\n"));
    }
    s.push_str("actions = [\n");
    for st in &cx.steps {
        s.push_str(&format!("  {:?},\n", st.action));
    }
    s.push_str("]\n");
    s
}
