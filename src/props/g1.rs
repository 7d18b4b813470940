//! G1 properties (GP §4.1): accounting and cache soundness.

use super::Scope;
use crate::system::ghost::Breach;
use crate::system::types::{BadKind, BlockHash, BlockId, ContentTag, Status, NULL_BLOCK};
use crate::system::{Engine, Rules};
use std::cell::RefCell;

/// `g1-accounting`: a block is free iff its ref count is 0, the queue has no duplicates,
/// ref counts equal the number of tables, deferred frees and connector pins holding the
/// block, the null block is never used.
pub fn accounting(s: &Scope, e: &Engine) -> bool {
    engine_accounting(e, s.rules)
}

/// `g1-accounting` over an engine (replay calls it directly).
pub fn engine_accounting(e: &Engine, rules: &Rules) -> bool {
    if e.ghost.has(Breach::HandedOutInUse) {
        return false;
    }
    let n = e.pool.num_blocks() as usize;
    // Per-block counters kept per thread (this runs on every state the checker visits).
    ACCOUNTING_BUFS.with(|c| {
        let (holders, seen) = &mut *c.borrow_mut();
        holders.clear();
        holders.resize(n, 0);
        seen.clear();
        seen.resize(n, false);
        accounting_with(e, rules, holders, seen)
    })
}

thread_local! {
    static ACCOUNTING_BUFS: RefCell<(Vec<u32>, Vec<bool>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// [`engine_accounting`] with `holders` all 0 and `seen` all false, one entry per block.
fn accounting_with(e: &Engine, rules: &Rules, holders: &mut [u32], seen: &mut [bool]) -> bool {
    let n = holders.len();
    for q in &e.reqs {
        for &b in &q.table {
            if b == NULL_BLOCK {
                return false;
            }
            holders[b as usize] += 1;
        }
    }
    // Blocks of finished requests parked behind a step fence (async `deferred_frees`).
    for (_, blocks) in &e.deferred_frees {
        for &b in blocks {
            holders[b as usize] += 1;
        }
    }
    for b in e.conn.gpu_pins(rules) {
        if b == NULL_BLOCK {
            return false;
        }
        holders[b as usize] += 1;
    }
    // The free queue has `num_free` blocks, none twice (walked in place: a repeated block
    // ends the walk, so a cycle cannot hold it).
    let mut len = 0;
    for b in e.pool.free_queue_iter() {
        if b == NULL_BLOCK || seen[b as usize] {
            return false;
        }
        seen[b as usize] = true;
        len += 1;
    }
    if len != e.pool.num_free() {
        return false;
    }
    (1..n).all(|b| {
        let rc = u32::from(e.pool.ref_cnt(b as u32));
        rc == holders[b] && (rc == 0) == seen[b]
    })
}

/// `g1-cache-sound`: every cached hash names a block carrying that hash whose content is that
/// prefix's KV. The one exemption is vLLM's recompute policy by design: a block known to
/// hold bad KV (failed load, or computed from it) while every request holding it will
/// recompute it before reading it.
pub fn cache_sound(s: &Scope, e: &Engine) -> bool {
    engine_cache_sound(e, s.cfg.block_size)
}

/// `g1-cache-sound` over an engine.
pub fn engine_cache_sound(e: &Engine, b: u32) -> bool {
    e.pool.cached_blocks().all(|(h, blk)| cached_block_sound(e, b, h, blk))
}

/// One entry of the cached map (`h` lists `blk`) is sound.
#[inline(always)]
pub fn cached_block_sound(e: &Engine, b: u32, h: BlockHash, blk: BlockId) -> bool {
    if e.pool.block_hash(blk) != Some(h) {
        return false;
    }
    let c = e.pool.content(blk);
    if c == ContentTag::full(h, b) {
        return true;
    }
    let known_bad = matches!(c, ContentTag::Bad(BadKind::LoadFailed | BadKind::Tainted));
    let holders: Vec<_> = e.reqs.iter().filter(|q| q.table.contains(&blk)).collect();
    known_bad
        && !holders.is_empty()
        && holders.iter().all(|q| {
            let pos = q.table.iter().position(|&x| x == blk).unwrap() as u32;
            q.status == Status::Running && q.num_computed <= pos * b
        })
}
