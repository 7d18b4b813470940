//! Reference-count accounting of a block pool from change logs, for trace replay: G1 (for
//! g1-accounting) and SimpleCPU's CPU pool (for its host-accounting) are counted by the same
//! [`PoolCounts`]; and SimpleCPU's host-integrity over its CPU pool's logged changes.
//!
//! A pool's holders come from logs where they change (block tables and deferred frees, logged
//! by the pool) and from references a connector keeps in flight (SimpleCPU's and Mooncake's
//! pins of GPU blocks, SimpleCPU's lookup, load and store references on CPU blocks). Those are
//! diffed against the previous action's as a sorted multiset ([`PoolCounts::set_refs`]), so
//! only blocks whose holders, reference count or free-queue membership changed are examined
//! ([`PoolCounts::check`]): `ref_cnt == holders`, free iff unreferenced, the null block never
//! free, and a running count of queued blocks equal to `num_free`. The queue's link structure
//! (no cycle, no duplicate) is walked only by the full check.
//!
//! SimpleCPU's host-integrity (`props::host::engine_integrity`: every block its CPU pool lists
//! under a hash holds that hash and that prefix's KV) is re-evaluated for the pairs the cached
//! map gained or lost and for the blocks whose content changed ([`cpu_integrity`]), as
//! g1-cache-sound is for G1.

use crate::system::connector::simple_cpu::SimpleCpuState;
use crate::system::gpu_pool::GpuPool;
use crate::system::types::{BlockHash, BlockId, ContentTag, NULL_BLOCK};

/// Apply the difference between two sorted multisets of blocks: `gone` once per reference
/// that `before` has and `now` lacks, `new` once per reference `now` adds.
fn multiset_diff(before: &[BlockId], now: &[BlockId], mut gone: impl FnMut(BlockId), mut new: impl FnMut(BlockId)) {
    let (mut i, mut j) = (0, 0);
    while i < before.len() || j < now.len() {
        match (before.get(i), now.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(&a), Some(&b)) if a < b => {
                gone(a);
                i += 1;
            }
            (Some(&a), None) => {
                gone(a);
                i += 1;
            }
            (_, Some(&b)) => {
                new(b);
                j += 1;
            }
            (None, None) => unreachable!("loop condition"),
        }
    }
}

/// Running holder counts of one pool (see the module documentation).
pub struct PoolCounts {
    holders: Vec<u32>,
    in_queue: Vec<bool>,
    queued: u32,
    /// In-flight references after the previous action, sorted (null and out-of-pool ones left
    /// out: they are reported, not counted).
    refs: Vec<BlockId>,
    mark: Vec<u32>,
    epoch: u32,
    dirty: Vec<BlockId>,
}

impl PoolCounts {
    /// Start from `p`, a pool that nothing holds yet.
    pub fn new(p: &GpuPool) -> Self {
        let n = p.num_blocks() as usize;
        let in_queue: Vec<bool> = (0..n as u32).map(|b| p.in_free_queue(b)).collect();
        let queued = in_queue.iter().filter(|&&q| q).count() as u32;
        PoolCounts {
            holders: vec![0; n],
            in_queue,
            queued,
            refs: Vec::new(),
            mark: vec![0; n],
            epoch: 0,
            dirty: Vec::new(),
        }
    }

    /// A new action: nothing touched yet. Returns the action's epoch (never 0) and whether
    /// the counter wrapped (marks kept by the caller under this epoch must be reset).
    pub fn begin(&mut self) -> (u32, bool) {
        self.epoch = self.epoch.wrapping_add(1);
        let wrapped = self.epoch == 0;
        if wrapped {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        self.dirty.clear();
        (self.epoch, wrapped)
    }

    /// `b` may have changed (reference count, queue membership or holders).
    pub fn touch(&mut self, b: BlockId) {
        let i = b as usize;
        if i < self.mark.len() && self.mark[i] != self.epoch {
            self.mark[i] = self.epoch;
            self.dirty.push(b);
        }
    }

    /// `b` gained a holder (a block table, a deferred free).
    pub fn hold(&mut self, b: BlockId) {
        self.holders[b as usize] += 1;
        self.touch(b);
    }

    /// `b` lost a holder.
    pub fn release(&mut self, b: BlockId) {
        self.holders[b as usize] -= 1;
        self.touch(b);
    }

    /// The references a connector keeps in flight now (any order). Returns one that names
    /// the null block or lies past the pool, if any.
    pub fn set_refs(&mut self, mut now: Vec<BlockId>) -> Option<BlockId> {
        let n = self.holders.len() as u32;
        let bad = now.iter().copied().find(|&b| b == NULL_BLOCK || b >= n);
        now.retain(|&b| b != NULL_BLOCK && b < n);
        now.sort_unstable();
        if now != self.refs {
            let (mut gone, mut new) = (Vec::new(), Vec::new());
            multiset_diff(&self.refs, &now, |b| gone.push(b), |b| new.push(b));
            gone.into_iter().for_each(|b| self.release(b));
            new.into_iter().for_each(|b| self.hold(b));
            self.refs = now;
        }
        bad
    }

    /// Blocks touched in this action.
    pub fn touched(&self) -> usize {
        self.dirty.len()
    }

    /// Check every block touched in this action against `p` (`what` names its blocks in the
    /// message: "block", "CPU block"). The first problem found, if any; the running counts
    /// are brought up to date either way.
    pub fn check(&mut self, p: &GpuPool, what: &str) -> Option<String> {
        let mut found = None;
        for &b in &self.dirty {
            let i = b as usize;
            let rc = u32::from(p.ref_cnt(i as u32));
            let iq = p.in_free_queue(b);
            if iq != self.in_queue[i] {
                self.in_queue[i] = iq;
                if iq {
                    self.queued += 1;
                } else {
                    self.queued -= 1;
                }
            }
            if found.is_some() {
                continue;
            }
            if rc != self.holders[i] {
                found = Some(format!("{what} {b} has ref count {rc} but {} holders", self.holders[i]));
            } else if (rc == 0) != iq {
                let not = if iq { "" } else { "not " };
                found = Some(format!("{what} {b} has ref count {rc} and is {not}in the free queue"));
            } else if b == NULL_BLOCK && iq {
                found = Some(format!("the null {what} is in the free queue"));
            }
        }
        let n = self.holders.len() as u32;
        if found.is_none() && (self.queued != p.num_free() || p.num_free() > n - 1) {
            found = Some(format!("{} {what}s are queued but num_free is {}", self.queued, p.num_free()));
        }
        found
    }
}

/// SimpleCPU's host-integrity over the CPU pool's logged pairs and content changes. Returns
/// what is wrong, if anything, and how many pairs were examined.
pub fn cpu_integrity(
    sc: &SimpleCpuState,
    b: u32,
    cached: &[(BlockHash, BlockId)],
    content: &[BlockId],
) -> (Option<String>, u64) {
    let p = &sc.cpu;
    let current = content.iter().filter_map(|&cb| p.block_hash(cb).map(|h| (h, cb)));
    let mut examined = 0;
    for (h, cb) in cached.iter().copied().chain(current) {
        examined += 1;
        if !p.cached_under(&h, cb) {
            continue;
        }
        if p.block_hash(cb) != Some(h) || p.content(cb) != ContentTag::full(h, b) {
            return (Some(format!("CPU block {cb}, listed under {h:?}, does not hold that prefix's KV")), examined);
        }
    }
    (None, examined)
}
