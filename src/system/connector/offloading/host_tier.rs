//! G2: the host tier behind the OffloadingConnector (vLLM `v1/kv_offload/cpu/manager.py:
//! CPUOffloadingManager` with `cpu/policies/lru.py: LRUCachePolicy`, 0.33 rules).
//!
//! A resident key is write-pending (`ref_cnt == -1`, allocated by `prepare_store`, store not
//! completed), ready and evictable (`0`), or pinned by in-flight loads (`> 0`).
//! `prepare_store` is all-or-nothing: when it cannot make room it returns None and changes
//! nothing but the request's access record. Chunk slots are handed out fresh in increasing
//! order first, then from a LIFO free list.
//!
//! Eviction follows the profile's LRU (`rules::HostLru`); a rank is a pair (major, minor),
//! smallest evicted first, majors drawn from one counter.
//! - 0.33 (`RequestRank`): a request draws one provisional *request rank* the first time the
//!   policy sees it; keys it inserts or reuses get (request rank, -position), so tails go
//!   before heads; when the request finishes, every key it saw is re-ranked with fresh ranks
//!   tail first, so its head ends most recently used.
//! - 0.32 (`InsertRank`): a fresh rank per key at insert, in offer order; the same tail-first
//!   re-rank at finish; reuse changes nothing until then.
//! - 0.24 (`ReleaseOrder`): a fresh rank when a key becomes evictable (store or last load
//!   completes; keys of one job in chunk order — vLLM iterates a Python set there, so its
//!   order depends on the hash seed: a model choice point under conformance, `walk_order`);
//!   the connector's `touch` gives a request's evictable keys
//!   fresh ranks tail first; nothing at finish. Non-evictable keys carry rank (0, 0).
//!
//! `order` is the eviction-order reference (`host_order`), ghost state checked at every
//! eviction.
//!
//! With `eviction_policy = "arc"` the policy is `host_arc::ArcLists` instead: ranks stay
//! (0, 0), the reference order stays empty (property arc-bounds checks the ARC lists), and the
//! manager's calls go to the ARC lists (`prepare_store`: `on_store_miss`, `insert`, `evict`;
//! `touch` under 0.24; `on_request_finished` under 0.32+).

mod observe;
mod pack;
mod store;

use super::host_arc::ArcLists;
use super::reference_order::{RefOrder, RefPlace};
use crate::system::choice::Point;
use crate::system::collections::pack::pack_fields;
use crate::system::collections::pos_map::PosMap;
use crate::system::collections::rank_set::RankSet;
use crate::system::collections::side::{HostLog, KeyMap, KeyMapIter, Side};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::rules::HostLru;
use crate::system::types::{BlockHash, ContentTag, Contents};
use std::borrow::Cow;

/// An offload key (`make_offload_key`): the block hash of the chunk's last block (one group).
pub type Key = BlockHash;
/// LRU rank: (major, minor); smaller is evicted first.
pub type Rank = (u64, i64);

/// `LookupResult`.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Lookup {
    Miss,
    HitPending,
    Hit,
}

#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct HostEntry {
    /// -1 write pending, 0 evictable, k > 0 pinned by k loads.
    pub ref_cnt: i32,
    pub slot: u32,
    pub rank: Rank,
    /// What the chunk slot holds, per GPU block of the chunk (empty until the copy lands).
    pub content: Contents,
}

pack_fields!(clone_bitwise HostEntry { ref_cnt, slot, rank, content });

/// The manager's per-request context (`ReqContext` + `_RequestCacheAccess` + `_RequestRank`).
#[derive(PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ReqAccess {
    pub rank: Option<u64>,
    /// Keys this request has offered, loaded or reused, with their end-token positions.
    pub seen: PosMap,
    pub finished: bool,
    /// ARC only (0.32+; empty otherwise): keys this request inserted, ready keys it reused
    /// (not ones it inserted), keys already reported to `on_store_miss`.
    /// Sorted inline sets (`VecSet`): empty in every non-ARC state, so a copy or a drop of a
    /// request's context costs nothing for them.
    pub inserted: KeySet,
    pub reused: KeySet,
    pub store_missed: KeySet,
}

pack_fields!(clone_bitwise ReqAccess { rank, seen, finished, inserted, reused, store_missed });

/// A request's set of host keys (ARC's bookkeeping): ordered, compared and hashed as a
/// `BTreeSet`.
pub type KeySet = crate::system::collections::vec_map::VecSet<Key, 2>;

