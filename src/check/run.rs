//! Running an exploration of one model and turning what it found into honest verdicts.
//!
//! Every strategy is kvmc's own (`bfs`, `dfs`, `simulate`), single-threaded for now, and obeys
//! every bound: `--max-states`, `--max-depth`, `--timeout`, the memory budget and Ctrl-C
//! (`crate::stop`). A property that was not violated is `holds` only if the exploration was
//! exhaustive; otherwise it is `incomplete`, and the run says what stopped it.

use crate::model::{Action, KvModel};
use crate::props::Kind;
use crate::stop::Watch;
use stateright::Model;
use std::sync::Arc;
use std::time::Duration;

pub use crate::report::rows::Verdict;
pub use crate::stop::{peak_rss_bytes, StopReason};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Strategy {
    /// Breadth-first: shortest counterexamples.
    Bfs,
    /// Depth-first: valid counterexamples, not shortest; a smaller frontier.
    Dfs,
    /// Random walks (never exhaustive: verdicts that are not violations are `incomplete`).
    Simulate,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Bfs => "bfs",
            Strategy::Dfs => "dfs",
            Strategy::Simulate => "simulate",
        }
    }
}

/// The states a simulation visits when neither `--max-states` nor `--timeout` bounds it.
pub const SIMULATE_DEFAULT_STATES: usize = 100_000;

#[derive(Clone, Debug)]
pub struct RunOpts {
    pub strategy: Strategy,
    /// Explorer threads. Every strategy is single-threaded for now; kept for the parallel BFS.
    pub threads: usize,
    /// At most this many distinct states (bfs, dfs) or states visited (simulate).
    pub max_states: Option<usize>,
    pub max_depth: Option<usize>,
    pub timeout: Option<Duration>,
    pub seed: u64,
    /// Stop when the process's resident memory reaches this many bytes.
    pub max_memory: Option<u64>,
    /// The stop signal to use (its clock already running); `None`: `run` starts one.
    pub watch: Option<Arc<Watch>>,
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts {
            strategy: Strategy::Bfs,
            threads: 1,
            max_states: None,
            max_depth: None,
            timeout: None,
            seed: 0,
            max_memory: None,
            watch: None,
        }
    }
}

impl RunOpts {
    /// The state bound in force: `--max-states`, or simulate's default when no other bound
    /// (`--max-states`, `--timeout`) ends its walks.
    pub fn state_bound(&self) -> Option<usize> {
        match self.max_states {
            Some(n) => Some(n),
            None if self.strategy == Strategy::Simulate && self.timeout.is_none() => Some(SIMULATE_DEFAULT_STATES),
            None => None,
        }
    }

    /// Why a run with these options stopped, in words.
    pub fn describe(&self, r: StopReason) -> String {
        let why = match r {
            StopReason::States => match self.max_states {
                Some(n) => format!("--max-states {n}"),
                None => format!("--max-states {} (simulate's default bound)", self.state_bound().unwrap_or(0)),
            },
            StopReason::Depth => format!("--max-depth {}", self.max_depth.unwrap_or(0)),
            StopReason::Timeout => format!("timeout of {}s", self.timeout.map_or(0.0, |t| t.as_secs_f64())),
            StopReason::Memory => format!(
                "the memory budget (--max-memory {}): the process's resident memory reached it",
                self.max_memory.map_or("-".to_string(), crate::stop::human_bytes)
            ),
            StopReason::Interrupted => "interrupt (Ctrl-C)".to_string(),
            StopReason::Sampling => return "simulation samples paths; it never exhausts the state space".into(),
        };
        if self.strategy == Strategy::Simulate {
            format!("{why}; simulation samples paths, it never exhausts the state space")
        } else {
            why
        }
    }
}

/// What one exploration found.
pub struct Explored {
    pub unique: usize,
    pub generated: usize,
    pub max_depth: usize,
    pub stopped: Option<StopReason>,
    /// (property, actions from the initial state), first found, in property order.
    pub discoveries: Vec<(&'static str, Vec<Action>)>,
}

/// What a run found for one property.
#[derive(Clone, Debug)]
pub struct PropOutcome {
    pub name: &'static str,
    pub kind: Kind,
    /// Always: a counterexample was found. Sometimes: an example was found.
    pub discovered: bool,
    /// The action path to the discovery.
    pub path: Option<Vec<Action>>,
}

#[derive(Clone, Debug)]
pub struct RunResult {
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    /// The exploration was exhaustive (no bound, timeout or sampling cut it short).
    pub complete: bool,
    /// Why it was not, if it was not.
    pub cut_by: Option<String>,
    pub props: Vec<PropOutcome>,
}

impl RunResult {
    pub fn outcome(&self, name: &str) -> Option<&PropOutcome> {
        self.props.iter().find(|p| p.name == name)
    }

    /// The verdict on an always-property.
    pub fn verdict(&self, name: &str) -> Verdict {
        match self.outcome(name) {
            Some(p) if p.discovered => Verdict::Violated,
            _ if self.complete => Verdict::Holds,
            _ => Verdict::Incomplete,
        }
    }

    /// Was a guard reached? (`None`: not reached, but the run was not exhaustive.)
    pub fn reached(&self, name: &str) -> Option<bool> {
        match self.outcome(name) {
            Some(p) if p.discovered => Some(true),
            _ if self.complete => Some(false),
            _ => None,
        }
    }
}

/// Explore `model` and collect one discovery per property.
pub fn run(model: KvModel, opts: &RunOpts) -> RunResult {
    let names: Vec<(&'static str, Kind)> = model.props.iter().map(|p| (p.name, p.kind)).collect();
    let watch = opts.watch.clone().unwrap_or_else(|| Watch::start(opts.timeout, opts.max_memory));
    let o = match opts.strategy {
        Strategy::Bfs => super::bfs::explore(&model, opts, &watch),
        Strategy::Dfs => super::dfs::explore(&model, opts, &watch),
        Strategy::Simulate => super::simulate::explore(&model, opts, &watch),
    };
    watch.finish();
    let seconds = watch.seconds();
    let cut_by = o.stopped.map(|r| opts.describe(r));
    let props = names
        .into_iter()
        .map(|(name, kind)| {
            let path = o.discoveries.iter().find(|(d, _)| *d == name).map(|(_, p)| p.clone());
            PropOutcome { name, kind, discovered: path.is_some(), path }
        })
        .collect();
    RunResult {
        unique_states: o.unique,
        states: o.generated,
        max_depth: o.max_depth,
        seconds,
        complete: cut_by.is_none(),
        cut_by,
        props,
    }
}

/// Replay `path` from the initial state; None if some action is not enabled or changes
/// nothing (the path does not belong to this model).
pub fn replay(model: &KvModel, path: &[Action]) -> Option<Vec<crate::model::KvState>> {
    let mut s = model.init_states().pop()?;
    let mut out = vec![s.clone()];
    for a in path {
        let mut acts = Vec::new();
        model.actions(&s, &mut acts);
        if !acts.contains(a) {
            return None;
        }
        s = model.next_state(&s, *a)?;
        out.push(s.clone());
    }
    Some(out)
}
