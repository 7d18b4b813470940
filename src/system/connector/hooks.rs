//! The connector interface: the hooks of vLLM's `KVConnectorBase_V1` that kvmc models, as one
//! trait every connector state implements (each in its own folder), and the contexts the
//! hooks receive instead of long argument lists.
//!
//! Scheduler side, in the order the scheduler calls them: `on_new_request`,
//! `get_num_new_matched_tokens`, `update_state_after_alloc`, `build_connector_meta`,
//! `request_finished`, `update_connector_output`. Worker side (`KVConnectorModelRunnerMixin`
//! around the forward pass): `handle_preemptions` and sync loads before the forward
//! ([`KvConnector::worker_before_forward`]), `start_load_kv` / `wait_for_save` /
//! `get_finished` after it. The rest are what the engine, the drivers and the properties
//! read. Every hook has a default that does nothing (vLLM's base class, or no connector).

use super::{BitSet, ConnCtx, SchedOut, StepScratch};
use crate::system::engine::{Ctx, Direction, StepInput};
use crate::system::events::Events;
use crate::system::ghost::Ghost;
use crate::system::gpu_pool::GpuPool;
use crate::system::model_runner::WorkerOut;
use crate::system::request::ReqState;
use crate::system::rules::Rules;
use crate::system::types::{BlockId, JobId, ReqId};
use crate::system::workload::RequestSpec;
use std::collections::BTreeSet;

/// One request as a hook sees it: its id, its scheduler state and its script.
#[derive(Clone, Copy)]
pub struct RequestRef<'a> {
    pub id: ReqId,
    pub state: &'a ReqState,
    pub spec: &'a RequestSpec,
}

/// A scheduler-side hook's context: the connector settings, and the engine parts the hook
/// may change beside the connector's own state.
pub struct HookCtx<'a> {
    pub(crate) c: ConnCtx<'a>,
    pub(crate) pool: &'a mut GpuPool,
    pub(crate) ghost: &'a mut Ghost,
    pub(crate) ev: &'a mut Events,
}

/// A worker-side hook's context.
pub struct WorkerCtx<'a> {
    pub(crate) ctx: Ctx<'a>,
    pub(crate) pool: &'a mut GpuPool,
    pub(crate) ghost: &'a mut Ghost,
    pub(crate) ev: &'a mut Events,
}

/// What a worker-side hook reads of the step: the scheduler's output, the connector's step
/// scratch and the environment's choices for the step.
#[derive(Clone, Copy)]
pub struct WorkerStep<'a> {
    pub(crate) out: &'a SchedOut,
    pub(crate) scratch: &'a StepScratch,
    pub(crate) input: &'a StepInput,
    pub(crate) reqs: &'a [ReqState],
}

/// The hooks of `KVConnectorBase_V1` (and what the engine reads of a connector). A new
/// connector implements this trait and gets one line in [`super::Connector`].
pub trait KvConnector {
    // ---- scheduler side ----

    /// `on_new_request`.
    fn on_new_request(&mut self, _r: ReqId) {}

    /// `get_num_new_matched_tokens(req, num_local)`: `(None, _)` asks the scheduler to retry;
    /// the flag is `load_kv_async`. `max_new`: prime-rl's load limit, for the connectors it
    /// wraps.
    fn get_num_new_matched_tokens(
        &mut self,
        _q: RequestRef,
        _num_local: u32,
        _max_new: Option<u32>,
        _scratch: &mut StepScratch,
        _cx: &mut HookCtx,
    ) -> (Option<u32>, bool) {
        (Some(0), false)
    }

    /// The external hit the lookup would have given without prime-rl's limit (for its
    /// report of what the limit cut).
    fn peek_unbounded_hit(&self, _q: RequestRef, _num_local: u32, _num_tokens: u32, _c: &ConnCtx) -> Option<u32> {
        None
    }

    /// `update_state_after_alloc(req, blocks, num_external)`.
    fn update_state_after_alloc(
        &mut self,
        _q: RequestRef,
        _num_external: u32,
        _scratch: &mut StepScratch,
        _cx: &mut HookCtx,
    ) {
    }

    /// `build_connector_meta(scheduler_output)`.
    fn build_connector_meta(
        &mut self,
        _out: &SchedOut,
        _reqs: &[ReqState],
        _scratch: &mut StepScratch,
        _cx: &mut HookCtx,
    ) {
    }

