//! KV connectors, scheduler side, and what the scheduler hands them each step.
//!
//! The scheduler calls the same hooks vLLM's `KVConnectorBase_V1` defines, in the same order:
//! `on_new_request`, `get_num_new_matched_tokens`, `update_state_after_alloc`,
//! `build_connector_meta`, `request_finished`, `update_connector_output`. [`Connector`]
//! dispatches each hook to the connector the engine runs (OffloadingConnector,
//! SimpleCPUOffloadConnector, MooncakeStoreConnector or NixlConnector's producer side).

pub mod mooncake;
pub mod nixl;
pub mod offloading;
pub mod simple_cpu;

use super::config::{ConnectorConfig, EngineConfig, MooncakeConfig};
use super::engine::Direction;
use super::events::Events;
use super::ghost::Ghost;
use super::gpu_pool::GpuPool;
use super::model_runner::WorkerOut;
use super::request::ReqState;
use super::rules::Rules;
use super::types::{BlockId, JobId, ReqId};
use super::workload::{RequestSpec, Workload};
use std::collections::BTreeSet;

pub use mooncake::MooncakeState;
pub use nixl::NixlState;
pub use offloading::{Job, JobKind, OffloadingReq, OffloadingState, Phase};
pub use simple_cpu::SimpleCpuState;

/// Which connector an engine runs, with its state.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Connector {
    None,
    Offloading(Box<OffloadingState>),
    SimpleCpu(Box<SimpleCpuState>),
    Mooncake(Box<MooncakeState>),
    Nixl(Box<NixlState>),
}

