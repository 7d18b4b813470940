//! SimpleCPUOffloadConnector, worker side (vLLM `v1/simple_kv_offload/worker.py:
//! SimpleCPUOffloadWorker`), as far as it decides anything:
//! - `handle_preemptions` (before the forward): when the step preempted a request
//!   (`need_flush`), wait for *every* load and store event launched so far (`_flush_and_sync_all`);
//! - `start_load_kv` (after the forward is launched: SimpleCPU loads are always async): launch
//!   this step's load event;
//! - `wait_for_save` (after the forward): launch this step's store event on the store stream,
//!   ordered after the compute-done event, so the copy reads what this step's forward wrote;
//! - `get_finished`: report completed events (high-water marks per stream): loads by request id
//!   (`finished_recving`), stores by event id (worker metadata).
//!
//! Each stream completes strictly in launch order. A store's copy reads its source blocks as
//! they are when it is launched; a forward that writes a source block before the copy is
//! done tears it.

use super::SimpleCpuState;
use crate::system::connector::Phase;
use crate::system::engine::{Ctx, Direction, StepInput};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::gpu_pool::GpuPool;
use crate::system::model_runner::WorkerOut;
use crate::system::types::{BadKind, BlockId, ContentTag, JobId, ReqId};
use std::collections::BTreeSet;

/// `StepInput::complete` names store events by id and load events by `id | LOAD_EVENT`
/// (vLLM counts them separately; conformance logs say which copies finished in a step).
pub const LOAD_EVENT: JobId = 1 << 31;

/// The event a stream completes next: the oldest launched one of that direction.
pub fn next_transfer(sc: &SimpleCpuState, d: Direction) -> Option<JobId> {
    match d {
        Direction::Store => sc.stores.iter().filter(|e| e.phase == Phase::Submitted).map(|e| e.id).min(),
        Direction::Load => sc.loads.iter().filter(|e| e.phase == Phase::Submitted).map(|e| e.id).min(),
    }
}

/// The copy of event `id` finished: a store's snapshot lands in its CPU blocks, a load's CPU
/// blocks (as they are now) land in its GPU blocks.
pub fn complete(sc: &mut SimpleCpuState, pool: &mut GpuPool, d: Direction, id: JobId, ev: &mut Events) {
    match d {
        Direction::Store => {
            let e = sc.stores.iter_mut().find(|e| e.id == id).expect("completed store event exists");
            let cpu: Vec<BlockId> = e.cpu().collect();
            let snapshot = e.snapshot.clone();
            e.phase = Phase::Done;
            for (cb, tag) in cpu.into_iter().zip(snapshot) {
                sc.cpu.set_content(cb, tag);
            }
        }
        Direction::Load => {
            let e = sc.loads.iter_mut().find(|e| e.id == id).expect("completed load event exists");
            e.phase = Phase::Done;
            let pairs: Vec<(BlockId, BlockId)> = e.gpu.iter().copied().zip(e.cpu.iter().copied()).collect();
            for (g, cb) in pairs {
                let tag = sc.cpu.content(cb);
                pool.set_content(g, tag);
            }
        }
    }
    ev.emit(|| Event::TransferDone { job: id });
}

/// `handle_preemptions`: with `need_flush`, every launched transfer finishes now.
pub fn handle_preemptions(
    sc: &mut SimpleCpuState,
    pool: &mut GpuPool,
    need_flush: bool,
    ghost: &mut Ghost,
    ev: &mut Events,
) {
    if !need_flush {
        return;
    }
    for d in [Direction::Load, Direction::Store] {
        while let Some(id) = next_transfer(sc, d) {
            ghost.mark(Mark::Flush);
            ev.emit(|| Event::Flush { job: id });
            complete(sc, pool, d, id, ev);
        }
    }
}

/// `start_load_kv`: launch this step's load event.
pub fn start_load_kv(sc: &mut SimpleCpuState) {
    for e in sc.loads.iter_mut().filter(|e| e.phase == Phase::Built) {
        e.phase = Phase::Submitted;
    }
}

