//! Running stateright on one model and turning what it found into honest verdicts.
//!
//! stateright reports a run cut short by a state bound, a depth bound or a timeout as
//! "done". kvmc tracks every bound itself: a property that was not violated is `holds` only
//! if the exploration was exhaustive; otherwise it is `incomplete`.

use crate::model::{Action, KvModel};
use crate::props::Kind;
use stateright::{Checker, HasDiscoveries, Model, UniformChooser};
use std::time::{Duration, Instant};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Strategy {
    /// Breadth-first (kvmc's explorer): shortest counterexamples.
    Bfs,
    /// Depth-first (stateright): less memory; counterexamples are valid but not shortest.
    Dfs,
    /// Random walks (never exhaustive: verdicts that are not violations are `incomplete`).
    Simulate,
}

/// Why an exploration stopped before exhausting the state space.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum StopReason {
    States,
    Depth,
    Timeout,
    Sampling,
}

#[derive(Clone, Debug)]
pub struct RunOpts {
    pub strategy: Strategy,
    pub threads: usize,
    pub max_states: Option<usize>,
    pub max_depth: Option<usize>,
    pub timeout: Option<Duration>,
    pub seed: u64,
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts { strategy: Strategy::Bfs, threads: 1, max_states: None, max_depth: None, timeout: None, seed: 0 }
    }
}

/// The verdict on one property in one run.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Verdict {
    Holds,
    Violated,
    Incomplete,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Incomplete => "incomplete",
        }
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
    let started = Instant::now();
    let (unique, states, depth, discoveries, stopped) = if opts.strategy == Strategy::Bfs {
        let o = super::bfs::explore(&model, opts);
        (o.unique, o.generated, o.max_depth, o.discoveries, o.stopped)
    } else {
        let mut b = model.checker().threads(opts.threads.max(1)).finish_when(HasDiscoveries::All);
        if let Some(n) = opts.max_states {
            b = b.target_state_count(n);
        }
        if let Some(d) = opts.max_depth {
            b = b.target_max_depth(d);
        }
        if let Some(t) = opts.timeout {
            b = b.timeout(t);
        }
        let (unique, states, depth, found) = match opts.strategy {
            Strategy::Dfs => collect(b.spawn_dfs().join()),
            _ => collect(b.spawn_simulation(opts.seed, UniformChooser).join()),
        };
        let all_found = names.iter().all(|(n, _)| found.iter().any(|(d, _)| d == n));
        // stateright reports a bounded run as done: decide ourselves whether a bound hit.
        let stopped = if all_found {
            None
        } else if opts.strategy == Strategy::Simulate {
            Some(StopReason::Sampling)
        } else if opts.timeout.is_some_and(|t| started.elapsed() >= t) {
            Some(StopReason::Timeout)
        } else if opts.max_states.is_some_and(|n| states >= n) {
            Some(StopReason::States)
        } else if opts.max_depth.is_some_and(|d| depth >= d) {
            Some(StopReason::Depth)
        } else {
            None
        };
        (unique, states, depth, found, stopped)
    };
    let seconds = started.elapsed().as_secs_f64();
    let cut_by = stopped.map(|r| match r {
        StopReason::States => format!("--max-states {}", opts.max_states.unwrap_or(0)),
        StopReason::Depth => format!("--max-depth {}", opts.max_depth.unwrap_or(0)),
        StopReason::Timeout => format!("timeout of {}s", opts.timeout.map_or(0.0, |t| t.as_secs_f64())),
        StopReason::Sampling => "simulation samples paths; it never exhausts the state space".to_string(),
    });
    let props = names
        .into_iter()
        .map(|(name, kind)| {
            let path = discoveries.iter().find(|(d, _)| *d == name).map(|(_, p)| p.clone());
            PropOutcome { name, kind, discovered: path.is_some(), path }
        })
        .collect();
    RunResult { unique_states: unique, states, max_depth: depth, seconds, complete: cut_by.is_none(), cut_by, props }
}

type Found = Vec<(&'static str, Vec<Action>)>;

fn collect<C: Checker<KvModel>>(c: C) -> (usize, usize, usize, Found) {
    let mut found: Found = c.discoveries().into_iter().map(|(n, p)| (n, p.into_actions())).collect();
    found.sort_by_key(|(n, _)| *n);
    (c.unique_state_count(), c.state_count(), c.max_depth(), found)
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

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
