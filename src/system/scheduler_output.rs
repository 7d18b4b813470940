//! The scheduler's side of a step's output (vLLM `Scheduler.update_from_output`,
//! `finish_requests`, `_free_request`, `_handle_invalid_blocks`,
//! `_update_from_kv_xfer_finished`), in vLLM's order: load failures first, then sampled
//! tokens and stops, then error finishes, then connector completions and finished loads.

use super::choice::Point;
use super::config::LoadFailurePolicy;
use super::connector::{HookCtx, RequestRef, SchedOut};
use super::engine::{Ctx, Engine};
use super::events::{Event, Events};
use super::ghost::{Breach, Mark};
use super::kv_manager;
use super::model_runner::{self, WorkerOut};
use super::scheduler::{conn_ctx, free_request_blocks, kv_ctx};
use super::types::{cdiv, BlockId, FinishReason, ReqId, Status};
use super::workload::{stop_outputs, Layout};

use smallvec::SmallVec;
use std::collections::BTreeSet;

/// `update_from_output` for one step's output.
pub fn update_from_output(e: &mut Engine, ctx: Ctx, out: &SchedOut, w: &mut WorkerOut, ev: &mut Events) {
    // Every GPU write of this and earlier steps is done: deferred frees may go back.
    if ctx.cfg.defer_block_free() && out.scheduled.iter().any(|s| s.tokens > 0) {
        e.processed_seq += 1;
        drain_deferred_frees(e);
    }
    let mut failed: Vec<ReqId> = Vec::new();
    if !w.failed_recving.is_empty() {
        e.ghost.mark(Mark::LoadFailure);
        failed = handle_failed_recving(e, ctx, &w.failed_recving);
    }
    if !w.invalid_blocks.is_empty() {
        e.ghost.mark(Mark::LoadFailure);
        let more = handle_invalid_blocks(e, ctx, &w.invalid_blocks, out, ev);
        failed.extend(more.into_iter().filter(|r| !failed.contains(r)).collect::<Vec<_>>());
    }
    // Inline: a step stops a few requests at most.
    let mut stopped: SmallVec<[(ReqId, Status); 8]> = SmallVec::new();
    let mut continuing: Vec<ReqId> = Vec::new();
    for s in &out.scheduled {
        let r = s.req;
        if s.negative > 0 {
            // `assert num_tokens_scheduled > 0`: the AssertionError kills the engine.
            e.ghost.breach(Breach::TokensNonPositive);
            let name = ctx.wl.spec(r, e.reqs[r as usize].turn).name.clone();
            let n = s.negative;
            ev.emit(|| Event::Violation {
                property: "tokens-positive",
                detail: format!("{name} was scheduled -{n} tokens past max_model_len: vLLM's assertion fails"),
            });
            return;
        }
        let q = &mut e.reqs[r as usize];
        let spec = ctx.wl.spec(r, q.turn);
        if q.status.is_finished() {
            continue;
        }
        q.in_flight = q.in_flight.saturating_sub(s.tokens as u16);
        let stale = q.stale > 0;
        if stale {
            q.stale = q.stale.saturating_sub(s.tokens as u16);
        }
        if (!failed.is_empty() && failed.contains(&r)) || !s.samples || (stale && q.drop_stale) {
            continue; // a dropped output, or a non-final prefill chunk (no sampled token)
        }
        // _update_request_with_output: append the sampled token, check_stop.
        let status_before = q.status;
        let had_placeholders = q.placeholders > 0;
        let position = q.num_tokens(spec);
        q.num_output += 1;
        if status_before == Status::Parked {
            // 0.24: the in-flight output of the step scheduled before the stop joins the
            // parked session (`_update_request_with_output`); its next input cuts it off.
            e.ghost.mark(Mark::StaleSessionOutput);
        }
        e.ghost.idle_steps = 0;
        ev.stat(|s| s.sampled_tokens += 1);
        ev.emit(|| Event::Sampled { req: r, position });
        let nt = q.num_tokens(spec);
        if let Some(a) = e.aux.as_mut() {
            // take_output: the rows up to num_tokens - 1 (the new token is never forwarded).
            if let Some(o) = w.rows.iter().find(|o| o.req == r) {
                let token_end = nt - 1;
                if token_end >= o.start {
                    let end = if ctx.rules.aux_emit_last_token { token_end + 1 } else { token_end.min(o.end) };
                    a.rows[r as usize].append(o.start, end);
                    ev.stat(|s| s.rows_emitted += u64::from(end.saturating_sub(o.start)));
                }
            }
        }
        // check_stop: EOS first, then max_model_len / max_tokens.
        let eos = spec.eos_at == Some(q.num_output - 1);
        let stop = eos || q.num_output >= spec.max_tokens || nt >= ctx.cfg.max_model_len;
        if !stale && q.placeholders > 0 {
            q.placeholders -= 1;
        }
        if !stale && status_before == Status::Running && had_placeholders {
            // Async: the newly sampled token is known now; cache the settled prefix.
            let n = q.num_computed - u32::from(q.in_flight);
            kv_manager::cache_blocks(&mut e.pool, q, n, &kv_ctx(&ctx, r, q.turn), ev);
        }
        if stop {
            let reason = if eos { FinishReason::Stopped } else { FinishReason::LengthCapped };
            stopped.push((r, status_before));
            if handle_stopped_request(e, ctx, r, reason, ev) {
                check_rows(e, ctx, r, ev);
                e.reqs[r as usize].status = Status::Finished(reason);
                ev.emit(|| Event::Finished { req: r, reason });
                free_request(e, ctx, r, false, ev);
            } else {
                continuing.push(r);
            }
        }
    }
    // Stopped requests leave their queues by their status before the stop: one stopped while
    // RUNNING leaves `running` only (a stale second entry in a waiting queue stays, finding
    // 28's), one stopped while not running (stale output) leaves the waiting queues. vLLM 0.33
    // then enqueues the sessions that continue, in output order (`continuing_reqs`); 0.24 and
    // 0.32 (rule `stop_requeue_first`) enqueued them before, inside the output loop
    // (`_handle_stopped_request`), so a session stopped while not running loses its fresh
    // entry too: it is in no queue and never scheduled again (finding 36). (Most steps stop
    // nothing: the queues are walked only when something stopped.)
    if ctx.rules.stop_requeue_first {
        for &r in &continuing {
            enqueue_waiting(e, ctx, r);
        }
    }
    if !stopped.is_empty() {
        let left =
            |r: &ReqId, running: bool| stopped.iter().any(|(x, st)| x == r && (*st == Status::Running) == running);
        e.running.retain(|r| !left(r, true));
        e.waiting.retain(|r| !left(r, false));
        if ctx.rules.session_stop_drops_in_flight {
            e.kv_holding.retain(|r| !left(r, false));
        }
    }
    if !ctx.rules.stop_requeue_first {
        for &r in &continuing {
            enqueue_waiting(e, ctx, r);
        }
    }
    if !failed.is_empty() && ctx.cfg.load_failure_policy == LoadFailurePolicy::Fail {
        e.ghost.mark(Mark::ErrorFinish);
        finish_requests(e, ctx, &failed, FinishReason::Error, ev);
    }
    // _update_from_kv_xfer_finished: connector first, then finished loads, then finished
    // sends (vLLM 0.24 to 0.34 walk `finished_recving` before `finished_sending`: the frees
    // of both reach the G1 free queue in that order). Both walk the same Python sets, in one
    // (hash-seed dependent) order each.
    ev.order(Point::FinishedRecving, &mut w.finished_recving);
    ev.order(Point::FinishedSending, &mut w.finished_sending);
    let mut cx = HookCtx { c: conn_ctx(&ctx), pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev };
    e.conn.update_connector_output(w, &e.reqs, &mut cx);
    if e.is_dead() {
        return; // the connector raised (connector-assert): the engine is gone
    }
    for &r in &w.finished_recving {
        if e.reqs[r as usize].status == Status::WaitingForRemoteKvs {
            if !e.finished_recving.contains(&r) {
                e.finished_recving.push(r);
            }
        } else if e.reqs[r as usize].status.is_finished() {
            free_blocks(e, ctx, r, ev);
        }
    }
    for &r in &w.finished_sending {
        if e.reqs[r as usize].status.is_finished() {
            free_blocks(e, ctx, r, ev);
        }
    }
}

