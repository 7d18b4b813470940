//! Host-tier properties (OC §9.4, SimpleCPU §4): integrity of what is stored, and accounting.

use super::Scope;
use crate::system::connector::{OffloadingState, SimpleCpuState};
use crate::system::ghost::Breach;
use crate::system::host_arc::ArcLists;
use crate::system::host_tier::{HostEntry, Key};
use crate::system::types::{ContentTag, NULL_BLOCK};
use crate::system::{Engine, Rules, Workload};

/// `host-integrity`: every ready host entry holds exactly the KV of the prefix its key names.
pub fn integrity(s: &Scope, e: &Engine) -> bool {
    let b = s.cfg.block_size;
    let bpc = s.cfg.offload().map_or(1, |o| o.blocks_per_chunk);
    engine_integrity(e, b, bpc, s.wl)
}

/// `host-integrity` over an engine (replay calls it directly).
pub fn engine_integrity(e: &Engine, b: u32, bpc: u32, wl: &Workload) -> bool {
    if let Some(sc) = e.conn.simple_cpu() {
        return integrity_simple_cpu(b, sc);
    }
    if let Some(mc) = e.conn.mooncake() {
        // The Mooncake pool: every key holds exactly the KV of the prefix it names.
        return mc.pool.iter().all(|(k, c)| *c == ContentTag::full(*k, b));
    }
    let Some(oc) = e.conn.offloading() else {
        return true;
    };
    oc.host.entries().all(|(k, en)| entry_intact(k, en, b, bpc, wl))
}

/// One host entry is intact (or not ready, so not yet claimed).
pub fn entry_intact(k: &Key, en: &HostEntry, b: u32, bpc: u32, wl: &Workload) -> bool {
    if en.ref_cnt < 0 {
        return true;
    }
    // The chunk's blocks are the `bpc` blocks whose chain ends at `k`, walked from the end
    // (`Workload::chain_ending_at` without allocating).
    en.content.len() == bpc as usize
        && wl.chain_back(*k, bpc).count() == bpc as usize
        && en.content.iter().rev().zip(wl.chain_back(*k, bpc)).all(|(c, h)| *c == ContentTag::full(h, b))
}

/// SimpleCPU: every CPU block registered in the CPU pool's cached map under a hash holds
/// exactly that prefix's KV.
fn integrity_simple_cpu(b: u32, sc: &SimpleCpuState) -> bool {
    sc.cpu
        .cached_blocks()
        .all(|(h, cb)| sc.cpu.block_hash(cb) == Some(h) && sc.cpu.content(cb) == ContentTag::full(h, b))
}

/// The ARC lists of an OffloadingConnector run with `eviction_policy = "arc"`.
pub fn arc(e: &Engine) -> Option<&ArcLists> {
    engine_arc(e)
}

/// Guard `reach-arc-t2`: ARC's T2 (keys hit again since they entered) holds a key.
pub fn engine_arc_t2(e: &Engine) -> bool {
    engine_arc(e).is_some_and(|a| !a.t2.is_empty())
}

/// Guard `reach-arc-ghost-hit`: a ghost hit (B1 or B2) has moved ARC's target.
pub fn engine_arc_ghost_hit(e: &Engine) -> bool {
    engine_arc(e).is_some_and(|a| a.target.get() != 0.0)
}

/// Guard `reach-fenced-store`: a finished request's store job is still in flight, its
/// source blocks fenced (`_block_id_to_pending_jobs` non-empty), so its completion runs
/// `_remove_pending_job` (connector-assert, finding 35).
pub fn engine_fenced_store(e: &Engine) -> bool {
    e.conn.offloading().is_some_and(|oc| !oc.fences.is_empty())
}

/// The ARC lists of an engine whose OffloadingConnector runs `eviction_policy = "arc"`.
fn engine_arc(e: &Engine) -> Option<&ArcLists> {
    e.conn.offloading().and_then(|oc| oc.host.arc.as_deref())
}

/// `arc-bounds`: the ARC lists agree with the host entries and stay within their bounds
/// (`ArcLists::bounds_hold`); vacuous under LRU.
pub fn arc_bounds(_: &Scope, e: &Engine) -> bool {
    engine_arc_bounds(e)
}

/// `arc-bounds` over an engine (replay calls it directly).
pub fn engine_arc_bounds(e: &Engine) -> bool {
    let Some(a) = e.conn.offloading().and_then(|oc| oc.host.arc.as_deref()) else {
        return true;
    };
    let resident: std::collections::BTreeSet<Key> =
        e.conn.offloading().unwrap().host.entries().map(|(k, _)| *k).collect();
    a.bounds_hold(&resident)
}

/// `host-accounting`: vLLM's counters match the entries, capacity is never exceeded, every
/// pin belongs to an in-flight load, and every job completes once.
pub fn accounting(s: &Scope, e: &Engine) -> bool {
    engine_accounting(e, s.rules)
}

/// `host-accounting` over an engine (replay calls it directly).
pub fn engine_accounting(e: &Engine, rules: &Rules) -> bool {
    if e.ghost.has(Breach::BadCompletion) {
        return false;
    }
    if let Some(sc) = e.conn.simple_cpu() {
        return accounting_simple_cpu(rules, sc);
    }
    let Some(oc) = e.conn.offloading() else {
        return true;
    };
    let h = &oc.host;
    let pending = h.entries().filter(|(_, e)| e.ref_cnt < 0).count() as u32;
    let evictable = h.entries().filter(|(_, e)| e.ref_cnt == 0).count() as u32;
    if pending != h.num_write_pending || evictable != h.num_evictable {
        return false;
    }
    if h.len() as u32 + h.num_free_slots() != h.capacity || h.eviction_order_len() as u32 != evictable {
        return false;
    }
    h.entries().filter(|(_, e)| e.ref_cnt > 0).all(|(k, e)| pins_match(oc, k, e))
}

/// A pinned key is pinned once per in-flight load that names it.
pub fn pins_match(oc: &OffloadingState, k: &Key, e: &HostEntry) -> bool {
    let loads = oc.jobs.iter().filter(|j| !j.is_store() && j.keys.contains(k)).count() as i32;
    loads == e.ref_cnt
}

/// SimpleCPU's CPU pool: a block is in the free queue iff its reference count is 0, the queue
/// has no duplicates and its length is the free count, every reference belongs to a lookup
/// pin, a load or a store not yet processed, the null block is never used, and the pool never
/// holds more than its blocks.
fn accounting_simple_cpu(rules: &Rules, sc: &SimpleCpuState) -> bool {
    let p = &sc.cpu;
    let n = p.num_blocks() as usize;
    let mut holders = vec![0u32; n];
    for b in sc.cpu_refs(rules) {
        if b == NULL_BLOCK || b as usize >= n {
            return false;
        }
        holders[b as usize] += 1;
    }
    let queue = p.free_queue();
    if queue.len() as u32 != p.num_free() || p.num_free() > p.num_blocks() - 1 {
        return false;
    }
    let mut seen = vec![false; n];
    for &b in &queue {
        if b == NULL_BLOCK || seen[b as usize] {
            return false;
        }
        seen[b as usize] = true;
    }
    (1..n).all(|b| {
        let rc = u32::from(p.ref_cnt(b as u32));
        rc == holders[b] && (rc == 0) == seen[b]
    })
}
