//! OffloadingConnector, worker side (vLLM `offloading/worker.py: OffloadingConnectorWorker`
//! over `kv_offload/cpu/gpu_worker.py`), as far as it decides anything:
//! - `handle_preemptions` (every step, before the forward): flushed jobs of this step are
//!   queued, every queued store is submitted, then the flushed jobs are waited for;
//! - `start_load_kv`: this step's loads (sync loads complete at once, before the forward);
//! - `wait_for_save`: this step's other stores are queued for the next step;
//! - `get_finished`: completed jobs are reported (stores, then loads, then sync loads).
//!
//! Each direction completes strictly in submission order. A store's copy reads its source
//! blocks as they are when it is submitted; a forward pass that writes a source block before
//! the copy is done tears it.

use crate::system::connector::{JobKind, OffloadingState, Phase, StepScratch};
use crate::system::engine::{Ctx, StepInput};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost};
use crate::system::gpu_pool::GpuPool;
use crate::system::model_runner::WorkerOut;
use crate::system::types::{BadKind, BlockHash, BlockId, ContentTag, JobId};
use smallvec::SmallVec;
use std::collections::BTreeSet;

/// Submit a store: take the copy's snapshot and check that every source block holds its
/// chunk's final KV (source-freshness).
fn submit_store(oc: &mut OffloadingState, pool: &GpuPool, ctx: Ctx, id: JobId, ghost: &mut Ghost, ev: &mut Events) {
    let b = ctx.cfg.block_size;
    let blocks_per_chunk = ctx.cfg.offload().map_or(1, |o| o.blocks_per_chunk);
    let job = oc.job_mut(id).expect("submitted job exists");
    job.phase = Phase::Submitted;
    // Into the job's own list (a job copied into a spare one may have room: `recycle`).
    job.snapshot.clear();
    job.snapshot.extend(job.blocks.iter().map(|&blk| pool.content(blk)));
    let mut stale = Vec::new();
    for (i, key) in job.keys.iter().enumerate() {
        // The chunk's block hashes, oldest first (`Workload::chain_ending_at` without allocating).
        let mut want: smallvec::SmallVec<[BlockHash; 4]> = ctx.wl.chain_back(*key, blocks_per_chunk).collect();
        let known = want.len() == blocks_per_chunk as usize;
        want.reverse();
        for j in 0..blocks_per_chunk as usize {
            let got = job.snapshot.get(i * blocks_per_chunk as usize + j).copied();
            let ok = match got {
                Some(g) if known => g == ContentTag::full(want[j], b),
                _ => false,
            };
            if !ok {
                stale.push((ctx.wl.label(*key), job.blocks.get(i * blocks_per_chunk as usize + j).copied()));
            }
        }
    }
    if !stale.is_empty() {
        ghost.breach(Breach::StaleSource);
        ev.emit(|| Event::Violation {
            property: "source-freshness",
            detail: format!("store job {id} copies {stale:?}: the source block does not hold the chunk's final KV"),
        });
    }
}

/// The copy of `id` finished (`fail`: a load whose blocks from that index were not written).
pub fn complete(
    oc: &mut OffloadingState,
    pool: &mut GpuPool,
    ctx: Ctx,
    id: JobId,
    fail: Option<u32>,
    ghost: &mut Ghost,
    ev: &mut Events,
) {
    let blocks_per_chunk = ctx.cfg.offload().map_or(1, |o| o.blocks_per_chunk);
    let at = oc.jobs.iter().position(|j| j.id == id).expect("completed job exists");
    match oc.jobs[at].kind {
        JobKind::Store => {
            let (job, host) = (&mut oc.jobs[at], &mut oc.host);
            host.warm(job.keys.iter());
            for (i, key) in job.keys.iter().enumerate() {
                let content = &job.snapshot
                    [i * blocks_per_chunk as usize..((i + 1) * blocks_per_chunk as usize).min(job.snapshot.len())];
                host.write_content(key, content);
            }
            job.phase = Phase::Done;
            ev.emit(|| Event::TransferDone { job: id });
        }
        JobKind::Load { .. } => {
            let job = &oc.jobs[at];
            let first_bad = fail.unwrap_or(u32::MAX);
            for (j, &blk) in job.blocks.iter().enumerate() {
                let j = j as u32;
                let tag = if j >= first_bad {
                    ContentTag::Bad(BadKind::LoadFailed)
                } else {
                    let pos = job.block_offset + j;
                    let key = job.keys.get((pos / blocks_per_chunk) as usize);
                    key.and_then(|k| oc.host.content_of(k))
                        .and_then(|c| c.get((pos % blocks_per_chunk) as usize).copied())
                        .unwrap_or(ContentTag::Empty)
                };
                pool.set_content(blk, tag);
            }
            let jm = &mut oc.jobs[at];
            if fail.is_some() {
                jm.phase = Phase::Failed;
                jm.invalid_from = fail;
                let invalid = &jm.blocks[first_bad.min(jm.blocks.len() as u32) as usize..];
                ev.emit(|| Event::TransferFailed { job: id, invalid: invalid.to_vec() });
            } else {
                jm.phase = Phase::Done;
                ev.emit(|| Event::TransferDone { job: id });
            }
        }
    }
    let _ = ghost;
}

