//! The buffers an engine step works in, kept per thread and reused from step to step: the
//! connector's and the scheduler's scratch, the step's `SchedulerOutput` and the worker's
//! report. Nothing here is vLLM's: the checker takes hundreds of thousands of steps, each on a
//! copy of a state, and a step that built these lists afresh allocated and freed them every
//! time. Between steps every buffer is empty; only its allocation is kept.

use super::connector::{SchedOut, StepScratch};
use super::model_runner::WorkerOut;
use super::types::{BlockId, ReqId};
use std::cell::Cell;

/// What one engine step works in (`Engine::step`). A step takes the thread's and gives it
/// back; a step nested in another (none today) would take fresh ones.
#[derive(Default)]
pub(crate) struct StepBufs {
    pub scratch: StepScratch,
    pub out: SchedOut,
    pub wout: WorkerOut,
}

thread_local! {
    static STEP_BUFS: Cell<Option<Box<StepBufs>>> = const { Cell::new(None) };
}

impl StepBufs {
    /// The thread's buffers (empty), or fresh ones.
    pub fn take() -> Box<StepBufs> {
        STEP_BUFS.with(|c| c.take()).unwrap_or_default()
    }

    /// Empty the buffers, keeping their allocations, and keep them for the thread's next step.
    pub fn give_back(mut self: Box<Self>) {
        let StepBufs { scratch, out, wout } = &mut *self;
        recycle(out, &mut scratch.sched);
        scratch.clear();
        wout.clear();
        STEP_BUFS.with(|c| c.set(Some(self)));
    }
}

/// The scheduler's temporaries for one step (`scheduler::schedule`), in the step's
/// [`StepScratch`].
#[derive(Clone, Debug, Default)]
pub(crate) struct SchedBufs {
    /// The waiting pass's skipped requests (`skipped_waiting`, and those holding KV blocks).
    pub skipped_kv: Vec<ReqId>,
    pub skipped_waiting: Vec<ReqId>,
    /// The local prefix hit of the waiting request being looked at.
    pub hits: Vec<BlockId>,
    /// Emptied block lists of earlier steps' `Scheduled` entries, for this step's.
    spare_blocks: Vec<Vec<BlockId>>,
}

/// Spare block lists kept at most (a step schedules at most `max_num_seqs` entries).
const SPARE_BLOCK_LISTS: usize = 64;

impl SchedBufs {
    /// Empty, keeping the buffers and the spare block lists.
    pub fn clear(&mut self) {
        self.skipped_kv.clear();
        self.skipped_waiting.clear();
        self.hits.clear();
    }

    /// A `Scheduled` entry's block list holding `blocks`, in a spare list if there is one.
    pub fn blocks(&mut self, blocks: &[BlockId]) -> Vec<BlockId> {
        if blocks.is_empty() {
            return Vec::new();
        }
        let mut v = self.spare_blocks.pop().unwrap_or_default();
        v.extend_from_slice(blocks);
        v
    }
}

/// Empty `out` for the thread's next step, keeping its entries' block lists in `bufs`.
fn recycle(out: &mut SchedOut, bufs: &mut SchedBufs) {
    let SchedOut { scheduled, preempted, finished, resumed_after_new } = out;
    for s in scheduled.drain(..) {
        let mut v = s.blocks;
        if v.capacity() > 0 && bufs.spare_blocks.len() < SPARE_BLOCK_LISTS {
            v.clear();
            bufs.spare_blocks.push(v);
        }
    }
    preempted.clear();
    finished.clear();
    *resumed_after_new = false;
}
