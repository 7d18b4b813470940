//! G1: the GPU block pool and its prefix cache (vLLM `v1/core/block_pool.py: BlockPool`,
//! `v1/core/kv_cache_utils.py: FreeKVCacheBlockQueue`). SimpleCPUOffloadConnector's host tier
//! is a second instance of the same class ([`Medium::Cpu`]): one CPU block per GPU block,
//! FIFO by release, hashes registered when a store lands.
//!
//! Block 0 is the null block: never free, never hashed, never handed out. The free queue is
//! a doubly linked list over block ids (pop at the head, unhashed blocks freed to the head,
//! hashed ones to the tail), its links kept in the blocks' records so that it is both O(1) and
//! canonical. A cached block keeps its hash while it sits in the free queue; the hash is
//! dropped only when the slot is handed out again (`get_new_blocks`).
//!
//! Every block's state is one plain record (`slots.rs`), so a copy of the pool is one `memcpy`
//! and its packed form (the search frontier's, `pack.rs`) and serde's non-human-readable form
//! write the records as one run of bytes; the checker keeps no cached map beside the records
//! (it is a function of them), replay keeps a hash map (see [`GpuPool`]).

use super::collections::side::{KeyMap, PoolLog, Side};
use super::events::{Event, Events};
use super::ghost::{Breach, Ghost, Mark};
use super::types::{BlockHash, BlockId, BlockIds, ContentTag, NULL_BLOCK};
use crate::system::collections::pack::pack_fields;
use slots::{Slot, Slots, LOADED};
use smallvec::SmallVec;

mod cached;
mod pack;
mod slots;

const NIL: u32 = u32::MAX;
const OUT: u32 = u32::MAX - 1;

/// Which tier a pool serves; decides only how an eviction and a broken reference count are
/// reported (G1 events and g1-accounting, or host events and host-accounting).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum Medium {
    Gpu,
    /// SimpleCPU's CPU `BlockPool` (`SimpleCPUOffloadScheduler.cpu_block_pool`).
    Cpu,
}

/// The G1 pool (or, with [`Medium::Cpu`], SimpleCPU's CPU pool).
///
/// Each block's state is one record of [`slots::Slot`] (a copy of the pool is one `memcpy`).
/// The cached map has two forms. The checker's keeps no map: a block is in it under its own
/// hash, and its record's `rank` is its place among the blocks under that hash, so the map is
/// a function of the records. Replay's (after [`GpuPool::enable_log`]) is a hash map beside the
/// records (O(1) lookups in pools of tens of thousands of blocks), and every `rank` is 0.
#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct GpuPool {
    pub medium: Medium,
    slots: Slots,
    head: u32,
    tail: u32,
    num_free: u32,
    /// Replay's cached map: hash -> blocks carrying it, in insertion order (duplicates
    /// allowed); empty in the checker's form (see above).
    cached: KeyMap<BlockHash, BlockIds>,
    /// Trace replay's change log and read-cache counts (not state; off in the checker).
    pub log: Side<PoolLog>,
}

pack_fields!(clone GpuPool { medium, slots, head, tail, num_free, cached, log });

impl GpuPool {
    /// `BlockPool.__init__`: blocks 1..n-1 free in id order; block 0 is the null block.
    pub fn new(num_blocks: u32) -> Self {
        Self::with_medium(num_blocks, Medium::Gpu)
    }

    /// SimpleCPU's CPU pool: `num_cpu_blocks` blocks, block 0 its null block.
    pub fn new_cpu(num_blocks: u32) -> Self {
        Self::with_medium(num_blocks, Medium::Cpu)
    }

    fn with_medium(num_blocks: u32, medium: Medium) -> Self {
        let blank = Slot::unlinked(OUT);
        let mut pool = GpuPool {
            medium,
            slots: Slots(vec![blank; num_blocks as usize]),
            head: NIL,
            tail: NIL,
            num_free: 0,
            cached: KeyMap::default(),
            log: Side::default(),
        };
        for b in 1..num_blocks {
            pool.push_tail(b);
        }
        pool
    }

    /// Replay: log every change and keep the read cache's counts.
    pub fn enable_log(&mut self) {
        let verified_by = vec![0; self.slots.0.len()];
        self.log = Side(Some(Box::new(PoolLog { verified_by, ..Default::default() })));
        if !self.indexed() {
            // Replay's form: the map beside the records, built in each hash's order.
            let held = self.ranked();
            self.cached.use_hash(self.slots.0.len());
            for (h, b) in held {
                self.cached.entry_or_default(h).push(b);
                self.slots.0[b as usize].rank = 0;
            }
        }
    }

    #[inline]
    fn note(&mut self, b: BlockId) {
        if let Some(l) = self.log.get_mut() {
            l.blocks.push(b);
        }
    }

