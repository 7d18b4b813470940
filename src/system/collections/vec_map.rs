//! Small ordered maps and sets for checker states: a sorted vector whose first `N` entries are
//! stored inline (no allocation), standing in for a `BTreeMap` / `BTreeSet` with the same
//! order, equality and hash (a length, then each entry), so fingerprints do not move.
//!
//! The checker's maps hold a handful of keys (a pool's cached hashes, a host tier's chunks, a
//! store's fenced blocks): a clone is a copy of the inline entries, a comparison one slice
//! comparison, a drop nothing, where a tree allocates, walks and frees a node per clone. A
//! lookup is a binary search; an insertion shifts the entries after it, so these are for
//! small maps (trace replay keeps its large maps in hashed forms, see `KeyMap`).

use super::bitwise::Bitwise;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};

/// A sorted map with `N` entries inline; ordered, compared and hashed like a `BTreeMap<K, V>`.
/// Serialized as a newtype over `SmallVec`'s sequence of `(key, value)` pairs in key order (in
/// bincode, a `BTreeMap`'s bytes); read back as written, the order not checked.
#[derive(PartialEq, Eq, Serialize, Deserialize)]
pub struct VecMap<K, V, const N: usize>(SmallVec<[(K, V); N]>);

impl<K: Clone + Bitwise, V: Clone + Bitwise, const N: usize> Clone for VecMap<K, V, N> {
    #[inline]
    fn clone(&self) -> Self {
        VecMap(self.0.clone())
    }
    /// Reuses the target's entries and allocation (see `clone_fields`); an empty source (the
    /// common case) is a `clear`; both inline (`bitwise`), one copy of the whole map.
    #[inline]
    fn clone_from(&mut self, src: &Self) {
        if src.0.is_empty() {
            self.0.clear();
            return;
        }
        if self.inline() && src.inline() {
            // SAFETY: neither map owns heap memory (`Bitwise`): the target drops nothing by
            // being overwritten and the copy is a valid equal map.
            unsafe { std::ptr::copy_nonoverlapping(&src.0, &mut self.0, 1) };
            return;
        }
        self.0.clone_from(&src.0);
    }
}

impl<K, V, const N: usize> Default for VecMap<K, V, N> {
    #[inline]
    fn default() -> Self {
        VecMap(SmallVec::new())
    }
}

impl<K: Ord, V, const N: usize> VecMap<K, V, N> {
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }
    #[inline]
    fn find(&self, k: &K) -> Result<usize, usize> {
        self.0.binary_search_by(|(x, _)| x.cmp(k))
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        self.find(k).ok().map(|i| &self.0[i].1)
    }
    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match self.find(k) {
            Ok(i) => Some(&mut self.0[i].1),
            Err(_) => None,
        }
    }
    #[inline]
    pub fn contains_key(&self, k: &K) -> bool {
        self.find(k).is_ok()
    }
    /// Insert, returning the value replaced.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        match self.find(&k) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (k, v));
                None
            }
        }
    }
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        match self.find(k) {
            Ok(i) => Some(self.0.remove(i).1),
            Err(_) => None,
        }
    }
    /// The value under `k`, inserted with `V::default()` if absent (`entry(k).or_default()`).
    #[inline]
    pub fn entry_or_default(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        let i = match self.find(&k) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (k, V::default()));
                i
            }
        };
        &mut self.0[i].1
    }
    /// Apply `f` to the value under `k` (if any) and remove the entry when `f` says it is done.
    #[inline]
    pub fn update_or_remove(&mut self, k: &K, f: impl FnOnce(&mut V) -> bool) {
        if let Ok(i) = self.find(k) {
            if f(&mut self.0[i].1) {
                self.0.remove(i);
            }
        }
    }
    /// Entries in key order.
    #[inline]
    pub fn iter(&self) -> Iter<'_, K, V> {
        Iter(self.0.iter())
    }
    #[inline]
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }
    #[inline]
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> {
        self.0.iter().map(|(_, v)| v)
    }
    #[inline]
    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.0.iter_mut().map(|(_, v)| v)
    }
    /// Entries in key order, by value.
    #[inline]
    pub fn into_entries(self) -> smallvec::IntoIter<[(K, V); N]> {
        self.0.into_iter()
    }
}

