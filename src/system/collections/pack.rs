//! The checker's packed form of a state: its fields one after another, integers fixed-width
//! little-endian, a length as one byte (or, from 255 on, that byte and a `u32`), an `Option`
//! or an enum a one-byte tag; no field names, no visitor. The whole `Engine` implements
//! [`Pack`] (`crate::system::engine`), and its packed form is the search frontier's format (the
//! checker's hooks, src/check/hooks.rs): every successor is packed once (its fingerprint is
//! taken over the bytes), every frontier state unpacked once, in place.
//!
//! It replaces serde's derives in the frontier (a visitor per field: docs/benchmarks.md, Round
//! 25); serde keeps JSON (the explorer, reports).
//!
//! The form is canonical: equal states pack to equal bytes (the search keys a state by the
//! fingerprint of its encoding). Every container packed here is ordered in the checker; a
//! replay-only hash form is packed sorted by key. What is not state packs to nothing: `Side`
//! data unpacks as off, a `#[serde(skip)]` field (`pack_fields!`'s `skip`) as its `Default`,
//! as serde's derive decodes them.
//!
//! A struct's `Pack` is `pack_fields!` beside its definition (or in a `pack.rs` beside it);
//! a type whose `Clone` is field-wise too gets that from the same list
//! (`pack_fields!(clone ..)`, `pack_fields!(clone_bitwise ..)`), so each type lists its fields
//! once.
//!
//! [`Pack::unpack`] decodes *in place*: vectors keep their buffers, an `Option` already `Some`
//! is decoded into, so decoding a frontier state into the engine the search reuses allocates
//! nothing once the engine has grown. It returns `None` on bytes it cannot have written (too
//! short, a tag out of range, a length the remaining bytes cannot hold) and never panics.

/// A reader over packed bytes: each read takes from the front.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    #[inline(always)]
    pub fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    #[inline(always)]
    pub fn tag(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    /// A length ([`put_len`]'s form; the long form of a length the short one holds is refused).
    #[inline(always)]
    pub fn len(&mut self) -> Option<usize> {
        match self.tag()? {
            LONG_LEN => self.long_len(),
            n => Some(n as usize),
        }
    }
    /// [`Reader::len`]'s long form, out of line (rare).
    #[cold]
    #[inline(never)]
    fn long_len(&mut self) -> Option<usize> {
        match u32::from_le_bytes(self.take()?) {
            n if n < u32::from(LONG_LEN) => None,
            n => Some(n as usize),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Append `N` bytes (a capacity check and a store).
#[inline(always)]
pub fn put<const N: usize>(out: &mut Vec<u8>, b: [u8; N]) {
    out.reserve(N);
    let len = out.len();
    // SAFETY: `reserve` made room for N more bytes after `len`; they are written before the
    // length covers them, and a byte array has no alignment to keep.
    unsafe {
        std::ptr::write_unaligned(out.as_mut_ptr().add(len).cast::<[u8; N]>(), b);
        out.set_len(len + N);
    }
}

/// The first byte of a length of [`LONG_LEN`] or more, a `u32` after it.
const LONG_LEN: u8 = u8::MAX;

/// A length: one byte below `LONG_LEN` (nearly every container of a checker state: most are
/// empty), else that byte and a `u32` (a state's containers are far below 2^32 entries).
#[inline(always)]
pub fn put_len(out: &mut Vec<u8>, n: usize) {
    debug_assert!(n <= u32::MAX as usize);
    if n < usize::from(LONG_LEN) {
        put(out, [n as u8]);
    } else {
        put_long_len(out, n);
    }
}

/// [`put_len`]'s long form, out of line (rare: a long form inlined at every length made the
/// packing slower).
#[cold]
#[inline(never)]
fn put_long_len(out: &mut Vec<u8>, n: usize) {
    put(out, [LONG_LEN]);
    put(out, (n as u32).to_le_bytes());
}

/// A state component's packed form (see the module docs).
pub trait Pack {
    fn pack(&self, out: &mut Vec<u8>);
    /// Decode from the front of `r` into `self` (in place). `None`: bytes [`Pack::pack`] never
    /// writes.
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()>;
}

macro_rules! pack_int {
    ($($t:ty),*) => {$(
        impl Pack for $t {
            #[inline(always)]
            fn pack(&self, out: &mut Vec<u8>) {
                put(out, self.to_le_bytes());
            }
            #[inline(always)]
            fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
                *self = <$t>::from_le_bytes(r.take()?);
                Some(())
            }
        }
    )*};
}
pack_int!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Pack for bool {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        put(out, [*self as u8]);
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        *self = match r.tag()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(())
    }
}

impl Pack for () {
    #[inline(always)]
    fn pack(&self, _: &mut Vec<u8>) {}
    #[inline(always)]
    fn unpack(&mut self, _: &mut Reader<'_>) -> Option<()> {
        Some(())
    }
}

impl<A: Pack, B: Pack> Pack for (A, B) {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
        self.1.pack(out);
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        self.0.unpack(r)?;
        self.1.unpack(r)
    }
}

