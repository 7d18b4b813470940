//! Ghost state: facts about the history that a state predicate cannot see otherwise.
//!
//! `violations` are sticky flags raised inside a transition when a predicate over that
//! transition fails (a forward read wrong KV, a store copied a moving block, ...).
//! `marks` record what the *last* transition did, for the `sometimes` reachability guards.

use super::collections::side::SideVal;

/// A predicate checked inside transitions. Each maps to one property of the catalogue.
#[derive(Copy, Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum Breach {
    /// A forward pass read KV that is not the request's own prefix (kv-read-integrity).
    BadRead = 1 << 0,
    /// A store copied a block that did not hold the chunk's final KV, or that was written
    /// while the copy ran (source-freshness).
    StaleSource = 1 << 1,
    /// A load was prepared from a key that is not ready, or next to another job of the
    /// same request, or its target blocks were read before it landed (load-safety).
    UnsafeLoad = 1 << 2,
    /// A pinned or write-pending host chunk was evicted (load-safety).
    EvictedPinned = 1 << 3,
    /// A job completion was processed twice or for an unknown job (host-accounting).
    BadCompletion = 1 << 4,
    /// A computed chunk was never offered for storing and is not in the host tier when its
    /// request's final stores are built (store-coverage).
    CoverageLoss = 1 << 5,
    /// A referenced block was handed out as a new block (g1-accounting).
    HandedOutInUse = 1 << 6,
    /// The connector's mirror of a scheduled request's block table differs from the
    /// scheduler's table (mirror-table).
    MirrorMismatch = 1 << 7,
    /// The host tier evicted other keys than its policy's reference order names (the
    /// OffloadingConnector's LRU, SimpleCPU's FIFO by release) (eviction-order).
    EvictionOrder = 1 << 8,
    /// A finished request's last offer of a computed chunk was refused and the chunk is not
    /// in the host tier (final-store-kept).
    FinalStoreLost = 1 << 9,
    /// Router replay: an emit step needed rows the store lacks (BlockObjectStoreError), or a
    /// rows-buffer assertion fired: the engine dies (rows-present).
    RowsMissing = 1 << 10,
    /// Router replay: a finished request's rows are not exactly `[start, T - 1)` (rows-exact).
    RowsInexact = 1 << 11,
    /// Router replay: the end-anchored response start is not the first row's position
    /// (start-anchored).
    StartNotAnchored = 1 << 12,
    /// MooncakeStoreConnector: `update_state_after_alloc` got an external token count other
    /// than its LoadSpec's `kvpool_cached_tokens - vllm_cached_tokens`: the scheduler's
    /// AssertionError kills the engine (connector-assert).
    ConnectorAssert = 1 << 13,
    /// NIXL P/D: the consumer read a block from the producer's host buffer whose copy is not
    /// the KV of the request's tokens (copied before its last write) (handoff-integrity).
    PdStaleSend = 1 << 14,
    /// P/D with router replay: the router's merged rows are not what a colocated engine returns
    /// for the request, or the merge refused with HTTP 500 (pd-equals-colocated).
    PdNotColocated = 1 << 15,
    /// The scheduler met, at an entry of its waiting queues, a request it had just scheduled
    /// from another entry or one that had finished: vLLM raises `RuntimeError("Invalid request
    /// status")` and the engine dies (queue-sound).
    QueueRaised = 1 << 16,
    /// A streaming session took its next input with `num_computed_tokens` below what the
    /// model keeps (every token but the last sampled one): vLLM 0.24 and 0.32 keep only the
    /// computed tokens, so a session preempted while its last output was in flight loses its
    /// prompt and outputs (session-history, finding 34).
    SessionHistoryLost = 1 << 17,
    /// The scheduler scheduled a running request a negative token count: a streaming session
    /// whose inputs grew it past `max_model_len` (vLLM checks each input alone). vLLM's
    /// `update_from_output` asserts `num_tokens_scheduled > 0` and the engine dies
    /// (tokens-positive).
    TokensNonPositive = 1 << 18,
}

