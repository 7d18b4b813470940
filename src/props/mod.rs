//! The property registry: every invariant (`always`) and reachability guard (`sometimes`),
//! one entry each, keyed by [`PropId`]: its name, its kind, where its verdict comes from (a
//! predicate over the state, ghost breaches raised inside transitions, a ghost mark, a
//! predicate over the engine), the connectors and policies it speaks about, and a one-line
//! doc. The checker, replay and conformance all read these entries; no other code names a
//! property by string (names are read only at the edges: specs, the CLI, reports). What each
//! property means at length, which bug it guards and its expected verdicts live in
//! `specs/<name>.toml` (rendered by `kvmc explain`).
//!
//! Predicates take system types only: `(&System, &Engine)` for the checker, `(&Scope,
//! &Engine)` for a single run (replay), which holds an engine and a growing workload but no
//! `System`.

pub mod eviction;
pub mod g1;
pub mod host;
pub mod progress;

use crate::system::config::{ConnectorKind, EngineConfig};
use crate::system::ghost::{Breach, Mark};
use crate::system::{Engine, EvictionPolicy, Rules, System, Workload};
use ConnectorKind::{Mooncake as MC, Nixl as NX, Offloading as OC, SimpleCpu as SC};

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Kind {
    /// A safety invariant: a state where it is false is a counterexample.
    Always,
    /// A reachability guard: a state where it is true is an example.
    Sometimes,
}

pub struct PropDef {
    pub id: PropId,
    pub name: &'static str,
    pub kind: Kind,
    /// The models it speaks about.
    pub on: Applies,
    /// What the verdict is read from; `check` is built from it (every driver reads this).
    pub source: Source,
    /// The predicate over a state of the system (the checker evaluates it on every state).
    pub check: fn(&System, &Engine) -> bool,
    /// One line: what it says.
    pub doc: &'static str,
}

/// Which connectors a property speaks about.
#[derive(Copy, Clone, Debug)]
pub enum Connectors {
    /// Every model, with or without a connector.
    Any,
    /// Any offload connector.
    Offload,
    /// These connectors only.
    Only(&'static [ConnectorKind]),
}

/// Which host-tier eviction policies a property speaks about.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    Any,
    /// Only `eviction_policy = "arc"` (ARC's own bounds and situations).
    ArcOnly,
    /// Not ARC (a reference order ARC has no counterpart of).
    NotArc,
}

/// The models a property applies to.
#[derive(Copy, Clone, Debug)]
pub struct Applies {
    pub connectors: Connectors,
    /// Only with router replay on (`[router_replay]`).
    pub rows: bool,
    pub policy: Policy,
    /// Only under async scheduling (`async_scheduling = true`).
    pub async_only: bool,
}

/// Every model.
const ANY: Applies = Applies { connectors: Connectors::Any, rows: false, policy: Policy::Any, async_only: false };
/// Models with any offload connector.
const OFFLOAD: Applies = Applies { connectors: Connectors::Offload, ..ANY };
/// Models with router replay.
const ROWS: Applies = Applies { rows: true, ..ANY };
/// P/D pairs with router replay (connector = "nixl" and `[router_replay]`).
const PD: Applies = Applies { connectors: Connectors::Only(&[NX]), rows: true, ..ANY };
/// Models under async scheduling.
const ASYNC: Applies = Applies { async_only: true, ..ANY };
/// Models with one of these connectors.
const fn only(c: &'static [ConnectorKind]) -> Applies {
    Applies { connectors: Connectors::Only(c), ..ANY }
}

impl Applies {
    const fn arc_only(self) -> Applies {
        Applies { policy: Policy::ArcOnly, ..self }
    }
    const fn not_arc(self) -> Applies {
        Applies { policy: Policy::NotArc, ..self }
    }

    /// Does a property with this scope apply to a model with this engine configuration?
    pub fn holds_for(&self, cfg: &EngineConfig) -> bool {
        self.why_not(cfg).is_none()
    }

