//! Copying the OffloadingConnector's state into a reused one without allocating. The checker
//! writes every successor into a reused engine (`System::apply_into`), and the derived copy of
//! the fences allocates anyway (jobs keep their lists inline and copy whole, `bitwise`). A
//! block's job list is copied into the list the target has for that block (the map's
//! element-wise copy clones each `(block, list)` pair afresh), or into a spare list: a block
//! leaving the fences, in a copy or in a step, leaves its list in a per-thread spare list, and
//! a newly fenced block takes one.

use super::OffloadingState;
use crate::system::collections::vec_map::VecMap;
use crate::system::types::{BlockId, JobId};
use smallvec::SmallVec;
use std::cell::RefCell;

/// Spare fence lists a thread keeps at most (trace replay frees fences without ever copying a
/// state: the rest are dropped).
const SPARE_LISTS: usize = 32;

type Fences = VecMap<BlockId, Vec<JobId>, 4>;

thread_local! {
    static SPARE_FENCE_LISTS: RefCell<Vec<Vec<JobId>>> = const { RefCell::new(Vec::new()) };
}

/// A fenced block's job list has left the fences: keep its buffer for a later one.
pub(super) fn retire_list(mut list: Vec<JobId>) {
    if list.capacity() == 0 {
        return;
    }
    list.clear();
    SPARE_FENCE_LISTS.with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if s.len() < SPARE_LISTS {
                s.push(list);
            }
        }
    });
}

/// `fences.entry_or_default(b)`, the new entry's (empty) list a spare one if there is one.
pub(super) fn fence_list(fences: &mut Fences, b: BlockId) -> &mut Vec<JobId> {
    if !fences.contains_key(&b) {
        let list = SPARE_FENCE_LISTS.with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.pop())).unwrap_or_default();
        fences.insert(b, list);
    }
    fences.get_mut(&b).expect("inserted")
}

/// `VecMap::clone_from` with each block's job list copied into the target's list for the same
/// block, or into a spare one; the lists of blocks `src` does not fence become spares. `dst`
/// ends equal to `src` (the map is sorted: same blocks, same order).
fn clone_fences_from(dst: &mut Fences, src: &Fences) {
    if dst.len() == src.len() && dst.keys().eq(src.keys()) {
        // The common case (a reused engine and the state copied into it fence the same blocks).
        for (d, s) in dst.values_mut().zip(src.values()) {
            d.clone_from(s);
        }
        return;
    }
    let gone: SmallVec<[BlockId; 8]> = dst.keys().filter(|b| !src.contains_key(b)).copied().collect();
    for b in gone {
        if let Some(list) = dst.remove(&b) {
            retire_list(list);
        }
    }
    for (&b, s) in src.iter() {
        fence_list(dst, b).clone_from(s);
    }
}

/// Field by field, as `clone_fields` writes it (every field listed: a field added later and
/// not copied here is a compile error), with the fences' lists copied through the spares.
impl Clone for OffloadingState {
    fn clone(&self) -> Self {
        let OffloadingState { reqs, jobs, next_job, fences, host, held } = self;
        OffloadingState {
            reqs: reqs.clone(),
            jobs: jobs.clone(),
            next_job: *next_job,
            fences: fences.clone(),
            host: host.clone(),
            held: held.clone(),
        }
    }
    fn clone_from(&mut self, src: &Self) {
        let OffloadingState { reqs, jobs, next_job, fences, host, held } = self;
        reqs.clone_from(&src.reqs);
        jobs.clone_from(&src.jobs);
        *next_job = src.next_job;
        clone_fences_from(fences, &src.fences);
        host.clone_from(&src.host);
        held.clone_from(&src.held);
    }
}