/// `_drain_deferred_frees`: return blocks whose fence step has been processed, FIFO,
/// stopping at the first pending fence; each list is freed tail first.
fn drain_deferred_frees(e: &mut Engine) {
    while let Some((fence, _)) = e.deferred_frees.first() {
        if *fence > e.processed_seq {
            break;
        }
        let (_, blocks) = e.deferred_frees.remove(0);
        e.pool.note_holders(&[], &blocks);
        e.pool.free_blocks(blocks.iter().rev().copied(), &mut e.ghost);
    }
}

/// `_handle_failed_recving` (0.34, rule `failed_load_request_level`): of the requests whose
/// async load failed, only those still waiting for it count. Under `recompute` each goes back
/// to 0 computed tokens and is marked failed (its promotion frees its blocks and it looks up
/// again); nothing is returned. Under `fail` they are returned, to be finished with an error.
fn handle_failed_recving(e: &mut Engine, ctx: Ctx, reqs: &[ReqId]) -> Vec<ReqId> {
    let recompute = ctx.cfg.load_failure_policy == LoadFailurePolicy::Recompute;
    let mut affected = Vec::new();
    for &r in reqs {
        let q = &mut e.reqs[r as usize];
        if q.status != Status::WaitingForRemoteKvs || affected.contains(&r) {
            continue;
        }
        affected.push(r);
        if recompute {
            q.num_computed = 0;
            if !e.failed_recving.contains(&r) {
                e.failed_recving.push(r);
            }
        }
    }
    if recompute {
        Vec::new()
    } else {
        affected
    }
}