    /// `request_finished` / `request_finished_all_groups`, before the blocks are freed.
    /// Returns `delay_free_blocks`: the blocks stay held until the worker reports the request
    /// in `finished_sending`.
    fn request_finished(&mut self, _q: RequestRef, _cx: &mut HookCtx) -> bool {
        false
    }

    /// `update_connector_output(kv_connector_output)`.
    fn update_connector_output(&mut self, _w: &WorkerOut, _reqs: &[ReqState], _cx: &mut HookCtx) {}

    /// `has_pending_push_work`.
    fn has_pending_work(&self) -> bool {
        false
    }

    /// Tokens of request `r` its derived offload keys cover (a session may not drop them).
    fn keyed_tokens(&self, _r: ReqId, _c: &ConnCtx) -> u32 {
        0
    }

    // ---- worker side ----

    /// Before the forward pass: `handle_preemptions`, and loads that land before it (sync
    /// loads). Returns the blocks a failed load left invalid.
    fn worker_before_forward(&mut self, _s: WorkerStep, _cx: &mut WorkerCtx) -> BTreeSet<BlockId> {
        BTreeSet::new()
    }

    /// The blocks whose forward-pass writes the connector must see ([`Self::forward_write`]):
    /// `None` for every block. `room`: the number of GPU blocks.
    fn forward_watch(&self, _room: usize) -> Option<BitSet> {
        Some(BitSet::default())
    }

    /// The forward pass wrote `block` (a copy still reading it is torn).
    fn forward_write(&mut self, _block: BlockId, _ghost: &mut Ghost, _ev: &mut Events) {}

    /// After the forward pass, before other connectors report (`start_load_kv`,
    /// `wait_for_save`, the copies that finish within the step, `get_finished`).
    fn worker_after_forward(&mut self, _s: WorkerStep, _cx: &mut WorkerCtx) -> WorkerOut {
        WorkerOut::default()
    }

    /// The end of the worker's step, after every other connector reported (the
    /// OffloadingConnector's `start_load_kv`, `wait_for_save` and `get_finished`).
    fn worker_end_step(&mut self, _s: WorkerStep, _w: &mut WorkerOut, _cx: &mut WorkerCtx) {}

    /// The transfer a worker stream completes next (the oldest launched one of `d`).
    fn next_transfer(&self, _d: Direction) -> Option<JobId> {
        None
    }

    /// The copy `job` of direction `d` finished (`fail`: a load whose blocks from that index
    /// on were not written).
    fn complete_transfer(&mut self, _d: Direction, _job: JobId, _fail: Option<u32>, _cx: &mut WorkerCtx) {
        panic!("transfers need a connector with transfer jobs")
    }

    // ---- what the engine and the properties read ----

    /// GPU blocks an unfinished load is still filling (no forward may touch them).
    fn loading_blocks(&self) -> BTreeSet<BlockId> {
        BTreeSet::new()
    }

    /// References the connector holds on GPU blocks (one entry per reference).
    fn gpu_pins(&self, _rules: &Rules) -> Vec<BlockId> {
        Vec::new()
    }

    /// The GPU blocks of a queued load job (how many blocks a failure may start at).
    fn load_job_blocks(&self, _id: JobId) -> u32 {
        0
    }

    /// Renumber ids densely (model checker only). `outside`: ids in in-flight worker reports.
    fn canonicalize<'a>(&mut self, _outside: impl Iterator<Item = &'a mut JobId>) {}

    /// Trace replay: turn on the change logs of the connector's pools.
    fn enable_replay_aids(&mut self) {}

    // ---- P/D: the decode peer reading a producer's blocks ----

    /// Requests whose blocks the consumer may read now.
    fn consumer_readable(&self) -> Vec<ReqId> {
        Vec::new()
    }

    /// The consumer reads request `q`'s blocks and notifies the producer.
    fn consumer_read(&mut self, _q: RequestRef, _cx: &mut WorkerCtx) {
        panic!("consumer reads need connector = \"nixl\"")
    }

    // ---- trace replay's request slots ----

    /// Room for one more request slot.
    fn add_slot(&mut self) {}

    /// The connector keeps nothing for slot `r` and no job of its names it.
    fn slot_idle(&self, _r: ReqId) -> bool {
        true
    }

    /// Idle slot `r` starts afresh (ghost records included).
    fn reset_slot(&mut self, _r: ReqId) {}
}

/// No connector: every hook keeps its default.
pub struct NoConnector;

impl KvConnector for NoConnector {}
