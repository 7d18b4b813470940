//! Routed-expert rows for router replay (vLLM's AuxOutput connector, `aux_output_connector/*`,
//! 0.31 and 0.33 forms, plus prime-rl's patches). See docs/router-replay.md.
//!
//! A row is what the MoE router chose for one *forwarded* position; positions covered by a
//! prefix hit or an external load are not forwarded, so their rows can only come from the
//! per-instance row store (`row_store`), keyed by block hash. The worker (`worker`) captures,
//! publishes and emits rows; the scheduler side (`scheduler`) decides each request's emit
//! start, sends block hashes as keys, retains rows (0.33) and gates or clamps hits so that no
//! request needs rows the store lacks. The frontend concatenates each request's emitted rows
//! (`RowsRecord`), which rows-exact and start-anchored check at finish.

mod pack;
pub mod row_store;
pub mod scheduler;
pub mod worker;

use crate::system::types::ReqId;
pub use row_store::{RowStore, StoreFull};
pub use scheduler::{AuxMeta, AuxSched};
pub use worker::{Crash, Forwarded, RowsOutput, WorkerReq};

/// The rows a request's client has received so far (`routed_experts_chunks`).
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RowsRecord {
    /// Position of the first row, if any.
    pub first: Option<u32>,
    /// One past the last row.
    pub end: u32,
    /// A chunk did not continue where the previous one ended.
    pub gap: bool,
    /// Rows received.
    pub count: u32,
}

impl RowsRecord {
    pub fn append(&mut self, start: u32, end: u32) {
        if start >= end {
            return;
        }
        match self.first {
            None => self.first = Some(start),
            Some(_) if start != self.end => self.gap = true,
            Some(_) => {}
        }
        self.end = end;
        self.count += end - start;
    }
    pub fn len(&self) -> u32 {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

/// Everything router replay adds to one engine.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct AuxState {
    pub(crate) sched: AuxSched,
    pub(crate) row_store: RowStore,
    pub(crate) workers: Vec<Option<WorkerReq>>,
    pub(crate) rows: Vec<RowsRecord>,
    /// The engine died (BlockObjectStoreError or a buffer assertion).
    pub(crate) dead: bool,
}

impl AuxState {
    pub fn new(num_reqs: usize, store_objects: u32, capacity_blocks: u32, evicts_live: bool, grows: bool) -> Self {
        AuxState {
            sched: AuxSched::new(num_reqs, capacity_blocks),
            row_store: RowStore::new(store_objects, evicts_live, grows),
            workers: vec![None; num_reqs],
            rows: vec![RowsRecord::default(); num_reqs],
            dead: false,
        }
    }

    /// Trace replay: one more request slot (the engine's `add_slot`).
    pub fn add_slot(&mut self) {
        self.sched.add_slot();
        self.workers.push(None);
        self.rows.push(RowsRecord::default());
    }

    /// Trace replay: nothing of slot `r`'s last request is left: the scheduler sent its
    /// terminal event, the worker tore its state down (its keys released in the store).
    pub fn slot_idle(&self, r: ReqId) -> bool {
        self.workers[r as usize].is_none() && self.sched.slot_idle(r)
    }

    /// Trace replay: idle slot `r` carries a new request; its client has received no rows.
    pub fn reset_slot(&mut self, r: ReqId) {
        debug_assert!(self.slot_idle(r));
        self.rows[r as usize] = RowsRecord::default();
    }

    /// Rows emitted for `r` so far.
    pub fn record(&self, r: ReqId) -> &RowsRecord {
        &self.rows[r as usize]
    }
}
