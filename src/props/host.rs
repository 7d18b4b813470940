//! Host-tier properties (OC §9.4): integrity of what is stored, and accounting.

use crate::model::{KvModel, KvState};
use crate::system::ghost::Breach;
use crate::system::types::ContentTag;

/// `host-integrity`: every ready host entry holds exactly the KV of the prefix its key names.
pub fn integrity(m: &KvModel, s: &KvState) -> bool {
    let Some(oc) = s.engine.conn.offloading() else {
        return true;
    };
    let b = m.scope.cfg.block_size;
    let bpc = m.scope.cfg.offload().map_or(1, |o| o.blocks_per_chunk);
    oc.host.entries().filter(|(_, en)| en.ref_cnt >= 0).all(|(k, en)| {
        let Some(chain) = m.scope.workload.chain_ending_at(*k, bpc) else {
            return false;
        };
        en.content.len() == chain.len() && en.content.iter().zip(&chain).all(|(c, h)| *c == ContentTag::full(*h, b))
    })
}

/// `host-accounting`: vLLM's counters match the entries, capacity is never exceeded, every
/// pin belongs to an in-flight load, and every job completes once.
pub fn accounting(_m: &KvModel, s: &KvState) -> bool {
    let Some(oc) = s.engine.conn.offloading() else {
        return true;
    };
    if s.engine.ghost.has(Breach::BadCompletion) {
        return false;
    }
    let h = &oc.host;
    let pending = h.entries().filter(|(_, e)| e.ref_cnt < 0).count() as u32;
    let evictable = h.entries().filter(|(_, e)| e.ref_cnt == 0).count() as u32;
    if pending != h.num_write_pending || evictable != h.num_evictable {
        return false;
    }
    if h.len() as u32 + h.num_free_slots() != h.capacity || h.eviction_order().len() as u32 != evictable {
        return false;
    }
    h.entries().filter(|(_, e)| e.ref_cnt > 0).all(|(k, e)| {
        let loads = oc.jobs.iter().filter(|j| !j.is_store() && j.keys.contains(k)).count() as i32;
        loads == e.ref_cnt
    })
}