/// What a transition did, for reachability guards.
#[derive(Copy, Clone, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
#[repr(u32)]
pub enum Mark {
    G1Hit = 1 << 0,
    G1Eviction = 1 << 1,
    HostHit = 1 << 2,
    HostEviction = 1 << 3,
    Preemption = 1 << 4,
    LoadFailure = 1 << 5,
    ErrorFinish = 1 << 6,
    StoreCompleted = 1 << 7,
    Abort = 1 << 8,
    Restart = 1 << 9,
    SyncLoad = 1 << 10,
    StoreRefused = 1 << 11,
    Flush = 1 << 12,
    FinishStore = 1 << 13,
    /// A copy submitted in this step finished within it (StepInput::drain).
    Drained = 1 << 14,
    /// A lookup ran while the request still had transfers in flight (#46014's window).
    LookupInflight = 1 << 15,
    /// A streaming session parked between inputs, holding its blocks.
    SessionParked = 1 << 16,
    /// A streaming session took its next input (`_update_request_as_session`).
    SessionResumed = 1 << 17,
    /// A request with earlier progress (preempted, or a session between inputs) was delivered
    /// to the connector with its full block table again.
    ReadmitFullTable = 1 << 18,
    /// SimpleCPU: a lookup dropped a pin its request had held since an earlier step (the
    /// request failed admission while holding CPU blocks).
    StalePinDropped = 1 << 19,
    /// SimpleCPU: an eager scan stopped at the CPU free count (a partial store).
    PartialStore = 1 << 20,
    /// SimpleCPU: a GPU-side hit moved a CPU block to the MRU end (#62444).
    HostRefresh = 1 << 21,
    /// Router replay: an emit step read rows back from the row store.
    RowsFromStore = 1 << 22,
    /// Router replay: a local hit was cut or an external hit refused because of rows.
    RowsCut = 1 << 23,
    /// NIXL P/D: the consumer read a finished request's blocks from the host buffer.
    PdHandoff = 1 << 24,
    /// NIXL P/D: a block was copied to the host buffer while its request had written only
    /// part of the prompt positions it holds.
    PdPartialSave = 1 << 25,
    /// P/D: the decode instance's NIXL read of a request's prompt KV landed or failed.
    PdRemoteLoad = 1 << 26,
    /// P/D: the router merged a request's P and D rows (or refused to).
    PdMerged = 1 << 27,
    /// P/D with a shared Mooncake pool: P loaded a block only D had put (decode-saved KV).
    PdDecodeSavedLoad = 1 << 28,
    /// P/D with a shared Mooncake pool: P looked up a request with a start past 0 (a bridged
    /// turn) whose prompt holds decode-saved blocks.
    PdBridgedTurn = 1 << 29,
    /// P/D with a shared Mooncake pool: P looked up a request with start 0 (a non-bridged
    /// retry) whose prompt holds decode-saved blocks.
    PdNonBridgedRetry = 1 << 30,
    /// A stopped streaming session's in-flight output was appended to it while it was parked
    /// (0.24 under async scheduling: rule `session_stop_drops_in_flight` false).
    StaleSessionOutput = 1 << 31,
}

#[derive(Clone, Default, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Ghost {
    pub violations: u32,
    pub marks: u32,
    /// Engine steps since the last progress (a sampled token, a finish, an arrival).
    pub idle_steps: u16,
    /// Faults injected so far (load failures): the environment is fair only if finite.
    pub faults: u8,
    /// Not state (never compared, hashed or encoded): set by a plain step when, at the point
    /// where a draining step (`StepInput::drain`) would finish its copies, some copy was
    /// submitted. Without it the draining step of the same state finishes nothing and is no
    /// transition, which the checker then knows without taking it (`System::apply_into`).
    #[serde(skip)]
    pub drainable: SideVal<bool>,
}

impl Ghost {
    #[inline]
    pub fn breach(&mut self, b: Breach) {
        self.violations |= b as u32;
    }
    #[inline]
    pub fn has(&self, b: Breach) -> bool {
        self.violations & (b as u32) != 0
    }
    #[inline]
    pub fn mark(&mut self, m: Mark) {
        self.marks |= m as u32;
    }
    #[inline]
    pub fn marked(&self, m: Mark) -> bool {
        self.marks & (m as u32) != 0
    }
}

// Packed (`collections::pack`): `drainable` is not state (`#[serde(skip)]`): nothing, decoded
// as false.
crate::system::collections::pack::pack_fields!(Ghost { violations, marks, idle_steps, faults } skip { drainable });
