//! The KV-cache manager for one full-attention group (vLLM `v1/core/kv_cache_manager.py:
//! KVCacheManager` over `single_type_kv_cache_manager.py: FullAttentionManager`).
//!
//! Every function here keeps vLLM's ordering of effects: in `allocate_slots` the capacity
//! check precedes every mutation, hits are touched before any fresh block is taken, and
//! blocks are cached only up to the scheduled end unless caching is delayed for an async load.

use super::events::Events;
use super::ghost::{Ghost, Mark};
use super::gpu_pool::GpuPool;
use super::request::ReqState;
use super::rules::Rules;
use super::types::{cdiv, BlockId};
use super::workload::RequestSpec;
use std::ops::Range;

/// Borrowed context every manager call needs.
pub struct KvCtx<'a> {
    pub spec: &'a RequestSpec,
    pub rules: &'a Rules,
    pub block_size: u32,
    pub max_model_len: u32,
    pub caching: bool,
}

/// `get_computed_blocks`: the longest cached prefix, capped at `num_tokens - 1` (the last
/// token is always recomputed to produce logits). Pure: no reference counts change.
/// `max_cache_hit_length` (router replay, 0.33) caps the hit further. (`pool` is mutable
/// only for replay's lookup memo.)
pub fn get_computed_blocks(pool: &mut GpuPool, req: &ReqState, k: &KvCtx, cap: Option<u32>) -> (Vec<BlockId>, u32) {
    let mut hits = Vec::new();
    let n = get_computed_blocks_into(pool, req, k, cap, &mut hits);
    (hits, n)
}

/// [`get_computed_blocks`] into `hits` (emptied first; the scheduler's reused buffer).
pub fn get_computed_blocks_into(
    pool: &mut GpuPool,
    req: &ReqState,
    k: &KvCtx,
    cap: Option<u32>,
    hits: &mut Vec<BlockId>,
) -> u32 {
    hits.clear();
    if !k.caching {
        return 0;
    }
    let hashes = req.block_hashes(k.spec, k.block_size);
    let max_len = req.num_tokens(k.spec).saturating_sub(1).min(cap.unwrap_or(u32::MAX));
    pool.find_longest_cache_hit_into(hashes, max_len, k.block_size, hits);
    hits.len() as u32 * k.block_size
}

/// `get_num_blocks_to_allocate` for full attention.
fn num_blocks_to_allocate(pool: &GpuPool, req: &ReqState, num_tokens: u32, hits: &[BlockId], block_size: u32) -> u32 {
    let required = cdiv(num_tokens, block_size);
    let have = req.table.len() as u32;
    if req.num_cached_block.is_some() {
        return required.saturating_sub(have);
    }
    let fresh = required.saturating_sub(hits.len() as u32 + have);
    // Hit blocks with ref 0 sit in the free queue: touching them consumes free capacity.
    let evictable = hits.iter().filter(|&&b| pool.ref_cnt(b) == 0).count() as u32;
    fresh + evictable
}

/// Arguments of `allocate_slots` besides the request.
pub struct Alloc<'a> {
    pub num_new_tokens: u32,
    pub num_new_computed: u32,
    pub hits: &'a [BlockId],
    pub num_external: u32,
    pub delay_cache: bool,
    pub reserved_blocks: u32,
    /// `full_sequence_must_fit` (the scheduler passes `scheduler_reserve_full_isl`, default
    /// true, for waiting requests): admit only if the whole current sequence fits.
    pub full_sequence: bool,
}

