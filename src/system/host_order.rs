//! The eviction-order reference: a plain list per LRU policy, kept next to the host tier as
//! ghost state and updated at the same calls, written the way vLLM's policies describe
//! themselves rather than the way `host_tier` implements them (ranks in a `BTreeSet`).
//!
//! - 0.24 (`ReleaseOrder`, `cpu/policies/lru.py` OrderedDict): the list holds the evictable
//!   keys; a key is appended when it becomes evictable, removed when pinned, and `touch`
//!   moves a request's evictable keys to the end, tail first (so its head ends last).
//! - 0.32 (`InsertRank`): the list holds every resident key in insert order; a finishing
//!   request moves its resident keys to the end, tail first.
//! - 0.33 (`RequestRank`): every resident key with its (request rank, -position) rank; reuse
//!   raises a key to its request's rank; a finishing request moves its keys to the end.
//!
//! The victims of a store are the first evictable, unprotected keys of the list;
//! eviction-order fails when the host tier picked others.

use super::host_tier::{Key, Rank};
use super::rules::HostLru;

#[derive(Clone, PartialEq, Eq, Hash, Debug, Default)]
pub struct RefOrder {
    /// Eviction order, first = next victim (with the 0.33 rank; unused by the other policies).
    pub list: Vec<(Key, Rank)>,
}

impl RefOrder {
    fn remove(&mut self, k: &Key) -> Option<Rank> {
        let i = self.list.iter().position(|(x, _)| x == k)?;
        Some(self.list.remove(i).1)
    }

    /// Place `k` after every key whose rank is not above `rank` (0.33).
    fn place(&mut self, k: Key, rank: Rank) {
        let i = self.list.iter().position(|(_, r)| *r > rank).unwrap_or(self.list.len());
        self.list.insert(i, (k, rank));
    }

    /// `prepare_store` inserted `k` (write pending).
    pub fn inserted(&mut self, p: HostLru, k: Key, rank: Rank) {
        match p {
            HostLru::ReleaseOrder => {}
            HostLru::InsertRank => self.list.push((k, (0, 0))),
            HostLru::RequestRank => self.place(k, rank),
        }
    }

    /// `k` became evictable (its store or its last load completed).
    pub fn released(&mut self, p: HostLru, k: Key) {
        if p == HostLru::ReleaseOrder {
            self.remove(&k);
            self.list.push((k, (0, 0)));
        }
    }

    /// `k` was pinned by a load.
    pub fn pinned(&mut self, p: HostLru, k: Key) {
        if p == HostLru::ReleaseOrder {
            self.remove(&k);
        }
    }

    /// A request reused resident `k` and raised it to `rank` (0.33 only).
    pub fn raised(&mut self, p: HostLru, k: Key, rank: Rank) {
        if p == HostLru::RequestRank {
            self.remove(&k);
            self.place(k, rank);
        }
    }

    /// The connector touched `keys` (chunk order; 0.24 only): move the listed ones to the end,
    /// tail first.
    pub fn touched(&mut self, p: HostLru, keys: &[Key]) {
        if p == HostLru::ReleaseOrder {
            for k in keys.iter().rev() {
                if self.remove(k).is_some() {
                    self.list.push((*k, (0, 0)));
                }
            }
        }
    }

    /// A request finished: its resident keys, tail first, with their fresh ranks.
    pub fn finished(&mut self, p: HostLru, keys_tail_first: &[(Key, Rank)]) {
        if p == HostLru::ReleaseOrder {
            return;
        }
        for (k, r) in keys_tail_first {
            if self.remove(k).is_some() {
                self.list.push((*k, *r));
            }
        }
    }

    /// `k` left the host tier.
    pub fn evicted(&mut self, k: &Key) {
        self.remove(k);
    }

    /// The first `n` keys for which `eligible` holds.
    pub fn victims(&self, n: usize, eligible: impl Fn(&Key) -> bool) -> Vec<Key> {
        self.list.iter().map(|(k, _)| *k).filter(|k| eligible(k)).take(n).collect()
    }

    pub fn map_majors(&mut self, f: impl Fn(u64) -> u64) {
        for (_, r) in &mut self.list {
            r.0 = f(r.0);
        }
    }
}