/// The result of a successful `prepare_store`.
#[derive(Clone, Debug, Default)]
pub struct StoreOut {
    pub keys_to_store: Vec<Key>,
    pub slots: Vec<u32>,
    pub evicted: Vec<Key>,
}

#[derive(PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct HostTier {
    pub capacity: u32,
    num_allocated: u32,
    free_list: Vec<u32>,
    /// The entries; in replay each carries where the reference order lists it.
    entries: KeyMap<Key, HostEntry, RefPlace>,
    evictable: RankSet<Key>,
    next_rank: u64,
    /// vLLM's counters, kept as it keeps them (host-accounting checks them).
    pub num_evictable: u32,
    pub num_write_pending: u32,
    pub policy: HostLru,
    /// Mutation: evict from the most recently used end.
    evict_mru: bool,
    /// Ghost: the eviction-order reference (LRU only).
    pub order: RefOrder,
    /// The ARC policy (`eviction_policy = "arc"`); None: the profile's LRU.
    pub arc: Option<Box<ArcLists>>,
    /// Trace replay's change log (not state; off in the checker).
    pub log: Side<HostLog>,
}

pack_fields!(clone HostTier {
    capacity,
    num_allocated,
    free_list,
    entries,
    evictable,
    next_rank,
    num_evictable,
    num_write_pending,
    policy,
    evict_mru,
    order,
    arc,
    log
});

impl HostTier {
    /// A 0.33 (request-rank) host tier.
    pub fn new(capacity: u32) -> Self {
        Self::with_policy(capacity, HostLru::RequestRank, false)
    }

    pub fn with_policy(capacity: u32, policy: HostLru, evict_mru: bool) -> Self {
        HostTier {
            policy,
            evict_mru,
            order: RefOrder::default(),
            arc: None,
            capacity,
            num_allocated: 0,
            free_list: Vec::new(),
            entries: KeyMap::default(),
            evictable: RankSet::default(),
            next_rank: 0,
            num_evictable: 0,
            num_write_pending: 0,
            log: Side::default(),
        }
    }

    /// Use ARC (`fallback`: rule arc_t1_fallback; `trim`: rule arc_ghost_trim) instead of the LRU.
    pub fn use_arc(&mut self, fallback: bool, trim: bool) {
        self.arc = Some(Box::new(ArcLists::new(self.capacity, fallback, trim)));
    }

    /// Is `k` resident?
    pub fn contains(&self, k: &Key) -> bool {
        self.entries.contains_key(k)
    }

    /// How many keys the eviction order holds (= evictable keys when the books balance).
    pub fn eviction_order_len(&self) -> usize {
        self.evictable.len()
    }