/// `VecMap::iter`: `(&K, &V)` in key order, like `btree_map::Iter`.
pub struct Iter<'a, K, V>(std::slice::Iter<'a, (K, V)>);

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}
impl<K, V> DoubleEndedIterator for Iter<'_, K, V> {
    #[inline]
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}
impl<K, V> ExactSizeIterator for Iter<'_, K, V> {}

impl<'a, K: Ord, V, const N: usize> IntoIterator for &'a VecMap<K, V, N> {
    type Item = (&'a K, &'a V);
    type IntoIter = Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<K: Hash, V: Hash, const N: usize> Hash for VecMap<K, V, N> {
    /// Exactly a `BTreeMap`'s hash: the length, then each key and value.
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_usize(self.0.len());
        for (k, v) in &self.0 {
            k.hash(h);
            v.hash(h);
        }
    }
}

impl<K: std::fmt::Debug, V: std::fmt::Debug, const N: usize> std::fmt::Debug for VecMap<K, V, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(k, v)| (k, v))).finish()
    }
}

/// A sorted set with `N` elements inline; ordered, compared and hashed like a `BTreeSet<T>`.
/// Serialized as a newtype over `SmallVec`'s sequence of the elements in order (in bincode, a
/// `BTreeSet`'s bytes); read back as written, the order not checked.
#[derive(PartialEq, Eq, Serialize, Deserialize)]
pub struct VecSet<T, const N: usize>(SmallVec<[T; N]>);

impl<T: Copy, const N: usize> Clone for VecSet<T, N> {
    #[inline]
    fn clone(&self) -> Self {
        VecSet(self.0.clone())
    }
    /// An empty source (the common case) is a `clear`; both inline, one copy of the whole set.
    #[inline]
    fn clone_from(&mut self, src: &Self) {
        if src.0.is_empty() {
            self.0.clear();
            return;
        }
        if !self.0.spilled() && !src.0.spilled() {
            // SAFETY: neither set owns heap memory (its `Copy` items are inline): the target
            // drops nothing by being overwritten and the copy is a valid equal set.
            unsafe { std::ptr::copy_nonoverlapping(&src.0, &mut self.0, 1) };
            return;
        }
        self.0.clone_from(&src.0);
    }
}

impl<T, const N: usize> Default for VecSet<T, N> {
    #[inline]
    fn default() -> Self {
        VecSet(SmallVec::new())
    }
}

impl<T: Ord, const N: usize> VecSet<T, N> {
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    #[inline]
    pub fn contains(&self, x: &T) -> bool {
        self.0.binary_search(x).is_ok()
    }
    /// Insert; false if it was there.
    #[inline]
    pub fn insert(&mut self, x: T) -> bool {
        match self.0.binary_search(&x) {
            Ok(_) => false,
            Err(i) => {
                self.0.insert(i, x);
                true
            }
        }
    }
    /// Remove; false if it was not there.
    #[inline]
    pub fn remove(&mut self, x: &T) -> bool {
        match self.0.binary_search(x) {
            Ok(i) => {
                self.0.remove(i);
                true
            }
            Err(_) => false,
        }
    }
    /// Elements in order.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }
    /// Elements in order, as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        &self.0
    }
    /// Elements of `self` not in `o`, in order.
    pub fn difference<'a>(&'a self, o: &'a Self) -> impl Iterator<Item = &'a T> + 'a {
        self.0.iter().filter(move |x| !o.contains(x))
    }
    /// Elements in order, by value.
    #[inline]
    pub fn into_elems(self) -> smallvec::IntoIter<[T; N]> {
        self.0.into_iter()
    }
}

impl<T: Ord, const N: usize> Extend<T> for VecSet<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, it: I) {
        for x in it {
            self.insert(x);
        }
    }
}