/// `_handle_invalid_blocks`: rewind the requests whose computed prefix holds an invalid
/// block; returns the ids whose output this step is dropped (all failed ones under `fail`).
fn handle_invalid_blocks(
    e: &mut Engine,
    ctx: Ctx,
    invalid: &BTreeSet<BlockId>,
    out: &SchedOut,
    ev: &mut Events,
) -> Vec<ReqId> {
    let async_reqs: Vec<ReqId> =
        e.kv_holding.iter().copied().filter(|&r| e.reqs[r as usize].status == Status::WaitingForRemoteKvs).collect();
    let (async_failed, _) = rewind_requests(e, ctx, &async_reqs, invalid, out, false);
    let running = e.running.clone();
    let (sync_failed, to_evict) = rewind_requests(e, ctx, &running, invalid, out, true);
    if async_failed.is_empty() && sync_failed.is_empty() {
        return Vec::new();
    }
    let recompute = ctx.cfg.load_failure_policy == LoadFailurePolicy::Recompute;
    if !to_evict.is_empty() && (!recompute || ctx.rules.evict_invalid_on_recompute) {
        let ids: Vec<BlockId> = to_evict.into_iter().collect();
        e.pool.evict_blocks(&ids, &mut e.ghost, ev);
    }
    if !recompute {
        let mut all = async_failed;
        all.extend(sync_failed);
        return all;
    }
    for r in async_failed {
        if !e.failed_recving.contains(&r) {
            e.failed_recving.push(r);
        }
    }
    sync_failed
}

/// `_update_requests_with_invalid_blocks`.
fn rewind_requests(
    e: &mut Engine,
    ctx: Ctx,
    reqs: &[ReqId],
    invalid: &BTreeSet<BlockId>,
    out: &SchedOut,
    evict: bool,
) -> (Vec<ReqId>, BTreeSet<BlockId>) {
    let b = ctx.cfg.block_size;
    let mut affected = Vec::new();
    let mut to_evict = BTreeSet::new();
    let mut marked: BTreeSet<BlockId> = BTreeSet::new();
    for &r in reqs {
        let q = &mut e.reqs[r as usize];
        let scheduled = out.scheduled.iter().find(|s| s.req == r).map_or(0, |s| s.tokens);
        let pre = q.num_computed - scheduled;
        let mut hit = false;
        let mut marked_here = false;
        for (idx, &blk) in q.table.iter().enumerate().take(cdiv(pre, b) as usize) {
            if !invalid.contains(&blk) {
                continue;
            }
            hit = true;
            if !marked.insert(blk) || marked_here {
                continue;
            }
            marked_here = true;
            q.num_computed = idx as u32 * b;
            if evict {
                to_evict.extend(q.table[idx..].iter().copied());
            }
        }
        if hit {
            if !marked_here {
                q.num_computed = pre;
            }
            affected.push(r);
        }
    }
    (affected, to_evict)
}

