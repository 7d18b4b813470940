//! SimpleCPU's host properties, evaluated from change logs (trace replay).
//!
//! SimpleCPU's CPU tier is a second block pool (`ScState::cpu`, a [`GpuPool`]), so replay turns
//! on that pool's change log as it does G1's. After each action:
//! - **host-integrity** (`props::host::engine_integrity` for SimpleCPU: every block the CPU
//!   pool lists under a hash holds that hash and that prefix's KV) is re-evaluated for the
//!   pairs the cached map gained or lost and for the blocks whose content changed, as
//!   g1-cache-sound is for G1;
//! - **host-accounting** (`accounting_simple_cpu`: reference counts equal SimpleCPU's own
//!   references, a block is free iff unreferenced, the free count adds up) keeps running
//!   holder counts. SimpleCPU's references (lookup pins, load pins, stores not yet processed)
//!   are diffed against the previous action's, a sorted multiset of what is in flight, so
//!   only blocks whose references or reference counts changed are examined.
//!
//! [`pin_diff`] is shared with g1-accounting, whose holders include the GPU blocks SimpleCPU
//! pins.

use crate::system::connector::simple_cpu::ScState;
use crate::system::gpu_pool::GpuPool;
use crate::system::rules::Rules;
use crate::system::types::{BlockHash, BlockId, ContentTag, NULL_BLOCK};

/// Apply the difference between two sorted multisets of blocks: `gone` once per reference
/// that `before` has and `now` lacks, `new` once per reference `now` adds.
pub fn pin_diff(before: &[BlockId], now: &[BlockId], mut gone: impl FnMut(BlockId), mut new: impl FnMut(BlockId)) {
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

/// Running counts for SimpleCPU's CPU pool (see the module documentation).
pub struct CpuShadow {
    holders: Vec<u32>,
    in_queue: Vec<bool>,
    queued: u32,
    /// SimpleCPU's CPU references after the previous action, sorted.
    refs: Vec<BlockId>,
    mark: Vec<u32>,
    epoch: u32,
    dirty: Vec<BlockId>,
}

impl CpuShadow {
    /// Start from `p`, a CPU pool that nothing references yet.
    pub fn new(p: &GpuPool) -> Self {
        let n = p.num_blocks() as usize;
        let in_queue: Vec<bool> = (0..n as u32).map(|b| p.in_free_queue(b)).collect();
        let queued = in_queue.iter().filter(|&&q| q).count() as u32;
        CpuShadow {
            holders: vec![0; n],
            in_queue,
            queued,
            refs: Vec::new(),
            mark: vec![0; n],
            epoch: 0,
            dirty: Vec::new(),
        }
    }

    fn touch(&mut self, b: BlockId) {
        let i = b as usize;
        if i < self.mark.len() && self.mark[i] != self.epoch {
            self.mark[i] = self.epoch;
            self.dirty.push(b);
        }
    }

    /// host-accounting after one action; `logged`: CPU blocks whose reference count or
    /// free-queue membership changed. Returns what is wrong, if anything, and how many blocks
    /// were examined.
    pub fn accounting(&mut self, sc: &ScState, rules: &Rules, logged: &[BlockId]) -> (Option<String>, u64) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            self.mark.iter_mut().for_each(|m| *m = 0);
            self.epoch = 1;
        }
        self.dirty.clear();
        let p = &sc.cpu;
        let n = p.num_blocks();
        let mut now = sc.cpu_refs(rules);
        now.sort_unstable();
        let mut bad_ref = None;
        if now != self.refs {
            let before = std::mem::take(&mut self.refs);
            let mut gone = Vec::new();
            let mut new = Vec::new();
            pin_diff(&before, &now, |b| gone.push(b), |b| new.push(b));
            for b in gone {
                // A reference to the null block or past the pool was reported, not counted.
                if b != NULL_BLOCK && b < n {
                    self.holders[b as usize] -= 1;
                    self.touch(b);
                }
            }
            for b in new {
                if b == NULL_BLOCK || b >= n {
                    bad_ref = Some(format!("SimpleCPU references CPU block {b}, the null block or past the pool"));
                } else {
                    self.holders[b as usize] += 1;
                    self.touch(b);
                }
            }
            self.refs = now;
        }
        for &b in logged {
            self.touch(b);
        }
        let examined = self.dirty.len() as u64;
        let mut found = bad_ref;
        for &b in &self.dirty {
            let i = b as usize;
            let rc = u32::from(p.ref_cnt[i]);
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
                found = Some(format!("CPU block {b} has ref count {rc} but SimpleCPU holds {}", self.holders[i]));
            } else if (rc == 0) != iq {
                let where_ = if iq { "" } else { "not " };
                found = Some(format!("CPU block {b} has ref count {rc} and is {where_}in the free queue"));
            } else if b == NULL_BLOCK && iq {
                found = Some("the CPU pool's null block is in its free queue".to_string());
            }
        }
        if found.is_none() && (self.queued != p.num_free() || p.num_free() > n - 1) {
            found = Some(format!("{} CPU blocks are queued but num_free is {}", self.queued, p.num_free()));
        }
        (found, examined)
    }
}

/// host-integrity over the CPU pool's logged pairs and content changes. Returns what is
/// wrong, if anything, and how many pairs were examined.
pub fn integrity(sc: &ScState, b: u32, cached: &[(BlockHash, BlockId)], content: &[BlockId]) -> (Option<String>, u64) {
    let p = &sc.cpu;
    let current = content.iter().filter_map(|&cb| p.hash[cb as usize].map(|h| (h, cb)));
    let mut examined = 0;
    for (h, cb) in cached.iter().copied().chain(current) {
        examined += 1;
        if !p.cached_under(&h).contains(&cb) {
            continue;
        }
        if p.hash[cb as usize] != Some(h) || p.content[cb as usize] != ContentTag::full(h, b) {
            return (Some(format!("CPU block {cb}, listed under {h:?}, does not hold that prefix's KV")), examined);
        }
    }
    (None, examined)
}
