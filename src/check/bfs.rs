//! `--strategy bfs`: kvmc's model on the search engine (`crate::search`): a parallel,
//! level-synchronous breadth-first search over 96-bit fingerprints and parent links, with
//! symmetry reduction (`--symmetry`) and liveness under weak fairness (`KvHooks`).
//!
//! This adapter bridges the engine's stop hook to the exploration's [`Watch`] (timeout, memory
//! budget, Ctrl-C; the watch's counts are published from every poll), maps the engine's end to
//! the checker's stop reasons (a run that is not exhaustive is never `holds`), and turns each
//! discovery into an action path: the shortest counterexample of an `always` property, the
//! shortest example of a guard, and a lasso (stem, then the cycle back to its first state) for
//! the liveness half of `requests-finish`.

use super::hooks::KvHooks;
use super::run::{Discovered, Explored, RunOpts, StopReason};
use crate::model::KvModel;
use crate::search::{self, Discovery, End, Options, Progress, Stop};
use crate::stop::Watch;

fn stop_of(r: StopReason) -> Stop {
    match r {
        StopReason::States | StopReason::Sampling => Stop::MaxStates,
        StopReason::Depth => Stop::MaxDepth,
        StopReason::Timeout => Stop::Timeout,
        StopReason::Memory => Stop::Memory,
        StopReason::Interrupted => Stop::Interrupted,
    }
}

fn reason_of(s: Stop) -> StopReason {
    match s {
        Stop::MaxStates => StopReason::States,
        Stop::MaxDepth => StopReason::Depth,
        Stop::Timeout => StopReason::Timeout,
        // 2^32 - 2 visited states: far past any memory this checker runs in.
        Stop::Memory | Stop::Capacity => StopReason::Memory,
        Stop::Interrupted => StopReason::Interrupted,
    }
}

/// Explore `model` breadth first on `opts.threads` threads.
pub fn explore(model: &KvModel, opts: &RunOpts, watch: &Watch) -> Explored {
    let hooks = KvHooks::new(model, opts.symmetry);
    let poll = |p: &Progress| {
        watch.publish(p.unique, p.generated, p.depth);
        watch.poll().map(stop_of)
    };
    let o = search::search(
        model,
        &hooks,
        &Options {
            threads: opts.threads.max(1),
            max_states: opts.max_states,
            max_depth: opts.max_depth,
            stop: Some(&poll),
            ..Options::default()
        },
    );
    watch.publish(o.unique, o.generated, o.max_depth);
    let stopped = match o.end {
        End::Exhausted | End::AllDiscovered => None,
        End::Stopped(s) => Some(reason_of(s)),
    };
    // A property may be given twice (requests-finish: its deadlock half as `always`, its cycle
    // half as `eventually`): the first discovery in property order is reported.
    let mut discoveries: Vec<Discovered> = Vec::new();
    let mut undecided: Vec<&'static str> = Vec::new();
    for p in &o.properties {
        match &p.discovery {
            Discovery::Found(t) if !discoveries.iter().any(|d| d.name == p.name) => {
                let mut path = t.actions.clone();
                let cycle_start = t.cycle.as_ref().map(|c| {
                    let at = path.len();
                    path.extend(c.iter().copied());
                    at
                });
                discoveries.push(Discovered { name: p.name, path, cycle_start });
            }
            Discovery::Unknown if stopped.is_none() => undecided.push(p.name),
            _ => {}
        }
    }
    undecided.retain(|n| !discoveries.iter().any(|d| d.name == *n));
    Explored {
        unique: o.unique,
        generated: o.generated,
        max_depth: o.max_depth,
        stopped,
        discoveries,
        undecided,
        visited_bytes: o.visited_bytes,
        graph_bytes: o.graph_bytes,
        frontier: (o.frontier_bytes, o.frontier_states),
    }
}