/// Router replay: a request that stopped returns rows `[start, T - 1)`, contiguous
/// (rows-exact), and the end-anchored start `T - 1 - |rows|` is its first row (start-anchored).
fn check_rows(e: &mut Engine, ctx: Ctx, r: ReqId, ev: &mut Events) {
    let Some(a) = e.aux.as_ref() else { return };
    let q = &e.reqs[r as usize];
    let spec = ctx.wl.spec(r, q.turn);
    let t1 = q.num_tokens(spec) - 1;
    let start = match ctx.rules.aux_emit {
        crate::system::rules::EmitStart::V031 => spec.rows_start,
        crate::system::rules::EmitStart::V033 => spec.rows_start.min(spec.prompt_len),
    };
    let rec = a.rows[r as usize].clone();
    // A P/D decode-side request emits from its first forward (the floor), not from the start:
    // its rows are contiguous up to T - 1 (the router's merge is checked by pd-equals-colocated).
    let from = if ctx.cfg.is_pd_decode() { rec.first.filter(|&f| f >= start).unwrap_or(start) } else { start };
    let exact = !rec.gap && if from >= t1 { rec.is_empty() } else { rec.first == Some(from) && rec.end == t1 };
    if !exact {
        e.ghost.breach(Breach::RowsInexact);
        ev.emit(|| Event::Violation {
            property: "rows-exact",
            detail: format!(
                "{} returns rows {} for tokens up to {t1}; expected [{start},{t1})",
                spec.name,
                match rec.first {
                    None => "none".to_string(),
                    Some(f) => format!("[{f},{}){}", rec.end, if rec.gap { " with a gap" } else { "" }),
                }
            ),
        });
    }
    if let Some(f) = rec.first {
        // The response's start (R6): end-anchored, or on a P/D instance without prime-rl's
        // packed /generate, `routed_experts_prompt_start`.
        let pd = ctx.cfg.connector_kind() == crate::system::config::ConnectorKind::Nixl;
        let anchored =
            if pd && !ctx.rules.pd_start_end_anchored { Some(spec.rows_start) } else { t1.checked_sub(rec.count) };
        if anchored != Some(f) {
            e.ghost.breach(Breach::StartNotAnchored);
            ev.emit(|| Event::Violation {
                property: "start-anchored",
                detail: format!(
                    "{}: {} = {} but the first row is at {f}",
                    spec.name,
                    if pd && !ctx.rules.pd_start_end_anchored {
                        "/generate answers start = routed_experts_prompt_start"
                    } else {
                        "len(prompt) + len(completion) - 1 - len(rows)"
                    },
                    anchored.map_or("negative".to_string(), |x| x.to_string())
                ),
            });
        }
    }
}

