//! The G1 pool's cached map in its two forms (see [`GpuPool`]): the checker's, a function of
//! the blocks' records (a block is listed under its own hash, at its record's `rank`), and
//! replay's, a hash map beside the records. `BlockPool.cached_block_hash_to_block` in vLLM.

use super::GpuPool;
use crate::system::collections::side::KeyMap;
use crate::system::gpu_pool::slots::HAS_HASH;
use crate::system::types::{BlockHash, BlockId, BlockIds};

impl GpuPool {
    /// Replay's form of the cached map (a hash map beside the records).
    #[inline(always)]
    pub(super) fn indexed(&self) -> bool {
        matches!(self.cached, KeyMap::Hash(_))
    }

    /// Every (hash, block) pair of the cached map (blocks in id order in the checker's form;
    /// in no particular order in replay's).
    pub fn cached_blocks(&self) -> impl Iterator<Item = (BlockHash, BlockId)> + '_ {
        // One form or the other, unboxed (the cache-soundness check walks it per state).
        let indexed = self.indexed();
        let map = indexed.then(|| self.cached.iter().flat_map(|(h, v)| v.iter().map(move |&b| (*h, b))));
        let records = (!indexed).then(|| (0..self.num_blocks()).filter_map(|b| self.block_hash(b).map(|h| (h, b))));
        map.into_iter().flatten().chain(records.into_iter().flatten())
    }

    /// The cached map as (hash, blocks in insertion order) pairs, by hash.
    pub fn cached(&self) -> Vec<(BlockHash, BlockIds)> {
        if self.indexed() {
            let mut out: Vec<(BlockHash, BlockIds)> = self.cached.iter().map(|(h, v)| (*h, v.clone())).collect();
            out.sort_unstable_by_key(|(h, _)| *h);
            return out;
        }
        let mut out: Vec<(BlockHash, BlockIds)> = Vec::new();
        for (h, b) in self.ranked() {
            match out.last_mut() {
                Some((k, v)) if *k == h => v.push(b),
                _ => out.push((h, std::iter::once(b).collect())),
            }
        }
        out
    }

    /// The checker's form: every (hash, block) pair of the cached map, by hash, each hash's
    /// blocks in insertion order (their ranks).
    pub(super) fn ranked(&self) -> Vec<(BlockHash, BlockId)> {
        let mut held: Vec<(BlockHash, u16, BlockId)> =
            (0..self.num_blocks()).filter_map(|b| self.block_hash(b).map(|h| (h, self.slot(b).rank, b))).collect();
        held.sort_unstable();
        held.into_iter().map(|(h, _, b)| (h, b)).collect()
    }

    /// Whether the cached map lists block `b` under `h`.
    pub fn cached_under(&self, h: &BlockHash, b: BlockId) -> bool {
        if self.indexed() {
            self.cached.get(h).is_some_and(|v| v.contains(&b))
        } else {
            self.block_hash(b) == Some(*h)
        }
    }

    /// The number of hashes the cached map holds.
    pub fn num_cached_entries(&self) -> usize {
        if self.indexed() {
            self.cached.len()
        } else {
            self.slots.0.iter().filter(|s| s.flags & HAS_HASH != 0 && s.rank == 0).count()
        }
    }

    /// Block `b` now carries `h` and joins the end of the cached map's list under it.
    #[inline(always)]
    pub(super) fn map_insert(&mut self, b: BlockId, h: BlockHash) {
        let rank = if self.indexed() {
            self.cached.entry_or_default(h).push(b);
            0
        } else {
            self.slots.0.iter().filter(|s| s.flags & HAS_HASH != 0 && s.hash == h.0).count() as u16
        };
        let s = &mut self.slots.0[b as usize];
        s.set_hash(Some(h));
        s.rank = rank;
        self.note_cached(h, b);
    }

    /// Block `b` drops its hash `h` and leaves the cached map's list under it.
    #[inline(always)]
    pub(super) fn map_remove(&mut self, b: BlockId, h: BlockHash) {
        let s = &mut self.slots.0[b as usize];
        let rank = s.rank;
        s.set_hash(None);
        s.rank = 0;
        if self.indexed() {
            self.cached.update_or_remove(h, |v| {
                v.retain(|x| *x != b);
                v.is_empty()
            });
        } else {
            for s in self.slots.0.iter_mut().filter(|s| s.flags & HAS_HASH != 0 && s.hash == h.0 && s.rank > rank) {
                s.rank -= 1;
            }
        }
        self.note_cached(h, b);
    }

    /// `get_one_block`: the first-inserted block still carrying `h`.
    #[inline(always)]
    pub fn get_one_block(&self, h: BlockHash) -> Option<BlockId> {
        if self.indexed() {
            self.cached.get(&h).and_then(|v| v.first().copied())
        } else {
            let i = self.slots.0.iter().position(|s| s.flags & HAS_HASH != 0 && s.hash == h.0 && s.rank == 0)?;
            Some(i as BlockId)
        }
    }
}
