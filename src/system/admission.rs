//! Cache-aware admission (vLLM 0.34 `SchedulerConfig.cache_aware_admission_window`,
//! `Scheduler._reorder_waiting_by_cached_prefix`): before the waiting requests are admitted,
//! the plain waiting ones (status WAITING, nothing computed) among the first N of `waiting` are
//! put in order of their G1 prefix hit, deepest first, arrival order breaking ties. Other
//! requests in the window (preempted, parked streaming sessions, partly computed ones) keep
//! their positions, and nothing beyond the window moves.
//!
//! It applies only with the profile's rule `cache_aware_admission`, the window on, prefix caching
//! on, at least two waiting requests and a KV cache usage (`BlockPool.get_usage`: one minus the
//! free share of the usable blocks) of at least `cache_aware_admission_threshold`. The threshold
//! is compared exactly, as a fraction in thousandths (vLLM compares Python floats).

use super::engine::{Ctx, Engine};
use super::kv_manager;
use super::scheduler::kv_ctx;
use super::types::{ReqId, Status};

/// `usage < threshold`, exactly: `1 - free / total < permille / 1000`.
fn below_threshold(e: &Engine, permille: u32) -> bool {
    let total = u64::from(e.pool.num_blocks().saturating_sub(1));
    if total == 0 {
        return true; // vLLM's usage is 0 without usable blocks
    }
    let used = total - u64::from(e.pool.num_free()).min(total);
    used * 1000 < u64::from(permille) * total
}

/// `Scheduler._reorder_waiting_by_cached_prefix`, called where `Scheduler.schedule` calls it:
/// before the waiting requests are scheduled, in a step that preempted nothing.
pub(crate) fn reorder_waiting_by_cached_prefix(e: &mut Engine, ctx: &Ctx) {
    let window = ctx.cfg.cache_aware_admission_window as usize;
    if !ctx.rules.cache_aware_admission || window == 0 || !ctx.cfg.enable_prefix_caching {
        return;
    }
    if e.waiting.len() < 2 || below_threshold(e, ctx.cfg.cache_aware_admission_threshold_permille) {
        return;
    }
    let head: Vec<ReqId> = e.waiting.iter().take(window).copied().collect();
    let slots: Vec<usize> = (0..head.len())
        .filter(|&i| {
            let q = &e.reqs[head[i] as usize];
            q.status == Status::Waiting && q.num_computed == 0
        })
        .collect();
    if slots.len() < 2 {
        return;
    }
    // `KVCacheManager.get_num_cached_tokens`: the probe of `get_computed_blocks`, no side effect.
    let cached: Vec<u32> = slots
        .iter()
        .map(|&i| {
            let r = head[i];
            let k = kv_ctx(ctx, r, e.reqs[r as usize].turn);
            kv_manager::get_computed_blocks(&mut e.pool, &e.reqs[r as usize], &k, None).1
        })
        .collect();
    let mut order: Vec<usize> = (0..slots.len()).collect();
    // Deepest cached prefix first; a stable sort keeps arrival order among equals.
    order.sort_by_key(|&j| std::cmp::Reverse(cached[j]));
    for (slot, &j) in slots.iter().zip(&order) {
        e.waiting[*slot] = head[slots[j]];
    }
}
