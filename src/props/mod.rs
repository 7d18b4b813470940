//! The property catalogue: every invariant (`always`) and reachability guard (`sometimes`)
//! as a named predicate over a model state. The same predicates run in the checker, in
//! replay and in conformance. What each property means, which bug it guards and its expected
//! verdicts live in `specs/<name>.toml` (rendered by `kvmc explain`).

pub mod eviction;
pub mod g1;
pub mod host;
pub mod progress;

use crate::model::{KvModel, KvState};
use crate::system::config::{ConnectorKind, EngineConfig};
use crate::system::ghost::{Breach, Mark};
use crate::system::Engine;
use stateright::Property;

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A safety invariant: a state where it is false is a counterexample.
    Always,
    /// A reachability guard: a state where it is true is an example.
    Sometimes,
}

pub struct PropDef {
    pub name: &'static str,
    pub kind: Kind,
    /// Only meaningful when the engine runs an offload connector (any kind; see also
    /// [`CONNECTOR_SCOPED`]).
    pub offload_only: bool,
    /// Only meaningful with router replay on.
    pub rows_only: bool,
    /// What the verdict is read from; `check` is built from it (every driver reads this).
    pub source: Source,
    /// The checker's predicate (stateright's `Property` takes a function pointer).
    pub check: fn(&KvModel, &KvState) -> bool,
}

/// Where a property's verdict comes from: the one place that ties a ghost flag or mark to its
/// property. The checker evaluates `check` (made from it by the catalogue's macros); replay
/// reads the flags and marks directly (src/replay/invariants.rs) and evaluates state
/// predicates from the engine's change logs.
#[derive(Copy, Clone, Debug)]
pub enum Source {
    /// A predicate over the whole state (`check`).
    State,
    /// Sticky ghost breaches raised inside transitions: violated once any of them is raised.
    Breaches(&'static [Breach]),
    /// A reachability guard: the last transition raised this ghost mark.
    Mark(Mark),
    /// A reachability guard over the engine's state alone.
    Engine(fn(&Engine) -> bool),
}

impl PropDef {
    /// The ghost breaches behind a flag property (None: not a flag property).
    pub fn breaches(&self) -> Option<&'static [Breach]> {
        match self.source {
            Source::Breaches(b) => Some(b),
            _ => None,
        }
    }

    /// The ghost mark behind a guard (None: not a mark guard).
    pub fn mark(&self) -> Option<Mark> {
        match self.source {
            Source::Mark(m) => Some(m),
            _ => None,
        }
    }

    /// Is this a predicate over the whole state (rather than a ghost flag or mark)?
    pub fn is_state_predicate(&self) -> bool {
        matches!(self.source, Source::State)
    }
}

/// `offload` / `rows` / nothing: the entry's (offload_only, rows_only).
macro_rules! needs {
    () => {
        (false, false)
    };
    (offload) => {
        (true, false)
    };
    (rows) => {
        (false, true)
    };
}

/// An always-property given by a state predicate.
macro_rules! state {
    ($name:literal, $f:path $(, $needs:ident)?) => {
        PropDef {
            name: $name,
            kind: Kind::Always,
            offload_only: needs!($($needs)?).0,
            rows_only: needs!($($needs)?).1,
            source: Source::State,
            check: $f,
        }
    };
}

/// An always-property given by ghost breaches: it fails once any of them is raised.
macro_rules! flag {
    ($name:literal, [$($b:expr),+] $(, $needs:ident)?) => {
        PropDef {
            name: $name,
            kind: Kind::Always,
            offload_only: needs!($($needs)?).0,
            rows_only: needs!($($needs)?).1,
            source: Source::Breaches(&[$($b),+]),
            check: |_, s| !(false $(|| s.engine.ghost.has($b))+),
        }
    };
}

/// A reachability guard given by a ghost mark of the last transition.
macro_rules! mark {
    ($name:literal, $m:expr $(, $needs:ident)?) => {
        PropDef {
            name: $name,
            kind: Kind::Sometimes,
            offload_only: needs!($($needs)?).0,
            rows_only: needs!($($needs)?).1,
            source: Source::Mark($m),
            check: |_, s| s.engine.ghost.marked($m),
        }
    };
}

/// A reachability guard given by a predicate over the engine.
macro_rules! guard {
    ($name:literal, $f:path $(, $needs:ident)?) => {
        PropDef {
            name: $name,
            kind: Kind::Sometimes,
            offload_only: needs!($($needs)?).0,
            rows_only: needs!($($needs)?).1,
            source: Source::Engine($f),
            check: |_, s| $f(&s.engine),
        }
    };
}