impl Connector {
    pub fn new(cfg: &EngineConfig, num_reqs: usize, rules: &Rules) -> Self {
        match &cfg.connector {
            ConnectorConfig::None => Connector::None,
            ConnectorConfig::Offloading(o) => Connector::Offloading(Box::new(OffloadingState::new(num_reqs, o, rules))),
            ConnectorConfig::SimpleCpu(s) => {
                Connector::SimpleCpu(Box::new(SimpleCpuState::new(num_reqs, s.cpu_blocks)))
            }
            ConnectorConfig::Mooncake(m) => {
                Connector::Mooncake(Box::new(MooncakeState::new(num_reqs, m, cfg.block_size)))
            }
            ConnectorConfig::Nixl => Connector::Nixl(Box::new(NixlState::new(cfg.num_gpu_blocks))),
        }
    }
    pub fn nixl(&self) -> Option<&NixlState> {
        match self {
            Connector::Nixl(s) => Some(s),
            _ => None,
        }
    }
    pub fn nixl_mut(&mut self) -> Option<&mut NixlState> {
        match self {
            Connector::Nixl(s) => Some(s),
            _ => None,
        }
    }
    pub fn mooncake(&self) -> Option<&MooncakeState> {
        match self {
            Connector::Mooncake(s) => Some(s),
            _ => None,
        }
    }
    pub fn mooncake_mut(&mut self) -> Option<&mut MooncakeState> {
        match self {
            Connector::Mooncake(s) => Some(s),
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
    /// `has_pending_push_work`.
    pub fn has_pending_work(&self) -> bool {
        match self {
            // NIXL's has_pending_push_work is False (its held blocks keep the engine stepping).
            Connector::None | Connector::Nixl(_) => false,
            Connector::Offloading(s) => s.has_pending_work(),
            Connector::SimpleCpu(s) => s.has_pending_work(),
            Connector::Mooncake(s) => s.has_pending_work(),
        }
    }

    /// Trace replay: room for one more request slot.
    pub fn add_slot(&mut self) {
        match self {
            Connector::None | Connector::Nixl(_) => {}
            Connector::Offloading(s) => s.reqs.push(None),
            Connector::SimpleCpu(s) => s.reqs.push(Default::default()),
            Connector::Mooncake(s) => s.reqs.push(Default::default()),
        }
    }

    /// Trace replay: the connector keeps nothing for slot `r` and no job of its names it.
    pub fn slot_idle(&self, r: ReqId) -> bool {
        let i = r as usize;
        match self {
            Connector::None => true,
            // Not replayed (the replay driver refuses NIXL models).
            Connector::Nixl(_) => false,
            Connector::Offloading(oc) => {
                oc.reqs[i].is_none() && oc.jobs.iter().all(|j| j.req != r) && oc.held.iter().all(|h| h.req != r)
            }
            Connector::SimpleCpu(sc) => {
                let q = &sc.reqs[i];
                q.store.is_none()
                    && q.pending.is_none()
                    && q.load.is_none()
                    && sc.stores.iter().all(|e| !e.reqs.contains(&r) && e.parts.iter().all(|t| t.req != r))
                    && sc.loads.iter().all(|e| !e.reqs.contains(&r))
                    && sc.pending_finished.iter().all(|t| t.req != r)
            }
            Connector::Mooncake(mc) => {
                mc.reqs[i] == Default::default()
                    && mc.unfinished.iter().all(|(x, _)| *x != r)
                    && mc.saves.iter().all(|j| j.req != r)
                    && mc.loads.iter().all(|j| j.req != r)
            }
        }
    }

    /// Trace replay: idle slot `r` starts afresh (ghost records included).
    pub fn reset_slot(&mut self, r: ReqId) {
        let i = r as usize;
        match self {
            Connector::SimpleCpu(s) => s.reqs[i] = Default::default(),
            Connector::Mooncake(s) => s.reqs[i] = Default::default(),
            Connector::None | Connector::Nixl(_) | Connector::Offloading(_) => {}
        }
    }

    /// `on_new_request` (only the OffloadingConnector keeps state from arrival on).
    pub fn on_new_request(&mut self, r: ReqId) {
        if let Connector::Offloading(oc) = self {
            oc.on_new_request(r);
        }
    }

    /// `get_num_new_matched_tokens(req, num_local)`: `(None, _)` asks the scheduler to retry.
    #[allow(clippy::too_many_arguments)]
    pub fn get_num_new_matched_tokens(
        &mut self,
        r: ReqId,
        req: &ReqState,
        spec: &RequestSpec,
        num_local: u32,
        max_new: Option<u32>,
        c: &ConnCtx,
        scratch: &mut StepScratch,
        ghost: &mut Ghost,
    ) -> (Option<u32>, bool) {
        match self {
            // NIXL's producer requests (do_remote_decode) load nothing.
            Connector::None | Connector::Nixl(_) => (Some(0), false),
            // `max_new`: prime-rl's load limit. It wraps `_max_loadable_tokens` of the
            // OffloadingConnector and `get_num_new_matched_tokens` of the Mooncake store;
            // SimpleCPU is not wrapped.
            Connector::Offloading(oc) => {
                oc.get_num_new_matched_tokens(r, req, spec, num_local, max_new, c, scratch, ghost)
            }
            Connector::SimpleCpu(sc) => sc.get_num_new_matched_tokens(r, req, spec, num_local, c, ghost),
            Connector::Mooncake(mc) => mc.get_num_new_matched_tokens(r, req, spec, num_local, max_new, c),
        }
    }

    /// `update_state_after_alloc(req, blocks, num_external)`.
    #[allow(clippy::too_many_arguments)]
    pub fn update_state_after_alloc(
        &mut self,
        r: ReqId,
        req: &ReqState,
        spec: &RequestSpec,
        pool: &mut GpuPool,
        num_external: u32,
        c: &ConnCtx,
        scratch: &mut StepScratch,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        match self {
            Connector::None => {}
            Connector::Offloading(oc) => {
                oc.update_state_after_alloc(r, req, spec, pool, num_external, c, scratch, ghost, ev)
            }
            Connector::SimpleCpu(sc) => sc.update_state_after_alloc(r, req, pool, num_external, c, ghost, ev),
            Connector::Mooncake(mc) => mc.update_state_after_alloc(r, req, &spec.name, num_external, ghost, ev),
            Connector::Nixl(nx) => nx.update_state_after_alloc(r),
        }
    }

    /// `build_connector_meta(scheduler_output)`.
    #[allow(clippy::too_many_arguments)]
    pub fn build_connector_meta(
        &mut self,
        out: &SchedOut,
        reqs: &[ReqState],
        wl: &Workload,
        pool: &mut GpuPool,
        c: &ConnCtx,
        scratch: &mut StepScratch,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        match self {
            Connector::None => {}
            Connector::Offloading(oc) => oc.build_connector_meta(out, reqs, wl, pool, c, scratch, ghost, ev),
            Connector::SimpleCpu(sc) => sc.build_connector_meta(out, reqs, wl, pool, c, ghost, ev),
            Connector::Mooncake(mc) => mc.build_connector_meta(out, reqs, wl, pool, c, ev),
            Connector::Nixl(nx) => nx.build_connector_meta(out, reqs, wl, c, scratch),
        }
    }

    /// `request_finished` / `request_finished_all_groups`, before the blocks are freed.
    /// Returns `delay_free_blocks`: the blocks stay held until the worker reports the request
    /// in `finished_sending`.
    #[allow(clippy::too_many_arguments)]
    pub fn request_finished(
        &mut self,
        r: ReqId,
        req: &ReqState,
        spec: &RequestSpec,
        pool: &mut GpuPool,
        c: &ConnCtx,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) -> bool {
        match self {
            // MooncakeStoreConnector returns (False, None) and keeps its state until the id
            // comes back in `finished_req_ids`.
            Connector::None | Connector::Mooncake(_) => {}
            Connector::Offloading(oc) => return oc.request_finished(r, req, spec, c),
            Connector::SimpleCpu(sc) => sc.request_finished(r, req, spec, pool, c, ghost, ev),
            Connector::Nixl(nx) => return nx.request_finished(r, req),
        }
        false
    }

    /// `update_connector_output(kv_connector_output)`.
    pub fn update_connector_output(
        &mut self,
        w: &WorkerOut,
        reqs: &[ReqState],
        pool: &mut GpuPool,
        c: &ConnCtx,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) {
        match self {
            Connector::None | Connector::Nixl(_) => {}
            Connector::Offloading(oc) => oc.update_connector_output(&w.completed, reqs, c, ghost, ev),
            Connector::SimpleCpu(sc) => {
                sc.update_connector_output(&w.completed, &w.finished_recving, pool, c, ghost, ev)
            }
            Connector::Mooncake(mc) => mc.update_connector_output(&w.completed, pool, ghost, ev),
        }
    }

    /// The transfer a worker stream completes next (the oldest launched one of `d`).
    pub fn next_transfer(&self, d: Direction) -> Option<JobId> {
        match self {
            Connector::None | Connector::Nixl(_) => None,
            Connector::Offloading(oc) => oc
                .jobs
                .iter()
                .filter(|j| j.phase == Phase::Submitted && (j.is_store() == (d == Direction::Store)))
                .map(|j| j.id)
                .min(),
            Connector::SimpleCpu(sc) => simple_cpu::worker::next_transfer(sc, d),
            Connector::Mooncake(mc) => mooncake::worker::next_transfer(mc, d),
        }
    }

    /// GPU blocks an unfinished load is still filling (no forward may touch them).
    pub fn loading_blocks(&self) -> BTreeSet<BlockId> {
        match self {
            Connector::None | Connector::Nixl(_) => BTreeSet::new(),
            Connector::Offloading(oc) => oc
                .jobs
                .iter()
                .filter(|j| !j.is_store() && !matches!(j.phase, Phase::Done | Phase::Failed | Phase::Reported))
                .flat_map(|j| j.blocks.iter().copied())
                .collect(),
            Connector::SimpleCpu(sc) => sc.loading_blocks().into_iter().collect(),
            Connector::Mooncake(mc) => mc.loading_blocks().into_iter().collect(),
        }
    }

    /// References the connector holds on GPU blocks (one entry per reference).
    pub fn gpu_pins(&self, rules: &Rules) -> Vec<BlockId> {
        match self {
            Connector::SimpleCpu(sc) => sc.gpu_pins(rules),
            Connector::Mooncake(mc) => mc.gpu_pins(),
            _ => Vec::new(),
        }
    }

    /// Renumber ids densely (model checker only). `outside`: ids in in-flight worker reports.
    pub fn canonicalize<'a>(&mut self, outside: impl Iterator<Item = &'a mut JobId>) {
        match self {
            Connector::None | Connector::Nixl(_) => {}
            Connector::Offloading(oc) => oc.canonicalize(outside),
            Connector::SimpleCpu(sc) => sc.canonicalize(outside),
            Connector::Mooncake(mc) => mc.canonicalize(outside),
        }
    }

    /// The GPU blocks of a queued load job (how many blocks a failure may start at).
    pub fn load_job_blocks(&self, id: JobId) -> u32 {
        match self {
            Connector::Offloading(oc) => oc.job(id).map_or(0, |j| j.blocks.len() as u32),
            Connector::Mooncake(mc) => mc.loads.iter().find(|j| j.id == id).map_or(0, |j| j.blocks.len() as u32),
            _ => 0,
        }
    }
}

/// Connector settings and rules, borrowed for one call.
pub struct ConnCtx<'a> {
    pub rules: &'a Rules,
    pub block_size: u32,
    pub blocks_per_chunk: u32,
    pub offload_prompt_only: bool,
    pub sync_budget: u32,
    /// GPU prefix caching on (`_chunks_being_loaded` is only kept then).
    pub caching: bool,
    /// The Mooncake store's settings (with `connector = "mooncake"`).
    pub mooncake: Option<&'a MooncakeConfig>,
}

