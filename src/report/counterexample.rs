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

/// A state value as ITF writes it: integers as `{"#bigint": "n"}`, lists, records (objects),
/// strings and booleans as they are (the state view has no nulls; one would become ITF's
/// `None` variant).
fn itf_value(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as V;
    match v {
        V::Number(n) => serde_json::json!({"#bigint": n.to_string()}),
        V::Array(a) => V::Array(a.iter().map(itf_value).collect()),
        V::Object(o) => V::Object(o.iter().map(|(k, x)| (k.clone(), itf_value(x))).collect()),
        V::Null => serde_json::json!({"tag": "None", "value": {"#tup": []}}),
        x => x.clone(),
    }
}

/// ITF (the Informal Trace Format of Apalache/Quint, ADR-015): one state per step, each with
/// the full state as values (`g1`, `requests`, `queues`, `host`, `connector`, `rows`, `flags`:
/// src/report/state.rs), the action taken (`mbt::actionTaken`, as Quint names it), the step's
/// story, and `violated`: the property this counterexample breaks, on its last state.
pub fn to_itf(model: &KvModel, cx: &Counterexample, property: &str) -> serde_json::Value {
    let mut raw: Engine = model.init().engine;
    let mut engines = vec![raw.clone()];
    for a in &cx.actions {
        let Some(next) = model.apply(&raw, *a, &mut Events::off(), false) else { break };
        engines.push(next.clone());
        raw = next;
    }
    let last = engines.len() - 1;
    let states: Vec<serde_json::Value> = engines
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut st = itf_value(&super::state::state_json(&model.sys, e));
            let (action, story) = match i {
                0 => ("init".to_string(), String::new()),
                _ => cx
                    .steps
                    .get(i - 1)
                    .map_or((String::new(), String::new()), |s| (s.action.clone(), s.summary.clone())),
            };
            for k in ["host", "connector", "rows"] {
                if st.get(k).is_none() {
                    st[k] = serde_json::json!({});
                }
            }
            st["mbt::actionTaken"] = serde_json::json!(action);
            st["story"] = serde_json::json!(story);
            st["violated"] = serde_json::json!(if i == last { vec![property] } else { vec![] });
            st["#meta"] = serde_json::json!({"index": i});
            st
        })
        .collect();
    let meta = serde_json::json!({"format": "ITF",
        "format-description": "https://apalache-mc.org/docs/adr/015adr-trace.html",
        "source": model.scope.path.display().to_string(), "description": format!("kvmc counterexample: {property}"),
        "profile": model.profile, "variant": model.variant.clone().unwrap_or_else(|| "fixed".into()), "path": cx.path});
    let mut t = serde_json::json!({
        "#meta": meta,
        "vars": ["g1", "queues", "requests", "host", "connector", "rows", "flags", "mbt::actionTaken", "story", "violated"],
        "states": states,
    });
    if let Some(k) = cx.cycle_start {
        // A lasso: the state after the last step is the state at index k.
        t["loop"] = serde_json::json!(k);
    }
    t
}

/// Escape a DOT string (inside double quotes): backslash and quote escaped, newlines as
/// DOT's left-justified line break.
fn dot_str(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\l")
}

/// Wrap `s` into lines of at most about `w` characters after a ";" or ",".
fn wrap(s: &str, w: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for part in s.split_inclusive([';', ',']) {
        if line > 0 && line + part.len() > w {
            out.push('\n');
            line = 0;
        }
        let part = if line == 0 { part.trim_start() } else { part };
        out.push_str(part);
        line += part.len();
    }
    out
}

/// The path as a DOT graph: one node per state (its step number and what changed), one edge
/// per action; the last state, which violates `property`, drawn red with the property's name.
pub fn to_dot(cx: &Counterexample, property: &str) -> String {
    let mut s = String::from("digraph counterexample {\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    s.push_str("  s0 [label=\"0: initial state\\l\"];\n");
    let n = cx.steps.len();
    for (i, st) in cx.steps.iter().enumerate() {
        let changes = if st.changes.is_empty() { "nothing changed".to_string() } else { st.changes.clone() };
        let mut label = format!("{}: {}\n", i + 1, wrap(&changes, 60));
        let mut attrs = String::new();
        if i + 1 == n {
            label.push_str(&format!("VIOLATES {property}\n"));
            attrs.push_str(", color=red, penwidth=2, fontcolor=red");
        }
        s.push_str(&format!("  s{} [label=\"{}\"{attrs}];\n", i + 1, dot_str(&label)));
        s.push_str(&format!("  s{i} -> s{} [label=\"{}\"];\n", i + 1, dot_str(&st.action)));
    }
    if let Some(k) = cx.cycle_start {
        s.push_str(&format!("  s{n} -> s{k} [style=dashed, label=\"the cycle repeats\"];\n"));
    }
    s.push_str("}\n");
    s
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
