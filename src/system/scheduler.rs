//! The scheduler's `schedule()` (vLLM `v1/core/sched/scheduler.py: Scheduler.schedule`),
//! synchronous mode: running requests first (FCFS preemption of the last running request
//! when a block is missing), then waiting requests (KV-holding ones first) with the prefix
//! lookup, the connector's answer and `allocate_slots`; no admission in a step that preempted.

use super::connector::{ConnCtx, SchedOut, Scheduled, StepScratch};
use super::engine::{Ctx, Engine};
use super::events::{Event, Events};
use super::ghost::Mark;
use super::kv_manager::{self, Alloc, KvCtx};
use super::types::{ReqId, Status};

pub(crate) fn kv_ctx<'a>(ctx: &Ctx<'a>, r: ReqId) -> KvCtx<'a> {
    KvCtx {
        spec: &ctx.wl.requests[r as usize],
        rules: ctx.rules,
        block_size: ctx.cfg.block_size,
        max_model_len: ctx.cfg.max_model_len,
    }
}

pub(crate) fn conn_ctx<'a>(ctx: &Ctx<'a>) -> ConnCtx<'a> {
    let (bpc, prompt_only, budget) = ctx.cfg.offload().map_or((1, true, 0), |o| {
        (
            o.blocks_per_chunk,
            o.offload_prompt_only,
            o.sync_load_budget_tokens,
        )
    });
    ConnCtx {
        rules: ctx.rules,
        block_size: ctx.cfg.block_size,
        bpc,
        offload_prompt_only: prompt_only,
        sync_budget: budget,
    }
}

/// `_holds_kv_blocks`.
fn holds_kv_blocks(e: &Engine, r: ReqId) -> bool {
    let q = &e.reqs[r as usize];
    q.num_computed > 0 || q.status == Status::WaitingForRemoteKvs
}

/// `_preempt_request`: free the blocks, reset to token 0, front of `waiting`. The connector
/// is not told (it learns from `preempted_req_ids`).
fn preempt(e: &mut Engine, r: ReqId, ev: &mut Events) {
    let q = &mut e.reqs[r as usize];
    debug_assert_eq!(q.status, Status::Running);
    kv_manager::free(&mut e.pool, q, &mut e.ghost);
    q.inflight_prefill = false;
    q.status = Status::Preempted;
    q.num_computed = 0;
    q.preempted = true;
    e.waiting.insert(0, r);
    e.ghost.mark(Mark::Preemption);
    ev.emit(|| Event::Preempted { req: r });
}

/// `_update_waiting_for_remote_kv`: cache what the async load brought (only the valid prefix
/// after a failure), and recompute the last token of a fully loaded prompt.
fn update_waiting_for_remote_kv(e: &mut Engine, ctx: Ctx, r: ReqId, ev: &mut Events) {
    let k = kv_ctx(&ctx, r);
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
    ev.emit(|| Event::Promoted {
        req: r,
        num_computed,
        failed,
    });
}

/// `Scheduler.schedule()` up to and including `build_connector_meta` and
/// `_update_after_schedule`.
pub fn schedule(e: &mut Engine, ctx: Ctx, scratch: &mut StepScratch, ev: &mut Events) -> SchedOut {
    let cfg = ctx.cfg;
    let mut budget = cfg.max_num_batched_tokens;
    let eligible = e.running.len() + e.waiting.len() + e.kv_holding.len();
    let lpt = if eligible > 1 {
        cfg.long_prefill_token_threshold
    } else {
        0
    };
    let mut out = SchedOut {
        finished: std::mem::take(&mut e.finished_since),
        ..Default::default()
    };

    // Phase A: running requests, in order.
    let mut idx = 0;
    while idx < e.running.len() && budget > 0 {
        let r = e.running[idx];
        let k = kv_ctx(&ctx, r);
        let q = &e.reqs[r as usize];
        let mut n = q.num_tokens(k.spec).saturating_sub(q.num_computed);
        if lpt > 0 && lpt < n {
            n = lpt;
        }
        n = n
            .min(budget)
            .min(cfg.max_model_len.saturating_sub(q.num_computed + 1));
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
            };
            if let Some(nb) = kv_manager::allocate_slots(
                &mut e.pool,
                &mut e.reqs[r as usize],
                a,
                &k,
                &mut e.ghost,
                ev,
            ) {
                break Some(nb);
            }
            let victim = e.running.pop().expect("the current request is running");
            preempt(e, victim, ev);
            out.preempted.push(victim);
            if victim == r {
                break None;
            }
        };
        let Some(new_blocks) = new_blocks else { break };
        ev.emit(|| Event::Scheduled {
            req: r,
            start,
            tokens: n,
            new_blocks: new_blocks.clone(),
        });
        out.scheduled.push(Scheduled {
            req: r,
            start,
            tokens: n,
            blocks: new_blocks,
            full_table: false,
        });
        budget -= n;
        idx += 1;
    }

    // Phase B: waiting requests, only if nothing was preempted.
    if out.preempted.is_empty() || !ctx.rules.no_admission_after_preempt {
        schedule_waiting(e, ctx, &mut budget, lpt, &mut out, scratch, ev);
    }

    if let Some(oc) = e.conn.offloading_mut() {
        oc.build_connector_meta(
            &out,
            &e.reqs,
            &ctx.wl.requests,
            &e.pool,
            &conn_ctx(&ctx),
            scratch,
            &mut e.ghost,
            ev,
        );
    }

    // _update_after_schedule
    for s in &out.scheduled {
        let q = &mut e.reqs[s.req as usize];
        q.num_computed += s.tokens;
        if q.num_computed >= q.num_tokens(&ctx.wl.requests[s.req as usize]) {
            q.inflight_prefill = false;
        }
    }
    out
}

