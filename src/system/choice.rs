//! vLLM's own nondeterminism as model choices: where vLLM iterates a Python `set` of request
//! ids and the iteration order reaches a decision (which block goes back to the free queue
//! first, which finished request's last store is prepared first, which request's LRU re-rank
//! is fresher), the engine asks `Events::order` for the order. Python orders a set of strings
//! by their hashes, which depend on `PYTHONHASHSEED`, so any order is possible.
//!
//! By default (`Events::choices` is `None`: the checker, trace replay) every point keeps the
//! model's canonical order (the order the model holds the ids in), so state counts do not
//! depend on this module. Conformance (src/conform/) sets a plan and searches every order for
//! one that matches a log (docs/conformance.md, "vLLM's nondeterminism").

use super::types::{BlockHash, ReqId};

/// Where vLLM iterates a set whose order reaches a decision (docs/conformance.md lists every
/// set iteration of the modelled code, also those whose order does not matter).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Point {
    /// `SchedulerOutput.finished_req_ids` (`Scheduler.finished_req_ids`), iterated by the
    /// connector's `build_connector_meta`: OffloadingConnector's `_build_store_jobs` (the
    /// finish-time `prepare_store` calls: job ids, host chunks, evictions) and its
    /// `on_request_finished` loop (fresh LRU ranks), in the same order.
    FinishedReqIds,
    /// `Scheduler.finish_requests(ids, ...)` with several ids: `set(request_ids)` decides the
    /// order of `_free_request` (finish lines, the connector's `request_finished`, the G1
    /// free-queue tail). Reached with the requests one KV load failure fails under
    /// `kv_load_failure_policy = "fail"` (`error_req_ids`).
    FinishRequests,
    /// `KVConnectorOutput.finished_recving`: SimpleCPU's `update_connector_output` (which CPU
    /// and GPU blocks `_cleanup_load_request` frees first), then the scheduler's
    /// `_update_from_kv_xfer_finished` (the blocks of a request finished meanwhile).
    FinishedRecving,
    /// `KVConnectorOutput.finished_sending`: `_update_from_kv_xfer_finished` frees the delayed
    /// blocks in this order.
    FinishedSending,
    /// vLLM 0.24's `TransferJobStatus.keys` (a `set[OffloadKey]`), walked by
    /// `CPUOffloadingManager.complete_store` / `complete_load` from the OffloadingConnector's
    /// `_update_connector_output`: each key that becomes evictable joins the MRU end of the LRU
    /// policy's `OrderedDict` (`mark_evictable`) in this order, which is the host tier's
    /// eviction order. Asked only under the release-order LRU (`HostLru::ReleaseOrder`); 0.32+
    /// ranks keys, so the walk order reaches no decision there.
    TransferJobKeys,
}

impl Point {
    /// The vLLM name of the set.
    pub fn as_str(self) -> &'static str {
        match self {
            Point::FinishedReqIds => "finished_req_ids",
            Point::FinishRequests => "finish_requests",
            Point::FinishedRecving => "finished_recving",
            Point::FinishedSending => "finished_sending",
            Point::TransferJobKeys => "TransferJobStatus.keys",
        }
    }
}

/// What a set holds: request ids, or host-tier keys (block hashes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Req(ReqId),
    Key(BlockHash),
}

impl From<ReqId> for Item {
    fn from(r: ReqId) -> Self {
        Item::Req(r)
    }
}

impl From<BlockHash> for Item {
    fn from(k: BlockHash) -> Self {
        Item::Key(k)
    }
}

/// One choice the engine made: the items in the model's order, and the order it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub point: Point,
    pub canonical: Vec<Item>,
    pub chosen: Vec<Item>,
    /// Index of `chosen` among the orders (0 = canonical), and how many orders there are.
    pub index: u32,
    pub count: u32,
}

/// Orders of more ids than this are not searched beyond the canonical one (8! = 40,320).
pub const MAX_PERMUTED: usize = 8;

/// A plan (the order index of each choice point, in the order the engine reaches them;
/// missing = 0) and the choices the engine made under it.
#[derive(Clone, Debug, Default)]
pub struct Choices {
    pub plan: Vec<u32>,
    pub taken: Vec<Choice>,
}

impl Choices {
    pub fn with_plan(plan: Vec<u32>) -> Self {
        Choices { plan, taken: Vec::new() }
    }

    /// Reorder `items` as the plan says for the next choice point, and record it.
    pub fn order<T: Copy + Into<Item>>(&mut self, point: Point, items: &mut [T]) {
        let canonical = items.iter().map(|&x| x.into()).collect();
        let count = if items.len() > MAX_PERMUTED { 1 } else { (1..=items.len() as u32).product() };
        let index = self.plan.get(self.taken.len()).copied().unwrap_or(0).min(count - 1);
        permute(items, index);
        self.taken.push(Choice { point, canonical, chosen: items.iter().map(|&x| x.into()).collect(), index, count });
    }

    /// The plan after `self.taken` in depth-first order (the last point that has another order
    /// moves to it; later points start again at 0), or None when every plan has been tried.
    pub fn next_plan(&self) -> Option<Vec<u32>> {
        let k = self.taken.iter().rposition(|c| c.index + 1 < c.count)?;
        let mut plan: Vec<u32> = self.taken[..k].iter().map(|c| c.index).collect();
        plan.push(self.taken[k].index + 1);
        Some(plan)
    }
}

/// The `index`-th permutation of `items` in lexicographic order of positions (0 = as is).
pub fn permute<T: Copy>(items: &mut [T], mut index: u32) {
    let mut pool: Vec<T> = items.to_vec();
    let n = items.len();
    for (i, slot) in items.iter_mut().enumerate() {
        let f: u32 = (1..(n - i) as u32).product();
        let pick = (index / f) as usize;
        index %= f;
        *slot = pool.remove(pick);
    }
}