impl<T: Ord, const N: usize> FromIterator<T> for VecSet<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        let mut s = Self::default();
        s.extend(it);
        s
    }
}

impl<'a, T: Ord, const N: usize> IntoIterator for &'a VecSet<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Hash, const N: usize> Hash for VecSet<T, N> {
    /// Exactly a `BTreeSet`'s hash: the length, then each element.
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_usize(self.0.len());
        for x in &self.0 {
            x.hash(h);
        }
    }
}

impl<T: std::fmt::Debug, const N: usize> std::fmt::Debug for VecSet<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.iter()).finish()
    }
}

/// Packed (`super::pack`): a length, then the entries in key order (decoded as written: the
/// packer wrote them sorted).
impl<K: super::pack::Pack + Default, V: super::pack::Pack + Default, const N: usize> super::pack::Pack
    for VecMap<K, V, N>
{
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        super::pack::put_len(out, self.0.len());
        for (k, v) in self.0.iter() {
            k.pack(out);
            v.pack(out);
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        let n = r.len()?;
        if n > r.0.len() {
            return None;
        }
        self.0.truncate(n);
        for (k, v) in self.0.iter_mut() {
            k.unpack(r)?;
            v.unpack(r)?;
        }
        while self.0.len() < n {
            let mut e = (K::default(), V::default());
            e.0.unpack(r)?;
            e.1.unpack(r)?;
            self.0.push(e);
        }
        Some(())
    }
}

/// Packed (`super::pack`): a length, then the elements in order.
impl<T: super::pack::Pack + Default, const N: usize> super::pack::Pack for VecSet<T, N> {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        super::pack::put_len(out, self.0.len());
        for x in self.0.iter() {
            x.pack(out);
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        let n = r.len()?;
        if n > r.0.len() {
            return None;
        }
        self.0.truncate(n);
        for x in self.0.iter_mut() {
            x.unpack(r)?;
        }
        while self.0.len() < n {
            let mut x = T::default();
            x.unpack(r)?;
            self.0.push(x);
        }
        Some(())
    }
}

// SAFETY: an unspilled `SmallVec` of `Copy` items owns no heap memory.
unsafe impl<T: Copy, const N: usize> super::bitwise::Bitwise for VecSet<T, N> {
    #[inline(always)]
    fn inline(&self) -> bool {
        !self.0.spilled()
    }
}

