//! KV connectors, scheduler side, and what the scheduler hands them each step.
//!
//! The scheduler calls the same hooks vLLM's `KVConnectorBase_V1` defines, in the same order:
//! `on_new_request`, `get_num_new_matched_tokens`, `update_state_after_alloc`,
//! `build_connector_meta`, `request_finished`, `update_connector_output`.

pub mod offloading;
mod offloading_store;
pub mod worker;

use super::rules::Rules;
use super::types::{BlockId, JobId, ReqId};
use std::collections::BTreeSet;

pub use offloading::{Job, JobKind, OcReq, OcState, Phase};

/// Which connector an engine runs, with its state.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Connector {
    None,
    Offloading(Box<OcState>),
}

impl Connector {
    pub fn offloading(&self) -> Option<&OcState> {
        match self {
            Connector::Offloading(s) => Some(s),
            Connector::None => None,
        }
    }
    pub fn offloading_mut(&mut self) -> Option<&mut OcState> {
        match self {
            Connector::Offloading(s) => Some(s),
            Connector::None => None,
        }
    }
    pub fn has_pending_work(&self) -> bool {
        self.offloading().is_some_and(|s| s.has_pending_work())
    }
}

/// Connector settings and rules, borrowed for one call.
pub struct ConnCtx<'a> {
    pub rules: &'a Rules,
    pub block_size: u32,
    pub bpc: u32,
    pub offload_prompt_only: bool,
    pub sync_budget: u32,
    /// GPU prefix caching on (`_chunks_being_loaded` is only kept then).
    pub caching: bool,
}

impl ConnCtx<'_> {
    /// Tokens per chunk.
    pub fn tpc(&self) -> u32 {
        self.block_size * self.bpc
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
}

/// Per-step connector scratch (`_current_batch_*`), cleared at the end of every step.
#[derive(Clone, Debug, Default)]
pub struct StepScratch {
    pub allocated: BTreeSet<BlockId>,
    pub load_jobs: Vec<JobId>,
    pub store_jobs: Vec<JobId>,
    pub sync_loads: Vec<ReqId>,
    pub sync_used: u32,
    pub flush: BTreeSet<JobId>,
    /// Router replay: this step's `AuxOutputConnectorMetadata`.
    pub aux: Option<crate::system::expert_rows::AuxMeta>,
}

/// A small growable bit set with a canonical representation (no trailing zero words).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct BitSet(Vec<u64>);

impl BitSet {
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