    /// Why not, if it does not apply: the part of the configuration it does not speak about.
    pub fn why_not(&self, cfg: &EngineConfig) -> Option<NotApplicable> {
        let kind = cfg.connector_kind();
        let arc = cfg.offload().is_some_and(|o| o.eviction_policy == EvictionPolicy::Arc);
        if self.rows && cfg.router_replay.is_none() {
            return Some(NotApplicable::NoRows);
        }
        if self.async_only && !cfg.async_scheduling {
            return Some(NotApplicable::Sync);
        }
        match self.connectors {
            Connectors::Any => {}
            Connectors::Offload if kind == ConnectorKind::None => return Some(NotApplicable::NoConnector),
            Connectors::Offload => {}
            Connectors::Only(_) if kind == ConnectorKind::None => return Some(NotApplicable::NoConnector),
            Connectors::Only(ks) if !ks.contains(&kind) => return Some(NotApplicable::Connector),
            Connectors::Only(_) => {}
        }
        match self.policy {
            Policy::ArcOnly if !arc => Some(NotApplicable::NotArc),
            Policy::NotArc if arc => Some(NotApplicable::Arc),
            _ => None,
        }
    }

    /// Needs an offload connector (for listings).
    pub fn needs_connector(&self) -> bool {
        !matches!(self.connectors, Connectors::Any)
    }
}

/// Why a property does not apply to a model.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NotApplicable {
    NoRows,
    NoConnector,
    /// Its connector is another one.
    Connector,
    /// It speaks about ARC and the model evicts otherwise.
    NotArc,
    /// It has no reference under ARC.
    Arc,
    /// It speaks about async scheduling and the model schedules synchronously.
    Sync,
}

/// Where a property's verdict comes from: the one place that ties a ghost flag or mark to its
/// property. The checker evaluates `check` (made from it by the catalogue's macros); replay
/// reads the flags and marks directly (src/replay/predicates.rs) and the state predicates'
/// single-run forms, some of them incrementally from the engine's change logs.
#[derive(Copy, Clone, Debug)]
pub enum Source {
    /// A predicate over the whole state: `check`, and this form of it over one engine of a
    /// single run (replay evaluates it, or an incremental form of it kept for speed).
    State(fn(&Scope, &Engine) -> bool),
    /// Sticky ghost breaches raised inside transitions: violated once any of them is raised.
    Breaches(&'static [Breach]),
    /// A reachability guard: the last transition raised this ghost mark.
    Mark(Mark),
    /// A reachability guard over the engine's state alone.
    Engine(fn(&Engine) -> bool),
}

/// What a state predicate reads besides the engine. The checker builds it from its
/// [`System`]; replay from its model, rules and growing workload.
pub struct Scope<'a> {
    pub cfg: &'a EngineConfig,
    pub rules: &'a Rules,
    pub wl: &'a Workload,
    /// Engine steps without progress a run may take (`requests-finish`).
    pub progress_steps: u32,
}

impl<'a> Scope<'a> {
    pub fn of(m: &'a System) -> Self {
        Scope { cfg: &m.cfg, rules: &m.rules, wl: &m.workload, progress_steps: m.env.progress_steps }
    }
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

    /// A state predicate's form over one engine of a single run (None: not a state predicate).
    pub fn run_form(&self) -> Option<fn(&Scope, &Engine) -> bool> {
        match self.source {
            Source::State(f) => Some(f),
            _ => None,
        }
    }

    /// Is this a predicate over the whole state (rather than a ghost flag or mark)?
    pub fn is_state_predicate(&self) -> bool {
        matches!(self.source, Source::State(_))
    }
}

