//! A request's seen offload keys by end-token position (`ReqAccess::seen`, the host tier's
//! per-request access record): a sorted vector standing in for a `BTreeMap<u32, Key>`.

use super::inline_vec::InlineVec;
use crate::system::types::BlockHash as Key;

/// A map from end-token position to key, as a vector sorted by position: positions mostly
/// arrive in increasing order, so an insert is usually a push. Compares and hashes exactly as
/// a `BTreeMap<u32, Key>` (a length, then each pair), so states keep their
/// fingerprints.
#[derive(PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct PosMap(InlineVec<(u32, Key), 2>);

impl Clone for PosMap {
    fn clone(&self) -> Self {
        PosMap(self.0.clone())
    }
    /// Reuses the target's allocation (see `clone_fields`).
    fn clone_from(&mut self, src: &Self) {
        self.0.clone_from(&src.0)
    }
}

impl PosMap {
    fn find(&self, p: u32) -> Result<usize, usize> {
        match self.0.last() {
            Some(&(l, _)) if p > l => Err(self.0.len()),
            _ => self.0.binary_search_by_key(&p, |&(q, _)| q),
        }
    }
    pub fn get(&self, p: &u32) -> Option<&Key> {
        self.find(*p).ok().map(|i| &self.0[i].1)
    }
    pub fn insert(&mut self, p: u32, k: Key) -> Option<Key> {
        match self.find(p) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, k)),
            Err(i) => {
                self.0.insert(i, (p, k));
                None
            }
        }
    }
    pub fn last_key_value(&self) -> Option<(&u32, &Key)> {
        self.0.last().map(|(p, k)| (p, k))
    }
    /// Keys in position order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Key> {
        self.0.iter().map(|(_, k)| k)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for PosMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(p, k)| (p, k))).finish()
    }
}

/// Packed (`super::pack`): its (position, key) pairs in order.
impl super::pack::Pack for PosMap {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}

// SAFETY: its pairs' vector's.
unsafe impl super::bitwise::Bitwise for PosMap {
    #[inline(always)]
    fn inline(&self) -> bool {
        super::bitwise::Bitwise::inline(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::types::{hash_of, BlockHash};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// Any insert sequence leaves a `PosMap` that reads, hashes and prints like the
        /// `BTreeMap` it replaces (so checker fingerprints do not move).
        #[test]
        fn behaves_and_hashes_like_a_btreemap(ops in proptest::collection::vec((0u32..40, 0u64..6), 0..60)) {
            let (mut a, mut b) = (PosMap::default(), BTreeMap::new());
            for (p, k) in ops {
                let (p, k) = (p * 16, BlockHash(k));
                prop_assert_eq!(a.insert(p, k), b.insert(p, k));
                prop_assert_eq!(a.get(&p), b.get(&p));
                prop_assert_eq!(a.last_key_value(), b.last_key_value());
                prop_assert!(a.values().eq(b.values()));
                prop_assert!(a.values().rev().eq(b.values().rev()));
                prop_assert_eq!(a.len(), b.len());
                prop_assert_eq!(hash_of(&a), hash_of(&b));
                prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
            }
        }
    }
}
