//! Preemption and block release (vLLM `Scheduler._preempt_request`, `_free_request_blocks`,
//! `_request_blocks_can_be_freed`): what the scheduler does to give a request's blocks back,
//! for a running request it preempts and (variant `fix-session-hold`) for a KV-holding waiting
//! request that cannot allocate while nothing runs.

use super::engine::{Ctx, Engine};
use super::events::{Event, Events};
use super::ghost::Mark;
use super::kv_manager;
use super::types::{ReqId, Status};

/// `_request_blocks_can_be_freed`: with `defer_block_free`, only once every step that was
/// scheduled before is processed.
pub(crate) fn blocks_can_be_freed(e: &Engine, ctx: &Ctx, r: ReqId) -> bool {
    !ctx.cfg.defer_block_free() || e.reqs[r as usize].last_sched_seq <= e.processed_seq
}

/// `_free_request_blocks`: free now, or park the blocks behind the current step's fence.
pub(crate) fn free_request_blocks(e: &mut Engine, ctx: &Ctx, r: ReqId) {
    if blocks_can_be_freed(e, ctx, r) {
        return kv_manager::free(&mut e.pool, &mut e.reqs[r as usize], &mut e.ghost);
    }
    let q = &mut e.reqs[r as usize];
    let blocks = std::mem::take(&mut q.table);
    q.num_cached_block = None;
    // The blocks stay held (by the deferred free) until the fence is processed.
    e.pool.note_table_cleared(&blocks);
    if !blocks.is_empty() {
        e.deferred_frees.push((e.sched_seq, blocks));
    }
}

/// `_preempt_request`: free the blocks, reset to token 0, front of `waiting`. The connector
/// is not told (it learns from `preempted_req_ids`). In-flight output becomes stale: it is
/// still delivered but no longer moves the request's counters, unless the connector requires
/// KV delivery (then it is dropped) or an earlier drop-mode share is still undrained (it stays
/// dropped: its positions were already resampled).
pub(crate) fn preempt(e: &mut Engine, ctx: &Ctx, r: ReqId, ev: &mut Events) {
    debug_assert_eq!(e.reqs[r as usize].status, Status::Running);
    if let Some(a) = e.aux.as_mut() {
        // Preemption is a teardown for the rows worker (vLLM calls request_finished).
        let q = &e.reqs[r as usize];
        let spec = ctx.wl.spec(r, q.turn);
        let reset = ctx.rules.aux_decode_floor == crate::system::rules::DecodeFloor::ResetOnPreempt;
        a.sched.request_finished(r, spec, q, &e.pool, ctx.rules.aux_retain, ctx.cfg.block_size, reset);
    }
    let kv_delivery = e.conn.requires_kv_delivery();
    let q = &mut e.reqs[r as usize];
    q.drop_stale = kv_delivery || (q.drop_stale && q.stale > 0);
    q.stale = q.in_flight;
    q.placeholders = 0;
    release_blocks(e, ctx, r, ev);
    e.waiting.insert(0, r);
}

/// What every preemption does: free the blocks, back to token 0, counted and reported. The
/// caller queues the request.
pub(crate) fn release_blocks(e: &mut Engine, ctx: &Ctx, r: ReqId, ev: &mut Events) {
    free_request_blocks(e, ctx, r);
    let q = &mut e.reqs[r as usize];
    q.inflight_prefill = false;
    q.status = Status::Preempted;
    q.num_computed = 0;
    q.preempted = true;
    e.ghost.mark(Mark::Preemption);
    ev.stat(|s| {
        s.preemptions += 1;
        s.req(r).preemptions += 1;
    });
    ev.emit(|| Event::Preempted { req: r });
}
