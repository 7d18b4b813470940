//! MooncakeStoreConnector, worker side (vLLM `mooncake/store/worker.py: MooncakeStoreWorker`,
//! `KVCacheStoreSendingThread`, `KVCacheStoreRecvingThread`), one worker rank:
//! - `start_load_kv` (after the forward is launched: every Mooncake load is async): queue this
//!   step's load jobs on the receiving thread;
//! - `wait_for_save` (after the forward): queue this step's save jobs on the sending thread
//!   (each waits for the step's compute event, so it reads what the forward wrote) and enter
//!   them in the request's ledger;
//! - the threads run their queues in order whenever the environment lets them: a put skips
//!   keys the pool already has (`batch_is_exist`) and resumes at the request's saved offset;
//!   a save job whose request was preempted meanwhile is not live any more and puts nothing;
//!   a get copies the pool's KV into the GPU blocks, or fails from some block on;
//! - `get_finished`: retire the ledgers of preempted and finished requests
//!   (`_close_ended_store_requests`), report finished loads (with the blocks that failed) and
//!   the save jobs done (`build_connector_worker_meta`'s `completed_saves`).

use super::{Ledger, MooncakeState};
use crate::system::connector::simple_cpu::worker::LOAD_EVENT;
use crate::system::connector::{Phase, SchedOut, WorkerCtx};
use crate::system::engine::{Ctx, Direction, StepInput};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::gpu_pool::GpuPool;
use crate::system::model_runner::WorkerOut;
use crate::system::types::{BadKind, BlockId, ContentTag, JobId, ReqId, NULL_BLOCK};
use std::collections::BTreeSet;

/// The job a thread runs next: the oldest queued one of that direction.
pub fn next_transfer(mc: &MooncakeState, d: Direction) -> Option<JobId> {
    match d {
        Direction::Store => mc.saves.iter().filter(|j| j.phase == Phase::Submitted).map(|j| j.id).min(),
        Direction::Load => mc.loads.iter().filter(|j| j.phase == Phase::Submitted).map(|j| j.id).min(),
    }
}

/// Job `id` of direction `d` is queued on its thread and has not run.
fn next_queued(mc: &MooncakeState, d: Direction, id: JobId) -> bool {
    match d {
        Direction::Store => mc.saves.iter().any(|j| j.id == id && j.phase == Phase::Submitted),
        Direction::Load => mc.loads.iter().any(|j| j.id == id && j.phase == Phase::Submitted),
    }
}

/// A thread runs job `id` (`fail`: a load whose gets fail from that block on).
pub fn complete(mc: &mut MooncakeState, d: Direction, id: JobId, fail: Option<u32>, cx: &mut WorkerCtx) {
    let (pool, ctx, ghost, ev) = (&mut *cx.pool, cx.ctx, &mut *cx.ghost, &mut *cx.ev);
    match d {
        Direction::Store => put(mc, pool, ctx, id, ghost, ev),
        Direction::Load => get(mc, pool, id, fail, ev),
    }
}

/// `KVCacheStoreSendingThread._handle_request`: put the request's full blocks from its saved
/// offset up to the job's end that the pool lacks, reading the GPU blocks now.
fn put(mc: &mut MooncakeState, pool: &GpuPool, ctx: Ctx, id: JobId, ghost: &mut Ghost, ev: &mut Events) {
    let b = ctx.cfg.block_size;
    let pos = mc.saves.iter().position(|j| j.id == id).expect("queued save job");
    let job = mc.saves[pos].clone();
    mc.saves[pos].phase = Phase::Done;
    let r = job.req as usize;
    let live = mc.reqs[r].ledger.as_ref().is_some_and(|l| l.live.contains(&id));
    if live {
        let save_start = mc.reqs[r].ledger.as_ref().map_or(0, |l| l.saved_offset);
        let mut stored = Vec::new();
        let mut stale = Vec::new();
        for ci in save_start.div_ceil(b)..job.token_len.div_ceil(b) {
            let Some(&blk) = job.blocks.get(ci as usize).filter(|&&x| x != NULL_BLOCK) else {
                continue; // an unavailable source block is skipped
            };
            let key = job.hashes[ci as usize];
            if mc.has(&key) {
                continue; // batch_is_exist: already in the pool
            }
            let tag = pool.content(blk);
            if tag != ContentTag::full(key, b) {
                stale.push((ctx.wl.label(key), blk));
            }
            mc.pool.insert(key, tag);
            if let Some(l) = mc.log.get_mut() {
                l.push(key);
            }
            stored.push(key);
        }
        if !stale.is_empty() {
            ghost.breach(Breach::StaleSource);
            ev.emit(|| Event::Violation {
                property: "source-freshness",
                detail: format!("save job {id} puts {stale:?}: the source block does not hold that KV"),
            });
        }
        if !stored.is_empty() {
            ghost.mark(Mark::StoreCompleted);
            ev.emit(|| Event::HostStored { keys: stored });
        }
        // _record_saved (the job is live).
        if let Some(l) = mc.reqs[r].ledger.as_mut() {
            l.saved_offset = job.token_len;
        }
    }
    // finish_store_job: out of the ledger, counted as completed.
    if let Some(l) = mc.reqs[r].ledger.as_mut() {
        l.live.retain(|&x| x != id);
    }
    ev.emit(|| Event::TransferDone { job: id });
}

