//! The row store (vLLM 0.33 `distributed/aux_output_connector/store.py: BlockObjectStore`):
//! one object per full hash block of routed-expert rows, keyed by the block hash (one
//! generation: prefix-cache resets are not modelled), on the output worker only.
//!
//! Objects referenced by a live request (its keys were sent to the worker) or retained by the
//! scheduler are never evicted; unreferenced objects sit in an LRU list and are evicted, oldest
//! first, when a `put` leaves more objects than slots. When every object is referenced the
//! 0.33 store grows instead (vLLM logs a warning); the 0.31/0.32 store (rule
//! `aux_store_grows` false) raises `BlockObjectStoreError("cannot retain the requested
//! batch")` from `_evict_to_fit`. A `get` of a missing key is `BlockObjectStoreError`: the
//! engine step fails.

use crate::system::types::BlockHash;
use std::collections::BTreeMap;

#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct RowStore {
    /// `num_slots` (objects); grows when everything is referenced.
    pub capacity: u32,
    /// Keys with an object (`_slots`), ascending.
    objects: Vec<BlockHash>,
    /// `_references`: key -> count (a key may be referenced before its object exists).
    refs: BTreeMap<BlockHash, u16>,
    /// `_lru`: unreferenced keys with an object, least recently used first.
    lru: Vec<BlockHash>,
    /// Variant store-evicts-live-rows: eviction ignores references.
    evicts_live: bool,
    /// Rule `aux_store_grows`: with every object referenced, the store grows (0.33) rather
    /// than fail.
    grows: bool,
}

/// `put` could not make room: every object over the store's slots is referenced or new
/// (0.31/0.32's `_evict_to_fit` raises `BlockObjectStoreError`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StoreFull {
    /// Objects the put would leave.
    pub objects: u32,
    /// The store's slots (`num_slots`).
    pub limit: u32,
}

crate::system::collections::pack::pack_fields!(RowStore { capacity, objects, refs, lru, evicts_live, grows });

/// A decoder's starting value (every field is then decoded).
impl Default for RowStore {
    fn default() -> Self {
        RowStore::new(0, false, false)
    }
}

impl RowStore {
    pub fn new(capacity: u32, evicts_live: bool, grows: bool) -> Self {
        RowStore { capacity, objects: Vec::new(), refs: BTreeMap::new(), lru: Vec::new(), evicts_live, grows }
    }

    pub fn contains(&self, k: &BlockHash) -> bool {
        self.objects.binary_search(k).is_ok()
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// Keys with an object, ascending (for display).
    pub fn objects(&self) -> &[BlockHash] {
        &self.objects
    }

    /// Unreferenced keys with an object, least recently used first (for display).
    pub fn lru_order(&self) -> &[BlockHash] {
        &self.lru
    }

    pub fn references(&self, k: &BlockHash) -> u16 {
        self.refs.get(k).copied().unwrap_or(0)
    }

    fn lru_remove(&mut self, k: &BlockHash) -> bool {
        match self.lru.iter().position(|x| x == k) {
            Some(i) => {
                self.lru.remove(i);
                true
            }
            None => false,
        }
    }

    fn lru_touch(&mut self, k: BlockHash) {
        self.lru_remove(&k);
        self.lru.push(k);
    }

    fn insert_object(&mut self, k: BlockHash) {
        if let Err(i) = self.objects.binary_search(&k) {
            self.objects.insert(i, k);
        }
    }

    fn remove_object(&mut self, k: &BlockHash) {
        if let Ok(i) = self.objects.binary_search(k) {
            self.objects.remove(i);
        }
    }

    /// `put(objects, retain_keys, release_keys)`; returns the keys it evicted, or `StoreFull`
    /// when it cannot make room and does not grow (the engine dies: the background writer's
    /// error is raised by the next `put` or `get`, and every later put is dropped, so kvmc ends
    /// the engine at this one).
    pub fn put(
        &mut self,
        objects: &[BlockHash],
        retain: &[BlockHash],
        release: &[BlockHash],
    ) -> Result<Vec<BlockHash>, StoreFull> {
        let mut unique: Vec<BlockHash> = Vec::new();
        for k in objects {
            if !unique.contains(k) {
                unique.push(*k);
            }
        }
        // An unreferenced object put again is replaced.
        for k in &unique {
            if self.lru_remove(k) {
                self.remove_object(k);
            }
        }
        for k in retain {
            let n = self.refs.entry(*k).or_insert(0);
            if *n == 0 {
                self.lru.retain(|x| x != k);
            }
            *n += 1;
        }
        let mut terminal = Vec::new();
        for k in release {
            let n = self.refs.get_mut(k).expect("release of an unreferenced key");
            *n -= 1;
            if *n > 0 {
                continue;
            }
            self.refs.remove(k);
            if self.contains(k) {
                self.lru_touch(*k);
            }
            terminal.push(*k);
        }
        for k in &unique {
            self.insert_object(*k);
            if !self.refs.contains_key(k) {
                self.lru_touch(*k);
            }
        }
        for k in &terminal {
            if self.lru.contains(k) {
                self.lru_touch(*k);
            }
        }
        // _evict_to_fit(protected = new objects not released in this call)
        let protected: Vec<BlockHash> = unique.iter().filter(|k| !terminal.contains(k)).copied().collect();
        let excess = self.objects.len().saturating_sub(self.capacity as usize);
        let mut victims: Vec<BlockHash> =
            self.lru.iter().filter(|k| !protected.contains(k)).take(excess).copied().collect();
        if self.evicts_live && victims.len() < excess {
            // Variant: referenced objects go too, oldest key first.
            let more: Vec<BlockHash> = self
                .objects
                .iter()
                .filter(|k| !protected.contains(k) && !victims.contains(k))
                .take(excess - victims.len())
                .copied()
                .collect();
            victims.extend(more);
        }
        if !self.grows && victims.len() < excess {
            return Err(StoreFull { objects: self.objects.len() as u32, limit: self.capacity });
        }
        for k in &victims {
            self.lru_remove(k);
            self.remove_object(k);
        }
        if self.objects.len() > self.capacity as usize {
            // Everything left is referenced: the arena grows.
            self.capacity = (self.objects.len() as u32).max(2 * self.capacity);
        }
        Ok(victims)
    }

    /// `get_concatenated(keys)`: Err(first missing key) is BlockObjectStoreError; hits become
    /// most recently used.
    pub fn get(&mut self, keys: &[BlockHash]) -> Result<(), BlockHash> {
        if let Some(k) = keys.iter().find(|k| !self.contains(k)) {
            return Err(*k);
        }
        for k in keys {
            if self.lru.contains(k) {
                self.lru_touch(*k);
            }
        }
        Ok(())
    }
}
