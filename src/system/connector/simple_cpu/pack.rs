//! SimpleCPU's packed form (`collections::pack`): its CPU pool as the G1 pool packs, then its
//! requests and events field by field; what the frontier keeps of it, decoded in place into
//! the box the search's engine reuses.

use super::{
    LoadEvent, LoadRequestState, PendingHit, SimpleCpuReq, SimpleCpuState, StoreEvent, StoreRequestState, Transfer,
};
use crate::system::collections::pack::pack_fields;
use crate::system::connector::Phase;
use crate::system::gpu_pool::GpuPool;

pack_fields!(StoreRequestState { mirror, cursor, events, finished });
pack_fields!(PendingHit { blocks, hit, num_computed });
pack_fields!(LoadRequestState { gpu, cpu, event, finished });
pack_fields!(SimpleCpuReq { store, pending, load, local_hit, owed });
pack_fields!(Transfer { gpu, cpu, hashes, req });
pack_fields!(StoreEvent { id, parts, reqs, phase, snapshot });
pack_fields!(LoadEvent { id, reqs, gpu, cpu, phase });
pack_fields!(SimpleCpuState {
    cpu,
    reqs,
    stores,
    loads,
    in_flight,
    pending_finished,
    next_store,
    next_load,
    fifo,
    lazy_target,
    cursor
});

/// Decoders' starting values (every field is then decoded).
impl Default for PendingHit {
    fn default() -> Self {
        PendingHit { blocks: Vec::new(), hit: 0, num_computed: 0 }
    }
}
impl Default for LoadRequestState {
    fn default() -> Self {
        LoadRequestState { gpu: Vec::new(), cpu: Vec::new(), event: None, finished: false }
    }
}
impl Default for Transfer {
    fn default() -> Self {
        Transfer { gpu: Vec::new(), cpu: Vec::new(), hashes: Vec::new(), req: 0 }
    }
}
impl Default for StoreEvent {
    fn default() -> Self {
        StoreEvent { id: 0, parts: Vec::new(), reqs: Vec::new(), phase: Phase::Built, snapshot: Vec::new() }
    }
}
impl Default for LoadEvent {
    fn default() -> Self {
        LoadEvent { id: 0, reqs: Vec::new(), gpu: Vec::new(), cpu: Vec::new(), phase: Phase::Built }
    }
}
impl Default for SimpleCpuState {
    fn default() -> Self {
        SimpleCpuState {
            cpu: GpuPool::default(),
            reqs: Vec::new(),
            stores: Vec::new(),
            loads: Vec::new(),
            in_flight: Vec::new(),
            pending_finished: Vec::new(),
            next_store: 0,
            next_load: 0,
            fifo: Vec::new(),
            lazy_target: 0,
            cursor: None,
        }
    }
}
