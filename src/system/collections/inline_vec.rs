//! A vector of `Copy` elements with its first `N` inline (a `SmallVec` underneath, spilling to
//! the heap beyond `N`): cloned with one `memcpy` (`SmallVec`'s own clone copies element by
//! element through an iterator), compared, ordered and hashed exactly as a slice (so as the
//! `Vec` it replaces). Everything else is `SmallVec`'s, through `Deref`.

use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

/// Serialized as `SmallVec`'s sequence (so as a slice or a `Vec`).
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
pub struct InlineVec<T: Copy, const N: usize>(pub SmallVec<[T; N]>);

impl<T: Copy, const N: usize> InlineVec<T, N> {
    #[inline]
    pub fn new() -> Self {
        InlineVec(SmallVec::new())
    }
    #[inline]
    pub fn from_slice(s: &[T]) -> Self {
        InlineVec(SmallVec::from_slice(s))
    }
    /// `Vec::retain` (the predicate takes `&T`, unlike `SmallVec::retain`).
    #[inline]
    pub fn retain(&mut self, mut f: impl FnMut(&T) -> bool) {
        self.0.retain(|x| f(x))
    }
}

impl<T: Copy, const N: usize> Default for InlineVec<T, N> {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy, const N: usize> Clone for InlineVec<T, N> {
    #[inline]
    fn clone(&self) -> Self {
        Self::from_slice(&self.0)
    }
    /// Reuses the target's allocation, if any (see `clone_fields`). Both inline (the common
    /// case in the checker): one copy of the whole vector, length and items.
    #[inline]
    fn clone_from(&mut self, src: &Self) {
        if !self.0.spilled() && !src.0.spilled() {
            // SAFETY: neither vector owns heap memory (both keep their `Copy` items inline), so
            // the target drops nothing by being overwritten and a bitwise copy of the source is
            // a valid vector with the same length and items.
            unsafe { std::ptr::copy_nonoverlapping(&src.0, &mut self.0, 1) };
            return;
        }
        self.0.clear();
        self.0.extend_from_slice(&src.0);
    }
}

impl<T: Copy, const N: usize> Deref for InlineVec<T, N> {
    type Target = SmallVec<[T; N]>;
    #[inline]
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<T: Copy, const N: usize> DerefMut for InlineVec<T, N> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<T: Copy + PartialEq, const N: usize> PartialEq for InlineVec<T, N> {
    #[inline]
    fn eq(&self, o: &Self) -> bool {
        self.0[..] == o.0[..]
    }
}
impl<T: Copy + Eq, const N: usize> Eq for InlineVec<T, N> {}

impl<T: Copy + PartialEq, const N: usize> PartialEq<Vec<T>> for InlineVec<T, N> {
    #[inline]
    fn eq(&self, o: &Vec<T>) -> bool {
        self.0[..] == o[..]
    }
}

impl<T: Copy + Hash, const N: usize> Hash for InlineVec<T, N> {
    /// Exactly a slice's (and a `Vec`'s) hash.
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.0[..].hash(h)
    }
}

impl<T: Copy + std::fmt::Debug, const N: usize> std::fmt::Debug for InlineVec<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0[..].fmt(f)
    }
}

impl<T: Copy, const N: usize> FromIterator<T> for InlineVec<T, N> {
    #[inline]
    fn from_iter<I: IntoIterator<Item = T>>(it: I) -> Self {
        InlineVec(it.into_iter().collect())
    }
}

impl<T: Copy, const N: usize> Extend<T> for InlineVec<T, N> {
    #[inline]
    fn extend<I: IntoIterator<Item = T>>(&mut self, it: I) {
        self.0.extend(it)
    }
}

impl<T: Copy, const N: usize> IntoIterator for InlineVec<T, N> {
    type Item = T;
    type IntoIter = smallvec::IntoIter<[T; N]>;
    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a, T: Copy, const N: usize> IntoIterator for &'a InlineVec<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Packed (`super::pack`): a length, then the items; decoded into the vector's buffer.
impl<T: Copy + Default + super::pack::Pack, const N: usize> super::pack::Pack for InlineVec<T, N> {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        super::pack::put_len(out, self.0.len());
        for x in self.0.iter() {
            x.pack(out);
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        super::pack::unpack_small(&mut self.0, r)
    }
}

// SAFETY: an unspilled `SmallVec` of `Copy` items owns no heap memory.
unsafe impl<T: Copy, const N: usize> super::bitwise::Bitwise for InlineVec<T, N> {
    #[inline(always)]
    fn inline(&self) -> bool {
        !self.0.spilled()
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

    #[test]
    fn inline_vec_hashes_and_clones_as_a_vec() {
        for n in 0..9u32 {
            let v: Vec<u32> = (0..n).collect();
            let a: InlineVec<u32, 4> = v.iter().copied().collect();
            assert_eq!(fingerprint(&a, 3), fingerprint(&v, 3));
            // Every target length, inline (below 5) and spilled, over every source.
            for m in 0..9u32 {
                let mut b: InlineVec<u32, 4> = (100..100 + m).collect();
                b.clone_from(&a);
                assert_eq!(b, a);
                assert_eq!(&b[..], &v[..]);
                b.push(1);
                assert_eq!(b.len(), v.len() + 1);
            }
            assert_eq!(a.clone(), a);
        }
    }

    /// The serde forms are the slice's (JSON and bincode), inline and spilled, and read back
    /// equal.
    #[test]
    fn serde_form_is_the_slices() {
        use bincode::Options;
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        for n in 0..6u16 {
            let v: Vec<u16> = (10..10 + n).collect();
            let a: InlineVec<u16, 2> = v.iter().copied().collect();
            let json = serde_json::to_string(&a).unwrap();
            assert_eq!(json, serde_json::to_string(&v).unwrap());
            assert_eq!(serde_json::from_str::<InlineVec<u16, 2>>(&json).unwrap(), a);
            let bytes = codec.serialize(&a).unwrap();
            assert_eq!(bytes, codec.serialize(&v).unwrap());
            assert_eq!(codec.deserialize::<InlineVec<u16, 2>>(&bytes).unwrap(), a);
        }
        let a = InlineVec::<u16, 2>::from_slice(&[1, 2, 3]);
        assert_eq!(serde_json::to_string(&a).unwrap(), "[1,2,3]");
        assert_eq!(codec.serialize(&a).unwrap(), [3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 3, 0]);
    }
}