/// An always-property given by a state predicate `fn(&Scope, &Engine) -> bool`, the same for
/// the checker and a single run; or, with `run:`, the checker's `fn(&System, &Engine) -> bool`
/// and a single run's own form (what a run can decide without the state graph).
macro_rules! state {
    ($id:ident, $name:literal, $f:path, $on:expr, $doc:literal) => {
        PropDef {
            id: PropId::$id,
            name: $name,
            kind: Kind::Always,
            on: $on,
            source: Source::State($f),
            // P/D: the decode instance is checked too.
            check: |m, e| $f(&Scope::of(m), e) && decode_too(m, e, $f),
            doc: $doc,
        }
    };
    ($id:ident, $name:literal, $f:path, run: $g:path, $on:expr, $doc:literal) => {
        PropDef {
            id: PropId::$id,
            name: $name,
            kind: Kind::Always,
            on: $on,
            source: Source::State($g),
            check: $f,
            doc: $doc,
        }
    };
}

/// An always-property given by ghost breaches: it fails once any of them is raised.
macro_rules! flag {
    ($id:ident, $name:literal, [$($b:expr),+], $on:expr, $doc:literal) => {
        PropDef {
            id: PropId::$id,
            name: $name,
            kind: Kind::Always,
            on: $on,
            source: Source::Breaches(&[$($b),+]),
            check: |_, e| !(false $(|| e.ghost.has($b))+),
            doc: $doc,
        }
    };
}

/// A reachability guard given by a ghost mark of the last transition.
macro_rules! mark {
    ($id:ident, $name:literal, $m:expr, $on:expr, $doc:literal) => {
        PropDef {
            id: PropId::$id,
            name: $name,
            kind: Kind::Sometimes,
            on: $on,
            source: Source::Mark($m),
            check: |_, e| e.ghost.marked($m),
            doc: $doc,
        }
    };
}

/// A reachability guard given by a predicate over the engine.
macro_rules! guard {
    ($id:ident, $name:literal, $f:path, $on:expr, $doc:literal) => {
        PropDef {
            id: PropId::$id,
            name: $name,
            kind: Kind::Sometimes,
            on: $on,
            source: Source::Engine($f),
            check: |_, e| $f(e),
            doc: $doc,
        }
    };
}

/// The registry: one entry per property, the entry of `PropId::X` at index `X as usize`
/// (the registry's own test checks the order), listed in the order reports use.
macro_rules! registry {
    ($($kind:ident!($id:ident, $($rest:tt)*);)*) => {
        /// A property of the registry.
        #[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
        pub enum PropId {
            $($id,)*
        }

        /// Every property, indexed by [`PropId`].
        pub const REGISTRY: &[PropDef] = &[$($kind!($id, $($rest)*),)*];
    };
}

