//! A `kvmc conform` divergence in the explorer: the implementation's event log and the model
//! side by side, step by step up to the first differing step (src/conform/trail.rs). Each step
//! lists the log's lines (inputs and decisions) beside the model's story for the same step and
//! the model's state after it (G1, requests, host tier, connector, as for a counterexample);
//! the diverging step is marked, with the differing log line and the model's value.
//! `kvmc conform` prints, for each divergence, the command and the URL path that open it
//! ([`ConformTarget::command`], [`ConformTarget::url_path`]).

use crate::report::link::{decode, encode};
use crate::report::state::state_json;
use crate::system::display;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What the explorer opens for a conformance run: a log file (relative to the directory the
/// explorer serves), checked under a profile and variant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConformTarget {
    pub log: String,
    /// Empty: the log's own release ([`crate::conform::profile::choose`]).
    pub profile: String,
    pub variant: Option<String>,
}

fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._/=:+,".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl ConformTarget {
    /// The URL path (and query) that opens it on a running `kvmc explore`.
    pub fn url_path(&self) -> String {
        let mut u = format!("/?conform={}&profile={}", encode(&self.log), encode(&self.profile));
        if let Some(v) = &self.variant {
            u.push_str(&format!("&variant={}", encode(v)));
        }
        u
    }

    /// The command that serves it and prints its URL.
    pub fn command(&self) -> String {
        let mut c = format!("kvmc explore --conform {} --profile {}", shell_word(&self.log), shell_word(&self.profile));
        if let Some(v) = &self.variant {
            c.push_str(&format!(" --variant {}", shell_word(v)));
        }
        c
    }

    /// Read a URL query (`conform=LOG&profile=P&variant=V&at=K`); unknown keys are refused.
    pub fn from_query(q: &str) -> Result<ConformTarget, String> {
        let mut t = ConformTarget::default();
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v).ok_or_else(|| format!("query parameter {k}: not valid percent-encoded UTF-8"))?;
            match k {
                "conform" => t.log = v,
                "profile" if !v.is_empty() => t.profile = v,
                "variant" => t.variant = Some(v).filter(|v| !v.is_empty()),
                "at" | "profile" => {}
                _ => return Err(format!("unknown query parameter {k:?} (conform, profile, variant, at)")),
            }
        }
        if t.log.is_empty() {
            return Err("the query names no log (conform=LOG.jsonl)".into());
        }
        Ok(t)
    }
}

/// Where a conformance log is: under `root` only, a `.jsonl` file.
pub fn log_file(root: &Path, log: &str) -> Result<PathBuf, String> {
    let p = Path::new(log);
    if p.extension().is_none_or(|x| x != "jsonl") {
        return Err(format!("log {log:?}: not a .jsonl event log"));
    }
    let full = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
    let canon = full.canonicalize().map_err(|e| format!("log {log:?}: {e}"))?;
    let root = root.canonicalize().map_err(|e| format!("the explorer's directory: {e}"))?;
    if !canon.starts_with(&root) || !canon.is_file() {
        return Err(format!("log {log:?}: not a file under the directory the explorer serves ({})", root.display()));
    }
    Ok(canon)
}

/// The page's data for a conformance run: header, one timeline entry per step up to the
/// divergence (log lines beside the model's story), the model's state at `at` (default: the
/// diverging step, else the last) and before it, and the divergence.
pub fn conform_view(file: &Path, t: &ConformTarget, at: Option<usize>) -> crate::error::Result<Value> {
    let text = crate::error::read_text(file)?;
    let given = Some(t.profile.as_str()).filter(|p| !p.is_empty());
    let profile = crate::conform::profile::choose(&text, given).profile;
    let tr = crate::conform::trail::trail(file, &text, &profile, t.variant.as_deref(), 8)?;
    let (sys, r, h) = (&tr.sys, &tr.report, &tr.header);
    let d = r.divergence.as_ref();
    let mut steps = vec![json!({"index": 0, "action": "init", "story": "the model's initial state", "changes": "",
        "violated": [], "texts": [], "log": [], "path": ""})];
    let mut prev = &tr.init;
    for s in &tr.steps {
        let diverges = d.is_some_and(|d| d.step == s.step);
        let log: Vec<Value> = s
            .lines
            .iter()
            .map(|l| {
                json!({"line": l.no, "text": l.text, "input": l.ev.is_input(),
                "differs": diverges && d.is_some_and(|d| d.line == l.no)})
            })
            .collect();
        let story = display::step_story(sys, prev, &s.engine, &s.events);
        steps.push(json!({
            "index": steps.len(), "action": format!("step {}", s.step), "story": story,
            "changes": display::diff(sys, prev, &s.engine),
            "violated": if diverges { vec!["diverges"] } else { Vec::new() }, "texts": [], "log": log, "path": "",
        }));
        prev = &s.engine;
    }
    let last = steps.len() - 1;
    let at = at.unwrap_or(last).min(last);
    let engine = |i: usize| if i == 0 { &tr.init } else { &tr.steps[i - 1].engine };
    let verdict = match (d, &r.search_bound, &r.partial) {
        (Some(_), Some(_), _) => "incomplete",
        (Some(_), None, _) => "diverges",
        (None, _, Some(_)) => "partial",
        (None, _, None) => "conforms",
    };
    let under: Vec<String> =
        d.map_or(Vec::new(), |d| d.under.iter().map(|c| format!("{} [{}]", c.point, c.chosen.join(", "))).collect());
    Ok(json!({
        "mode": "conform",
        "header": {
            "model": t.log,
            "scope": h.scenario,
            "profile": profile,
            "variant": t.variant.clone().unwrap_or_else(|| "fixed".into()),
            "property": format!("conformance of {} {}", h.implementation, h.version),
            "connector": crate::system::rules::connector_name(&sys.cfg),
        },
        "verdict": verdict,
        "divergence": d.map(|d| json!({"step": d.step, "line": d.line, "what": d.what, "implementation": d.logged,
            "model": d.model, "under": under, "tried": d.tried, "search_bound": r.search_bound})),
        "steps": steps,
        "first_violation": if d.is_some() { last as i64 } else { -1 },
        "at": at,
        "state": state_json(sys, engine(at)),
        "prev_state": if at > 0 { state_json(sys, engine(at - 1)) } else { Value::Null },
        "violations": [],
        "next": [],
        "command": t.command(),
    }))
}