pub const CATALOGUE: &[PropDef] = &[
    state!("g1-accounting", g1::accounting),
    state!("g1-cache-sound", g1::cache_sound),
    flag!("kv-read-integrity", [Breach::BadRead]),
    state!("host-integrity", host::integrity, offload),
    flag!("source-freshness", [Breach::StaleSource], offload),
    flag!("load-safety", [Breach::UnsafeLoad, Breach::EvictedPinned], offload),
    state!("host-accounting", host::accounting, offload),
    flag!("mirror-table", [Breach::MirrorMismatch], offload),
    flag!("store-coverage", [Breach::CoverageLoss], offload),
    flag!("eviction-order", [Breach::EvictionOrder], offload),
    state!("arc-bounds", host::arc_bounds, offload),
    flag!("final-store-kept", [Breach::FinalStoreLost], offload),
    flag!("rows-present", [Breach::RowsMissing], rows),
    flag!("rows-exact", [Breach::RowsInexact], rows),
    flag!("start-anchored", [Breach::StartNotAnchored], rows),
    flag!("connector-assert", [Breach::ConnectorAssert], offload),
    flag!("handoff-integrity", [Breach::PdStaleSend], offload),
    state!("requests-finish", progress::requests_finish),
    mark!("reach-g1-hit", Mark::G1Hit),
    mark!("reach-g1-eviction", Mark::G1Eviction),
    mark!("reach-preemption", Mark::Preemption),
    mark!("reach-abort", Mark::Abort),
    mark!("reach-error-finish", Mark::ErrorFinish),
    mark!("reach-load-failure", Mark::LoadFailure, offload),
    mark!("reach-host-hit", Mark::HostHit, offload),
    mark!("reach-host-eviction", Mark::HostEviction, offload),
    mark!("reach-store-done", Mark::StoreCompleted, offload),
    mark!("reach-store-refused", Mark::StoreRefused, offload),
    mark!("reach-restart", Mark::Restart, offload),
    mark!("reach-sync-load", Mark::SyncLoad, offload),
    mark!("reach-flush", Mark::Flush, offload),
    mark!("reach-finish-store", Mark::FinishStore, offload),
    mark!("reach-lookup-inflight", Mark::LookupInflight, offload),
    mark!("reach-stream-park", Mark::SessionParked),
    mark!("reach-stream-resume", Mark::SessionResumed),
    mark!("reach-readmit-full-table", Mark::ReadmitFullTable, offload),
    mark!("reach-pd-handoff", Mark::PdHandoff, offload),
    mark!("reach-pd-partial-save", Mark::PdPartialSave, offload),
    guard!("reach-arc-t2", host::engine_arc_t2, offload),
    guard!("reach-arc-ghost-hit", host::engine_arc_ghost_hit, offload),
    mark!("reach-stale-pin", Mark::StalePinDropped, offload),
    mark!("reach-partial-store", Mark::PartialStore, offload),
    mark!("reach-host-refresh", Mark::HostRefresh, offload),
    mark!("reach-rows-read-from-store", Mark::RowsFromStore, rows),
    mark!("reach-rows-cut", Mark::RowsCut, rows),
    guard!("reach-all-finished", progress::all_finished),
];

pub fn find(name: &str) -> Option<&'static PropDef> {
    CATALOGUE.iter().find(|p| p.name == name)
}

pub fn to_stateright(p: &'static PropDef) -> Property<KvModel> {
    match p.kind {
        Kind::Always => Property::always(p.name, p.check),
        Kind::Sometimes => Property::sometimes(p.name, p.check),
    }
}

/// Properties and guards that speak about some connectors only: checked (and listed) only
/// on models that run one of them.
pub const CONNECTOR_SCOPED: &[(&str, &[ConnectorKind])] = &[
    ("reach-stale-pin", &[ConnectorKind::SimpleCpu]),
    ("reach-partial-store", &[ConnectorKind::SimpleCpu]),
    ("reach-host-refresh", &[ConnectorKind::SimpleCpu]),
    ("reach-sync-load", &[ConnectorKind::Offloading]),
    ("arc-bounds", &[ConnectorKind::Offloading]),
    ("reach-arc-t2", &[ConnectorKind::Offloading]),
    ("reach-arc-ghost-hit", &[ConnectorKind::Offloading]),
    ("reach-lookup-inflight", &[ConnectorKind::Offloading]),
    ("reach-store-refused", &[ConnectorKind::Offloading]),
    ("reach-load-failure", &[ConnectorKind::Offloading, ConnectorKind::Mooncake]),
    // The Mooncake pool has no capacity, eviction order, cursor or mirror that kvmc models.
    ("reach-host-eviction", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("reach-restart", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("reach-flush", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("reach-finish-store", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("reach-readmit-full-table", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("host-accounting", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("mirror-table", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("store-coverage", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("eviction-order", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    ("final-store-kept", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu]),
    // Only the Mooncake store asserts on the scheduler's external token count.
    ("connector-assert", &[ConnectorKind::Mooncake]),
    // NIXL's producer side: a host buffer indexed by block id, no keyed host tier, no loads.
    ("handoff-integrity", &[ConnectorKind::Nixl]),
    ("reach-pd-handoff", &[ConnectorKind::Nixl]),
    ("reach-pd-partial-save", &[ConnectorKind::Nixl]),
    ("host-integrity", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu, ConnectorKind::Mooncake]),
    ("source-freshness", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu, ConnectorKind::Mooncake]),
    ("load-safety", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu, ConnectorKind::Mooncake]),
    ("reach-host-hit", &[ConnectorKind::Offloading, ConnectorKind::SimpleCpu, ConnectorKind::Mooncake]),
];

/// Properties and guards about the host tier's ARC policy (`eviction_policy = "arc"`).
pub const ARC_ONLY: &[&str] = &["arc-bounds", "reach-arc-t2", "reach-arc-ghost-hit"];

/// Does `p` apply to a model with this engine configuration?
pub fn applies(p: &PropDef, cfg: &EngineConfig) -> bool {
    let kind = cfg.connector_kind();
    // ARC's properties speak about ARC models only; eviction-order has no ARC reference.
    let arc = cfg.offload().is_some_and(|o| o.eviction_policy == crate::system::EvictionPolicy::Arc);
    if ARC_ONLY.contains(&p.name) != arc && (ARC_ONLY.contains(&p.name) || p.name == "eviction-order") {
        return false;
    }
    if let Some((_, only)) = CONNECTOR_SCOPED.iter().find(|(n, _)| *n == p.name) {
        if !only.contains(&kind) {
            return false;
        }
    }
    (kind != ConnectorKind::None || !p.offload_only) && (cfg.router_replay.is_some() || !p.rows_only)
}
