//! Running an exploration of one model and turning what it found into honest verdicts.
//!
//! Every strategy is kvmc's own: `bfs` runs on the search engine (`crate::search`, parallel on
//! `--threads`, symmetry reduction with `--symmetry on`), `dfs` and `simulate` on one thread.
//! Each obeys every bound: `--max-states`, `--max-depth`, `--timeout`, the memory budget and
//! Ctrl-C (`crate::stop`). A property that was not violated is `holds` only if the exploration
//! was exhaustive and the strategy decides it (only `bfs` decides the liveness half of
//! `requests-finish`); otherwise it is `incomplete`, and the run says what stopped it.

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
    /// Explorer threads (`bfs`; `dfs` and `simulate` run on one).
    pub threads: usize,
    /// Symmetry reduction (`bfs`): interchangeable requests and renamable block ids.
    pub symmetry: bool,
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
            symmetry: false,
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
    /// The first discovery of each property, in property order.
    pub discoveries: Vec<Discovered>,
    /// Properties the strategy cannot decide even when it is exhaustive (liveness outside
    /// `bfs`): `incomplete` unless discovered.
    pub undecided: Vec<&'static str>,
    /// Bytes of the visited set at the end (`bfs`; 0 elsewhere).
    pub visited_bytes: usize,
    /// Bytes of the state graph kept for liveness (`bfs` with requests-finish; 0 elsewhere).
    pub graph_bytes: usize,
    /// The encoded frontier's peak bytes and its state count then (`bfs`; 0 elsewhere).
    pub frontier: (usize, usize),
}

/// A discovery: the actions from the initial state, and for a lasso where its cycle starts
/// (`path[cycle_start..]` leads from the cycle's first state back to it).
#[derive(Clone, Debug)]
pub struct Discovered {
    pub name: &'static str,
    pub path: Vec<Action>,
    pub cycle_start: Option<usize>,
}

/// The discoveries of a strategy that finds action paths and no lassos (`dfs`, `simulate`):
/// the first per property name (requests-finish is given twice), and the `eventually`
/// properties it cannot decide.
pub fn paths_found(props: &[stateright::Property<KvModel>], found: Vec<Option<Vec<Action>>>) -> Explored {
    let mut discoveries: Vec<Discovered> = Vec::new();
    for (p, f) in props.iter().zip(found) {
        if let Some(path) = f.filter(|_| !discoveries.iter().any(|d| d.name == p.name)) {
            discoveries.push(Discovered { name: p.name, path, cycle_start: None });
        }
    }
    let undecided = props
        .iter()
        .filter(|p| p.expectation == stateright::Expectation::Eventually)
        .map(|p| p.name)
        .filter(|n| !discoveries.iter().any(|d| d.name == *n))
        .collect();
    Explored {
        unique: 0,
        generated: 0,
        max_depth: 0,
        stopped: None,
        discoveries,
        undecided,
        visited_bytes: 0,
        graph_bytes: 0,
        frontier: (0, 0),
    }
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
    /// A lasso: the step where its cycle starts (`path[k..]` returns to the state after
    /// `path[..k]`).
    pub cycle_start: Option<usize>,
    /// The strategy cannot decide this property (liveness outside `bfs`).
    pub undecided: bool,
}

#[derive(Clone, Debug)]
pub struct RunResult {
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    /// Bytes of the visited set at the end (`bfs`).
    pub visited_bytes: usize,
    /// Bytes of the state graph kept for liveness at the end (`bfs`).
    pub graph_bytes: usize,
    /// The encoded frontier's peak bytes and its state count then (`bfs`).
    pub frontier: (usize, usize),
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
            Some(p) if p.undecided => Verdict::Incomplete,
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
            let d = o.discoveries.iter().find(|d| d.name == name);
            PropOutcome {
                name,
                kind,
                discovered: d.is_some(),
                path: d.map(|d| d.path.clone()),
                cycle_start: d.and_then(|d| d.cycle_start),
                undecided: d.is_none() && o.undecided.contains(&name),
            }
        })
        .collect();
    RunResult {
        unique_states: o.unique,
        states: o.generated,
        max_depth: o.max_depth,
        seconds,
        visited_bytes: o.visited_bytes,
        graph_bytes: o.graph_bytes,
        frontier: o.frontier,
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
