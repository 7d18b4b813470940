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
use crate::system::collections::pack::pack_fields;
use crate::system::collections::rank_queue::{first_n, RankQueue};
use crate::system::collections::side::Side;
use crate::system::rules::HostLru;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RefOrder {
    /// Eviction order, first = next victim (with the 0.33 rank; unused by the other policies).
    pub(crate) list: Vec<(Key, Rank)>,
    /// Trace replay: the same sequence, indexed (`list` stays empty). Not used by the checker.
    indexed: Side<Indexed>,
}

pack_fields!(clone RefOrder { list, indexed });

/// The list, indexed: a key's place is (order rank, arrival sequence), so "after every key
/// whose rank is not above" is "after every key with a smaller place". Appends (the 0.24 and
/// 0.32 lists) use the sequence as their order rank. Where each key sits ([`RefPlace`]) is
/// kept by the caller next to the key's host entry (the host tier's map's side value), so
/// that the reference costs no lookup of its own.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Indexed {
    by_place: RankQueue<(u64, Key)>,
    seq: u64,
}

/// Where the indexed list holds a key: its arrival sequence (0: not listed; the top bit set
/// when its place is its rank, as in 0.33 lists, else the place is `(sequence, 0)`) and its
/// carried rank. Replay's side data, stored with the key's host entry.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct RefPlace {
    seq: u64,
    rank: Rank,
}

const BY_RANK: u64 = 1 << 63;

impl RefPlace {
    /// A value read from the place (for [`HostTier::warm`](super::host_tier::HostTier::warm)).
    pub fn touch(&self) -> usize {
        self.seq as usize
    }
    fn listed(&self) -> bool {
        self.seq != 0
    }
    fn seq(&self) -> u64 {
        self.seq & !BY_RANK
    }
    fn place(&self) -> Rank {
        if self.seq & BY_RANK != 0 {
            self.rank
        } else {
            (self.seq, 0)
        }
    }
}

/// Equal when the key sequences are equal, whatever the representation (the indexed form's
/// carried ranks live with the host entries; `HostTier::reference_order` reads them).
impl PartialEq for RefOrder {
    fn eq(&self, o: &Self) -> bool {
        if !self.indexed.is_on() && !o.indexed.is_on() {
            return self.list == o.list;
        }
        self.key_seq() == o.key_seq()
    }
}
impl Eq for RefOrder {}

/// Hashes the list (the checker's form; replay never hashes states).
impl std::hash::Hash for RefOrder {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        if self.indexed.is_on() {
            self.key_seq().hash(h);
        } else {
            self.list.hash(h);
        }
    }
}

impl RefOrder {
    /// Switch an empty order to the indexed form (trace replay, before the first key).
    pub fn index(&mut self) {
        assert!(self.list.is_empty(), "index the eviction order before it holds keys");
        if !self.indexed.is_on() {
            self.indexed = Side(Some(Box::default()));
        }
    }

    /// The keys in order, first = next victim.
    pub fn key_seq(&self) -> Vec<Key> {
        match self.indexed.get() {
            Some(ix) => ix.by_place.iter().map(|(_, (_, k))| k).collect(),
            None => self.list.iter().map(|(k, _)| *k).collect(),
        }
    }

    /// The sequence with carried ranks; `at` gives an indexed key's place.
    pub fn keys(&self, at: impl Fn(&Key) -> Option<RefPlace>) -> Vec<(Key, Rank)> {
        match self.indexed.get() {
            Some(ix) => {
                ix.by_place.iter().map(|(_, (_, k))| (k, at(&k).expect("a listed key has its place").rank)).collect()
            }
            None => self.list.clone(),
        }
    }

    #[inline(always)]
    fn remove(&mut self, k: &Key, at: Option<&mut RefPlace>) -> Option<Rank> {
        if let Some(ix) = self.indexed.get_mut() {
            // A key without a host entry has no place: it is not listed.
            let p = at?;
            if !p.listed() {
                return None;
            }
            ix.by_place.remove(p.place(), (p.seq(), *k));
            p.seq = 0;
            return Some(p.rank);
        }
        let i = self.list.iter().position(|(x, _)| x == k)?;
        Some(self.list.remove(i).1)
    }

