//! KV connectors, scheduler side, and what the scheduler hands them each step.
//!
//! The scheduler calls the same hooks vLLM's `KVConnectorBase_V1` defines, in the same order:
//! `on_new_request`, `get_num_new_matched_tokens`, `update_state_after_alloc`,
//! `build_connector_meta`, `request_finished`, `update_connector_output`. [`Connector`]
//! dispatches each hook to the connector the engine runs (OffloadingConnector,
//! SimpleCPUOffloadConnector, MooncakeStoreConnector or NixlConnector's producer side).

pub mod hooks;
pub mod mooncake;
pub mod nixl;
pub mod offloading;
mod pack;
pub mod simple_cpu;

use super::config::{ConnectorConfig, EngineConfig, MooncakeConfig};
use super::engine::Direction;
use super::events::Events;
use super::ghost::Ghost;
use super::model_runner::WorkerOut;
use super::request::ReqState;
use super::rules::Rules;
use super::types::{BlockId, JobId, ReqId};
use super::workload::Workload;
use crate::system::collections::pack::pack_fields;
use std::collections::BTreeSet;

pub use super::collections::bit_set::BitSet;
pub use hooks::{HookCtx, KvConnector, NoConnector, RequestRef, WorkerCtx, WorkerStep};

pub use super::pd::store::PdStore;
pub use mooncake::MooncakeState;
pub use nixl::consumer::NixlConsumer;
pub use nixl::NixlState;
pub use offloading::{Job, JobKind, OffloadingReq, OffloadingState, Phase};
pub use simple_cpu::SimpleCpuState;

/// Which connector an engine runs, with its state.
#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum Connector {
    None,
    Offloading(Box<OffloadingState>),
    SimpleCpu(Box<SimpleCpuState>),
    Mooncake(Box<MooncakeState>),
    Nixl(Box<NixlState>),
    NixlDecode(Box<NixlConsumer>),
    /// P of a P/D pair sharing a Mooncake pool: MultiConnector(NIXL producer, Mooncake store).
    NixlStore(Box<PdStore<NixlState>>),
    /// D of that pair: MultiConnector(NIXL consumer, Mooncake store as kv_consumer).
    NixlDecodeStore(Box<PdStore<NixlConsumer>>),
}

impl Clone for Connector {
    fn clone(&self) -> Self {
        match self {
            Connector::None => Connector::None,
            Connector::Offloading(s) => Connector::Offloading(s.clone()),
            Connector::SimpleCpu(s) => Connector::SimpleCpu(s.clone()),
            Connector::Mooncake(s) => Connector::Mooncake(s.clone()),
            Connector::Nixl(s) => Connector::Nixl(s.clone()),
            Connector::NixlDecode(s) => Connector::NixlDecode(s.clone()),
            Connector::NixlStore(s) => Connector::NixlStore(s.clone()),
            Connector::NixlDecodeStore(s) => Connector::NixlDecodeStore(s.clone()),
        }
    }
    /// Reuses the target's allocations when both run the same connector (see `clone_fields`).
    fn clone_from(&mut self, src: &Self) {
        match (self, src) {
            (Connector::Offloading(a), Connector::Offloading(b)) => a.clone_from(b),
            (Connector::SimpleCpu(a), Connector::SimpleCpu(b)) => a.clone_from(b),
            (Connector::Mooncake(a), Connector::Mooncake(b)) => a.clone_from(b),
            (Connector::Nixl(a), Connector::Nixl(b)) => a.clone_from(b),
            (a, b) => *a = b.clone(),
        }
    }
}