/// `handle_preemptions`: queue this step's flushed stores, submit every queued store, wait
/// for the flushed jobs (and, handlers being FIFO, for every store submitted before them).
pub fn handle_preemptions(
    oc: &mut OffloadingState,
    pool: &mut GpuPool,
    ctx: Ctx,
    scratch: &StepScratch,
    ghost: &mut Ghost,
    ev: &mut Events,
) {
    for &id in &scratch.flush {
        if scratch.store_jobs.contains(&id) {
            if let Some(j) = oc.job_mut(id) {
                j.phase = Phase::Queued;
            }
        }
    }
    let queued: SmallVec<[JobId; 8]> = oc.jobs.iter().filter(|j| j.phase == Phase::Queued).map(|j| j.id).collect();
    for id in queued {
        submit_store(oc, pool, ctx, id, ghost, ev);
    }
    if let Some(&last) = scratch
        .flush
        .iter()
        .filter(|&&id| oc.job(id).is_some_and(|j| j.is_store() && j.phase == Phase::Submitted))
        .max()
    {
        ghost.mark(crate::system::ghost::Mark::Flush);
        let upto: SmallVec<[JobId; 8]> = oc
            .jobs
            .iter()
            .filter(|j| j.is_store() && j.phase == Phase::Submitted && j.id <= last)
            .map(|j| j.id)
            .collect();
        for id in upto {
            ev.emit(|| Event::Flush { job: id });
            complete(oc, pool, ctx, id, None, ghost, ev);
        }
    }
}

/// `start_load_kv`: submit this step's loads; sync loads land now. Returns the blocks a
/// failed sync load left invalid.
pub fn start_load_kv(
    oc: &mut OffloadingState,
    pool: &mut GpuPool,
    ctx: Ctx,
    scratch: &StepScratch,
    input: Option<&StepInput>,
    ghost: &mut Ghost,
    ev: &mut Events,
) -> BTreeSet<BlockId> {
    let mut invalid = BTreeSet::new();
    let mut fail = input.and_then(|i| i.sync_load_fail);
    let fail_blocks: &[(JobId, Vec<BlockId>)] = input.map_or(&[], |i| &i.fail_blocks);
    for &id in &scratch.load_jobs {
        let Some(j) = oc.job(id) else { continue };
        match j.kind {
            JobKind::Load { sync: true } => {
                let named = fail_blocks
                    .iter()
                    .find(|(x, _)| *x == id)
                    .map(|(_, bad)| j.blocks.iter().position(|b| bad.contains(b)).unwrap_or(j.blocks.len()) as u32);
                let f = named.or_else(|| fail.take());
                if let Some(f) = f {
                    invalid.extend(j.blocks.iter().skip(f as usize).copied());
                }
                complete(oc, pool, ctx, id, f, ghost, ev);
            }
            _ => oc.job_mut(id).unwrap().phase = Phase::Submitted,
        }
    }
    invalid
}

/// `wait_for_save`: this step's remaining stores are queued for submission next step.
pub fn wait_for_save(oc: &mut OffloadingState, scratch: &StepScratch) {
    for &id in &scratch.store_jobs {
        if let Some(j) = oc.job_mut(id) {
            if j.phase == Phase::Built {
                j.phase = Phase::Queued;
            }
        }
    }
}

/// `get_finished` + `get_block_ids_with_load_errors`: what the worker reports this step
/// (each completion once: reported jobs leave the worker's queues), into `w`'s
/// `completed` (job ids in `completed_jobs`, a failed one too: 0.34 also lists it in
/// `failed_jobs`), `finished_recving` (the requests of completed async loads, failed ones
/// included), `invalid_blocks` (the unwritten blocks of failed loads reported block-level) and
/// `failed_recving` (the requests of failed async loads reported request-level), each
/// replaced. `request_level` (rule `failed_load_request_level`,
/// `OffloadingConnectorWorker.get_finished` in 0.34): a failed async load names its request in
/// `failed_recving` instead of its blocks; a failed sync load is still reported by its blocks.
pub fn get_finished(oc: &mut OffloadingState, request_level: bool, reported: &[JobId], w: &mut WorkerOut) {
    let finished = |p: Phase| matches!(p, Phase::Done | Phase::Failed);
    // Filled in place: `w` is the thread's reused report (`Engine::step`).
    w.completed.clear();
    w.finished_recving.clear();
    w.invalid_blocks.clear();
    w.failed_recving.clear();
    // The order the worker reports them in: a conformance log's (`reported`), else the real
    // worker's (stores, then async loads, then sync loads; each in submission order).
    let order = |j: &super::Job| {
        if let Some(i) = reported.iter().position(|&r| r == j.id) {
            i
        } else if j.is_store() {
            usize::MAX - 2
        } else if j.is_async_load() {
            usize::MAX - 1
        } else {
            usize::MAX
        }
    };
    let mut ids: SmallVec<[(usize, JobId); 8]> =
        oc.jobs.iter().filter(|j| finished(j.phase)).map(|j| (order(j), j.id)).collect();
    ids.sort_unstable();
    for (_, id) in ids {
        let j = oc.job_mut(id).expect("listed");
        w.completed.push(id);
        if j.is_async_load() {
            w.finished_recving.push(j.req);
        }
        if let Some(first_bad) = j.invalid_from {
            if request_level && j.is_async_load() {
                w.failed_recving.push(j.req);
            } else {
                w.invalid_blocks.extend(j.blocks.iter().skip(first_bad as usize).copied());
            }
        }
        j.phase = Phase::Reported;
    }
}
