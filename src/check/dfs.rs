//! kvmc's depth-first explorer over a stateright `Model`.
//!
//! It replaces stateright's DFS, which overshot `--max-states` several times over (it checks
//! the bound between batches of states) and ignored `--timeout` on one thread. This one holds
//! at most `--max-states` distinct states, reads its stop signal (`crate::stop`: timeout,
//! memory budget, Ctrl-C) before every state and every successor, and is deterministic: it
//! expands the first action's successor first, keeps one parent pointer per state (as the BFS
//! does) and reports, for each property, the first state it met that decides it. Its
//! counterexamples are valid paths, not shortest ones.

use super::run::{paths_found, Explored, RunOpts, StopReason};
use crate::model::{Action, KvModel, KvState};
use crate::stop::Watch;
use stateright::{Expectation, Model, Property};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

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
    let paths = found.iter().map(|f| f.map(|fp| path_to(model, &seen, init_fp, fp))).collect();
    Explored { unique: seen.len(), generated, max_depth, stopped, ..paths_found(&props, paths) }
}

/// A fast, deterministic 64-bit hasher for state fingerprints (no random keys).
struct StableHasher(u64);

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap()));
        }
        for &b in chunks.remainder() {
            self.write_u64(u64::from(b) | 0x100);
        }
    }
    fn write_u64(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u32(&mut self, w: u32) {
        self.write_u64(u64::from(w));
    }
    fn write_u16(&mut self, w: u16) {
        self.write_u64(u64::from(w));
    }
    fn write_u8(&mut self, w: u8) {
        self.write_u64(u64::from(w));
    }
    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }
}

/// The fingerprint of a state.
pub fn fingerprint(s: &KvState) -> u64 {
    let mut h = StableHasher(0x243f_6a88_85a3_08d3);
    s.hash(&mut h);
    h.finish()
}

/// One parent pointer per visited state: the state it was first generated from, and the
/// index of the action that generated it.
struct Node {
    parent: u64,
    action: u32,
}

/// Evaluate the properties not yet discovered on `s`; record `fp` as the discovery of each
/// one `s` decides. True when every property has its discovery.
fn check_props(model: &KvModel, props: &[Property<KvModel>], found: &mut [Option<u64>], s: &KvState, fp: u64) -> bool {
    for (i, p) in props.iter().enumerate() {
        if found[i].is_some() {
            continue;
        }
        let hit = match p.expectation {
            Expectation::Always => !(p.condition)(model, s),
            Expectation::Sometimes => (p.condition)(model, s),
            Expectation::Eventually => false,
        };
        if hit {
            found[i] = Some(fp);
        }
    }
    // Properties sharing a name are one property: one discovery decides it.
    props.iter().all(|p| props.iter().zip(found.iter()).any(|(q, f)| q.name == p.name && f.is_some()))
}

/// Rebuild the actions from the initial state to `fp` by replaying action indices.
fn path_to(model: &KvModel, seen: &HashMap<u64, Node>, init_fp: u64, fp: u64) -> Vec<Action> {
    let mut idx = Vec::new();
    let mut cur = fp;
    while cur != init_fp {
        let n = &seen[&cur];
        idx.push(n.action as usize);
        cur = n.parent;
    }
    idx.reverse();
    let mut s = model.init();
    let mut out = Vec::with_capacity(idx.len());
    let mut acts = Vec::new();
    for i in idx {
        acts.clear();
        model.actions(&s, &mut acts);
        let a = acts[i];
        s = model.next_state(&s, a).expect("a recorded step replays (the model is deterministic)");
        out.push(a);
    }
    out
}