    #[inline]
    fn note_cached(&mut self, h: BlockHash, b: BlockId) {
        if let Some(l) = self.log.get_mut() {
            l.cached.push((h, b));
            l.cached_changed(&h);
        }
    }

    /// Replay: blocks gained (`added`) or lost (`removed`) a holder that g1-accounting counts
    /// (a request's block table or a deferred free).
    #[inline]
    pub fn note_holders(&mut self, added: &[BlockId], removed: &[BlockId]) {
        if let Some(l) = self.log.get_mut() {
            l.table_added.extend_from_slice(added);
            l.table_removed.extend_from_slice(removed);
        }
    }

    /// Replay: a request's block table was taken whole (its read-cache prefix may be void).
    #[inline]
    pub fn note_table_cleared(&mut self, blocks: &[BlockId]) {
        if let Some(l) = self.log.get_mut() {
            l.table_takes += 1;
            if !l.recheck && blocks.iter().any(|&b| l.verified_by[b as usize] > 0) {
                l.recheck = true;
            }
        }
    }

    /// Write what block `b` now holds (the forward pass, a landed load).
    #[inline]
    pub fn set_content(&mut self, b: BlockId, tag: ContentTag) {
        self.slots.0[b as usize].set_content(tag);
        if let Some(l) = self.log.get_mut() {
            l.content.push(b);
            if l.verified_by[b as usize] > 0 {
                l.stale = true;
            }
        }
    }

    pub fn num_blocks(&self) -> u32 {
        self.slots.0.len() as u32
    }

    /// `get_num_free_blocks`: free blocks, cached or not.
    pub fn num_free(&self) -> u32 {
        self.num_free
    }

    pub fn in_free_queue(&self, b: BlockId) -> bool {
        self.slots.0[b as usize].prev != OUT
    }