registry! {
    state!(G1Accounting, "g1-accounting", g1::accounting, ANY, "G1's reference counts, free queue and holders agree");
    state!(G1CacheSound, "g1-cache-sound", g1::cache_sound, ANY, "every cached hash names a block holding that prefix's KV");
    flag!(KvReadIntegrity, "kv-read-integrity", [Breach::BadRead], ANY, "a forward pass reads only its own prefix's KV");
    state!(HostIntegrity, "host-integrity", host::integrity, only(&[OC, SC, MC]), "every host entry holds the KV its key names");
    flag!(SourceFreshness, "source-freshness", [Breach::StaleSource], only(&[OC, SC, MC]), "a store copies only final, unchanging KV");
    flag!(LoadSafety, "load-safety", [Breach::UnsafeLoad, Breach::EvictedPinned], only(&[OC, SC, MC]), "loads read ready keys into blocks nobody reads before they land");
    state!(HostAccounting, "host-accounting", host::accounting, only(&[OC, SC]), "the host tier's counters, pins and job completions agree");
    flag!(MirrorTable, "mirror-table", [Breach::MirrorMismatch], only(&[OC, SC]), "the connector's mirror of a block table equals the scheduler's");
    flag!(StoreCoverage, "store-coverage", [Breach::CoverageLoss], only(&[OC, SC]), "every computed chunk is offered for storing");
    flag!(EvictionOrder, "eviction-order", [Breach::EvictionOrder], only(&[OC, SC]).not_arc(), "the host tier evicts the victim its policy names");
    state!(ArcBounds, "arc-bounds", host::arc_bounds, only(&[OC]).arc_only(), "ARC's lists agree with the host entries and stay within bounds");
    flag!(FinalStoreKept, "final-store-kept", [Breach::FinalStoreLost], only(&[OC, SC]), "a finished request's last store is not dropped");
    flag!(RowsPresent, "rows-present", [Breach::RowsMissing], ROWS, "every routed-expert row a step needs is in the store");
    flag!(RowsExact, "rows-exact", [Breach::RowsInexact], ROWS, "a finished request's rows are exactly its response's");
    flag!(StartAnchored, "start-anchored", [Breach::StartNotAnchored], ROWS, "the response start is the first row's position");
    flag!(QueueSound, "queue-sound", [Breach::QueueRaised], ANY, "the scheduler never meets a scheduled or finished request in its waiting queues");
    flag!(TokensPositive, "tokens-positive", [Breach::TokensNonPositive], ANY, "the scheduler never schedules a request a negative token count (a session grown past max_model_len: vLLM asserts and the engine dies)");
    flag!(SessionHistory, "session-history", [Breach::SessionHistoryLost], ASYNC, "a streaming session's next input keeps the session's earlier tokens");
    flag!(ConnectorAssert, "connector-assert", [Breach::ConnectorAssert], only(&[OC, MC]), "the connector's scheduler side never raises (Mooncake's external-token assertion, the OffloadingConnector's fence bookkeeping)");
    flag!(HandoffIntegrity, "handoff-integrity", [Breach::PdStaleSend], only(&[NX]), "a P/D consumer reads only final KV from the producer");
    state!(RequestsFinish, "requests-finish", progress::requests_finish, run: progress::idle_bounded, ANY, "no deadlock and no livelock: every request can finish");
    mark!(ReachG1Hit, "reach-g1-hit", Mark::G1Hit, ANY, "a G1 prefix-cache hit");
    mark!(ReachG1Eviction, "reach-g1-eviction", Mark::G1Eviction, ANY, "a G1 eviction");
    mark!(ReachPreemption, "reach-preemption", Mark::Preemption, ANY, "a preemption");
    mark!(ReachAbort, "reach-abort", Mark::Abort, ANY, "a client abort");
    mark!(ReachErrorFinish, "reach-error-finish", Mark::ErrorFinish, ANY, "a request finishing with an error");
    mark!(ReachLoadFailure, "reach-load-failure", Mark::LoadFailure, only(&[OC, MC, NX]), "a failed load");
    mark!(ReachHostHit, "reach-host-hit", Mark::HostHit, only(&[OC, SC, MC]), "a host-tier hit");
    mark!(ReachHostEviction, "reach-host-eviction", Mark::HostEviction, only(&[OC, SC]), "a host-tier eviction");
    mark!(ReachStoreDone, "reach-store-done", Mark::StoreCompleted, OFFLOAD, "a completed store");
    mark!(ReachStoreRefused, "reach-store-refused", Mark::StoreRefused, only(&[OC]), "a store the host tier refused");
    mark!(ReachRestart, "reach-restart", Mark::Restart, only(&[OC, SC]), "a preempted request restarting");
    mark!(ReachSyncLoad, "reach-sync-load", Mark::SyncLoad, only(&[OC]), "a synchronous load");
    mark!(ReachFlush, "reach-flush", Mark::Flush, only(&[OC, SC]), "a flush of pending stores");
    mark!(ReachFinishStore, "reach-finish-store", Mark::FinishStore, only(&[OC, SC]), "a store built at a request's finish");
    mark!(ReachLookupInflight, "reach-lookup-inflight", Mark::LookupInflight, only(&[OC]), "a lookup of a key still being written");
    mark!(ReachStreamPark, "reach-stream-park", Mark::SessionParked, ANY, "a streaming session parked");
    mark!(ReachStreamResume, "reach-stream-resume", Mark::SessionResumed, ANY, "a streaming session resumed");
    mark!(ReachStaleSessionOutput, "reach-stale-session-output", Mark::StaleSessionOutput, ANY, "a stopped session's in-flight output reaching it parked");
    mark!(ReachReadmitFullTable, "reach-readmit-full-table", Mark::ReadmitFullTable, only(&[OC, SC]), "a resumed request readmitted with its full table");
    guard!(ReachFencedStore, "reach-fenced-store", host::engine_fenced_store, only(&[OC]), "a finished request's store still in flight, its blocks fenced");
    mark!(ReachPdHandoff, "reach-pd-handoff", Mark::PdHandoff, only(&[NX]), "a P/D handoff");
    mark!(ReachPdPartialSave, "reach-pd-partial-save", Mark::PdPartialSave, only(&[NX]), "a P/D save of a half-written block");
    guard!(ReachArcT2, "reach-arc-t2", host::engine_arc_t2, only(&[OC]).arc_only(), "ARC's T2 holds a key");
    guard!(ReachArcGhostHit, "reach-arc-ghost-hit", host::engine_arc_ghost_hit, only(&[OC]).arc_only(), "an ARC ghost hit moved the target");
    mark!(ReachStalePin, "reach-stale-pin", Mark::StalePinDropped, only(&[SC]), "SimpleCPU dropping a stale pin");
    mark!(ReachPartialStore, "reach-partial-store", Mark::PartialStore, only(&[SC]), "SimpleCPU storing part of a request");
    mark!(ReachHostRefresh, "reach-host-refresh", Mark::HostRefresh, only(&[SC]), "SimpleCPU refreshing a block on a GPU hit");
    mark!(ReachRowsReadFromStore, "reach-rows-read-from-store", Mark::RowsFromStore, ROWS, "routed-expert rows read from the store");
    mark!(ReachRowsCut, "reach-rows-cut", Mark::RowsCut, ROWS, "routed-expert rows cut");
    guard!(ReachAllFinished, "reach-all-finished", progress::all_finished, ANY, "every request arrived and finished");
    flag!(PdEqualsColocated, "pd-equals-colocated", [Breach::PdNotColocated], PD, "the router's merged P/D rows are what a colocated engine returns");
    mark!(ReachPdDecodeLoad, "reach-pd-decode-load", Mark::PdRemoteLoad, PD, "a P/D decoder reading prompt KV from the prefiller");
    mark!(ReachPdMerge, "reach-pd-merge", Mark::PdMerged, PD, "the P/D router merging a request's rows");
    mark!(ReachPdDecodeSavedLoad, "reach-pd-decode-saved-load", Mark::PdDecodeSavedLoad, PD, "P loading a block only D put into the shared pool (decode-saved KV)");
    mark!(ReachPdBridgedTurn, "reach-pd-bridged-turn", Mark::PdBridgedTurn, PD, "P looking up a bridged turn (start past 0) over decode-saved blocks");
    mark!(ReachPdNonBridgedRetry, "reach-pd-non-bridged-retry", Mark::PdNonBridgedRetry, PD, "P looking up a non-bridged retry (start 0) over decode-saved blocks");
}

/// A state predicate over the decode instance of a P/D system (true without one).
fn decode_too(m: &System, e: &Engine, f: fn(&Scope, &Engine) -> bool) -> bool {
    let (Some(pd), Some(x)) = (m.pd.as_ref(), e.pd.as_ref()) else { return true };
    f(&Scope { cfg: &pd.cfg, rules: &m.rules, wl: &pd.wl, progress_steps: m.env.progress_steps }, &x.d)
}

impl PropId {
    /// This property's registry entry.
    #[inline(always)]
    pub fn def(self) -> &'static PropDef {
        &REGISTRY[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }
}

pub fn find(name: &str) -> Option<&'static PropDef> {
    REGISTRY.iter().find(|p| p.name == name)
}

/// Does `p` apply to a model with this engine configuration?
pub fn applies(p: &PropDef, cfg: &EngineConfig) -> bool {
    p.on.holds_for(cfg)
}
