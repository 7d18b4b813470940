//! `prepare_store`: the offer's keys sorted into present and absent, recency recorded, room made
//! for the absent ones by evicting the policy's victims (checked against the eviction-order
//! reference), and the absent keys inserted write-pending (vLLM `CPUOffloadingManager.
//! prepare_store`). The rest of the manager's calls are in the parent module.

use super::{HostEntry, HostTier, Key, Lookup, Rank, ReqAccess, StoreOut};
use crate::system::collections::rank_queue::first_n;
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::rules::HostLru;
use crate::system::types::Contents;
use smallvec::SmallVec;

impl HostTier {
    /// `prepare_store(keys)`: keys are (key, end-token position) in chunk order.
    pub fn prepare_store(
        &mut self,
        keys: &[(Key, u32)],
        acc: &mut ReqAccess,
        ghost: &mut Ghost,
        ev: &mut Events,
    ) -> Option<StoreOut> {
        // Inline: an offer is a few chunks.
        let mut to_store: SmallVec<[(Key, u32); 8]> = SmallVec::new();
        let mut recorded: SmallVec<[(Key, u32); 8]> = SmallVec::new();
        let mut recorded_absent: SmallVec<[bool; 8]> = SmallVec::new();
        // The offer's own keys may not be evicted for it; only resident keys can be picked,
        // so only those are listed.
        let mut protected: std::collections::HashSet<
            Key,
            std::hash::BuildHasherDefault<crate::system::collections::side::WordHasher>,
        > = Default::default();
        for &(k, p) in keys {
            match self.entries.get(&k).map(|e| e.ref_cnt) {
                None => {
                    to_store.push((k, p));
                    recorded.push((k, p));
                    recorded_absent.push(true);
                }
                Some(rc) => {
                    protected.insert(k);
                    if rc >= 0 {
                        recorded.push((k, p));
                        recorded_absent.push(false);
                    }
                }
            }
        }
        let arc_requests = self.arc.is_some() && self.policy != HostLru::ReleaseOrder;
        if arc_requests {
            // ARC learns from B1/B2 before insert drops the ghost entry, once per request.
            let new: Vec<Key> = to_store.iter().map(|(k, _)| *k).filter(|k| !acc.store_missed.contains(k)).collect();
            if let Some(arc) = self.arc.as_mut() {
                arc.on_store_miss(&new);
            }
            acc.store_missed.extend(new);
        }
        // Recency is recorded before any early return.
        self.record_access(&recorded, acc, |i| recorded_absent[i]);
        if arc_requests {
            let ready: Vec<Key> = recorded.iter().map(|(k, _)| *k).filter(|k| self.lookup(k) == Lookup::Hit).collect();
            self.record_reuse(ready.into_iter(), acc);
        }
        if to_store.is_empty() {
            return Some(StoreOut::default());
        }
        let need = to_store.len() as i64 - self.num_free_slots() as i64;
        let mut evicted = Vec::with_capacity(need.max(0) as usize);
        if need > 0 {
            let need = need as u32;
            if need > self.num_evictable {
                return None;
            }
            let protected = |k: &Key| !protected.is_empty() && protected.contains(k);
            if self.arc.is_some() {
                let entries = &self.entries;
                let arc = self.arc.as_mut().expect("arc");
                let victims =
                    arc.evict(need as usize, |k| !protected(k) && entries.get(k).is_some_and(|e| e.ref_cnt == 0))?;
                for k in victims {
                    self.evict_one((0, 0), k, ghost, ev);
                    evicted.push(k);
                }
                return Some(self.insert_all(&to_store, evicted, acc));
            }
            let eligible = |(_, k): &(Rank, Key)| !protected(k);
            let victims: Vec<(Rank, Key)> = if self.evict_mru {
                first_n(self.evictable.iter_rev(), need as usize, eligible)
            } else {
                self.evictable.first(need as usize, eligible)
            };
            if (victims.len() as u32) < need {
                return None;
            }
            // The reference order's check and the evictions below read them one by one.
            self.warm(victims.iter().map(|(_, k)| k));
            let want = self
                .order
                .victims(need as usize, |k| !protected(k) && self.entries.get(k).is_some_and(|e| e.ref_cnt == 0));
            if victims.iter().map(|(_, k)| *k).collect::<Vec<_>>() != want {
                ghost.breach(Breach::EvictionOrder);
                let got: Vec<Key> = victims.iter().map(|(_, k)| *k).collect();
                let policy = self.policy;
                ev.emit(|| Event::WrongVictims { got, want, policy });
            }
            for (r, k) in victims {
                self.evict_one(r, k, ghost, ev);
                evicted.push(k);
            }
        }
        Some(self.insert_all(&to_store, evicted, acc))
    }

    /// Evict evictable `k` (at rank `r`).
    #[inline(always)]
    fn evict_one(&mut self, r: Rank, k: Key, ghost: &mut Ghost, ev: &mut Events) {
        self.evictable.remove(r, k);
        let (e, mut at) = self.entries.remove_aux(&k).expect("evictable key is resident");
        if e.ref_cnt != 0 {
            ghost.breach(Breach::EvictedPinned);
            let (slot, rc) = (e.slot, e.ref_cnt);
            ev.emit(|| Event::Violation {
                property: "load-safety",
                detail: format!(
                    "the host tier evicts the chunk in slot {slot} with ref count {rc} (pinned or being written)"
                ),
            });
        }
        self.num_evictable -= 1;
        self.free_list.push(e.slot);
        if self.arc.is_none() {
            self.order.evicted(&k, at.as_mut());
        }
        self.note(k, Some(e.ref_cnt), None);
        ev.stat(|s| s.host_evictions += 1);
        ghost.mark(Mark::HostEviction);
        ev.emit(|| Event::HostEvicted { key: k });
    }

    /// Allocate slots for `to_store` (room was made) and insert them write-pending.
    fn insert_all(&mut self, to_store: &[(Key, u32)], evicted: Vec<Key>, acc: &mut ReqAccess) -> StoreOut {
        let rr = if self.policy == HostLru::RequestRank && self.arc.is_none() { self.request_rank(acc) } else { 0 };
        let mut slots = Vec::with_capacity(to_store.len());
        for &(k, p) in to_store {
            let slot = if self.num_allocated < self.capacity {
                self.num_allocated += 1;
                self.num_allocated - 1
            } else {
                self.free_list.pop().expect("room was made")
            };
            slots.push(slot);
            let rank = match self.policy {
                _ if self.arc.is_some() => (0, 0),
                HostLru::RequestRank => (rr, -(p as i64)),
                HostLru::InsertRank => self.fresh_rank(),
                HostLru::ReleaseOrder => (0, 0),
            };
            let (old, at) = self.entries.insert_aux(k, HostEntry { ref_cnt: -1, slot, rank, content: Contents::new() });
            let old = old.map(|o| o.ref_cnt);
            if let Some(arc) = self.arc.as_mut() {
                arc.insert(k);
                if self.policy != HostLru::ReleaseOrder {
                    acc.inserted.insert(k);
                }
            } else {
                self.order.inserted(self.policy, k, rank, at);
            }
            self.note(k, old, Some(-1));
        }
        self.num_write_pending += to_store.len() as u32;
        StoreOut { keys_to_store: to_store.iter().map(|(k, _)| *k).collect(), slots, evicted }
    }
}