impl<A: Pack, B: Pack, C: Pack> Pack for (A, B, C) {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out);
        self.1.pack(out);
        self.2.pack(out);
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        self.0.unpack(r)?;
        self.1.unpack(r)?;
        self.2.unpack(r)
    }
}

impl<T: Pack + Default> Pack for Option<T> {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            None => put(out, [0]),
            Some(v) => {
                put(out, [1]);
                v.pack(out);
            }
        }
    }
    /// A `Some` is decoded into the value already there.
    #[inline]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        match r.tag()? {
            0 => *self = None,
            1 => self.get_or_insert_with(T::default).unpack(r)?,
            _ => return None,
        }
        Some(())
    }
}

impl<T: Pack> Pack for Box<T> {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        (**self).pack(out)
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        (**self).unpack(r)
    }
}

/// The items of a sequence, decoded over the ones `v` holds (kept, truncated or extended).
#[inline]
pub fn unpack_seq<T: Pack + Default>(v: &mut Vec<T>, r: &mut Reader<'_>) -> Option<()> {
    let n = r.len()?;
    // A count the remaining bytes cannot hold is not ours (and must not reserve memory).
    if n > r.0.len() && std::mem::size_of::<T>() > 0 {
        return None;
    }
    v.truncate(n);
    for x in v.iter_mut() {
        x.unpack(r)?;
    }
    while v.len() < n {
        let mut x = T::default();
        x.unpack(r)?;
        v.push(x);
    }
    Some(())
}

impl<T: Pack + Default> Pack for Vec<T> {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        put_len(out, self.len());
        for x in self {
            x.pack(out);
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        unpack_seq(self, r)
    }
}

