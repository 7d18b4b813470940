//! What kvmc keeps and reads beside vLLM's host tier, none of it vLLM's rules: replay's change
//! log and its switch to the fast representations (hashed key map, queued rank set, indexed
//! reference order), the cache warm-up before a batch of lookups, the views properties and
//! displays read (eviction order, reference order), and the checker's canonical renumbering
//! of rank majors. vLLM's `CPUOffloadingManager` rules are in the parent module.

use super::{HostEntry, HostTier, Key, Rank, RefPlace};
use crate::system::collections::rank_set::RankSet;
use crate::system::collections::side::{KeyMap, Side};

impl HostTier {
    /// Replay: log every key whose entry changes, and keep the eviction-order reference
    /// indexed (its list form costs O(resident keys) per update). The key map, read at random
    /// several times per stored chunk, sits in huge pages (`crate::hint`).
    pub fn enable_log(&mut self) {
        self.log = Side(Some(Box::default()));
        let capacity = self.capacity as usize;
        crate::hint::huge_pages(|| self.entries.use_hash(capacity));
        self.evictable.use_queue();
        self.order.index();
    }

    /// Replay: `k`'s reference count went from `before` to `after` (None: not resident).
    #[inline]
    pub(super) fn note(&mut self, k: Key, before: Option<i32>, after: Option<i32>) {
        if let Some(l) = self.log.get_mut() {
            l.moves.push((k, before, after));
        }
    }

    /// Replay: `k`'s content was written, or it became ready.
    #[inline]
    pub(super) fn note_written(&mut self, k: Key) {
        if let Some(l) = self.log.get_mut() {
            l.written.push(k);
        }
    }

    /// Look `keys` up once, in a tight loop, before reading their entries one by one: the
    /// lookups are independent, so their cache misses overlap instead of queueing (replay's
    /// host map is far larger than the CPU caches). Changes nothing.
    pub fn warm<'a>(&self, keys: impl Iterator<Item = &'a Key>) {
        // Reading fields, not just matching the key: an entry spans two cache lines.
        let touch = |(e, at): (&HostEntry, Option<&RefPlace>)| {
            e.ref_cnt as usize + e.content.len() + at.map_or(0, |p| p.touch())
        };
        std::hint::black_box(keys.filter_map(|k| self.entries.get_aux(k)).map(touch).sum::<usize>());
    }

    /// Keys in eviction order (first = next victim), evictable ones only. Under ARC: T1's
    /// evictable keys, then T2's (the victims' sources depend on the target).
    pub fn eviction_order(&self) -> Vec<Key> {
        if let Some(a) = self.arc.as_deref() {
            let ready = |k: &&Key| self.entries.get(k).is_some_and(|e| e.ref_cnt == 0);
            return a.t1.iter().chain(&a.t2).filter(ready).copied().collect();
        }
        self.evictable.iter().map(|(_, k)| k).collect()
    }

    /// The eviction-order reference with its carried ranks, first = next victim.
    pub fn reference_order(&self) -> Vec<(Key, Rank)> {
        self.order.keys(|k| self.entries.aux(k).copied())
    }

    /// Renumber rank majors densely (order preserved) so that equal histories give equal
    /// states. `live` are the request ranks still held by requests.
    pub fn canonicalize<'a>(&mut self, live: impl Iterator<Item = &'a mut Option<u64>>) {
        // Small vectors: this runs on every successor the checker generates.
        let mut live: smallvec::SmallVec<[&mut Option<u64>; 8]> = live.collect();
        // Already dense (the common case): the majors in use are exactly 1..=next_rank, seen
        // as a bit mask without collecting or sorting them.
        if self.next_rank < 64 {
            let n = self.next_rank;
            let (mut mask, mut within) = (0u64, true);
            let mut see = |m: u64| {
                if m > n {
                    within = false;
                } else if m > 0 {
                    mask |= 1 << m;
                }
            };
            self.entries.values().for_each(|e| see(e.rank.0));
            self.order.list.iter().for_each(|(_, r)| see(r.0));
            live.iter().for_each(|r| see(r.unwrap_or(0)));
            if within && mask == ((1u64 << n) - 1) << 1 {
                return;
            }
        }
        let mut majors: smallvec::SmallVec<[u64; 16]> =
            self.entries.values().map(|e| e.rank.0).filter(|&m| m > 0).collect();
        majors.extend(self.order.list.iter().map(|(_, r)| r.0).filter(|&m| m > 0));
        majors.extend(live.iter().filter_map(|r| **r));
        majors.sort_unstable();
        majors.dedup();
        if majors.iter().enumerate().all(|(i, &m)| m == i as u64 + 1) && self.next_rank == majors.len() as u64 {
            return; // already dense
        }
        let map = |m: u64| if m == 0 { 0 } else { majors.binary_search(&m).expect("known major") as u64 + 1 };
        // Each form walked as what it is: the general iterators of both collections are boxed,
        // an allocation per call.
        match &mut self.entries {
            KeyMap::Tree(m) => m.values_mut().for_each(|e| e.rank.0 = map(e.rank.0)),
            KeyMap::Hash(m) => m.values_mut().for_each(|(e, _)| e.rank.0 = map(e.rank.0)),
        }
        let old = std::mem::take(&mut self.evictable);
        match &old {
            RankSet::Tree(s) => s.iter().for_each(|&((m, n), k)| {
                self.evictable.insert((map(m), n), k);
            }),
            RankSet::Queue(q) => q.iter().for_each(|((m, n), k)| {
                self.evictable.insert((map(m), n), k);
            }),
        }
        self.order.map_majors(map);
        for m in live.iter_mut().filter_map(|r| r.as_mut()) {
            *m = map(*m);
        }
        self.next_rank = majors.len() as u64;
    }
}
