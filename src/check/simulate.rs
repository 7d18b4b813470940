//! kvmc's random-walk simulator over a stateright `Model` (`--strategy simulate`).
//!
//! stateright 0.31's simulation records the index of every action it *tried*, including
//! those whose `next_state` is `None` (an engine step that changes nothing, a drain with
//! nothing to drain: common in kvmc's model), and indexes into a list it has shrunk with
//! `swap_remove`; its path then rebuilds from fresh action lists and lands on other states,
//! so most counterexamples did not replay. This simulator records the actions themselves as
//! it walks, so a path always replays.
//!
//! Each walk starts at the initial state and takes a uniformly random enabled action (from a
//! seeded generator: the same seed gives the same walks) until no action changes the state,
//! the walk returns to a state it visited, or it reaches `--max-depth`. Every state visited
//! is checked against every property. Walks go on until every property has its discovery or
//! a bound stops them: `--max-states` (states visited, over all walks; simulate's default
//! when neither `--max-states` nor `--timeout` is given), `--timeout`, the memory budget or
//! Ctrl-C. It never exhausts the state space: a property not violated is `incomplete`.

use super::dfs::fingerprint;
use super::run::{Explored, RunOpts, StopReason};
use crate::model::{Action, KvModel};
use stateright::{Expectation, Model};
use std::collections::HashSet;

/// SplitMix64: a small, seedable, well-mixed generator (no dependency, stable across
/// releases, so a seed means the same walks forever).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

/// Walk `model` at random from `opts.seed` until a bound stops it.
pub fn explore(model: &KvModel, opts: &RunOpts, watch: &crate::stop::Watch) -> Explored {
    let props = model.properties();
    let mut found: Vec<Option<Vec<Action>>> = vec![None; props.len()];
    let bound = opts.state_bound();
    let mut rng = Rng(opts.seed);
    let mut unique: HashSet<u64> = HashSet::new();
    let mut on_walk: HashSet<u64> = HashSet::new();
    let mut visited = 0usize;
    let mut max_depth = 0usize;
    let mut actions = Vec::new();
    let mut path: Vec<Action> = Vec::new();
    let stopped = 'walks: loop {
        let mut s = model.init();
        path.clear();
        on_walk.clear();
        loop {
            if let Some(r) = watch.poll() {
                break 'walks r;
            }
            if bound.is_some_and(|n| visited >= n) {
                break 'walks StopReason::States;
            }
            let fp = fingerprint(&s);
            if !on_walk.insert(fp) {
                break; // back to a state of this walk: a cycle ends it
            }
            visited += 1;
            unique.insert(fp);
            max_depth = max_depth.max(path.len());
            watch.publish(unique.len(), visited, max_depth);
            for (i, p) in props.iter().enumerate() {
                if found[i].is_some() {
                    continue;
                }
                let hit = match p.expectation {
                    Expectation::Always => !(p.condition)(model, &s),
                    Expectation::Sometimes => (p.condition)(model, &s),
                    Expectation::Eventually => false,
                };
                if hit {
                    found[i] = Some(path.clone());
                }
            }
            if props.iter().all(|p| props.iter().zip(found.iter()).any(|(q, f)| q.name == p.name && f.is_some())) {
                break 'walks StopReason::Sampling; // replaced by None below
            }
            if opts.max_depth.is_some_and(|d| path.len() >= d) {
                break;
            }
            actions.clear();
            model.actions(&s, &mut actions);
            // Try enabled actions in random order until one changes the state.
            let mut next = None;
            while !actions.is_empty() {
                if let Some(r) = watch.poll() {
                    break 'walks r;
                }
                let a = actions.swap_remove(rng.below(actions.len()));
                if let Some(n) = model.next_state(&s, a).filter(|n| model.within_boundary(n)) {
                    next = Some((a, n));
                    break;
                }
            }
            let Some((a, n)) = next else {
                break; // nothing changes the state: the walk ends
            };
            path.push(a);
            s = n;
        }
    };
    let all = props.iter().all(|p| props.iter().zip(found.iter()).any(|(q, f)| q.name == p.name && f.is_some()));
    Explored {
        unique: unique.len(),
        generated: visited,
        max_depth,
        stopped: if all { None } else { Some(stopped) },
        ..super::run::paths_found(&props, found)
    }
}
