//! The scheduler's `schedule()` (vLLM `v1/core/sched/scheduler.py: Scheduler.schedule`),
//! synchronous mode: running requests first (FCFS preemption of the last running request
//! when a block is missing), then waiting requests (KV-holding ones first) with the prefix
//! lookup, the connector's answer and `allocate_slots`; no admission in a step that preempted.

use super::connector::{ConnCtx, Connector, HookCtx, RequestRef, SchedOut, Scheduled, StepScratch};
use super::engine::{Ctx, Engine};
use super::events::{Event, Events};
use super::expert_rows::scheduler as rows_sched;
use super::ghost::{Breach, Mark};
use super::kv_manager::{self, Alloc, KvCtx};
use super::preemption::{blocks_can_be_freed, preempt, release_blocks};
use super::types::{ReqId, Status};

pub(crate) use super::preemption::free_request_blocks;

/// The KV manager's view of request `r` in its input chunk `turn`.
pub(crate) fn kv_ctx<'a>(ctx: &Ctx<'a>, r: ReqId, turn: u8) -> KvCtx<'a> {
    KvCtx {
        spec: ctx.wl.spec(r, turn),
        rules: ctx.rules,
        block_size: ctx.cfg.block_size,
        max_model_len: ctx.cfg.max_model_len,
        caching: ctx.cfg.enable_prefix_caching,
    }
}

pub(crate) fn conn_ctx<'a>(ctx: &Ctx<'a>) -> ConnCtx<'a> {
    let (blocks_per_chunk, prompt_only, budget) = ctx
        .cfg
        .offload()
        .map_or((1, true, 0), |o| (o.blocks_per_chunk, o.offload_prompt_only, o.sync_load_budget_tokens));
    ConnCtx {
        rules: ctx.rules,
        wl: ctx.wl,
        block_size: ctx.cfg.block_size,
        blocks_per_chunk,
        offload_prompt_only: prompt_only,
        sync_budget: if ctx.rules.sync_loads { budget } else { 0 },
        caching: ctx.cfg.enable_prefix_caching,
        mooncake: ctx.cfg.mooncake(),
    }
}

/// `_holds_kv_blocks`.
fn holds_kv_blocks(e: &Engine, r: ReqId) -> bool {
    let q = &e.reqs[r as usize];
    q.num_computed > 0 || q.status == Status::WaitingForRemoteKvs
}

/// `_update_waiting_for_remote_kv`: cache what the async load brought (only the valid prefix
/// after a failure), and recompute the last token of a fully loaded prompt.
fn update_waiting_for_remote_kv(e: &mut Engine, ctx: Ctx, r: ReqId, ev: &mut Events) {
    let k = kv_ctx(&ctx, r, e.reqs[r as usize].turn);
    let failed = e.failed_recving.contains(&r);
    let q = &mut e.reqs[r as usize];
    if failed {
        if q.num_computed > 0 {
            let n = q.num_computed;
            kv_manager::cache_blocks(&mut e.pool, q, n, &k, ev);
        } else {
            kv_manager::free(&mut e.pool, q, &mut e.ghost);
        }
        e.failed_recving.retain(|&x| x != r);
    } else {
        let n = q.num_computed;
        kv_manager::cache_blocks(&mut e.pool, q, n, &k, ev);
    }
    let nt = q.num_tokens(k.spec);
    if q.num_computed == nt {
        q.num_computed = nt - 1;
    }
    let num_computed = q.num_computed;
    e.finished_recving.retain(|&x| x != r);
    // What the async load kept: the loaded tokens, less the last token of a fully loaded
    // prompt (recomputed) and anything a failure rewound.
    ev.stat(|s| {
        let from = s.req(r).async_local;
        s.loaded(r, from, num_computed.max(from))
    });
    ev.emit(|| Event::Promoted { req: r, num_computed, failed });
}

