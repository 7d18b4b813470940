//! The host tier's ARC policy (`eviction_policy = "arc"`; vLLM `cpu/policies/arc.py:
//! ARCCachePolicy`), driven by the CPU manager in `host_tier` the way `cpu/manager.py` drives it.
//!
//! T1 (keys stored but not reused yet) and T2 (reused keys) are ordered LRU -> MRU; each key's
//! status (write-pending, ready, pinned) is its host entry's reference count. B1 and B2 are the
//! ghost lists (keys evicted from T1 / T2, LRU -> MRU), trimmed to the capacity after every
//! eviction. `target` is `target_t1_size`, a Python float in vLLM: kept as the bits of the same
//! IEEE-754 double, computed with the same operations, so it is exact and `int(target)` is
//! vLLM's.
//!
//! Who calls what (per release):
//! - 0.32 / 0.33 (`CPUOffloadingManager`): `prepare_store` reports the request's new store misses
//!   once per request (`on_store_miss`: tail first, a ghost hit moves the target), inserts at the
//!   MRU end of T1; `on_request_finished` walks the request's keys tail first: insertion-only keys
//!   move to the MRU end of their list, reused keys go T1 -> T2 (or to the MRU end of T2).
//! - 0.24: the connector's `touch` (every lookup, and after every store that inserted keys) is
//!   the only recency signal: ready T1 keys go to T2, write-pending T1 keys to the MRU end of T1,
//!   T2 keys to its MRU end, ghost keys adapt the target (at every touch).
//!
//! `evict(n, protected)`: per victim, T1's next evictable unprotected key if |T1| (less the
//! victims already taken from it) >= int(target), else T2's; if T2 has none, T1's (the final
//! fallback, 0.32+: rule `arc_t1_fallback`; 0.24 gives up). All or nothing.

use super::host_tier::{Key, KeySet};
use std::collections::BTreeSet;

/// `target_t1_size` as the bits of an f64 (Eq/Hash on the bits; never -0.0 or NaN).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Target(u64);