    /// Append `k` at the end (its rank is only carried).
    #[inline(always)]
    fn push_back(&mut self, k: Key, rank: Rank, at: Option<&mut RefPlace>) {
        if let Some(ix) = self.indexed.get_mut() {
            // A place above every other (only list policies append, and only append).
            ix.seq += 1;
            let place = (ix.seq, 0);
            ix.by_place.insert(place, (ix.seq, k));
            *at.expect("the indexed order is given each key's place") = RefPlace { seq: ix.seq, rank };
            return;
        }
        self.list.push((k, rank));
    }

    /// Place `k` after every key whose rank is not above `rank` (0.33).
    #[inline(always)]
    fn place(&mut self, k: Key, rank: Rank, at: Option<&mut RefPlace>) {
        if let Some(ix) = self.indexed.get_mut() {
            // Places of 0.33 lists are their ranks (the list is sorted by rank).
            ix.seq += 1;
            ix.by_place.insert(rank, (ix.seq, k));
            *at.expect("the indexed order is given each key's place") = RefPlace { seq: ix.seq | BY_RANK, rank };
            return;
        }
        let i = self.list.iter().position(|(_, r)| *r > rank).unwrap_or(self.list.len());
        self.list.insert(i, (k, rank));
    }

    /// `prepare_store` inserted `k` (write pending).
    #[inline(always)]
    pub fn inserted(&mut self, p: HostLru, k: Key, rank: Rank, at: Option<&mut RefPlace>) {
        match p {
            HostLru::ReleaseOrder => {}
            HostLru::InsertRank => self.push_back(k, (0, 0), at),
            HostLru::RequestRank => self.place(k, rank, at),
        }
    }

    /// `k` became evictable (its store or its last load completed).
    #[inline(always)]
    pub fn released(&mut self, p: HostLru, k: Key, mut at: Option<&mut RefPlace>) {
        if p == HostLru::ReleaseOrder {
            self.remove(&k, at.as_deref_mut());
            self.push_back(k, (0, 0), at);
        }
    }

    /// `k` was pinned by a load.
    #[inline(always)]
    pub fn pinned(&mut self, p: HostLru, k: Key, at: Option<&mut RefPlace>) {
        if p == HostLru::ReleaseOrder {
            self.remove(&k, at);
        }
    }

    /// A request reused resident `k` and raised it to `rank` (0.33 only).
    #[inline(always)]
    pub fn raised(&mut self, p: HostLru, k: Key, rank: Rank, mut at: Option<&mut RefPlace>) {
        if p == HostLru::RequestRank {
            self.remove(&k, at.as_deref_mut());
            self.place(k, rank, at);
        }
    }

    /// The connector touched `k` (0.24 only; callers go through a request's keys tail first):
    /// a listed key moves to the end.
    #[inline(always)]
    pub fn touched(&mut self, p: HostLru, k: Key, mut at: Option<&mut RefPlace>) {
        if p == HostLru::ReleaseOrder && self.remove(&k, at.as_deref_mut()).is_some() {
            self.push_back(k, (0, 0), at);
        }
    }

    /// A finishing request re-ranked resident `k` to the fresh rank `r` (callers go through
    /// its keys tail first): the key moves to the end.
    #[inline(always)]
    pub fn finished(&mut self, p: HostLru, k: Key, r: Rank, mut at: Option<&mut RefPlace>) {
        if p == HostLru::ReleaseOrder {
            return;
        }
        if self.remove(&k, at.as_deref_mut()).is_some() {
            if p == HostLru::RequestRank {
                self.place(k, r, at); // a fresh rank: above every other
            } else {
                self.push_back(k, r, at);
            }
        }
    }

    /// `k` left the host tier.
    #[inline(always)]
    pub fn evicted(&mut self, k: &Key, at: Option<&mut RefPlace>) {
        self.remove(k, at);
    }

    /// The first `n` keys for which `eligible` holds (a pure predicate: the indexed form may
    /// ask it twice about a key).
    pub fn victims(&self, n: usize, eligible: impl Fn(&Key) -> bool) -> Vec<Key> {
        if let Some(ix) = self.indexed.get() {
            return ix.by_place.first(n, |(_, (_, k))| eligible(k)).into_iter().map(|(_, (_, k))| k).collect();
        }
        first_n(self.list.iter().map(|(k, _)| *k), n, |k| eligible(k))
    }

    pub fn map_majors(&mut self, f: impl Fn(u64) -> u64) {
        assert!(!self.indexed.is_on(), "only the checker canonicalises, and it never indexes the order");
        for (_, r) in &mut self.list {
            r.0 = f(r.0);
        }
    }
}

pack_fields!(RefPlace { seq, rank });