/// `_handle_stopped_request`: true if the request is finished. A streaming session is not:
/// it drops its in-flight work, then takes its next queued input, or finishes if the client
/// already ended the session, or parks (WAITING_FOR_STREAMING_REQ) keeping its blocks.
fn handle_stopped_request(e: &mut Engine, ctx: Ctx, r: ReqId, reason: FinishReason, ev: &mut Events) -> bool {
    if !ctx.wl.is_session(r) {
        return true;
    }
    let q = &mut e.reqs[r as usize];
    let drops = ctx.rules.session_stop_drops_in_flight;
    if drops {
        q.num_computed -= u32::from(q.placeholders);
        q.drop_stale = true;
        q.stale = q.in_flight;
        q.placeholders = 0;
    }
    let ix = q.turn;
    let turn = ctx.wl.input_no(r, ix);
    // Async scheduling: a step in flight may have written the position of the token the
    // session drops (its last sampled one) into the block that holds the kept frontier. The
    // next input recomputes that position before anyone reads it, and the block is not cached
    // (its last token was a placeholder when it was scheduled): the block serves only its
    // positions below the frontier, as in a synchronous run. (0.24 keeps that position.)
    let b = ctx.cfg.block_size;
    let (frontier, spec) = (q.num_computed, ctx.wl.spec(r, ix));
    if drops && frontier % b != 0 {
        let i = (frontier / b) as usize;
        if let Some(&blk) = q.table.get(i) {
            let keep = frontier % b;
            if model_runner::tag_serves(e.pool.content(blk), spec, i, keep, b) {
                e.pool.set_content(blk, model_runner::written_tag(spec, i, keep, b));
            }
        }
    }
    ev.emit(|| Event::TurnEnded { req: r, turn, reason });
    if q.sent > turn {
        if turn + 1 == ctx.wl.num_turns(r) {
            return true; // the queued update is the end-of-session sentinel
        }
        update_request_as_session(e, ctx, r, ev);
    } else {
        q.status = Status::Parked;
        e.streaming_waiting += 1;
        e.ghost.mark(Mark::SessionParked);
    }
    false
}

/// `_update_request_as_session`: the session takes its next input. Its tokens up to
/// `num_computed_tokens` are kept (they join the prompt, their KV and block table stay): every
/// token but the last sampled one, or (0.24 with an output in flight at the stop, rule
/// `session_stop_drops_in_flight` false) every sampled one, the in-flight output still to
/// come becoming the next input's first output token ([`Layout`]). Block hashes from the
/// first dropped token's block on are recomputed over the new tokens. 0.24 and 0.32 (rule
/// `session_keeps_computed_only`) keep no more than `num_computed_tokens`: a session preempted
/// while the output that ended its input was in flight keeps nothing ([`Layout::Lost`]).
pub(crate) fn update_request_as_session(e: &mut Engine, ctx: Ctx, r: ReqId, ev: &mut Events) {
    let q = &mut e.reqs[r as usize];
    let spec = ctx.wl.spec(r, q.turn);
    let stop = stop_outputs(spec, ctx.cfg.max_model_len);
    let mut layout = if ctx.rules.session_stop_drops_in_flight || q.num_computed < spec.prompt_len + stop {
        Layout::Dropped
    } else if q.num_output > stop {
        Layout::Kept // the in-flight output came while parked and is cut off again
    } else {
        Layout::KeptStale
    };
    let keep_end = match layout {
        Layout::Dropped => q.num_tokens(spec) - 1,
        _ => spec.prompt_len + stop,
    };
    assert!(keep_end >= q.num_computed, "a session resumes from its materialized frontier");
    if ctx.rules.session_keeps_computed_only && q.num_computed < keep_end {
        // 0.24/0.32: `_all_token_ids[:num_computed_tokens]` is kept and the prompt is not cut:
        // a preempted session loses its history (it holds the new input alone).
        let (n, name) = (q.num_computed, &spec.name);
        assert_eq!(n, 0, "model gap: a session loses its history with computed tokens left");
        layout = Layout::Lost;
        e.ghost.breach(Breach::SessionHistoryLost);
        ev.emit(|| Event::Violation {
            property: "session-history",
            detail: format!(
                "{name} takes its next input with num_computed_tokens {n} below its {keep_end} kept tokens: _update_request_as_session keeps _all_token_ids[:{n}] while the prompt keeps its old length, so the session's prompt and outputs are lost"
            ),
        });
    }
    // vLLM keeps offload keys it already derived; none may cover the dropped token, unless the
    // session keeps that token's block hash too (0.24, `session_rehash = false`), or it lost
    // its history (0.32 never schedules it again, finding 36).
    assert!(
        !ctx.rules.session_rehash || layout == Layout::Lost || e.conn.keyed_tokens(r, &conn_ctx(&ctx)) <= keep_end,
        "model gap: an offload key covers a session's dropped token"
    );
    q.turn = ctx.wl.next_spec(r, q.turn, layout);
    q.num_output = 0;
    q.status = Status::Waiting;
    let (turn, num_computed) = (ctx.wl.input_no(r, q.turn), q.num_computed);
    e.ghost.mark(Mark::SessionResumed);
    ev.emit(|| Event::SessionResumed { req: r, turn, num_computed });
}

