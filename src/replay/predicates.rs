//! Which always-properties of the registry (src/props) replay evaluates and how: the ghost
//! flags and the state predicates' single-run forms, both read from their entries, over the
//! whole state ([`full`], the oracle the incremental [`Checker`](super::invariants::Checker)
//! is compared with), and which reachability guards replay can report.

use super::invariants::{v, Violation};
use crate::props::{PropId, Scope, Source};
use crate::system::config::EngineConfig;
use crate::system::ghost::Breach;
use crate::system::{Engine, Rules, Workload};

/// The always-properties replay evaluates for an engine configuration, in registry order.
pub fn properties(cfg: &EngineConfig) -> Vec<PropId> {
    crate::props::REGISTRY
        .iter()
        .filter(|p| p.kind == crate::props::Kind::Always && crate::props::applies(p, cfg))
        .map(|p| p.id)
        .collect()
}

/// The ghost breaches behind a flag property (None: not a flag property), read from its
/// catalogue entry.
pub fn flag_of(name: &str) -> Option<&'static [Breach]> {
    crate::props::find(name).and_then(|p| p.breaches())
}

/// Does replay evaluate property `name` (as a state predicate, by its entry's single-run form,
/// or as a flag)?
pub fn handles(name: &str) -> bool {
    crate::props::find(name).is_some_and(|p| p.is_state_predicate()) || flag_of(name).is_some()
}

/// Does replay report guard `name` when it is reached (a ghost mark, or a predicate over the
/// engine evaluated after every action)?
pub fn reports(name: &str) -> bool {
    crate::props::find(name).is_some_and(|p| matches!(p.source, Source::Mark(_) | Source::Engine(_)))
}

/// Per property: a ghost flag rather than a state predicate.
pub(super) fn flag_props(props: &[PropId]) -> Vec<bool> {
    props.iter().map(|p| !p.def().is_state_predicate()).collect()
}

/// The ghost flag behind each flag property.
pub(super) fn flag_violation(e: &Engine, id: PropId) -> Option<Violation> {
    let hit = id.def().breaches().is_some_and(|bs| bs.iter().any(|b| e.ghost.has(*b)));
    if hit {
        v(id.name(), "raised inside a transition (re-running the scenario shows its events)")
    } else {
        None
    }
}

/// The registry's predicates over the whole state: each state predicate's single-run form
/// (the checker's own code), each flag's breaches.
pub fn full(
    e: &Engine,
    wl: &Workload,
    cfg: &EngineConfig,
    rules: &Rules,
    progress_steps: u32,
    skip: &[PropId],
) -> Option<Violation> {
    let scope = Scope { cfg, rules, wl, progress_steps };
    for id in properties(cfg).into_iter().filter(|p| !skip.contains(p)) {
        let ok = match id.def().run_form() {
            Some(f) => f(&scope, e),
            None => flag_violation(e, id).is_none(),
        };
        if !ok {
            return v(id.name(), "the full-state predicate fails");
        }
    }
    None
}