/// `Scheduler.schedule()` up to and including `build_connector_meta` and
/// `_update_after_schedule`, into `out` (empty: the thread's reused buffers, `Engine::step`).
pub fn schedule(e: &mut Engine, ctx: Ctx, scratch: &mut StepScratch, out: &mut SchedOut, ev: &mut Events) {
    let cfg = ctx.cfg;
    let mut budget = cfg.max_num_batched_tokens;
    let eligible = e.running.len() + e.waiting.len() + e.kv_holding.len();
    let long_prefill_threshold =
        if eligible > 1 || !ctx.rules.long_prefill_lone_exempt { cfg.long_prefill_token_threshold } else { 0 };
    debug_assert!(out.scheduled.is_empty() && out.preempted.is_empty() && out.finished.is_empty());
    // Copied, not taken: the engine's list keeps its buffer (the checker copies states into a
    // reused engine, which then need not grow it again).
    out.finished.extend_from_slice(&e.finished_since);
    e.finished_since.clear();
    out.resumed_after_new = ctx.rules.resumed_after_new;
    // `finished_req_ids` is a set: the connector walks it in hash-seed order.
    ev.order(super::choice::Point::FinishedReqIds, &mut out.finished);

    // Phase A: running requests, in order.
    let mut idx = 0;
    while idx < e.running.len() && budget > 0 {
        let r = e.running[idx];
        let k = kv_ctx(&ctx, r, e.reqs[r as usize].turn);
        let q = &e.reqs[r as usize];
        // Async: do not schedule an extra step once max_tokens is surely reached (counted from
        // `num_prompt_tokens`, which a session that lost its history overstates).
        if q.placeholders > 0
            && i64::from(q.num_computed) + 2 - i64::from(q.placeholders)
                >= i64::from(k.spec.num_prompt_tokens() + k.spec.max_tokens)
        {
            idx += 1;
            continue;
        }
        if q.num_computed >= cfg.max_model_len && !ctx.rules.running_cap_clamped {
            // Past `max_model_len` (a streaming session whose inputs outgrew it: vLLM checks
            // each input's length alone): the cap `max_model_len - num_computed_tokens - 1` is
            // negative, and 0.24's `schedule()` schedules that count (`allocate_slots` needs no
            // block, the budget grows by it, `num_computed_tokens` goes back by it).
            // `update_from_output` then asserts `num_tokens_scheduled > 0` (tokens-positive).
            // 0.32+ clamp it at 0 (`_reserve_prefill_lookahead`): skipped below.
            let negative = q.num_computed + 1 - cfg.max_model_len;
            out.scheduled.push(Scheduled {
                req: r,
                start: q.num_computed,
                tokens: 0,
                blocks: Vec::new(),
                full_table: false,
                samples: false,
                resumed: false,
                negative,
            });
            budget += negative;
            idx += 1;
            continue;
        }
        let mut n = (q.num_tokens(k.spec) + u32::from(q.placeholders)).saturating_sub(q.num_computed);
        if long_prefill_threshold > 0 && long_prefill_threshold < n {
            n = long_prefill_threshold;
        }
        n = n.min(budget).min(cfg.max_model_len.saturating_sub(q.num_computed + 1));
        if n == 0 {
            idx += 1;
            continue;
        }
        let start = q.num_computed;
        let new_blocks = loop {
            let a = Alloc {
                num_new_tokens: n,
                num_new_computed: 0,
                hits: &[],
                num_external: 0,
                delay_cache: false,
                reserved_blocks: 0,
                full_sequence: false,
            };
            if let Some(nb) = kv_manager::allocate_slots(&mut e.pool, &mut e.reqs[r as usize], a, &k, &mut e.ghost, ev)
            {
                break Some(scratch.sched.blocks(&e.reqs[r as usize].table[nb]));
            }
            let victim = if ctx.rules.preempt_oldest {
                e.running[0]
            } else {
                *e.running.last().expect("the current request is running")
            };
            if ctx.rules.preempt_checks_deferred_free && !blocks_can_be_freed(e, &ctx, victim) {
                break None; // a deferred free would not help this allocation (0.32+)
            }
            let at = e.running.iter().position(|&x| x == victim).expect("running");
            e.running.remove(at);
            preempt(e, &ctx, victim, ev);
            out.preempted.push(victim);
            if at < idx {
                // Scheduled earlier in this step (mut-preempt-oldest only): unschedule it, as
                // vLLM's priority preemption does (`scheduled_running_reqs.remove`, the
                // budget back).
                if let Some(i) = out.scheduled.iter().position(|s| s.req == victim) {
                    budget += out.scheduled.remove(i).tokens;
                }
                idx -= 1;
            }
            if victim == r {
                break None;
            }
        };
        let Some(new_blocks) = new_blocks else { break };
        ev.emit(|| Event::Scheduled { req: r, start, tokens: n, new_blocks: new_blocks.clone() });
        out.scheduled.push(Scheduled {
            req: r,
            start,
            tokens: n,
            blocks: new_blocks,
            full_table: false,
            samples: false,
            resumed: false,
            negative: 0,
        });
        budget -= n;
        idx += 1;
    }

    // Phase B: waiting requests, only if nothing was preempted.
    if out.preempted.is_empty() || !ctx.rules.no_admission_after_preempt {
        if out.preempted.is_empty() {
            super::admission::reorder_waiting_by_cached_prefix(e, &ctx);
        }
        schedule_waiting(e, ctx, &mut budget, long_prefill_threshold, out, scratch, ev);
    }

    let mut cx = HookCtx { c: conn_ctx(&ctx), pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev };
    e.conn.build_connector_meta(out, &e.reqs, scratch, &mut cx);
    if let Some(a) = e.aux.as_mut() {
        let reqs = &e.reqs;
        let sched = out
            .scheduled
            .iter()
            .map(|s| (s.req, s.tokens, ctx.wl.spec(s.req, reqs[s.req as usize].turn), &reqs[s.req as usize]));
        scratch.aux = Some(a.sched.build_meta(sched, ctx.rules, cfg.block_size, cfg.is_pd_decode()));
    }

    if ctx.cfg.defer_block_free() && out.scheduled.iter().any(|s| s.tokens > 0) {
        e.sched_seq += 1;
    }
    ev.emit(|| Event::StepScheduled {
        scheduled: out.scheduled.iter().map(|s| (s.req, i64::from(s.tokens) - i64::from(s.negative))).collect(),
        // Model Runner V2 (0.33's default) reports requests resumed after preemption as new,
        // in `yield_req_data` order (`scheduled_new_reqs`: up to 0.33 resumed ones last).
        new: out.yield_order().filter(|s| s.full_table).map(|s| s.req).collect(),
        resumed: Vec::new(),
        preempted: out.preempted.clone(),
        finished: out.finished.clone(),
        tables: e
            .reqs
            .iter()
            .enumerate()
            .filter(|(_, q)| !q.table.is_empty())
            .map(|(i, q)| (i as ReqId, q.table.clone()))
            .collect(),
    });
    // _update_after_schedule (+ AsyncScheduler's placeholders)
    for s in &mut out.scheduled {
        let q = &mut e.reqs[s.req as usize];
        q.num_computed = q.num_computed + s.tokens - s.negative;
        q.in_flight += s.tokens as u16;
        if ctx.cfg.defer_block_free() {
            q.last_sched_seq = e.sched_seq;
        }
        let spec = ctx.wl.spec(s.req, q.turn);
        let nt = q.num_tokens(spec);
        if s.tokens > 0 {
            // Replay metrics: a one-token step at an output position is a decode; anything
            // else is prefill (or recomputation after a preemption).
            let decode = s.tokens == 1 && s.start >= spec.prompt_len;
            let (r, start, n) = (s.req, s.start, s.tokens);
            ev.stat(|st| st.computed(r, start, n, decode));
        }
        let prefill_chunk = q.num_computed < nt + u32::from(q.placeholders);
        s.samples = !prefill_chunk;
        if !prefill_chunk {
            q.inflight_prefill = false;
            if ctx.cfg.async_scheduling {
                q.placeholders += 1;
            }
        }
    }
}