/// `KVCacheStoreRecvingThread._handle_request`: copy each key's KV from the pool into its GPU
/// block; from `fail` on the gets fail and those blocks are reported invalid.
fn get(mc: &mut MooncakeState, pool: &mut GpuPool, id: JobId, fail: Option<u32>, ev: &mut Events) {
    let pos = mc.loads.iter().position(|j| j.id == id).expect("queued load job");
    let first_bad = fail.unwrap_or(u32::MAX);
    let job = mc.loads[pos].clone();
    for (j, (&blk, key)) in job.blocks.iter().zip(&job.keys).enumerate() {
        let tag = if j as u32 >= first_bad {
            ContentTag::Bad(BadKind::LoadFailed)
        } else {
            mc.pool.get(key).copied().unwrap_or(ContentTag::Bad(BadKind::LoadFailed))
        };
        pool.set_content(blk, tag);
    }
    let jm = &mut mc.loads[pos];
    jm.phase = if fail.is_some() { Phase::Failed } else { Phase::Done };
    jm.invalid_from = fail;
    if fail.is_some() {
        let invalid = job.blocks[first_bad.min(job.blocks.len() as u32) as usize..].to_vec();
        ev.emit(|| Event::TransferFailed { job: id, invalid });
    } else {
        ev.emit(|| Event::TransferDone { job: id });
    }
}

/// The worker's hooks after the forward: queue the step's loads and saves, let the jobs the
/// environment chose run within the step, retire ledgers, report.
pub fn after_forward(mc: &mut MooncakeState, out: &SchedOut, input: &StepInput, cx: &mut WorkerCtx) -> WorkerOut {
    // start_load_kv
    for j in mc.loads.iter_mut().filter(|j| j.phase == Phase::Built) {
        j.phase = Phase::Submitted;
    }
    // wait_for_save: register each job in its request's ledger, then queue it.
    let built: Vec<(JobId, ReqId)> =
        mc.saves.iter().filter(|j| j.phase == Phase::Built).map(|j| (j.id, j.req)).collect();
    for (id, r) in built {
        let l = mc.reqs[r as usize].ledger.get_or_insert_with(Ledger::default);
        l.live.push(id);
        mc.saves.iter_mut().find(|j| j.id == id).expect("listed").phase = Phase::Submitted;
    }
    if !input.drain {
        cx.ghost.drainable.0 |= [Direction::Load, Direction::Store].into_iter().any(|d| next_transfer(mc, d).is_some());
    }
    if input.drain {
        for d in [Direction::Load, Direction::Store] {
            while let Some(id) = next_transfer(mc, d) {
                cx.ghost.mark(Mark::Drained);
                complete(mc, d, id, None, cx);
            }
        }
    }
    // A conformance log names the jobs that finish in this step (saves by id, loads by
    // `id | LOAD_EVENT`, as SimpleCPU's events) and the loads that fail (their unwritten
    // blocks: the failure starts at the first of them), if queued and not run yet.
    for &named in &input.complete {
        let (d, id) =
            if named & LOAD_EVENT != 0 { (Direction::Load, named & !LOAD_EVENT) } else { (Direction::Store, named) };
        if next_queued(mc, d, id) {
            cx.ghost.mark(Mark::Drained);
            complete(mc, d, id, None, cx);
        }
    }
    for (id, bad) in &input.fail_blocks {
        if next_queued(mc, Direction::Load, *id) {
            let j = mc.loads.iter().find(|j| j.id == *id).expect("queued");
            let first = j.blocks.iter().position(|b| bad.contains(b)).unwrap_or(j.blocks.len()) as u32;
            cx.ghost.mark(Mark::LoadFailure);
            complete(mc, Direction::Load, *id, Some(first), cx);
        }
    }
    // get_finished: _close_ended_store_requests (preempted now; finished once drained).
    for &r in &out.preempted {
        mc.reqs[r as usize].ledger = None;
        mc.reqs[r as usize].closing = false;
    }
    for &r in &out.finished {
        mc.reqs[r as usize].closing = true;
    }
    for q in mc.reqs.iter_mut().filter(|q| q.closing) {
        if q.ledger.as_ref().is_none_or(|l| l.live.is_empty()) {
            q.ledger = None;
            q.closing = false;
        }
    }
    let mut w = WorkerOut::default();
    let mut invalid: BTreeSet<BlockId> = BTreeSet::new();
    for j in mc.loads.iter().filter(|j| matches!(j.phase, Phase::Done | Phase::Failed)) {
        w.finished_recving.push(j.req);
        if let Some(f) = j.invalid_from {
            invalid.extend(j.blocks.iter().skip(f as usize).copied());
        }
    }
    mc.loads.retain(|j| !matches!(j.phase, Phase::Done | Phase::Failed));
    w.invalid_blocks = invalid;
    for j in mc.saves.iter_mut().filter(|j| j.phase == Phase::Done) {
        j.phase = Phase::Reported;
        w.completed.push(j.id);
    }
    w
}
