//! kvmc's depth-first explorer over a stateright `Model`.
//!
//! It replaces stateright's DFS, which overshot `--max-states` several times over (it checks
//! the bound between batches of states) and ignored `--timeout` on one thread. This one holds
//! at most `--max-states` distinct states, reads its stop signal (`crate::stop`: timeout,
//! memory budget, Ctrl-C) before every state and every successor, and is deterministic: it
//! expands the first action's successor first, keeps one parent pointer per state (as the BFS
//! does) and reports, for each property, the first state it met that decides it. Its
//! counterexamples are valid paths, not shortest ones.

use super::bfs::{check_props, fingerprint, path_to, Node};
use super::run::{Explored, RunOpts, StopReason};
use crate::model::{KvModel, KvState};
use crate::stop::Watch;
use stateright::Model;
use std::collections::HashMap;

/// Explore `model` depth first.
pub fn explore(model: &KvModel, opts: &RunOpts, watch: &Watch) -> Explored {
    let props = model.properties();
    let mut found: Vec<Option<u64>> = vec![None; props.len()];
    let init = model.init();
    let init_fp = fingerprint(&init);
    let mut seen: HashMap<u64, Node> = HashMap::new();
    seen.insert(init_fp, Node { parent: init_fp, action: u32::MAX });
    let mut stack: Vec<(KvState, u64, usize)> = vec![(init, init_fp, 0)];
    let mut generated = 1usize;
    let mut max_depth = 0usize;
    let mut stopped = None;
    let mut actions = Vec::new();
    let mut next_states: Vec<(KvState, u64)> = Vec::new();
    'states: while let Some((s, fp, depth)) = stack.pop() {
        max_depth = max_depth.max(depth);
        watch.publish(seen.len(), generated, max_depth);
        if let Some(r) = watch.poll() {
            stopped = Some(r);
            break;
        }
        if check_props(model, &props, &mut found, &s, fp) {
            break; // every property has its discovery
        }
        if opts.max_depth.is_some_and(|d| depth >= d) {
            stopped.get_or_insert(StopReason::Depth);
            continue;
        }
        actions.clear();
        model.actions(&s, &mut actions);
        next_states.clear();
        for (idx, a) in actions.iter().enumerate() {
            if let Some(r) = watch.poll() {
                stopped = Some(r);
                break 'states;
            }
            let Some(next) = model.next_state(&s, *a) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            generated += 1;
            let nfp = fingerprint(&next);
            let full = opts.max_states.is_some_and(|n| seen.len() >= n);
            if let std::collections::hash_map::Entry::Vacant(v) = seen.entry(nfp) {
                if full {
                    stopped = Some(StopReason::States); // a new state past the bound
                    break 'states;
                }
                v.insert(Node { parent: fp, action: idx as u32 });
                next_states.push((next, nfp));
            }
        }
        // The first action's successor is expanded first.
        stack.extend(next_states.drain(..).rev().map(|(n, nfp)| (n, nfp, depth + 1)));
    }
    watch.publish(seen.len(), generated, max_depth);
    let discoveries = props
        .iter()
        .zip(&found)
        .filter_map(|(p, f)| f.map(|fp| (p.name, path_to(model, &seen, init_fp, fp))))
        .collect();
    Explored { unique: seen.len(), generated, max_depth, stopped, discoveries }
}
