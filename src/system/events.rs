//! What the engine did, step by step: the story of a counterexample, the decisions that
//! conformance compares, and the raw material of replay metrics. The model runs with events
//! off (`Events::off()`), so recording costs nothing there.

use super::types::{BlockHash, BlockId, FinishReason, JobId, ReqId};

/// Things that crossed the scheduler/connector API, in the order vLLM does them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Arrived {
        req: ReqId,
    },
    /// A prefix lookup: local G1 hit, and the connector's answer (`None` = retry later).
    Lookup {
        req: ReqId,
        local: u32,
        external: Option<u32>,
        load_async: bool,
    },
    /// A waiting request was admitted (`resumed` = it had been preempted).
    Admitted {
        req: ReqId,
        resumed: bool,
        table: Vec<BlockId>,
        num_computed: u32,
    },
    /// Admitted into WAITING_FOR_REMOTE_KVS: an async load will fill its blocks.
    AsyncLoadWait {
        req: ReqId,
        table: Vec<BlockId>,
        num_computed: u32,
    },
    Scheduled {
        req: ReqId,
        start: u32,
        tokens: u32,
        new_blocks: Vec<BlockId>,
    },
    /// What `schedule()` returned: tokens per request in `num_scheduled_tokens` order, new and
    /// resumed admissions, `preempted_req_ids`, `finished_req_ids`, and every block table.
    StepScheduled {
        scheduled: Vec<(ReqId, u32)>,
        new: Vec<ReqId>,
        resumed: Vec<ReqId>,
        preempted: Vec<ReqId>,
        finished: Vec<ReqId>,
        tables: Vec<(ReqId, Vec<BlockId>)>,
    },
    /// The step's `jobs_to_flush`.
    JobsToFlush {
        jobs: Vec<JobId>,
    },
    /// An async load landed (or failed) and the request left WAITING_FOR_REMOTE_KVS.
    Promoted {
        req: ReqId,
        num_computed: u32,
        failed: bool,
    },
    /// A waiting request does not fit in G1 this step (admission stops here).
    NoRoom {
        req: ReqId,
        free: u32,
    },
    Preempted {
        req: ReqId,
    },
    /// A cached G1 block lost its hash because its slot was handed out again.
    G1Evicted {
        block: BlockId,
        hash: BlockHash,
    },
    G1Cached {
        block: BlockId,
        hash: BlockHash,
    },
    HostEvicted {
        key: BlockHash,
    },
    /// `complete_store`: these write-pending keys became ready (vLLM's CPU BlockStored).
    HostStored {
        keys: Vec<BlockHash>,
    },
    /// `prepare_store` returned None: no room (nothing changed).
    StoreRefused {
        req: ReqId,
        keys: Vec<BlockHash>,
    },
    StoreJob {
        job: JobId,
        req: ReqId,
        keys: Vec<BlockHash>,
        blocks: Vec<BlockId>,
        slots: Vec<u32>,
    },
    LoadJob {
        job: JobId,
        req: ReqId,
        keys: Vec<BlockHash>,
        blocks: Vec<BlockId>,
        slots: Vec<u32>,
        sync: bool,
    },
    Flush {
        job: JobId,
    },
    TransferDone {
        job: JobId,
    },
    TransferFailed {
        job: JobId,
        invalid: Vec<BlockId>,
    },
    /// The scheduler processed a job's completion (`complete_store` / `complete_load`).
    JobCompleted {
        job: JobId,
    },
    /// SimpleCPU: `_cleanup_load_request` for a request in `finished_recving`: its load
    /// event `job` landed and its CPU and GPU pins are released.
    HostLoadDone {
        req: ReqId,
        job: JobId,
    },
    Sampled {
        req: ReqId,
        position: u32,
    },
    /// eviction-order: the host tier evicted `got`, its policy's reference order names `want`.
    WrongVictims {
        got: Vec<BlockHash>,
        want: Vec<BlockHash>,
        policy: crate::system::rules::HostLru,
    },
    /// Router replay: a hit was cut (prime-rl's loaded-block cut, or 0.33's hit gating).
    RowsCut {
        req: ReqId,
        from: u32,
        to: u32,
    },
    /// Router replay: the worker emitted rows `[start, end)` for `req`.
    RowsEmitted {
        req: ReqId,
        start: u32,
        end: u32,
        from_store: bool,
    },
    /// A streaming session's input chunk `turn` stopped (the session continues).
    TurnEnded {
        req: ReqId,
        turn: u8,
        reason: FinishReason,
    },
    /// The client sent a session's next input (or ended the session) and it was queued.
    StreamQueued {
        req: ReqId,
    },
    /// A session took its input `turn` and waits to be re-admitted.
    SessionResumed {
        req: ReqId,
        turn: u8,
        num_computed: u32,
    },
    Finished {
        req: ReqId,
        reason: FinishReason,
    },
    Freed {
        req: ReqId,
        blocks: Vec<BlockId>,
    },
    /// A property's predicate failed inside a transition (read integrity, source freshness,
    /// load safety, coverage).
    Violation {
        property: &'static str,
        detail: String,
    },
}

/// An event recorder that can be switched off.
#[derive(Debug, Default)]
pub struct Events {
    pub on: bool,
    pub list: Vec<Event>,
}

impl Events {
    pub fn off() -> Self {
        Events { on: false, list: Vec::new() }
    }
    pub fn on() -> Self {
        Events { on: true, list: Vec::new() }
    }
    #[inline]
    pub fn emit(&mut self, f: impl FnOnce() -> Event) {
        if self.on {
            self.list.push(f());
        }
    }
}