fn schedule_waiting(
    e: &mut Engine,
    ctx: Ctx,
    budget: &mut u32,
    long_prefill_threshold: u32,
    out: &mut SchedOut,
    scratch: &mut StepScratch,
    ev: &mut Events,
) {
    let cfg = ctx.cfg;
    let cc = conn_ctx(&ctx);
    // The step's reused buffers, taken out of the scratch the connector hooks below borrow,
    // and put back at the end.
    let mut skipped_kv = std::mem::take(&mut scratch.sched.skipped_kv);
    let mut skipped_waiting = std::mem::take(&mut scratch.sched.skipped_waiting);
    let mut hits = std::mem::take(&mut scratch.sched.hits);
    // Pops the head of the queue in use into the skipped list it belongs to. 0.24 (rule
    // `session_requeue_kv_holding` false) has one: `step_skipped_waiting`, prepended to
    // `skipped_waiting` (here `kv_holding`), which is served first.
    let one_skipped_queue = !ctx.rules.session_requeue_kv_holding;
    let skip = |e: &mut Engine, from_kv: bool, sk: &mut Vec<ReqId>, sw: &mut Vec<ReqId>| {
        let r = if from_kv { e.kv_holding.remove(0) } else { e.waiting.remove(0) };
        if one_skipped_queue || holds_kv_blocks(e, r) {
            sk.push(r);
        } else {
            sw.push(r);
        }
    };
    // Parked streaming sessions are not running but hold a model-runner slot. Nothing below
    // parks or unparks a request, so they are counted once, when first needed.
    let mut parked: Option<usize> = None;
    while *budget > 0 {
        let from_kv = !e.kv_holding.is_empty();
        let head = if from_kv { e.kv_holding.first() } else { e.waiting.first() };
        let Some(&r) = head else { break };
        let parked = *parked.get_or_insert_with(|| {
            if ctx.rules.parked_holds_slot {
                e.reqs.iter().filter(|q| q.status == Status::Parked).count()
            } else {
                0
            }
        });
        if (e.running.len() + parked) as u32 >= cfg.max_num_seqs {
            break;
        }
        let status = e.reqs[r as usize].status;
        if status == Status::Running || status.is_finished() {
            // vLLM 0.24 under async scheduling (rule `session_stop_drops_in_flight` false): a
            // second entry of a request this loop already scheduled (a parked session's
            // in-flight output stopped it again and enqueued it twice, finding 28), or the
            // entry of a session that output finished (it leaves `waiting` only, finding 29).
            // `schedule()` gets to `raise RuntimeError(f"Invalid request status: ...")`.
            e.ghost.breach(Breach::QueueRaised);
            let name = ctx.wl.spec(r, e.reqs[r as usize].turn).name.clone();
            let what =
                if status == Status::Running { "RUNNING at a second entry" } else { "finished but still at an entry" };
            ev.emit(|| Event::Violation {
                property: "queue-sound",
                detail: format!("{name} is {what} of the waiting queues: vLLM raises RuntimeError"),
            });
            break;
        }
        if e.reqs[r as usize].status == Status::Parked {
            // `_handle_blocked_waiting_request`: a session waiting for its next input.
            skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
            continue;
        }
        let k = kv_ctx(&ctx, r, e.reqs[r as usize].turn);
        if e.reqs[r as usize].status == Status::WaitingForRemoteKvs {
            if !e.finished_recving.contains(&r) {
                skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
                continue;
            }
            update_waiting_for_remote_kv(e, ctx, r, ev);
            let q = &mut e.reqs[r as usize];
            q.status = if q.preempted { Status::Preempted } else { Status::Waiting };
            if ctx.rules.failed_load_requeue && q.num_computed == 0 && q.table.is_empty() {
                // The proposed fix (findings 20, 23d): a request its failed load reset holds
                // nothing; it leaves `_inflight_prefills` and, if it came from the KV-holding
                // queue, waits in `waiting` so that the loads behind it are promoted first.
                q.inflight_prefill = false;
                if from_kv {
                    skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
                    continue;
                }
            }
        }
        let q = &e.reqs[r as usize];
        if q.stale > 0 && !q.drop_stale {
            // Deliverable stale output still in flight: resuming now could resample a
            // position that output later delivers. Output to drop (a stopped session's, or
            // a drop-mode preemption's) does not hold the request back.
            skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
            continue;
        }
        let nt = q.num_tokens(k.spec);
        let (local, ext, load_async, num_computed);
        hits.clear();
        if q.num_computed == 0 {
            let b = cfg.block_size;
            let hashes = q.block_hashes(k.spec, b);
            // Router replay, 0.33: local hits only as far as every block's rows are retained.
            let cap = match e.aux.as_mut() {
                Some(a) if ctx.rules.aux_retain => Some(a.sched.max_cache_hit(hashes, nt, &e.pool, b)),
                _ => None,
            };
            let mut l = kv_manager::get_computed_blocks_into(&mut e.pool, q, &k, cap, &mut hits);
            let mut max_new = None;
            if e.aux.is_some() {
                // prime-rl: cut local hits at the first externally loaded block from blk(s) on,
                // and clamp external loads at block_floor(s).
                let decode = cfg.is_pd_decode();
                let keep = rows_sched::cut_hits(ctx.rules, k.spec, q, &hits, &e.pool, b, decode);
                if keep < hits.len() {
                    let was = l;
                    hits.truncate(keep);
                    l = keep as u32 * b;
                    e.ghost.mark(Mark::RowsCut);
                    ev.stat(|s| {
                        s.hits_cut += 1;
                        s.cut_tokens += u64::from(was - l);
                    });
                    ev.emit(|| Event::RowsCut { req: r, from: was, to: l });
                }
                max_new = rows_sched::load_limit(ctx.rules, k.spec, q, l, b, decode);
            }
            // prime-rl's limit goes into the connector (OffloadingConnector's
            // `_max_loadable_tokens`, the Mooncake store's wrapped lookup), unless the
            // mutation trims the connector's answer afterwards.
            let in_core = ctx.rules.aux_clamp_in_core;
            let (x, mut la) = e.conn.get_num_new_matched_tokens(
                RequestRef { id: r, state: &e.reqs[r as usize], spec: k.spec },
                l,
                if in_core { None } else { max_new },
                scratch,
                &mut HookCtx { c: cc, pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev },
            );
            let mut x = x;
            if let (Some(limit), Some(ext)) = (max_new.filter(|_| in_core), x) {
                x = Some(ext.min(limit));
                la &= ext.min(limit) > 0;
            }
            if let (Some(_), Some(ext)) = (max_new, x) {
                // prime-rl's clamp: report the external hit it gave up.
                let q = &e.reqs[r as usize];
                let full = e.conn.peek_unbounded_hit(RequestRef { id: r, state: q, spec: k.spec }, l, nt, &cc);
                if let Some(full) = full.filter(|&f| f > ext) {
                    e.ghost.mark(Mark::RowsCut);
                    ev.stat(|s| {
                        s.loads_clamped += 1;
                        s.clamped_tokens += u64::from(full - ext);
                    });
                    ev.emit(|| Event::RowsCut { req: r, from: l + full, to: l + ext });
                }
            }
            if let (Some(a), Some(ext)) = (e.aux.as_mut(), x) {
                if ctx.rules.aux_retain && ext > 0 {
                    // 0.33 cap_external_hit: all or nothing (after the connector answered).
                    let capped = a.sched.cap_external_hit(
                        e.reqs[r as usize].block_hashes(k.spec, b),
                        nt,
                        l,
                        ext,
                        &e.pool,
                        b,
                        ctx.rules.aux_cap_trims,
                    );
                    if capped < ext {
                        e.ghost.mark(Mark::RowsCut);
                        ev.stat(|s| {
                            s.loads_clamped += 1;
                            s.clamped_tokens += u64::from(ext - capped);
                        });
                        ev.emit(|| Event::RowsCut { req: r, from: l + ext, to: l + capped });
                    }
                    x = Some(capped);
                    la &= capped > 0;
                }
            }
            if !matches!(e.conn, Connector::None) {
                ev.emit(|| Event::Lookup { req: r, local: l, external: x, load_async: la });
            }
            let Some(x) = x else {
                skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
                continue;
            };
            local = l;
            ext = x;
            load_async = la;
            num_computed = l + x;
        } else {
            local = 0;
            ext = 0;
            load_async = false;
            num_computed = q.num_computed;
        }
        let n = if load_async {
            0
        } else {
            let mut n = nt - num_computed;
            if long_prefill_threshold > 0 && long_prefill_threshold < n {
                n = long_prefill_threshold;
            }
            n.min(*budget)
        };
        let reserved = if load_async && ctx.rules.reserve_for_async_loads {
            e.reqs
                .iter()
                .enumerate()
                // vLLM 0.33 counts every member of `_inflight_prefills`, including a request
                // whose async load failed from its first block and that is being admitted
                // again: it then reserves its own blocks (fix-self-reservation leaves it out).
                .filter(|(i, x)| x.inflight_prefill && !(ctx.rules.reserve_excludes_self && *i == r as usize))
                .map(|(i, x)| kv_manager::remaining_blocks(x, &kv_ctx(&ctx, i as ReqId, x.turn)))
                .sum()
        } else {
            0
        };
        let a = Alloc {
            num_new_tokens: n,
            num_new_computed: local,
            hits: &hits,
            num_external: ext,
            delay_cache: load_async,
            reserved_blocks: reserved,
            full_sequence: cfg.reserve_full_isl,
        };
        if kv_manager::allocate_slots(&mut e.pool, &mut e.reqs[r as usize], a, &k, &mut e.ghost, ev).is_none() {
            let free = e.pool.num_free();
            ev.emit(|| Event::NoRoom { req: r, free });
            let stuck = e.running.is_empty() && !load_async && e.aux.is_none() && holds_kv_blocks(e, r);
            if ctx.rules.free_stuck_kv_holder && stuck {
                // Variant fix-session-hold (finding 33): nothing runs, so nothing else can
                // free a block; the stuck holder gives its blocks back and recomputes later.
                if from_kv {
                    e.kv_holding.remove(0);
                } else {
                    e.waiting.remove(0);
                }
                release_blocks(e, &ctx, r, ev);
                e.waiting.push(r);
                continue;
            }
            break;
        }
        e.conn.update_state_after_alloc(
            RequestRef { id: r, state: &e.reqs[r as usize], spec: k.spec },
            ext,
            scratch,
            &mut HookCtx { c: cc, pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev },
        );
        if ext > 0 && e.aux.is_some() {
            rows_sched::mark_loaded(&mut e.pool, &e.reqs[r as usize], local, ext, cfg.block_size);
        }
        // Replay metrics: G1 hits now; a synchronous load's tokens now, an async load's when
        // it lands (update_waiting_for_remote_kv).
        let sync_ext = if load_async { 0 } else { ext };
        ev.stat(|s| {
            s.served(r, local, local + sync_ext);
            if load_async {
                s.req(r).async_local = local;
            }
        });
        let q = &mut e.reqs[r as usize];
        if load_async {
            q.status = Status::WaitingForRemoteKvs;
            q.num_computed = num_computed;
            if let Some(a) = e.aux.as_mut().filter(|_| ctx.rules.aux_retain) {
                a.sched.request_loading(r, q.block_hashes(k.spec, cfg.block_size), num_computed, cfg.block_size);
            }
            q.inflight_prefill = true;
            ev.emit(|| Event::AsyncLoadWait { req: r, table: q.table.clone(), num_computed });
            skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
            continue;
        }
        if from_kv {
            e.kv_holding.remove(0);
        } else {
            e.waiting.remove(0);
        }
        let resumed = q.status == Status::Preempted;
        q.status = Status::Running;
        q.num_computed = num_computed;
        if num_computed + n < nt {
            q.inflight_prefill = true;
        }
        let table = scratch.sched.blocks(&q.table);
        e.running.push(r);
        ev.emit(|| Event::Admitted { req: r, resumed, table: table.clone(), num_computed });
        ev.emit(|| Event::Scheduled { req: r, start: num_computed, tokens: n, new_blocks: table.clone() });
        out.scheduled.push(Scheduled {
            req: r,
            start: num_computed,
            tokens: n,
            blocks: table,
            full_table: true,
            samples: false,
            resumed,
            negative: 0,
        });
        *budget -= n;
    }
    // Skipped requests go back to the front of their queue in their original order (into the
    // queues' own buffers: the skipped lists are the scratch's, kept for the next step).
    if !skipped_kv.is_empty() {
        e.kv_holding.splice(0..0, skipped_kv.drain(..));
    }
    if !skipped_waiting.is_empty() {
        e.waiting.splice(0..0, skipped_waiting.drain(..));
    }
    (scratch.sched.skipped_kv, scratch.sched.skipped_waiting, scratch.sched.hits) = (skipped_kv, skipped_waiting, hits);
}
