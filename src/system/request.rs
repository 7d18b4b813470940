//! Per-request scheduler and KV-manager state (vLLM `v1/request.py: Request` plus the
//! request's entries in `SingleTypeKVCacheManager.req_to_blocks` / `num_cached_block`).
//!
//! Tokens and block hashes are not stored here: a request's tokens are its workload
//! script's first `num_tokens()` tokens, and its block hashes are the script's hashes of
//! the full blocks among them (vLLM hashes eagerly, `Request.update_block_hashes`).

use super::types::{BlockHash, BlockId, ReqId, Status};
use super::workload::RequestSpec;
use crate::system::collections::pack::pack_fields;

#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ReqState {
    pub status: Status,
    /// `num_computed_tokens` (optimistic: counts scheduled tokens).
    pub num_computed: u32,
    /// Output tokens appended so far.
    pub num_output: u32,
    /// The block table (`req_to_blocks`).
    pub table: Vec<BlockId>,
    /// `num_cached_block[req]`: leading table entries already hashed; `None` = no entry
    /// (fresh request: the next allocation is a first allocation that may adopt hits).
    pub num_cached_block: Option<u32>,
    /// `num_preemptions > 0`.
    pub preempted: bool,
    /// Member of `Scheduler._inflight_prefills`.
    pub inflight_prefill: bool,
    /// `num_output_placeholders` (async scheduling: tokens being sampled, not yet appended).
    pub placeholders: u16,
    /// `num_in_flight_tokens`: scheduled, output not yet processed.
    pub in_flight: u16,
    /// `num_stale_output_tokens`: in-flight tokens scheduled before a preemption.
    pub stale: u16,
    /// `last_sched_seq` (deferred-free fence; only with `defer_block_free`).
    pub last_sched_seq: u32,
    /// `drop_stale_output`: stale in-flight output is discarded, not delivered.
    pub drop_stale: bool,
    /// Streaming sessions: the spec being served (`Workload::spec`): the input number (0 = the
    /// first), unless the run decides how inputs are laid out (`Workload::with_layouts`),
    /// where `Workload::input_no` reads it.
    pub turn: u8,
    /// Streaming sessions: updates the client has sent so far (the later inputs, then the
    /// end-of-session sentinel); those beyond `turn` wait in `streaming_queue`.
    pub sent: u8,
}

pack_fields!(clone ReqState {
    status,
    num_computed,
    num_output,
    table,
    num_cached_block,
    preempted,
    inflight_prefill,
    placeholders,
    in_flight,
    stale,
    last_sched_seq,
    drop_stale,
    turn,
    sent
});

impl ReqState {
    pub fn new() -> Self {
        ReqState {
            status: Status::Pending,
            num_computed: 0,
            num_output: 0,
            table: Vec::new(),
            num_cached_block: None,
            preempted: false,
            inflight_prefill: false,
            placeholders: 0,
            in_flight: 0,
            stale: 0,
            last_sched_seq: 0,
            drop_stale: false,
            turn: 0,
            sent: 0,
        }
    }

    pub fn num_tokens(&self, spec: &RequestSpec) -> u32 {
        spec.prompt_len + self.num_output
    }

    /// `block_hashes`: hashes of every full block of the current tokens.
    pub fn block_hashes<'a>(&self, spec: &'a RequestSpec, block_size: u32) -> &'a [BlockHash] {
        let n = (self.num_tokens(spec) / block_size) as usize;
        &spec.hashes[..n.min(spec.hashes.len())]
    }
}

impl Default for ReqState {
    fn default() -> Self {
        Self::new()
    }
}

/// Request ids in a queue, front first.
pub type Queue = Vec<ReqId>;