impl Connector {
    pub fn new(cfg: &EngineConfig, num_reqs: usize, rules: &Rules) -> Self {
        match &cfg.connector {
            ConnectorConfig::None => Connector::None,
            ConnectorConfig::Offloading(o) => Connector::Offloading(Box::new(OffloadingState::new(num_reqs, o, rules))),
            ConnectorConfig::SimpleCpu(s) => {
                // `_estimate_lazy_target_blocks`: one full-attention group, WATERMARK_RATIO 1.
                let lazy_target = if s.lazy { 2 * cfg.max_num_batched_tokens.div_ceil(cfg.block_size) } else { 0 };
                Connector::SimpleCpu(Box::new(SimpleCpuState::new(num_reqs, s.cpu_blocks, lazy_target)))
            }
            ConnectorConfig::Mooncake(m) => {
                Connector::Mooncake(Box::new(MooncakeState::new(num_reqs, m, cfg.block_size)))
            }
            ConnectorConfig::Nixl => Connector::Nixl(Box::new(NixlState::new(cfg.num_gpu_blocks))),
            ConnectorConfig::NixlDecode => Connector::NixlDecode(Box::new(NixlConsumer::new(num_reqs))),
            ConnectorConfig::NixlStore(m) => Connector::NixlStore(Box::new(PdStore::new(
                NixlState::new(cfg.num_gpu_blocks),
                MooncakeState::new(num_reqs, m, cfg.block_size),
                num_reqs,
            ))),
            ConnectorConfig::NixlDecodeStore(m) => Connector::NixlDecodeStore(Box::new(PdStore::new(
                NixlConsumer::new(num_reqs),
                MooncakeState::new(num_reqs, m, cfg.block_size),
                num_reqs,
            ))),
        }
    }
    /// `KVConnectorBase_V1.requires_kv_delivery`: the connector hands KV off and a request
    /// preempted with the hand-off pending must be recomputed, so its in-flight output is
    /// dropped (`_preempt_request(drop_stale_output=...)`). The base class's default is the
    /// producer role (`kv_producer`, `kv_both`); OffloadingConnector and SimpleCPU opt out as
    /// best-effort caches. The Mooncake store runs as `kv_both`; on the decode side of P/D every
    /// part is a `kv_consumer`.
    pub fn requires_kv_delivery(&self) -> bool {
        match self {
            Connector::None | Connector::Offloading(_) | Connector::SimpleCpu(_) => false,
            Connector::Mooncake(_) | Connector::Nixl(_) | Connector::NixlStore(_) => true,
            Connector::NixlDecode(_) | Connector::NixlDecodeStore(_) => false,
        }
    }
    pub fn nixl(&self) -> Option<&NixlState> {
        match self {
            Connector::Nixl(s) => Some(s),
            Connector::NixlStore(s) => Some(&s.nixl),
            _ => None,
        }
    }
    pub fn nixl_mut(&mut self) -> Option<&mut NixlState> {
        match self {
            Connector::Nixl(s) => Some(s),
            Connector::NixlStore(s) => Some(&mut s.nixl),
            _ => None,
        }
    }
    pub fn nixl_decode(&self) -> Option<&NixlConsumer> {
        match self {
            Connector::NixlDecode(s) => Some(s),
            Connector::NixlDecodeStore(s) => Some(&s.nixl),
            _ => None,
        }
    }
    pub fn nixl_decode_mut(&mut self) -> Option<&mut NixlConsumer> {
        match self {
            Connector::NixlDecode(s) => Some(s),
            Connector::NixlDecodeStore(s) => Some(&mut s.nixl),
            _ => None,
        }
    }
    pub fn mooncake(&self) -> Option<&MooncakeState> {
        match self {
            Connector::Mooncake(s) => Some(s),
            Connector::NixlStore(s) => Some(&s.store),
            Connector::NixlDecodeStore(s) => Some(&s.store),
            _ => None,
        }
    }
    pub fn mooncake_mut(&mut self) -> Option<&mut MooncakeState> {
        match self {
            Connector::Mooncake(s) => Some(s),
            Connector::NixlStore(s) => Some(&mut s.store),
            Connector::NixlDecodeStore(s) => Some(&mut s.store),
            _ => None,
        }
    }
    pub fn offloading(&self) -> Option<&OffloadingState> {
        match self {
            Connector::Offloading(s) => Some(s),
            _ => None,
        }
    }
    pub fn offloading_mut(&mut self) -> Option<&mut OffloadingState> {
        match self {
            Connector::Offloading(s) => Some(s),
            _ => None,
        }
    }
    pub fn simple_cpu(&self) -> Option<&SimpleCpuState> {
        match self {
            Connector::SimpleCpu(s) => Some(s),
            _ => None,
        }
    }
    pub fn simple_cpu_mut(&mut self) -> Option<&mut SimpleCpuState> {
        match self {
            Connector::SimpleCpu(s) => Some(s),
            _ => None,
        }
    }
}