/// A `SmallVec` of `Copy` items: decoded into its buffer (no heap while the count fits).
pub fn unpack_small<A: smallvec::Array>(v: &mut smallvec::SmallVec<A>, r: &mut Reader<'_>) -> Option<()>
where
    A::Item: Pack + Default + Copy,
{
    let n = r.len()?;
    if n > r.0.len() && std::mem::size_of::<A::Item>() > 0 {
        return None;
    }
    v.clear();
    v.reserve(n);
    for _ in 0..n {
        let mut x = A::Item::default();
        x.unpack(r)?;
        v.push(x);
    }
    Some(())
}

/// `impl Pack` for a struct, field by field in the order given. Like `clone_fields`, both
/// methods destructure the struct without `..`: a field added later and not listed is a
/// compile error, never a field silently left out of the state's bytes. Fields listed after
/// `skip` are not state (`#[serde(skip)]`): they pack to nothing and unpack to their
/// `Default`, as serde's derive decodes a skipped field.
///
/// A leading mode makes the one field list serve the type's `Clone` as well, so a state type
/// lists its fields once:
/// - `pack_fields!(clone T { .. } skip { .. })`: also `clone_fields!` (`collections`) over
///   every field, the skipped ones too (a clone copies them like the others).
/// - `pack_fields!(clone_bitwise T { .. })`: also `clone_fields!(bitwise ..)` (`collections`:
///   `Clone` and `Bitwise` for a record copied in one `memcpy` while it owns no heap memory);
///   no `skip`.
macro_rules! pack_fields {
    (clone $t:ident { $($f:ident),* $(,)? } $(skip { $($s:ident),* $(,)? })?) => {
        $crate::system::collections::clone_fields!($t { $($f,)* $($($s,)*)? });
        $crate::system::collections::pack::pack_fields!($t { $($f,)* } $(skip { $($s,)* })?);
    };
    (clone_bitwise $t:ident { $($f:ident),* $(,)? }) => {
        $crate::system::collections::clone_fields!(bitwise $t { $($f,)* });
        $crate::system::collections::pack::pack_fields!($t { $($f,)* });
    };
    ($t:ident { $($f:ident),* $(,)? } $(skip { $($s:ident),* $(,)? })?) => {
        impl $crate::system::collections::pack::Pack for $t {
            #[inline]
            fn pack(&self, out: &mut Vec<u8>) {
                let $t { $($f,)* $($($s: _,)*)? } = self;
                $( $crate::system::collections::pack::Pack::pack($f, out); )*
            }
            #[inline]
            fn unpack(&mut self, r: &mut $crate::system::collections::pack::Reader<'_>) -> Option<()> {
                let $t { $($f,)* $($($s,)*)? } = self;
                $( $crate::system::collections::pack::Pack::unpack($f, r)?; )*
                $($( *$s = Default::default(); )*)?
                Some(())
            }
        }
    };
}
pub(crate) use pack_fields;

/// `impl Pack` for an enum of unit variants: its variant's index as one byte. The variants are
/// listed in declaration order with their default discriminants (checked at compile time), so
/// packing is a cast.
macro_rules! pack_unit_enum {
    ($t:ident { $($v:ident),* $(,)? }) => {
        const _: () = {
            let all = [$($t::$v as usize),*];
            let mut i = 0;
            while i < all.len() {
                assert!(all[i] == i, "variants listed in declaration order, default discriminants");
                i += 1;
            }
        };
        impl $crate::system::collections::pack::Pack for $t {
            #[inline]
            fn pack(&self, out: &mut Vec<u8>) {
                $crate::system::collections::pack::put(out, [*self as u8]);
            }
            #[inline]
            fn unpack(&mut self, r: &mut $crate::system::collections::pack::Reader<'_>) -> Option<()> {
                const ALL: &[$t] = &[$($t::$v),*];
                *self = *ALL.get(r.tag()? as usize)?;
                Some(())
            }
        }
    };
}
pub(crate) use pack_unit_enum;

/// Decode all of `bytes` into `v` (in place): `None` when they are not one packed value, or
/// not only one (bytes left over).
#[inline]
pub fn unpack_all<T: Pack + ?Sized>(v: &mut T, bytes: &[u8]) -> Option<()> {
    let mut r = Reader(bytes);
    v.unpack(&mut r)?;
    r.is_empty().then_some(())
}

/// A length read for `n` items of `T` that the remaining bytes could hold (an item packs to
/// at least one byte unless `T` is zero-sized): a count that cannot be ours must not loop or
/// allocate for long.
#[inline(always)]
fn plausible<T>(n: usize, r: &Reader<'_>) -> Option<usize> {
    (n <= r.0.len() || std::mem::size_of::<T>() == 0).then_some(n)
}

/// Packed: a length, then the entries in key order; decoded by insertion (a `BTreeMap` has no
/// buffer to reuse). The checker's maps are ordered, so equal maps pack to equal bytes.
impl<K: Pack + Default + Ord, V: Pack + Default> Pack for std::collections::BTreeMap<K, V> {
    fn pack(&self, out: &mut Vec<u8>) {
        put_len(out, self.len());
        for (k, v) in self {
            k.pack(out);
            v.pack(out);
        }
    }
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        let n = plausible::<(K, V)>(r.len()?, r)?;
        self.clear();
        for _ in 0..n {
            let (mut k, mut v) = (K::default(), V::default());
            k.unpack(r)?;
            v.unpack(r)?;
            self.insert(k, v);
        }
        Some(())
    }
}