impl Target {
    pub fn get(self) -> f64 {
        f64::from_bits(self.0)
    }
    fn of(v: f64) -> Self {
        Target((v + 0.0).to_bits())
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ArcLists {
    pub t1: Vec<Key>,
    pub t2: Vec<Key>,
    pub b1: Vec<Key>,
    pub b2: Vec<Key>,
    pub target: Target,
    pub capacity: u32,
    /// `arc_t1_fallback` (0.32+).
    fallback: bool,
    /// Ghost lists trimmed to the capacity (false only under mut-arc-no-ghost-trim).
    trim: bool,
}

fn take(list: &mut Vec<Key>, k: &Key) -> bool {
    match list.iter().position(|x| x == k) {
        Some(i) => {
            list.remove(i);
            true
        }
        None => false,
    }
}

impl ArcLists {
    pub fn new(capacity: u32, fallback: bool, trim: bool) -> Self {
        ArcLists {
            t1: Vec::new(),
            t2: Vec::new(),
            b1: Vec::new(),
            b2: Vec::new(),
            target: Target::default(),
            capacity,
            fallback,
            trim,
        }
    }

    /// `insert`: a new key joins T1's MRU end and leaves the ghost lists.
    pub fn insert(&mut self, k: Key) {
        self.t1.push(k);
        take(&mut self.b1, &k);
        take(&mut self.b2, &k);
    }

    /// `_adapt_to_ghost_hit`: a B1 hit grows the target by max(1, |B2|/|B1|) (at most the
    /// capacity), a B2 hit shrinks it by max(1, |B1|/|B2|) (at least 0); the ghost key moves to
    /// its list's MRU end.
    fn adapt(&mut self, k: &Key) -> bool {
        let (b1, b2) = (self.b1.len() as f64, self.b2.len() as f64);
        if take(&mut self.b1, k) {
            let delta = (b2 / b1).max(1.0);
            self.target = Target::of((self.target.get() + delta).min(self.capacity as f64));
            self.b1.push(*k);
            return true;
        }
        if take(&mut self.b2, k) {
            let delta = (b1 / b2).max(1.0);
            self.target = Target::of((self.target.get() - delta).max(0.0));
            self.b2.push(*k);
            return true;
        }
        false
    }

    /// `on_store_miss(keys)` (keys in chunk order): ghost adaptation, tail first.
    pub fn on_store_miss(&mut self, keys: &[Key]) {
        for k in keys.iter().rev() {
            self.adapt(k);
        }
    }

    /// `touch(keys)` (0.24's connector; chunk order, processed tail first).
    pub fn touch(&mut self, keys: &[Key], ready: impl Fn(&Key) -> bool) {
        for k in keys.iter().rev() {
            if take(&mut self.t1, k) {
                if ready(k) {
                    self.t2.push(*k);
                } else {
                    self.t1.push(*k);
                }
            } else if take(&mut self.t2, k) {
                self.t2.push(*k);
            } else {
                self.adapt(k);
            }
        }
    }

    /// `on_request_finished`: `keys` head to tail (by position), processed tail first.
    pub fn on_request_finished(&mut self, keys: &[Key], insertion_only: &KeySet, reused: &KeySet) {
        for k in keys.iter().rev() {
            if insertion_only.contains(k) {
                if take(&mut self.t1, k) {
                    self.t1.push(*k);
                } else if take(&mut self.t2, k) {
                    self.t2.push(*k);
                }
            } else if reused.contains(k) && (take(&mut self.t1, k) || take(&mut self.t2, k)) {
                self.t2.push(*k);
            }
        }
    }

    /// `evict(n, protected)`: `eligible` = evictable (ref 0) and not protected. None leaves
    /// everything unchanged.
    pub fn evict(&mut self, n: usize, eligible: impl Fn(&Key) -> bool) -> Option<Vec<Key>> {
        fn next(list: &[Key], at: &mut usize, eligible: &impl Fn(&Key) -> bool) -> Option<Key> {
            while *at < list.len() {
                *at += 1;
                if eligible(&list[*at - 1]) {
                    return Some(list[*at - 1]);
                }
            }
            None
        }
        let floor = self.target.get().trunc() as usize;
        let mut virtual_t1 = self.t1.len();
        let (mut i1, mut i2) = (0, 0);
        let mut picked: Vec<(Key, bool)> = Vec::with_capacity(n);
        for _ in 0..n {
            let mut cand = None;
            if virtual_t1 >= floor {
                cand = next(&self.t1, &mut i1, &eligible).map(|k| (k, true));
            }
            if cand.is_none() {
                cand = next(&self.t2, &mut i2, &eligible).map(|k| (k, false));
            }
            if cand.is_none() && self.fallback {
                cand = next(&self.t1, &mut i1, &eligible).map(|k| (k, true));
            }
            let (k, from_t1) = cand?;
            if from_t1 {
                virtual_t1 -= 1;
            }
            picked.push((k, from_t1));
        }
        for &(k, from_t1) in &picked {
            if from_t1 {
                take(&mut self.t1, &k);
                self.b1.push(k);
            } else {
                take(&mut self.t2, &k);
                self.b2.push(k);
            }
        }
        if self.trim {
            let cap = self.capacity as usize;
            for b in [&mut self.b1, &mut self.b2] {
                if b.len() > cap {
                    b.drain(..b.len() - cap);
                }
            }
        }
        Some(picked.into_iter().map(|(k, _)| k).collect())
    }

    /// `arc-bounds`: T1 and T2 partition the resident keys, the ghost lists are disjoint from
    /// each other and from the resident keys, hold at most `capacity` keys each, and
    /// 0 <= target <= capacity.
    pub fn bounds_hold(&self, resident: &BTreeSet<Key>) -> bool {
        let t: BTreeSet<Key> = self.t1.iter().chain(&self.t2).copied().collect();
        let b: BTreeSet<Key> = self.b1.iter().chain(&self.b2).copied().collect();
        let cap = self.capacity as usize;
        let tg = self.target.get();
        t.len() == self.t1.len() + self.t2.len()
            && t == *resident
            && b.len() == self.b1.len() + self.b2.len()
            && b.is_disjoint(resident)
            && self.b1.len() <= cap
            && self.b2.len() <= cap
            && (0.0..=self.capacity as f64).contains(&tg)
    }
}

impl crate::system::collections::pack::Pack for Target {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline]
    fn unpack(&mut self, r: &mut crate::system::collections::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}
crate::system::collections::pack::pack_fields!(ArcLists { t1, t2, b1, b2, target, capacity, fallback, trim });

/// A decoder's starting value (every field is then decoded).
impl Default for ArcLists {
    fn default() -> Self {
        ArcLists::new(0, false, false)
    }
}