    pub fn entries(&self) -> KeyMapIter<'_, Key, HostEntry, RefPlace> {
        self.entries.iter()
    }
    #[inline(always)]
    pub fn get(&self, k: &Key) -> Option<&HostEntry> {
        self.entries.get(k)
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn num_free_slots(&self) -> u32 {
        self.free_list.len() as u32 + self.capacity - self.num_allocated
    }
    #[inline(always)]
    pub fn lookup(&self, k: &Key) -> Lookup {
        match self.entries.get(k).map(|e| e.ref_cnt) {
            None => Lookup::Miss,
            Some(rc) if rc < 0 => Lookup::HitPending,
            Some(_) => Lookup::Hit,
        }
    }

    fn request_rank(&mut self, acc: &mut ReqAccess) -> u64 {
        if let Some(r) = acc.rank {
            return r;
        }
        self.next_rank += 1;
        acc.rank = Some(self.next_rank);
        self.next_rank
    }

    fn fresh_rank(&mut self) -> Rank {
        self.next_rank += 1;
        (self.next_rank, 0)
    }

    /// `k` becomes evictable (ref count reached 0).
    #[inline(always)]
    fn release(&mut self, k: Key) {
        let fresh = (self.policy == HostLru::ReleaseOrder && self.arc.is_none()).then(|| self.fresh_rank());
        let (e, at) = self.entries.get_mut_aux(&k).expect("resident");
        if let Some(r) = fresh {
            e.rank = r;
        }
        self.num_evictable += 1;
        self.evictable.insert(e.rank, k);
        if self.arc.is_none() {
            self.order.released(self.policy, k, at);
        }
    }

    /// `touch(keys)` (0.24's connector, at lookup and after a successful store): a request's
    /// evictable keys become most recently used, its head last.
    pub fn touch(&mut self, keys: &[Key]) {
        if self.policy != HostLru::ReleaseOrder {
            return;
        }
        if let Some(arc) = self.arc.as_mut() {
            let entries = &self.entries;
            arc.touch(keys, |k| entries.get(k).is_some_and(|e| e.ref_cnt >= 0));
            return;
        }
        for k in keys.iter().rev() {
            if let Some(e) = self.entries.get_mut(k).filter(|e| e.ref_cnt == 0) {
                self.next_rank += 1;
                Self::rerank(&mut self.evictable, e, *k, (self.next_rank, 0));
            }
        }
        for k in keys.iter().rev() {
            let at = self.entries.get_mut_aux(k).and_then(|(_, a)| a);
            self.order.touched(self.policy, *k, at);
        }
    }

    /// Give resident `k` (entry `e`) the rank `rank`.
    #[inline(always)]
    fn rerank(evictable: &mut RankSet<Key>, e: &mut HostEntry, k: Key, rank: Rank) {
        if e.ref_cnt == 0 {
            evictable.remove(e.rank, k);
            evictable.insert(rank, k);
        }
        e.rank = rank;
    }

    /// `_record_request_cache_access` + `LRUCachePolicy.on_request_access`: first sight of a
    /// key raises a resident key to (request rank, -position) if that is larger.
    /// `absent(i)`: the caller knows `keys[i]` is not resident (nothing to raise).
    fn record_access(&mut self, keys: &[(Key, u32)], acc: &mut ReqAccess, absent: impl Fn(usize) -> bool) {
        // Positions past the last one seen are new without a lookup (offers come in position
        // order, so most are).
        let last = acc.seen.last_key_value().map(|(p, _)| *p);
        // Inline: an offer is a few chunks.
        let new: smallvec::SmallVec<[(Key, u32, usize); 8]> = keys
            .iter()
            .enumerate()
            .filter(|(_, (k, p))| last.is_none_or(|l| *p > l) || acc.seen.get(p) != Some(k))
            .map(|(i, &(k, p))| (k, p, i))
            .collect();
        if new.is_empty() {
            return;
        }
        if self.policy == HostLru::ReleaseOrder {
            return; // 0.24 records nothing (no finish-time re-rank)
        }
        for (k, p, _) in &new {
            acc.seen.insert(*p, *k);
        }
        if self.policy == HostLru::InsertRank || self.arc.is_some() {
            return; // 0.32: reuse only matters at finish
        }
        let rr = self.request_rank(acc);
        for (k, p, _) in new.into_iter().filter(|(_, _, i)| !absent(*i)) {
            if let Some((e, at)) = self.entries.get_mut_aux(&k) {
                let rank = (rr, -(p as i64));
                if e.rank < rank {
                    Self::rerank(&mut self.evictable, e, k, rank);
                    self.order.raised(self.policy, k, rank, at);
                }
            }
        }
    }

    /// A reuse of ready keys (ARC, 0.32+): not counted for keys this request inserted.
    fn record_reuse(&mut self, keys: impl Iterator<Item = Key>, acc: &mut ReqAccess) {
        let keys: Vec<Key> = keys.filter(|k| !acc.inserted.contains(k)).collect();
        acc.reused.extend(keys);
    }

    /// The copy of a store landed in the chunk slot of `k`.
    pub fn write_content(&mut self, k: &Key, content: &[ContentTag]) {
        if let Some(e) = self.entries.get_mut(k) {
            e.content.clear();
            match content {
                // One block per chunk (the common case): a push, cheaper than a slice copy.
                [only] => e.content.push(*only),
                _ => e.content.extend_from_slice(content),
            }
            self.note_written(*k);
        }
    }

    /// The order in which a job's keys are walked. 0.24's `TransferJobStatus.keys` is a set, and
    /// under its release-order LRU the order in which keys become evictable is the eviction
    /// order: conformance chooses the order of the keys `releases` picks (choice point
    /// `TransferJobStatus.keys`); the other keys keep their places (they decide nothing).
    fn walk_order<'a>(
        &self,
        keys: &'a [Key],
        releases: impl Fn(&HostEntry) -> bool,
        ev: &mut Events,
    ) -> Cow<'a, [Key]> {
        if ev.choices.is_none() || self.policy != HostLru::ReleaseOrder || self.arc.is_some() {
            return Cow::Borrowed(keys);
        }
        let at: Vec<usize> = (0..keys.len()).filter(|&i| self.entries.get(&keys[i]).is_some_and(&releases)).collect();
        if at.len() < 2 {
            return Cow::Borrowed(keys);
        }
        let mut picked: Vec<Key> = at.iter().map(|&i| keys[i]).collect();
        ev.order(Point::TransferJobKeys, &mut picked);
        let mut out = keys.to_vec();
        for (&i, k) in at.iter().zip(picked) {
            out[i] = k;
        }
        Cow::Owned(out)
    }

    /// `complete_store(keys)`: write-pending keys become ready and evictable.
    pub fn complete_store(&mut self, keys: &[Key], ghost: &mut Ghost, ev: &mut Events) {
        let mut stored = Vec::new();
        let keys = self.walk_order(keys, |e| e.ref_cnt < 0, ev);
        for k in keys.iter() {
            if let Some(e) = self.entries.get_mut(k) {
                if e.ref_cnt < 0 {
                    e.ref_cnt = 0;
                    self.num_write_pending -= 1;
                    self.release(*k);
                    self.note(*k, Some(-1), Some(0));
                    self.note_written(*k);
                    ghost.mark(Mark::StoreCompleted);
                    if ev.is_on() {
                        stored.push(*k);
                    }
                }
            }
        }
        if !stored.is_empty() {
            ev.emit(|| Event::HostStored { keys: stored });
        }
    }

    /// `prepare_load(keys)`: pin ready keys; returns their chunk slots. Loading a key that is
    /// absent or write-pending is a load-safety breach (vLLM asserts).
    pub fn prepare_load(
        &mut self,
        keys: &[(Key, u32)],
        acc: &mut ReqAccess,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) -> Vec<u32> {
        let mut slots = Vec::with_capacity(keys.len());
        for &(ref k, end) in keys {
            match self.entries.get_mut_aux(k) {
                Some((e, at)) if e.ref_cnt >= 0 => {
                    if e.ref_cnt == 0 {
                        self.evictable.remove(e.rank, *k);
                        self.num_evictable -= 1;
                        if self.policy == HostLru::ReleaseOrder {
                            e.rank = (0, 0);
                        }
                        if self.arc.is_none() {
                            self.order.pinned(self.policy, *k, at);
                        }
                    }
                    e.ref_cnt += 1;
                    let rc = e.ref_cnt;
                    slots.push(e.slot);
                    self.note(*k, Some(rc - 1), Some(rc));
                }
                _ => {
                    ghost.breach(Breach::UnsafeLoad);
                    ev.emit(|| Event::Violation {
                        property: "load-safety",
                        detail: format!(
                            "a load reads the host chunk ending at token {end}, which is absent or still being written"
                        ),
                    });
                    slots.push(u32::MAX);
                }
            }
        }
        self.record_access(keys, acc, |_| false);
        if self.arc.is_some() && self.policy != HostLru::ReleaseOrder {
            self.record_reuse(keys.iter().map(|(k, _)| *k), acc);
        }
        slots
    }

    /// What a load of `k` copies into GPU memory.
    pub fn content_of(&self, k: &Key) -> Option<&[ContentTag]> {
        self.entries.get(k).filter(|e| e.ref_cnt >= 0).map(|e| e.content.as_slice())
    }

    /// `complete_load(keys)`: unpin; a key whose count reaches 0 is evictable again at its
    /// existing rank.
    pub fn complete_load(&mut self, keys: &[Key], ghost: &mut Ghost, ev: &mut Events) {
        let keys = self.walk_order(keys, |e| e.ref_cnt == 1, ev);
        for k in keys.iter() {
            match self.entries.get_mut(k) {
                Some(e) if e.ref_cnt > 0 => {
                    e.ref_cnt -= 1;
                    let rc = e.ref_cnt;
                    if rc == 0 {
                        self.release(*k);
                    }
                    self.note(*k, Some(rc + 1), Some(rc));
                }
                _ => ghost.breach(Breach::BadCompletion),
            }
        }
    }

    /// `on_request_finished`: re-rank every key the request saw, tail first, with fresh ranks.
    pub fn on_request_finished(&mut self, acc: &mut ReqAccess) {
        if acc.finished {
            return;
        }
        acc.finished = true;
        if self.policy == HostLru::ReleaseOrder {
            return; // 0.24's CPU manager: the base no-op
        }
        if let Some(arc) = self.arc.as_mut() {
            let keys: Vec<Key> = acc.seen.values().copied().collect();
            let insertion_only: KeySet = acc.inserted.difference(&acc.reused).copied().collect();
            arc.on_request_finished(&keys, &insertion_only, &acc.reused);
            return;
        }
        self.warm(acc.seen.values());
        for &k in acc.seen.values().rev() {
            let Some((e, at)) = self.entries.get_mut_aux(&k) else { continue };
            self.next_rank += 1;
            let r = (self.next_rank, 0);
            Self::rerank(&mut self.evictable, e, k, r);
            self.order.finished(self.policy, k, r, at);
        }
    }
}