// The one place that dispatches: every hook of [`KvConnector`] as a method of [`Connector`],
// forwarded to the state of the connector the engine runs (no connector: the trait's defaults). Hooks taking `&mut self`
// first, then those taking `&self`; each written without its receiver.
macro_rules! forward_hooks {
    (
        mut: $( fn $name:ident $(<$lt:lifetime>)? ($($arg:ident : $ty:ty),*) $(-> $ret:ty)? ; )*
        ref: $( fn $rname:ident ($($rarg:ident : $rty:ty),*) $(-> $rret:ty)? ; )*
    ) => {
        impl Connector {
            $(
                #[inline]
                pub fn $name $(<$lt>)? (&mut self, $($arg: $ty),*) $(-> $ret)? {
                    match self {
                        Connector::None => KvConnector::$name(&mut NoConnector, $($arg),*),
                        Connector::Offloading(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::SimpleCpu(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::Mooncake(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::Nixl(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::NixlDecode(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::NixlStore(s) => KvConnector::$name(&mut **s, $($arg),*),
                        Connector::NixlDecodeStore(s) => KvConnector::$name(&mut **s, $($arg),*),
                    }
                }
            )*
            $(
                #[inline]
                pub fn $rname(&self, $($rarg: $rty),*) $(-> $rret)? {
                    match self {
                        Connector::None => KvConnector::$rname(&NoConnector, $($rarg),*),
                        Connector::Offloading(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::SimpleCpu(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::Mooncake(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::Nixl(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::NixlDecode(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::NixlStore(s) => KvConnector::$rname(&**s, $($rarg),*),
                        Connector::NixlDecodeStore(s) => KvConnector::$rname(&**s, $($rarg),*),
                    }
                }
            )*
        }
    };
}

forward_hooks! {
    mut:
    fn on_new_request(r: ReqId);
    fn get_num_new_matched_tokens(q: RequestRef, num_local: u32, max_new: Option<u32>, scratch: &mut StepScratch, cx: &mut HookCtx) -> (Option<u32>, bool);
    fn update_state_after_alloc(q: RequestRef, num_external: u32, scratch: &mut StepScratch, cx: &mut HookCtx);
    fn build_connector_meta(out: &SchedOut, reqs: &[ReqState], scratch: &mut StepScratch, cx: &mut HookCtx);
    fn request_finished(q: RequestRef, cx: &mut HookCtx) -> bool;
    fn update_connector_output(w: &WorkerOut, reqs: &[ReqState], cx: &mut HookCtx);
    fn worker_before_forward(s: WorkerStep, cx: &mut WorkerCtx) -> BTreeSet<BlockId>;
    fn forward_write(block: BlockId, ghost: &mut Ghost, ev: &mut Events);
    fn worker_after_forward(s: WorkerStep, cx: &mut WorkerCtx) -> WorkerOut;
    fn worker_end_step(s: WorkerStep, w: &mut WorkerOut, cx: &mut WorkerCtx);
    fn complete_transfer(d: Direction, job: JobId, fail: Option<u32>, cx: &mut WorkerCtx);
    fn canonicalize<'a>(outside: impl Iterator<Item = &'a mut JobId>);
    fn enable_replay_aids();
    fn add_slot();
    fn reset_slot(r: ReqId);
    fn consumer_read(q: RequestRef, cx: &mut WorkerCtx);
    ref:
    fn peek_unbounded_hit(q: RequestRef, num_local: u32, num_tokens: u32, c: &ConnCtx) -> Option<u32>;
    fn has_pending_work() -> bool;
    fn keyed_tokens(r: ReqId, c: &ConnCtx) -> u32;
    fn forward_watch(room: usize) -> Option<BitSet>;
    fn next_transfer(d: Direction) -> Option<JobId>;
    fn loading_blocks() -> BTreeSet<BlockId>;
    fn gpu_pins(rules: &Rules) -> Vec<BlockId>;
    fn load_job_blocks(id: JobId) -> u32;
    fn slot_idle(r: ReqId) -> bool;
    fn consumer_readable() -> Vec<ReqId>;
}

/// Connector settings and rules, borrowed for one call.
#[derive(Clone, Copy)]
pub struct ConnCtx<'a> {
    pub(crate) rules: &'a Rules,
    pub(crate) wl: &'a Workload,
    pub(crate) block_size: u32,
    pub(crate) blocks_per_chunk: u32,
    pub(crate) offload_prompt_only: bool,
    pub(crate) sync_budget: u32,
    /// GPU prefix caching on (`_chunks_being_loaded` is only kept then).
    pub(crate) caching: bool,
    /// The Mooncake store's settings (with `connector = "mooncake"`).
    pub(crate) mooncake: Option<&'a MooncakeConfig>,
}

impl ConnCtx<'_> {
    /// Tokens per chunk.
    pub fn tokens_per_chunk(&self) -> u32 {
        self.block_size * self.blocks_per_chunk
    }
}

/// One request in a step's `SchedulerOutput`.
#[derive(Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Scheduled {
    pub req: ReqId,
    /// `num_computed_tokens` before this step: the forward computes `[start, start+tokens)`.
    pub start: u32,
    pub tokens: u32,
    /// Full table when `full_table` (new or resumed request data), else this step's new blocks.
    pub blocks: Vec<BlockId>,
    /// `yield_req_data`'s `is_full_table`.
    pub full_table: bool,
    /// Not a prefill chunk: the model runner samples a token for it in this step.
    pub samples: bool,
    /// Admitted after a preemption (`scheduled_resumed_reqs`), not new.
    pub resumed: bool,
    /// vLLM scheduled `-negative` tokens (`tokens` is then 0): a running request already past
    /// `max_model_len` (see `scheduler::schedule`). 0 otherwise.
    pub negative: u32,
}

pack_fields!(clone Scheduled { req, start, tokens, blocks, full_table, samples, resumed, negative });

/// The parts of `SchedulerOutput` the connector and the worker read.
#[derive(Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SchedOut {
    /// In `num_scheduled_tokens` order: running requests, then admissions.
    pub scheduled: Vec<Scheduled>,
    pub preempted: Vec<ReqId>,
    /// `finished_req_ids`: requests finished since the previous step.
    pub finished: Vec<ReqId>,
    /// `Rules::resumed_after_new`: the order of `scheduled_new_reqs`.
    pub resumed_after_new: bool,
}

pack_fields!(clone SchedOut { scheduled, preempted, finished, resumed_after_new });

impl SchedOut {
    /// `yield_req_data` order (Model Runner V2): `scheduled_new_reqs`, then the cached
    /// (running) requests, each in scheduling order. Up to 0.33 `scheduled_new_reqs` holds the
    /// requests admitted from WAITING, then those resumed after a preemption, which MRV2
    /// appends to them; 0.34 keeps one list in admission order (`resumed_after_new`).
    pub fn yield_order(&self) -> impl Iterator<Item = &Scheduled> {
        let split = self.resumed_after_new;
        let new = self.scheduled.iter().filter(move |s| s.full_table && !(split && s.resumed));
        let resumed = self.scheduled.iter().filter(move |s| split && s.full_table && s.resumed);
        new.chain(resumed).chain(self.scheduled.iter().filter(|s| !s.full_table))
    }
}

/// Per-step connector scratch (`_current_batch_*`), cleared at the end of every step, and the
/// scheduler's own buffers for the step. One per thread is reused from step to step
/// (`step_bufs`): [`StepScratch::clear`] empties it and keeps what its vectors allocated.
#[derive(Clone, Debug, Default)]
pub struct StepScratch {
    /// Blocks handed to scheduled requests this step.
    pub(crate) allocated: BitSet,
    pub(crate) load_jobs: Vec<JobId>,
    pub(crate) store_jobs: Vec<JobId>,
    pub(crate) sync_loads: Vec<ReqId>,
    pub(crate) sync_used: u32,
    pub(crate) flush: BTreeSet<JobId>,
    /// Router replay: this step's `AuxOutputConnectorMetadata`.
    pub(crate) aux: Option<crate::system::expert_rows::AuxMeta>,
    /// NIXL host-buffer mode: this step's `reqs_to_save` (request, block ids to copy).
    pub(crate) nixl_save: Vec<(ReqId, Vec<BlockId>)>,
    /// SimpleCPU: the requests whose loads this step prepared, in the order it prepared them.
    pub(crate) load_order: Vec<ReqId>,
    /// OffloadingConnector: the store offer being built (`(key, end position)`) and its chunk
    /// indices (`build_store_job`).
    pub(crate) offer: Vec<(offloading::host_tier::Key, u32)>,
    pub(crate) offer_chunks: Vec<u32>,
    /// The scheduler's temporaries.
    pub(crate) sched: super::step_bufs::SchedBufs,
}

impl StepScratch {
    /// Empty, as `default()`, but keeping the buffers. Every field is listed (no `..`): a
    /// field added later and not cleared here is a compile error.
    pub(crate) fn clear(&mut self) {
        let StepScratch {
            allocated,
            load_jobs,
            store_jobs,
            sync_loads,
            sync_used,
            flush,
            aux,
            nixl_save,
            load_order,
            offer,
            offer_chunks,
            sched,
        } = self;
        allocated.clear();
        load_jobs.clear();
        store_jobs.clear();
        sync_loads.clear();
        *sync_used = 0;
        flush.clear();
        *aux = None;
        nixl_save.clear();
        load_order.clear();
        offer.clear();
        offer_chunks.clear();
        sched.clear();
    }
}