// SAFETY: an unspilled `SmallVec` whose entries own no heap memory owns none.
unsafe impl<K: super::bitwise::Bitwise, V: super::bitwise::Bitwise, const N: usize> super::bitwise::Bitwise
    for VecMap<K, V, N>
{
    #[inline]
    fn inline(&self) -> bool {
        !self.0.spilled() && self.0.iter().all(|(k, v)| k.inline() && v.inline())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any fixed hasher shows two values hash alike (std's `DefaultHasher::new` has fixed keys).
    fn fingerprint<T: Hash + ?Sized>(x: &T, seed: u64) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        seed.hash(&mut h);
        x.hash(&mut h);
        h.finish()
    }
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    proptest! {
        /// Any sequence of inserts and removes leaves a `VecMap` equal in order, contents and
        /// fingerprint to the `BTreeMap` it replaces (inline and spilled).
        #[test]
        fn vec_map_matches_btree_map(ops in proptest::collection::vec((any::<bool>(), 0u32..12, any::<u16>()), 0..40)) {
            let (mut a, mut b) = (VecMap::<u32, u16, 2>::new(), BTreeMap::new());
            for (ins, k, v) in ops {
                if ins {
                    prop_assert_eq!(a.insert(k, v), b.insert(k, v));
                } else {
                    prop_assert_eq!(a.remove(&k), b.remove(&k));
                }
                prop_assert_eq!(a.len(), b.len());
                prop_assert!(a.iter().eq(b.iter()));
                prop_assert_eq!(fingerprint(&a, 7), fingerprint(&b, 7));
            }
        }

        /// The same for `VecSet` against `BTreeSet`.
        #[test]
        fn vec_set_matches_btree_set(ops in proptest::collection::vec((any::<bool>(), 0u64..12), 0..40)) {
            let (mut a, mut b) = (VecSet::<u64, 2>::new(), BTreeSet::new());
            for (ins, x) in ops {
                if ins {
                    prop_assert_eq!(a.insert(x), b.insert(x));
                } else {
                    prop_assert_eq!(a.remove(&x), b.remove(&x));
                }
                prop_assert!(a.iter().eq(b.iter()));
                prop_assert_eq!(fingerprint(&a, 7), fingerprint(&b, 7));
            }
        }

        /// The serde forms round-trip (bincode and JSON), and bincode's bytes are the
        /// `BTreeMap`'s / `BTreeSet`'s they stand in for.
        #[test]
        fn serde_round_trips(xs in proptest::collection::vec((0u32..40, any::<u16>()), 0..8)) {
            use bincode::Options;
            let codec = bincode::DefaultOptions::new();
            let mut a = VecMap::<u32, u16, 2>::new();
            for &(k, x) in &xs { a.insert(k, x); }
            let tree: BTreeMap<u32, u16> = a.iter().map(|(k, v)| (*k, *v)).collect();
            let bytes = codec.serialize(&a).unwrap();
            prop_assert_eq!(&bytes, &codec.serialize(&tree).unwrap());
            prop_assert!(codec.deserialize::<VecMap<u32, u16, 2>>(&bytes).unwrap() == a);
            prop_assert!(serde_json::from_str::<VecMap<u32, u16, 2>>(&serde_json::to_string(&a).unwrap()).unwrap() == a);

            let mut s = VecSet::<u32, 2>::new();
            for k in a.keys() { s.insert(*k); }
            let keys: BTreeSet<u32> = s.iter().copied().collect();
            let bytes = codec.serialize(&s).unwrap();
            prop_assert_eq!(&bytes, &codec.serialize(&keys).unwrap());
            prop_assert!(codec.deserialize::<VecSet<u32, 2>>(&bytes).unwrap() == s);
            prop_assert!(serde_json::from_str::<VecSet<u32, 2>>(&serde_json::to_string(&s).unwrap()).unwrap() == s);
        }
    }

    /// The JSON text: a map is its entries as pairs in key order, a set its elements in order
    /// (inline and spilled alike); each reads back equal.
    #[test]
    fn json_form() {
        let mut m = VecMap::<u32, u16, 2>::new();
        assert_eq!(serde_json::to_string(&m).unwrap(), "[]");
        for (k, v) in [(9, 90), (1, 10), (5, 50)] {
            m.insert(k, v);
        }
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, "[[1,10],[5,50],[9,90]]");
        assert!(serde_json::from_str::<VecMap<u32, u16, 2>>(&json).unwrap() == m);
        let s: VecSet<u64, 2> = [7, 3].into_iter().collect();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, "[3,7]");
        assert!(serde_json::from_str::<VecSet<u64, 2>>(&json).unwrap() == s);
        assert!(serde_json::from_str::<VecSet<u64, 2>>("[]").unwrap() == VecSet::new());
    }

    /// Bincode's fixed-width form: a `u64` length, then the entries.
    #[test]
    fn bincode_form() {
        use bincode::Options;
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        let mut m = VecMap::<u32, u16, 2>::new();
        m.insert(1, 10);
        let bytes = codec.serialize(&m).unwrap();
        assert_eq!(bytes, [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 10, 0]);
        assert!(codec.deserialize::<VecMap<u32, u16, 2>>(&bytes).unwrap() == m);
        let s: VecSet<u16, 2> = [4].into_iter().collect();
        let bytes = codec.serialize(&s).unwrap();
        assert_eq!(bytes, [1, 0, 0, 0, 0, 0, 0, 0, 4, 0]);
        assert!(codec.deserialize::<VecSet<u16, 2>>(&bytes).unwrap() == s);
    }
}