/// Packed: a length, then the elements in order; decoded by insertion.
impl<T: Pack + Default + Ord> Pack for std::collections::BTreeSet<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        put_len(out, self.len());
        for x in self {
            x.pack(out);
        }
    }
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        let n = plausible::<T>(r.len()?, r)?;
        self.clear();
        for _ in 0..n {
            let mut x = T::default();
            x.unpack(r)?;
            self.insert(x);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn round_trip<T: Pack + Default + PartialEq + std::fmt::Debug>(v: &T) -> T {
        let mut b = Vec::new();
        v.pack(&mut b);
        let mut out = T::default();
        let mut r = Reader(&b);
        out.unpack(&mut r).expect("our own bytes");
        assert!(r.is_empty());
        out
    }

    proptest! {
        #[test]
        fn nested_round_trip(v in prop::collection::vec(prop::option::of((any::<u32>(), any::<bool>(), any::<i64>())), 0..6)) {
            prop_assert_eq!(round_trip(&v), v);
        }

        /// Decoding over a value already there gives the same as decoding over a default.
        #[test]
        fn in_place_over_any(a in prop::collection::vec(prop::option::of(prop::collection::vec(any::<u16>(), 0..4)), 0..5),
                             b in prop::collection::vec(prop::option::of(prop::collection::vec(any::<u16>(), 0..4)), 0..5)) {
            let mut bytes = Vec::new();
            a.pack(&mut bytes);
            let mut place = b;
            place.unpack(&mut Reader(&bytes)).unwrap();
            prop_assert_eq!(place, a);
        }

        /// Any bytes: an error or a value, never a panic or a huge allocation.
        #[test]
        fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut v: Vec<Option<(u32, Vec<u8>)>> = Vec::new();
            let _ = v.unpack(&mut Reader(&bytes));
            let mut m: BTreeMap<u16, BTreeSet<u8>> = BTreeMap::new();
            let _ = m.unpack(&mut Reader(&bytes));
        }

        /// Ordered maps and sets round-trip, decoded over any earlier contents.
        #[test]
        fn btree_round_trip(a in prop::collection::btree_map(any::<u32>(), prop::collection::btree_set(any::<u16>(), 0..3), 0..5),
                            b in prop::collection::btree_map(any::<u32>(), prop::collection::btree_set(any::<u16>(), 0..3), 0..5)) {
            prop_assert_eq!(round_trip(&a), a.clone());
            let mut bytes = Vec::new();
            a.pack(&mut bytes);
            let mut place = b;
            unpack_all(&mut place, &bytes).unwrap();
            prop_assert_eq!(place, a);
        }
    }

    #[derive(Default, PartialEq, Debug)]
    struct WithSkip {
        a: u32,
        b: Vec<u16>,
        not_state: u64,
    }
    pack_fields!(WithSkip { a, b } skip { not_state });

    /// A skipped field packs to nothing and unpacks to its default (also over a value there), as
    /// serde's derive decodes a `#[serde(skip)]` field.
    #[test]
    fn skipped_fields() {
        let v = WithSkip { a: 7, b: vec![1, 2], not_state: 9 };
        let mut bytes = Vec::new();
        v.pack(&mut bytes);
        assert_eq!(bytes.len(), 4 + 1 + 2 * 2);
        let mut place = WithSkip { a: 1, b: vec![5; 4], not_state: 3 };
        unpack_all(&mut place, &bytes).unwrap();
        assert_eq!(place, WithSkip { a: 7, b: vec![1, 2], not_state: 0 });
        assert!(unpack_all(&mut place, &bytes[..bytes.len() - 1]).is_none());
    }

    /// A length below 255 is one byte; from 255 on, a 255 byte and a `u32`. The long form of a
    /// length the short one holds is not a form `pack` writes, and is refused.
    #[test]
    fn lengths() {
        for n in [0usize, 1, 254, 255, 256, 1000] {
            let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut bytes = Vec::new();
            v.pack(&mut bytes);
            assert_eq!(bytes.len(), if n < 255 { 1 } else { 5 } + n, "length {n}");
            assert_eq!(round_trip(&v), v);
        }
        let mut long_small = vec![255u8];
        long_small.extend_from_slice(&3u32.to_le_bytes());
        long_small.extend_from_slice(&[1, 2, 3]);
        let mut v: Vec<u8> = Vec::new();
        assert!(unpack_all(&mut v, &long_small).is_none());
    }
}
