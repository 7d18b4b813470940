//! Replay's "situations reached": every reachability guard of the catalogue whose situation
//! occurred during a replay, read from the guard's own catalogue entry (its ghost mark, or its
//! predicate over the engine), never from a list of names kept here.

use crate::props::{PropDef, Source};
use crate::system::config::EngineConfig;
use crate::system::Engine;

/// The reachability guards a replay has reached, read from the catalogue's entries: the ghost
/// marks every action raised, and the engine predicates that held after some action.
pub struct Reached {
    marks: u32,
    state: Vec<EngineGuard>,
}

/// A guard given by a predicate over the engine, and whether it has held yet.
struct EngineGuard {
    name: &'static str,
    holds: fn(&Engine) -> bool,
    seen: bool,
}

impl Reached {
    /// The engine-predicate guards that apply to `cfg` are evaluated (ARC's only on ARC).
    pub(super) fn new(cfg: &EngineConfig) -> Self {
        let state = crate::props::REGISTRY
            .iter()
            .filter(|p| crate::props::applies(p, cfg))
            .filter_map(|p| match p.source {
                Source::Engine(holds) => Some(EngineGuard { name: p.name, holds, seen: false }),
                _ => None,
            })
            .collect();
        Reached { marks: 0, state }
    }

    /// After an action: the marks it raised, and the guards that hold now.
    pub(super) fn observe(&mut self, e: &Engine) {
        self.marks |= e.ghost.marks;
        for g in self.state.iter_mut().filter(|g| !g.seen) {
            g.seen = (g.holds)(e);
        }
    }

    /// Has the situation of guard `p` occurred?
    pub fn has(&self, p: &PropDef) -> bool {
        match p.source {
            Source::Mark(m) => self.marks & m as u32 != 0,
            Source::Engine(_) => self.state.iter().any(|g| g.seen && g.name == p.name),
            Source::State(_) | Source::Breaches(_) => false,
        }
    }
}