/// `wait_for_save`: launch this step's store event; its copy reads the sources now, and each
/// must hold the KV of the hash it was selected under (source-freshness).
pub fn wait_for_save(sc: &mut SimpleCpuState, pool: &GpuPool, ctx: Ctx, ghost: &mut Ghost, ev: &mut Events) {
    let b = ctx.cfg.block_size;
    for e in sc.stores.iter_mut().filter(|e| e.phase == Phase::Built) {
        e.phase = Phase::Submitted;
        e.snapshot = e.gpu().map(|g| pool.content(g)).collect();
        let stale: Vec<(String, BlockId)> = e
            .gpu()
            .zip(e.hashes())
            .zip(&e.snapshot)
            .filter(|((_, h), tag)| **tag != ContentTag::full(*h, b))
            .map(|((g, h), _)| (ctx.wl.label(h), g))
            .collect();
        if !stale.is_empty() {
            ghost.breach(Breach::StaleSource);
            let id = e.id;
            ev.emit(|| Event::Violation {
                property: "source-freshness",
                detail: format!("store event {id} copies {stale:?}: the source block does not hold that KV"),
            });
        }
    }
}

/// The forward pass wrote `block`: a store still copying it is torn.
pub fn forward_write(sc: &mut SimpleCpuState, block: BlockId, ghost: &mut Ghost, ev: &mut Events) {
    for e in sc.stores.iter_mut().filter(|e| e.phase == Phase::Submitted) {
        let gpu: Vec<BlockId> = e.gpu().collect();
        for (i, g) in gpu.into_iter().enumerate() {
            if g == block {
                e.snapshot[i] = ContentTag::Bad(BadKind::Torn);
                ghost.breach(Breach::StaleSource);
                let id = e.id;
                ev.emit(|| Event::Violation {
                    property: "source-freshness",
                    detail: format!("block {block} is overwritten while store event {id} is still copying it"),
                });
            }
        }
    }
}

/// `get_finished` + `build_connector_worker_meta`: completed store events and the requests
/// whose loads completed; each is reported once.
pub fn get_finished(sc: &mut SimpleCpuState) -> (Vec<JobId>, Vec<ReqId>) {
    let mut recving = Vec::new();
    for e in sc.loads.iter_mut().filter(|e| e.phase == Phase::Done) {
        e.phase = Phase::Reported;
        recving.extend_from_slice(&e.reqs);
    }
    let mut completed = Vec::new();
    for e in sc.stores.iter_mut().filter(|e| e.phase == Phase::Done) {
        e.phase = Phase::Reported;
        completed.push(e.id);
    }
    (completed, recving)
}

/// The worker's hooks after the forward: launch the step's loads and stores, let the copies
/// the environment chose finish within the step, report.
pub fn after_forward(
    sc: &mut SimpleCpuState,
    pool: &mut GpuPool,
    ctx: Ctx,
    input: &StepInput,
    ghost: &mut Ghost,
    ev: &mut Events,
) -> WorkerOut {
    start_load_kv(sc);
    wait_for_save(sc, pool, ctx, ghost, ev);
    if !input.drain {
        ghost.drainable.0 |= [Direction::Load, Direction::Store].into_iter().any(|d| next_transfer(sc, d).is_some());
    }
    if input.drain {
        for d in [Direction::Load, Direction::Store] {
            while let Some(id) = next_transfer(sc, d) {
                ghost.mark(Mark::Drained);
                complete(sc, pool, d, id, ev);
            }
        }
    }
    // Copies a conformance log reports finished in this step (if launched and not done yet).
    for &named in &input.complete {
        let (d, id) =
            if named & LOAD_EVENT != 0 { (Direction::Load, named & !LOAD_EVENT) } else { (Direction::Store, named) };
        let launched = match d {
            Direction::Store => sc.stores.iter().any(|e| e.id == id && e.phase == Phase::Submitted),
            Direction::Load => sc.loads.iter().any(|e| e.id == id && e.phase == Phase::Submitted),
        };
        if launched {
            ghost.mark(Mark::Drained);
            complete(sc, pool, d, id, ev);
        }
    }
    let (completed, finished_recving) = get_finished(sc);
    WorkerOut { completed, finished_recving, invalid_blocks: BTreeSet::new(), ..Default::default() }
}