fn schedule_waiting(
    e: &mut Engine,
    ctx: Ctx,
    budget: &mut u32,
    lpt: u32,
    out: &mut SchedOut,
    scratch: &mut StepScratch,
    ev: &mut Events,
) {
    let cfg = ctx.cfg;
    let cc = conn_ctx(&ctx);
    let mut skipped_kv: Vec<ReqId> = Vec::new();
    let mut skipped_waiting: Vec<ReqId> = Vec::new();
    // Pops the head of the queue in use into the skipped list it belongs to.
    let skip = |e: &mut Engine, from_kv: bool, sk: &mut Vec<ReqId>, sw: &mut Vec<ReqId>| {
        let r = if from_kv {
            e.kv_holding.remove(0)
        } else {
            e.waiting.remove(0)
        };
        if holds_kv_blocks(e, r) {
            sk.push(r);
        } else {
            sw.push(r);
        }
    };
    while *budget > 0 {
        let from_kv = !e.kv_holding.is_empty();
        let head = if from_kv {
            e.kv_holding.first()
        } else {
            e.waiting.first()
        };
        let Some(&r) = head else { break };
        if e.running.len() as u32 >= cfg.max_num_seqs {
            break;
        }
        let k = kv_ctx(&ctx, r);
        if e.reqs[r as usize].status == Status::WaitingForRemoteKvs {
            if !e.finished_recving.contains(&r) {
                skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
                continue;
            }
            update_waiting_for_remote_kv(e, ctx, r, ev);
            let q = &mut e.reqs[r as usize];
            q.status = if q.preempted {
                Status::Preempted
            } else {
                Status::Waiting
            };
        }
        let q = &e.reqs[r as usize];
        let nt = q.num_tokens(k.spec);
        let (hits, local, ext, load_async, num_computed);
        if q.num_computed == 0 {
            let (h, l) = kv_manager::get_computed_blocks(&e.pool, q, &k);
            let (x, la) = match e.conn.offloading_mut() {
                Some(oc) => oc.get_num_new_matched_tokens(
                    r,
                    &e.reqs[r as usize],
                    k.spec,
                    l,
                    &cc,
                    scratch,
                    &mut e.ghost,
                ),
                None => (Some(0), false),
            };
            ev.emit(|| Event::Lookup {
                req: r,
                local: l,
                external: x,
                load_async: la,
            });
            let Some(x) = x else {
                skip(e, from_kv, &mut skipped_kv, &mut skipped_waiting);
                continue;
            };
            hits = h;
            local = l;
            ext = x;
            load_async = la;
            num_computed = l + x;
        } else {
            hits = Vec::new();
            local = 0;
            ext = 0;
            load_async = false;
            num_computed = q.num_computed;
        }
        let n = if load_async {
            0
        } else {
            let mut n = nt - num_computed;
            if lpt > 0 && lpt < n {
                n = lpt;
            }
            n.min(*budget)
        };
        let reserved = if load_async && ctx.rules.reserve_for_async_loads {
            e.reqs
                .iter()
                .enumerate()
                .filter(|(_, x)| x.inflight_prefill)
                .map(|(i, x)| kv_manager::remaining_blocks(x, &kv_ctx(&ctx, i as ReqId)))
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
        };
        if kv_manager::allocate_slots(
            &mut e.pool,
            &mut e.reqs[r as usize],
            a,
            &k,
            &mut e.ghost,
            ev,
        )
        .is_none()
        {
            let free = e.pool.num_free();
            ev.emit(|| Event::NoRoom { req: r, free });
            break;
        }
        if let Some(oc) = e.conn.offloading_mut() {
            oc.update_state_after_alloc(
                r,
                &e.reqs[r as usize],
                k.spec,
                &e.pool,
                ext,
                &cc,
                scratch,
                &mut e.ghost,
                ev,
            );
        }
        let q = &mut e.reqs[r as usize];
        if load_async {
            q.status = Status::WaitingForRemoteKvs;
            q.num_computed = num_computed;
            q.inflight_prefill = true;
            let table = q.table.clone();
            ev.emit(|| Event::AsyncLoadWait {
                req: r,
                table,
                num_computed,
            });
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
        let table = q.table.clone();
        e.running.push(r);
        ev.emit(|| Event::Admitted {
            req: r,
            resumed,
            table: table.clone(),
            num_computed,
        });
        ev.emit(|| Event::Scheduled {
            req: r,
            start: num_computed,
            tokens: n,
            new_blocks: table.clone(),
        });
        out.scheduled.push(Scheduled {
            req: r,
            start: num_computed,
            tokens: n,
            blocks: table,
            full_table: true,
        });
        *budget -= n;
    }
    // Skipped requests go back to the front of their queue in their original order.
    skipped_kv.append(&mut e.kv_holding);
    e.kv_holding = skipped_kv;
    skipped_waiting.append(&mut e.waiting);
    e.waiting = skipped_waiting;
}
