//! The Mooncake store's packed form (`collections::pack`): the pool in key order, then the
//! requests and jobs field by field; the trace-replay log packs to nothing.

use super::{Ledger, LoadJob, LoadSpec, MooncakeReq, MooncakeState, SaveJob, Tracker};
use crate::system::collections::pack::pack_fields;
use crate::system::connector::Phase;

pack_fields!(LoadSpec { vllm_cached, kvpool_cached, can_load, tail_key });
pack_fields!(Tracker { token_len, num_saved, prefill_end });
pack_fields!(Ledger { live, saved_offset });
pack_fields!(MooncakeReq { load_spec, tracker, ledger, closing });
pack_fields!(SaveJob { id, req, token_len, blocks, hashes, pinned, phase });
pack_fields!(LoadJob { id, req, keys, blocks, phase, invalid_from });
pack_fields!(MooncakeState { pool, reqs, unfinished, saves, loads, next_save, next_load, log });

/// Decoders' starting values (every field is then decoded).
impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec { vllm_cached: 0, kvpool_cached: 0, can_load: false, tail_key: None }
    }
}
impl Default for Tracker {
    fn default() -> Self {
        Tracker { token_len: 0, num_saved: 0, prefill_end: 0 }
    }
}
impl Default for SaveJob {
    fn default() -> Self {
        SaveJob {
            id: 0,
            req: 0,
            token_len: 0,
            blocks: Vec::new(),
            hashes: Vec::new(),
            pinned: Vec::new(),
            phase: Phase::Built,
        }
    }
}
impl Default for LoadJob {
    fn default() -> Self {
        LoadJob { id: 0, req: 0, keys: Vec::new(), blocks: Vec::new(), phase: Phase::Built, invalid_from: None }
    }
}
impl Default for MooncakeState {
    fn default() -> Self {
        MooncakeState {
            pool: Default::default(),
            reqs: Vec::new(),
            unfinished: Vec::new(),
            saves: Vec::new(),
            loads: Vec::new(),
            next_save: 0,
            next_load: 0,
            log: Default::default(),
        }
    }
}