/// `_enqueue_waiting_request`: requests holding blocks go to `kv_holding_waiting`. 0.24
/// (rule `session_requeue_kv_holding` false) has no such queue: a parked session goes to
/// `skipped_waiting`, which is served first like `kv_holding` here, and a session that took
/// its queued input joins the tail of `waiting`.
fn enqueue_waiting(e: &mut Engine, ctx: Ctx, r: ReqId) {
    let q = &e.reqs[r as usize];
    if !ctx.rules.session_requeue_kv_holding {
        if q.status == Status::Parked {
            e.kv_holding.push(r);
        } else {
            e.waiting.push(r);
        }
    } else if q.num_computed > 0 || q.status == Status::WaitingForRemoteKvs {
        e.kv_holding.push(r);
    } else {
        e.waiting.push(r);
    }
}

/// `finish_requests(ids, status)`: finish live requests from outside the step loop.
pub fn finish_requests(e: &mut Engine, ctx: Ctx, ids: &[ReqId], reason: FinishReason, ev: &mut Events) {
    // Inline: the client finishes one request at a time; a failed load's batch a few.
    let mut valid: SmallVec<[ReqId; 8]> =
        ids.iter().copied().filter(|&r| e.reqs[r as usize].status.is_live()).collect();
    // `request_ids = set(request_ids)`: its order decides the finishes' order.
    ev.order(Point::FinishRequests, &mut valid[..]);
    e.running.retain(|r| !valid.contains(r));
    e.waiting.retain(|r| !valid.contains(r));
    e.kv_holding.retain(|r| !valid.contains(r));
    for r in valid {
        if e.reqs[r as usize].status == Status::Parked {
            e.streaming_waiting -= 1;
        }
        let mut delay = false;
        if e.reqs[r as usize].status == Status::WaitingForRemoteKvs {
            // The load will still report done; free the blocks then.
            delay = !e.finished_recving.contains(&r);
            e.finished_recving.retain(|&x| x != r);
            e.failed_recving.retain(|&x| x != r);
        }
        e.reqs[r as usize].status = Status::Finished(reason);
        ev.emit(|| Event::Finished { req: r, reason });
        free_request(e, ctx, r, delay, ev);
    }
}

/// `_free_request`: tell the connector, report the id next step, free the blocks unless the
/// free is delayed (an async load still filling them, or the connector's `delay_free_blocks`).
fn free_request(e: &mut Engine, ctx: Ctx, r: ReqId, delay: bool, ev: &mut Events) {
    e.ghost.idle_steps = 0;
    let spec = ctx.wl.spec(r, e.reqs[r as usize].turn);
    if let Some(a) = e.aux.as_mut() {
        let reset = ctx.rules.aux_decode_floor == crate::system::rules::DecodeFloor::ResetOnPreempt;
        a.sched.request_finished(
            r,
            spec,
            &e.reqs[r as usize],
            &e.pool,
            ctx.rules.aux_retain,
            ctx.cfg.block_size,
            reset,
        );
    }
    let q = RequestRef { id: r, state: &e.reqs[r as usize], spec };
    let delay_free = e
        .conn
        .request_finished(q, &mut HookCtx { c: conn_ctx(&ctx), pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev });
    e.reqs[r as usize].inflight_prefill = false;
    e.finished_since.push(r);
    if !delay && !delay_free {
        free_blocks(e, ctx, r, ev);
    }
}

/// `_free_blocks`: return the request's blocks to the pool (or behind a fence).
fn free_blocks(e: &mut Engine, ctx: Ctx, r: ReqId, ev: &mut Events) {
    // The table is emptied in place: the event's copy is taken first (only with events on).
    let blocks = if ev.is_on() { e.reqs[r as usize].table.clone() } else { Vec::new() };
    free_request_blocks(e, &ctx, r);
    ev.emit(|| Event::Freed { req: r, blocks });
}