    /// The free queue, head (next to hand out) first.
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.num_free as usize);
        out.extend(self.free_queue_iter());
        out
    }

    /// [`GpuPool::free_queue`] without collecting it (the property checks walk it per state).
    pub fn free_queue_iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let b = cur;
            cur = self.slots.0[b as usize].next;
            Some(b)
        })
    }

    /// The free queue after block `b`, in eviction order (`FreeKVCacheBlockQueue.
    /// iter_blocks_after`): from the head when `b` is None, nothing when `b` is not queued.
    pub fn free_after(&self, b: Option<BlockId>) -> impl Iterator<Item = BlockId> + '_ {
        let start = match b {
            None => self.head,
            Some(b) if self.in_free_queue(b) => self.slots.0[b as usize].next,
            Some(_) => NIL,
        };
        std::iter::successors((start != NIL).then_some(start), move |&x| {
            let n = self.slots.0[x as usize].next;
            (n != NIL).then_some(n)
        })
    }

    #[inline(always)]
    fn slot(&self, b: BlockId) -> &Slot {
        &self.slots.0[b as usize]
    }

    /// Block `b`'s reference count.
    #[inline(always)]
    pub fn ref_cnt(&self, b: BlockId) -> u16 {
        self.slot(b).ref_cnt
    }

    /// Block `b`'s hash (`block_hash`), if it has one.
    #[inline(always)]
    pub fn block_hash(&self, b: BlockId) -> Option<BlockHash> {
        self.slot(b).hash()
    }

    /// What block `b` really holds (ghost: the content oracle).
    #[inline(always)]
    pub fn content(&self, b: BlockId) -> ContentTag {
        self.slot(b).content()
    }

    /// prime-rl's scheduler-side mark (`_track_externally_loaded_blocks`): an external load
    /// filled block `b`; cleared when `get_new_blocks` hands the block out again.
    #[inline(always)]
    pub fn loaded(&self, b: BlockId) -> bool {
        self.slot(b).flags & LOADED != 0
    }

    pub fn set_loaded(&mut self, b: BlockId) {
        self.slots.0[b as usize].flags |= LOADED;
    }

    #[inline(always)]
    fn push_tail(&mut self, b: BlockId) {
        let i = b as usize;
        self.slots.0[i].prev = self.tail;
        self.slots.0[i].next = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.slots.0[self.tail as usize].next = b;
        }
        self.tail = b;
        self.num_free += 1;
        self.note(b);
    }

    fn push_head(&mut self, b: BlockId) {
        let i = b as usize;
        self.slots.0[i].next = self.head;
        self.slots.0[i].prev = NIL;
        if self.head == NIL {
            self.tail = b;
        } else {
            self.slots.0[self.head as usize].prev = b;
        }
        self.head = b;
        self.num_free += 1;
        self.note(b);
    }

    #[inline(always)]
    fn unlink(&mut self, b: BlockId) {
        let i = b as usize;
        let (p, n) = (self.slots.0[i].prev, self.slots.0[i].next);
        if p == NIL {
            self.head = n;
        } else {
            self.slots.0[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.slots.0[n as usize].prev = p;
        }
        self.slots.0[i].prev = OUT;
        self.slots.0[i].next = OUT;
        self.num_free -= 1;
        self.note(b);
    }

    /// The breach a broken reference count is for this pool's accounting property.
    fn bad_ref(&self) -> Breach {
        match self.medium {
            Medium::Gpu => Breach::HandedOutInUse,
            Medium::Cpu => Breach::BadCompletion,
        }
    }

    /// `_maybe_evict_cached_block`: drop every cached-map entry of `b` and its hash.
    #[inline(always)]
    fn evict_cached(&mut self, b: BlockId, ghost: &mut Ghost, ev: &mut Events) {
        if let Some(h) = self.block_hash(b) {
            self.map_remove(b, h);
            match self.medium {
                Medium::Gpu => {
                    ev.stat(|s| s.g1_evictions += 1);
                    ghost.mark(Mark::G1Eviction);
                    ev.emit(|| Event::G1Evicted { block: b, hash: h });
                }
                Medium::Cpu => {
                    ev.stat(|s| s.host_evictions += 1);
                    ghost.mark(Mark::HostEviction);
                    ev.emit(|| Event::HostEvicted { key: h });
                }
            }
        }
    }

    /// `get_new_blocks(n)`: pop `n` blocks from the head, evict their hashes, ref 1.
    /// Callers check capacity first.
    pub fn get_new_blocks(&mut self, n: u32, ghost: &mut Ghost, ev: &mut Events) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(n as usize);
        self.push_new_blocks(n, &mut out, ghost, ev);
        out
    }

    /// [`GpuPool::get_new_blocks`] appended to `out` (the KV manager's: the request's table).
    pub fn push_new_blocks(&mut self, n: u32, out: &mut Vec<BlockId>, ghost: &mut Ghost, ev: &mut Events) {
        assert!(n <= self.num_free, "get_new_blocks({n}) with {} free: capacity not checked", self.num_free);
        out.reserve(n as usize);
        self.warm_victims(n);
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            self.evict_cached(b, ghost, ev);
            if self.slots.0[b as usize].ref_cnt != 0 {
                // Only reachable when a referenced block sat in the free queue
                // (mut-no-touch-dequeue): vLLM asserts here; we record it and go on.
                ghost.breach(self.bad_ref());
            }
            self.slots.0[b as usize].ref_cnt = 1;
            self.slots.0[b as usize].flags &= !LOADED;
            self.note(b);
            out.push(b);
        }
    }

    /// Replay: look up the cached-map entries of the next `n` blocks of the free queue in a
    /// tight loop before evicting them one by one, so that their cache misses overlap (the
    /// same idea as `HostTier::warm`). Changes nothing; skipped without a change log (the
    /// checker).
    fn warm_victims(&self, n: u32) {
        if !self.log.is_on() || n < 2 {
            return;
        }
        let (mut b, mut sum) = (self.head, 0usize);
        for _ in 0..n {
            if b == NIL {
                break;
            }
            if let Some(h) = self.block_hash(b) {
                sum += self.cached.get(&h).map_or(0, |v| v.len());
            }
            b = self.slots.0[b as usize].next;
        }
        std::hint::black_box(sum);
    }

    /// `touch`: a prefix hit takes a reference; a ref-0 block leaves the free queue.
    pub fn touch(&mut self, blocks: &[BlockId], dequeue: bool) {
        for &b in blocks {
            if b == NULL_BLOCK {
                continue;
            }
            if self.slots.0[b as usize].ref_cnt == 0 && dequeue && self.in_free_queue(b) {
                self.unlink(b);
            }
            self.slots.0[b as usize].ref_cnt += 1;
            self.note(b);
        }
    }

    /// `free_blocks(ordered)`: `ordered` is in eviction-priority order (callers pass a
    /// table reversed). Unhashed blocks reaching ref 0 go to the head, hashed to the tail.
    pub fn free_blocks(&mut self, ordered: impl Iterator<Item = BlockId>, ghost: &mut Ghost) {
        self.free_blocks_with(ordered, false, ghost)
    }

    /// `free_blocks(ordered, evict_first)` (0.34): with `evict_first`, hashed blocks reaching
    /// ref 0 go to the head too (their content is held by another tier).
    pub fn free_blocks_with(&mut self, ordered: impl Iterator<Item = BlockId>, evict_first: bool, ghost: &mut Ghost) {
        // Inline up to a table of 16 blocks: a request's free allocates nothing.
        let mut first: SmallVec<[BlockId; 16]> = SmallVec::new();
        let mut last: SmallVec<[BlockId; 16]> = SmallVec::new();
        for b in ordered {
            if b == NULL_BLOCK {
                continue;
            }
            let rc = &mut self.slots.0[b as usize].ref_cnt;
            if *rc == 0 {
                // Reference counts are already broken (a mutation handed this block out
                // twice, or freed it twice); record it instead of underflowing.
                ghost.breach(self.bad_ref());
                continue;
            }
            *rc -= 1;
            let rc = *rc;
            self.note(b);
            if rc == 0 && !self.in_free_queue(b) {
                if self.block_hash(b).is_none() || evict_first {
                    first.push(b);
                } else {
                    last.push(b);
                }
            }
        }
        // prepend_n keeps list order: first[0] becomes the new head.
        for &b in first.iter().rev() {
            self.push_head(b);
        }
        for b in last {
            self.push_tail(b);
        }
    }

    /// `cache_full_blocks`: register `hashes[i]` for `blocks[i]`, i in `from..to`.
    pub fn cache_full_blocks(
        &mut self,
        blocks: &[BlockId],
        hashes: &[BlockHash],
        from: usize,
        to: usize,
        ev: &mut Events,
    ) {
        for i in from..to {
            let b = blocks[i];
            if b == NULL_BLOCK {
                continue;
            }
            let h = hashes[i];
            if let Some(old) = self.block_hash(b) {
                if old == h {
                    continue;
                }
                self.map_remove(b, old);
            }
            self.map_insert(b, h);
            ev.emit(|| Event::G1Cached { block: b, hash: h });
        }
    }

    /// `_insert_block_hash(h, b)` for a block without a hash of its own (SimpleCPU registers
    /// a CPU block when its store lands): the block carries `h` and joins the cached map.
    /// Returns false when nothing changed (already registered). Secondary hashes of a block
    /// that already carries another one (fine-grained hash blocks) are not modelled.
    pub fn insert_hash(&mut self, b: BlockId, h: BlockHash) -> bool {
        match self.block_hash(b) {
            Some(_) => false,
            None => {
                self.map_insert(b, h);
                true
            }
        }
    }

    /// A free block moves to the tail of the free queue (evicted last) without any change to
    /// its reference count; a block outside the queue is left alone.
    pub fn move_to_tail(&mut self, b: BlockId) {
        if b != NULL_BLOCK && self.in_free_queue(b) {
            self.unlink(b);
            self.push_tail(b);
        }
    }

    /// `evict_blocks(ids)`: drop the hashes of the given blocks (load failure under `fail`);
    /// reference counts and queue membership are untouched.
    pub fn evict_blocks(&mut self, ids: &[BlockId], ghost: &mut Ghost, ev: &mut Events) {
        for &b in ids {
            if b != NULL_BLOCK {
                self.evict_cached(b, ghost, ev);
            }
        }
    }

    /// `find_longest_cache_hit`: walk the request's hashes for at most `max_len / B` blocks,
    /// stopping at the first miss.
    pub fn find_longest_cache_hit(&mut self, hashes: &[BlockHash], max_len: u32, block_size: u32) -> Vec<BlockId> {
        let mut out = Vec::new();
        self.find_longest_cache_hit_into(hashes, max_len, block_size, &mut out);
        out
    }

    /// [`GpuPool::find_longest_cache_hit`] into `out` (emptied first; the scheduler's reused
    /// buffer).
    pub fn find_longest_cache_hit_into(
        &mut self,
        hashes: &[BlockHash],
        max_len: u32,
        block_size: u32,
        out: &mut Vec<BlockId>,
    ) {
        out.clear();
        let max_blocks = (max_len / block_size) as usize;
        let query = &hashes[..max_blocks.min(hashes.len())];
        // Replay: a waiting request at the head of the queue is looked up again every step
        // while it does not fit; reuse the last answer while nothing it read changed.
        if let Some(l) = self.log.get_mut() {
            // Hashes are chained, so two sequences of equal length that end in the same hash
            // are the same sequence (the prefix cache itself relies on that).
            let same = |m: &super::collections::side::HitMemo| {
                m.hashes.len() == query.len() && m.hashes.last() == query.last()
            };
            if let Some(i) = l.hit_memo.iter().position(|m| m.valid && same(m)) {
                let m = l.hit_memo.remove(i);
                out.extend_from_slice(&m.result);
                l.hit_memo.insert(0, m);
                return;
            }
        }
        for h in query {
            match self.get_one_block(*h) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        if let Some(l) = self.log.get_mut() {
            let read = &query[..(out.len() + 1).min(query.len())];
            let mut m = if l.hit_memo.len() >= 2 { l.hit_memo.pop().unwrap_or_default() } else { Default::default() };
            m.hashes.clear();
            m.hashes.extend_from_slice(query);
            m.result.clone_from(out);
            m.watch.clear();
            m.watch.extend(read.iter().map(|h| (*h, ())));
            m.valid = true;
            l.hit_memo.insert(0, m);
        }
    }
}
