//! The property catalogue: every invariant (`always`) and reachability guard (`sometimes`)
//! as a named predicate over a model state. The same predicates run in the checker, in
//! replay and in conformance. What each property means, which bug it guards and its expected
//! verdicts live in `specs/<name>.toml` (rendered by `kvmc explain`).

pub mod eviction;
pub mod g1;
pub mod host;
mod progress;

use crate::model::{KvModel, KvState};
use crate::system::config::{ConnectorKind, EngineConfig};
use crate::system::ghost::{Breach, Mark};
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
    pub check: fn(&KvModel, &KvState) -> bool,
}

macro_rules! mark {
    ($name:literal, $m:expr, $offload:expr) => {
        PropDef {
            name: $name,
            kind: Kind::Sometimes,
            offload_only: $offload,
            rows_only: false,
            check: |_, s| s.engine.ghost.marked($m),
        }
    };
}

pub const CATALOGUE: &[PropDef] = &[
    PropDef { name: "g1-accounting", kind: Kind::Always, offload_only: false, rows_only: false, check: g1::accounting },
    PropDef {
        name: "g1-cache-sound",
        kind: Kind::Always,
        offload_only: false,
        rows_only: false,
        check: g1::cache_sound,
    },
    PropDef {
        name: "kv-read-integrity",
        kind: Kind::Always,
        offload_only: false,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::BadRead),
    },
    PropDef {
        name: "host-integrity",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: host::integrity,
    },
    PropDef {
        name: "source-freshness",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::StaleSource),
    },
    PropDef {
        name: "load-safety",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::UnsafeLoad) && !s.engine.ghost.has(Breach::EvictedPinned),
    },
    PropDef {
        name: "host-accounting",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: host::accounting,
    },
    PropDef {
        name: "mirror-table",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::MirrorMismatch),
    },
    PropDef {
        name: "store-coverage",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::CoverageLoss),
    },
    PropDef {
        name: "eviction-order",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: eviction::eviction_order,
    },
    PropDef { name: "arc-bounds", kind: Kind::Always, offload_only: true, rows_only: false, check: host::arc_bounds },
    PropDef {
        name: "final-store-kept",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::FinalStoreLost),
    },
    PropDef {
        name: "rows-present",
        kind: Kind::Always,
        offload_only: false,
        rows_only: true,
        check: |_, s| !s.engine.ghost.has(Breach::RowsMissing),
    },
    PropDef {
        name: "rows-exact",
        kind: Kind::Always,
        offload_only: false,
        rows_only: true,
        check: |_, s| !s.engine.ghost.has(Breach::RowsInexact),
    },
    PropDef {
        name: "start-anchored",
        kind: Kind::Always,
        offload_only: false,
        rows_only: true,
        check: |_, s| !s.engine.ghost.has(Breach::StartNotAnchored),
    },
    PropDef {
        name: "connector-assert",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::ConnectorAssert),
    },
    PropDef {
        name: "handoff-integrity",
        kind: Kind::Always,
        offload_only: true,
        rows_only: false,
        check: |_, s| !s.engine.ghost.has(Breach::PdStaleSend),
    },
    PropDef {
        name: "requests-finish",
        kind: Kind::Always,
        offload_only: false,
        rows_only: false,
        check: progress::requests_finish,
    },
    mark!("reach-g1-hit", Mark::G1Hit, false),
    mark!("reach-g1-eviction", Mark::G1Eviction, false),
    mark!("reach-preemption", Mark::Preemption, false),
    mark!("reach-abort", Mark::Abort, false),
    mark!("reach-error-finish", Mark::ErrorFinish, false),
    mark!("reach-load-failure", Mark::LoadFailure, true),
    mark!("reach-host-hit", Mark::HostHit, true),
    mark!("reach-host-eviction", Mark::HostEviction, true),
    mark!("reach-store-done", Mark::StoreCompleted, true),
    mark!("reach-store-refused", Mark::StoreRefused, true),
    mark!("reach-restart", Mark::Restart, true),
    mark!("reach-sync-load", Mark::SyncLoad, true),
    mark!("reach-flush", Mark::Flush, true),
    mark!("reach-finish-store", Mark::FinishStore, true),
    mark!("reach-lookup-inflight", Mark::LookupInflight, true),
    mark!("reach-stream-park", Mark::SessionParked, false),
    mark!("reach-stream-resume", Mark::SessionResumed, false),
    mark!("reach-readmit-full-table", Mark::ReadmitFullTable, true),
    mark!("reach-pd-handoff", Mark::PdHandoff, true),
    mark!("reach-pd-partial-save", Mark::PdPartialSave, true),
    PropDef {
        name: "reach-arc-t2",
        kind: Kind::Sometimes,
        offload_only: true,
        rows_only: false,
        check: |_, s| host::arc(s).is_some_and(|a| !a.t2.is_empty()),
    },
    PropDef {
        name: "reach-arc-ghost-hit",
        kind: Kind::Sometimes,
        offload_only: true,
        rows_only: false,
        check: |_, s| host::arc(s).is_some_and(|a| a.target.get() != 0.0),
    },
    PropDef {
        name: "reach-stale-pin",
        kind: Kind::Sometimes,
        offload_only: true,
        rows_only: false,
        check: |_, s| s.engine.ghost.marked(Mark::StalePinDropped),
    },
    PropDef {
        name: "reach-partial-store",
        kind: Kind::Sometimes,
        offload_only: true,
        rows_only: false,
        check: |_, s| s.engine.ghost.marked(Mark::PartialStore),
    },
    PropDef {
        name: "reach-host-refresh",
        kind: Kind::Sometimes,
        offload_only: true,
        rows_only: false,
        check: |_, s| s.engine.ghost.marked(Mark::HostRefresh),
    },
    PropDef {
        name: "reach-rows-read-from-store",
        kind: Kind::Sometimes,
        offload_only: false,
        rows_only: true,
        check: |_, s| s.engine.ghost.marked(Mark::RowsFromStore),
    },
    PropDef {
        name: "reach-rows-cut",
        kind: Kind::Sometimes,
        offload_only: false,
        rows_only: true,
        check: |_, s| s.engine.ghost.marked(Mark::RowsCut),
    },
    PropDef {
        name: "reach-all-finished",
        kind: Kind::Sometimes,
        offload_only: false,
        rows_only: false,
        check: progress::all_finished,
    },
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
