//! Which always-properties of the registry (src/props) replay evaluates and how: the ghost
//! flags read from their entries, the state predicates' engine-level forms over the whole
//! state ([`full`], the oracle the incremental [`Checker`](super::invariants::Checker) is
//! compared with), and which reachability guards replay can report.

use super::invariants::{v, Violation};
use crate::props::{g1, host, PropId, Source};
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

/// The state predicates replay evaluates (from change logs, and over the whole state in
/// [`full`]); every other always-property is a ghost flag read from its registry entry.
const STATE_PREDICATES: &[PropId] = &[
    PropId::G1Accounting,
    PropId::G1CacheSound,
    PropId::HostIntegrity,
    PropId::HostAccounting,
    PropId::ArcBounds,
    PropId::RequestsFinish,
];

/// Is `name` a state predicate replay evaluates?
fn is_state_predicate(name: &str) -> bool {
    crate::props::find(name).is_some_and(|p| p.is_state_predicate() && STATE_PREDICATES.contains(&p.id))
}

/// Does replay evaluate property `name` (as a state predicate or a flag)?
pub fn handles(name: &str) -> bool {
    is_state_predicate(name) || flag_of(name).is_some()
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

/// The catalogue's predicates over the whole state (the checker's own code).
pub fn full(
    e: &Engine,
    wl: &Workload,
    cfg: &EngineConfig,
    rules: &Rules,
    progress_steps: u32,
    skip: &[PropId],
) -> Option<Violation> {
    let b = wl.block_size;
    let bpc = cfg.offload().map_or(1, |o| o.blocks_per_chunk);
    for id in properties(cfg).into_iter().filter(|p| !skip.contains(p)) {
        let ok = match id {
            PropId::G1Accounting => g1::engine_accounting(e, rules),
            PropId::G1CacheSound => g1::engine_cache_sound(e, b),
            PropId::HostIntegrity => host::engine_integrity(e, b, bpc, wl),
            PropId::HostAccounting => host::engine_accounting(e, rules),
            PropId::ArcBounds => host::engine_arc_bounds(e),
            PropId::RequestsFinish => u32::from(e.ghost.idle_steps) <= progress_steps,
            other if other.def().is_state_predicate() => unhandled(other),
            other => flag_violation(e, other).is_none(),
        };
        if !ok {
            return v(id.name(), "the full-state predicate fails");
        }
    }
    None
}

/// A state predicate replay has no engine-level form of yet: a new property's entry must be
/// given one here (the registry's tests run every always-property through replay).
pub(super) fn unhandled(id: PropId) -> ! {
    panic!("replay has no evaluation of state predicate {} (src/replay/predicates.rs)", id.name())
}