/// `KVCacheManager.allocate_slots`: returns where the newly allocated blocks are in the
/// request's table (appended last), or None (nothing changed) when the pool cannot hold them.
pub fn allocate_slots(
    pool: &mut GpuPool,
    req: &mut ReqState,
    a: Alloc,
    k: &KvCtx,
    ghost: &mut Ghost,
    ev: &mut Events,
) -> Option<Range<usize>> {
    let b = k.block_size;
    let local = req.num_computed + a.num_new_computed;
    let total = (local + a.num_external).min(k.max_model_len);
    let need_slots = (total + a.num_new_tokens).min(k.max_model_len);
    if a.full_sequence {
        // First check and fail if the full request sequence won't fit (no watermark: 0.0).
        let full = req.num_tokens(k.spec).min(k.max_model_len);
        if num_blocks_to_allocate(pool, req, full, a.hits, b) > pool.num_free() {
            return None;
        }
    }
    let needed = num_blocks_to_allocate(pool, req, need_slots, a.hits, b);
    if needed > pool.num_free().saturating_sub(a.reserved_blocks) || pool.num_free() < a.reserved_blocks {
        return None;
    }
    if req.num_cached_block.is_none() && (!a.hits.is_empty() || a.num_external > 0) {
        // add_local_computed_blocks: touch, then adopt the hits.
        pool.touch(a.hits, k.rules.touch_dequeues);
        if !a.hits.is_empty() {
            ghost.mark(Mark::G1Hit);
        }
        req.table.extend_from_slice(a.hits);
        pool.note_holders(a.hits, &[]);
        req.num_cached_block = Some(req.table.len() as u32);
        // allocate_external_computed_blocks: fresh blocks for the connector's tokens.
        if a.num_external > 0 {
            let n = cdiv(local + a.num_external, b).saturating_sub(req.table.len() as u32);
            let from = req.table.len();
            pool.push_new_blocks(n, &mut req.table, ghost, ev);
            pool.note_holders(&req.table[from..], &[]);
        }
    }
    // allocate_new_blocks up to need_slots.
    let n = cdiv(need_slots, b).saturating_sub(req.table.len() as u32);
    let from = req.table.len();
    // Most calls (a decode step inside a block) need no new block.
    if n > 0 {
        pool.push_new_blocks(n, &mut req.table, ghost, ev);
        pool.note_holders(&req.table[from..], &[]);
    }
    let new_blocks = from..req.table.len();
    if a.delay_cache && k.rules.delay_cache_async_loads {
        return Some(new_blocks);
    }
    let upto = if k.rules.cache_scheduled_only {
        (total + a.num_new_tokens).min(req.num_tokens(k.spec))
    } else {
        // Mutation: cache every full block whose hash is known, scheduled or not.
        req.num_tokens(k.spec)
    };
    cache_blocks(pool, req, upto, k, ev);
    Some(new_blocks)
}

/// `SingleTypeKVCacheManager.cache_blocks(req, n)`: hash the full blocks among the first `n`
/// tokens that are not hashed yet.
pub fn cache_blocks(pool: &mut GpuPool, req: &mut ReqState, n: u32, k: &KvCtx, ev: &mut Events) {
    if !k.caching {
        return;
    }
    let hashes = req.block_hashes(k.spec, k.block_size);
    let num_full = (n.min(hashes.len() as u32 * k.block_size) / k.block_size).min(req.table.len() as u32);
    let done = req.num_cached_block.unwrap_or(0);
    if done >= num_full {
        return;
    }
    pool.cache_full_blocks(&req.table, hashes, done as usize, num_full as usize, ev);
    req.num_cached_block = Some(num_full);
}

/// `KVCacheManager.free`: release the table tail-first and forget the request. The table is
/// emptied in place: its buffer stays with the request (a reused engine's next copy fills it).
pub fn free(pool: &mut GpuPool, req: &mut ReqState, ghost: &mut Ghost) {
    req.num_cached_block = None;
    pool.note_holders(&[], &req.table);
    pool.note_table_cleared(&req.table);
    pool.free_blocks(req.table.iter().rev().copied(), ghost);
    req.table.clear();
}

/// Blocks `req` still needs to hold its whole sequence (`_request_remaining_blocks`).
pub fn remaining_blocks(req: &ReqState, k: &KvCtx) -> u32 {
    let full = req.num_tokens(k.spec).min(k.max_model_len);
    cdiv(full, k.block_size).saturating_sub(req.table.len() as u32)
}
