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
    /// Every order of the set is among the `count` (false: a set of more than
    /// [`MAX_PERMUTED`] items, tried in the model's order and the log's only).
    pub exhaustive: bool,
}

/// Orders of more ids than this are not all searched (8! = 40,320): such a set is tried in the
/// model's order and in the order the log shows for it ([`Choices::hints`]), if any.
pub const MAX_PERMUTED: usize = 8;

/// A plan (the order index of each choice point, in the order the engine reaches them;
/// missing = 0) and the choices the engine made under it.
#[derive(Clone, Debug, Default)]
pub struct Choices {
    pub plan: Vec<u32>,
    pub taken: Vec<Choice>,
    /// Orders a conformance log shows for a point (vLLM 0.24's host-tier LRU order after the
    /// step, for `TransferJobStatus.keys`): a set too large to search is also tried sorted by
    /// them, items the log does not list first (they left the order: evicted or pinned again).
    pub hints: Vec<(Point, Vec<Item>)>,
}

impl Choices {
    pub fn with_plan(plan: Vec<u32>) -> Self {
        Choices { plan, taken: Vec::new(), hints: Vec::new() }
    }

    /// As [`Choices::with_plan`], with the orders the log shows.
    pub fn with_hints(plan: Vec<u32>, hints: Vec<(Point, Vec<Item>)>) -> Self {
        Choices { plan, taken: Vec::new(), hints }
    }

    /// Reorder `items` as the plan says for the next choice point, and record it.
    pub fn order<T: Copy + Into<Item>>(&mut self, point: Point, items: &mut [T]) {
        let canonical: Vec<Item> = items.iter().map(|&x| x.into()).collect();
        let wanted = self.plan.get(self.taken.len()).copied().unwrap_or(0);
        let (index, count, exhaustive) = if items.len() > MAX_PERMUTED {
            // Too many orders to search: the model's, and the one the log's order gives.
            let mut hinted: Vec<T> = items.to_vec();
            if let Some((_, hint)) = self.hints.iter().find(|(p, _)| *p == point) {
                hinted.sort_by_key(|&x| {
                    let x: Item = x.into();
                    hint.iter().position(|&h| h == x).map_or(0, |i| i + 1)
                });
            }
            let count = if hinted.iter().zip(&canonical).any(|(&a, b)| Into::<Item>::into(a) != *b) { 2 } else { 1 };
            let index = wanted.min(count - 1);
            if index == 1 {
                items.copy_from_slice(&hinted);
            }
            (index, count, false)
        } else {
            let count: u32 = (1..=items.len() as u32).product();
            let index = wanted.min(count - 1);
            permute(items, index);
            (index, count, true)
        };
        let chosen = items.iter().map(|&x| x.into()).collect();
        self.taken.push(Choice { point, canonical, chosen, index, count, exhaustive });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_too_large_to_permute_is_tried_in_the_model_s_order_and_the_hinted_one() {
        let ids: Vec<ReqId> = (0..9).collect();
        // No hint: the model's order only.
        let mut c = Choices::with_plan(vec![1]);
        let mut v = ids.clone();
        c.order(Point::FinishedReqIds, &mut v);
        assert_eq!((v.clone(), c.taken[0].count, c.taken[0].exhaustive), (ids.clone(), 1, false));
        // A hint naming some of them (reversed): those follow the ones it does not name.
        let hint: Vec<Item> = [8u16, 5, 2].iter().map(|&r| Item::Req(r)).collect();
        for (plan, want) in [(0, ids.clone()), (1, vec![0, 1, 3, 4, 6, 7, 8, 5, 2])] {
            let mut c = Choices::with_hints(vec![plan], vec![(Point::FinishedReqIds, hint.clone())]);
            let mut v = ids.clone();
            c.order(Point::FinishedReqIds, &mut v);
            assert_eq!((v, c.taken[0].index, c.taken[0].count), (want, plan, 2));
            assert!(c.next_plan().is_some() == (plan == 0));
        }
        // A hint for another point is not used; a small set is searched whole.
        let mut c = Choices::with_hints(vec![1], vec![(Point::FinishRequests, hint)]);
        let mut v = ids.clone();
        c.order(Point::FinishedReqIds, &mut v);
        assert_eq!(c.taken[0].count, 1);
        let mut small = vec![0u16, 1, 2];
        c.order(Point::FinishedReqIds, &mut small);
        assert_eq!((c.taken[1].count, c.taken[1].exhaustive), (6, true));
    }
}