impl ConnCtx<'_> {
    /// Tokens per chunk.
    pub fn tokens_per_chunk(&self) -> u32 {
        self.block_size * self.blocks_per_chunk
    }
}

/// One request in a step's `SchedulerOutput`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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
}

/// The parts of `SchedulerOutput` the connector and the worker read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SchedOut {
    /// In `num_scheduled_tokens` order: running requests, then admissions.
    pub scheduled: Vec<Scheduled>,
    pub preempted: Vec<ReqId>,
    /// `finished_req_ids`: requests finished since the previous step.
    pub finished: Vec<ReqId>,
    /// `Rules::resumed_after_new`: the order of `scheduled_new_reqs`.
    pub resumed_after_new: bool,
}

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

/// Per-step connector scratch (`_current_batch_*`), cleared at the end of every step.
#[derive(Clone, Debug, Default)]
pub struct StepScratch {
    /// Blocks handed to scheduled requests this step.
    pub allocated: BitSet,
    pub load_jobs: Vec<JobId>,
    pub store_jobs: Vec<JobId>,
    pub sync_loads: Vec<ReqId>,
    pub sync_used: u32,
    pub flush: BTreeSet<JobId>,
    /// Router replay: this step's `AuxOutputConnectorMetadata`.
    pub aux: Option<crate::system::expert_rows::AuxMeta>,
    /// NIXL host-buffer mode: this step's `reqs_to_save` (request, block ids to copy).
    pub nixl_save: Vec<(ReqId, Vec<BlockId>)>,
}

/// A small growable bit set with a canonical representation (no trailing zero words).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct BitSet(Vec<u64>);

impl BitSet {
    /// An empty set with room for members below `n` (no regrowth while it fills).
    pub fn with_room(n: usize) -> Self {
        BitSet(Vec::with_capacity(n.div_ceil(64)))
    }
    pub fn insert(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (i % 64);
    }
    pub fn remove(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if w < self.0.len() {
            self.0[w] &= !(1 << (i % 64));
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }
    }
    pub fn extend(&mut self, items: impl IntoIterator<Item = u32>) {
        for i in items {
            self.insert(i);
        }
    }
    pub fn contains(&self, i: u32) -> bool {
        let w = (i / 64) as usize;
        w < self.0.len() && self.0[w] & (1 << (i % 64)) != 0
    }
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
    pub fn clear(&mut self) {
        self.0.clear();
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| (0..64).filter(move |b| bits & (1 << b) != 0).map(move |b| w as u32 * 64 + b))
    }
}
