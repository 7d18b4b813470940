//! Copying a record with one `memcpy` when nothing in it is on the heap.
//!
//! The checker's per-request records (`OffloadingReq`: a mirror table, a position map, bit
//! sets, key sets, all [`InlineVec`](super::inline_vec::InlineVec)s and friends) keep their few
//! items inline. While every container of a record is inline, the record owns no heap memory:
//! a bitwise copy of it is a valid, equal record, and overwriting one drops nothing. The search
//! copies a parent engine into a reused one for every successor (`clone_fields`), so such
//! records (`clone_fields!(bitwise ..)`, whose fast path is [`copy_whole`]) are copied whole
//! instead of container by container, and an `OptVec` slot that holds no record yet takes one
//! without a fresh clone. A record with a spilled container falls back to the field-by-field
//! copy.

/// A value that says when it owns no heap memory.
///
/// # Safety
/// When `inline()` is true, the value owns no heap memory and has no drop side effect: a
/// bitwise copy is a valid value equal to it, and overwriting it without dropping leaks
/// nothing. `false` is always safe (the caller then clones field by field).
pub unsafe trait Bitwise {
    fn inline(&self) -> bool;
}

/// `Bitwise` for plain `Copy` types (always inline).
macro_rules! bitwise_copy {
    ($($t:ty),*) => {$(
        // SAFETY: plain `Copy` data owns no heap memory.
        unsafe impl $crate::system::collections::bitwise::Bitwise for $t {
            #[inline(always)]
            fn inline(&self) -> bool {
                true
            }
        }
    )*};
}
pub(crate) use bitwise_copy;
bitwise_copy!(
    u8,
    u16,
    u32,
    u64,
    i8,
    i16,
    i32,
    i64,
    bool,
    crate::system::types::BlockHash,
    crate::system::types::ContentTag
);

// SAFETY: inline iff its value is (None owns nothing).
unsafe impl<T: Bitwise> Bitwise for Option<T> {
    #[inline(always)]
    fn inline(&self) -> bool {
        self.as_ref().is_none_or(Bitwise::inline)
    }
}

// SAFETY: inline iff both parts are.
unsafe impl<A: Bitwise, B: Bitwise> Bitwise for (A, B) {
    #[inline(always)]
    fn inline(&self) -> bool {
        self.0.inline() && self.1.inline()
    }
}

// SAFETY: a heap vector is never copied bitwise.
unsafe impl<T> Bitwise for Vec<T> {
    #[inline(always)]
    fn inline(&self) -> bool {
        false
    }
}

// SAFETY: `SideVal` of `Copy` data is that data.
unsafe impl<T: Copy> Bitwise for super::side::SideVal<T> {
    #[inline(always)]
    fn inline(&self) -> bool {
        true
    }
}

/// `*dst = src.clone()` by one `memcpy` when both own no heap memory (true), else nothing
/// done (false: the caller copies field by field). `clone_fields!(bitwise ..)`'s fast path.
#[inline(always)]
pub fn copy_whole<T: Bitwise>(dst: &mut T, src: &T) -> bool {
    if !(dst.inline() && src.inline()) {
        return false;
    }
    // SAFETY: both values own no heap memory and have no drop side effect (`Bitwise`), so the
    // target drops nothing by being overwritten and the copy is a valid equal value.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, 1) };
    true
}

/// `dst.clone_from(src)` for vectors of [`Bitwise`] items: one `memcpy` of the items when the
/// lengths match and every item on both sides is inline, item by item otherwise (a target item
/// absent from an `Option` slot is cloned afresh).
#[inline]
pub fn clone_vec_from<T: Clone + Bitwise>(dst: &mut Vec<T>, src: &[T]) {
    if dst.len() == src.len() && dst.iter().all(Bitwise::inline) && src.iter().all(Bitwise::inline) {
        // SAFETY: same length, and every item on both sides owns no heap memory (`Bitwise`):
        // the targets drop nothing by being overwritten and the copies are valid equal items.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), src.len()) };
        return;
    }
    dst.truncate(src.len());
    let n = dst.len();
    dst.clone_from_slice(&src[..n]);
    dst.extend_from_slice(&src[n..]);
}

#[cfg(test)]
mod tests {
    use super::super::inline_vec::InlineVec;
    use super::*;
    use proptest::prelude::*;

    #[derive(PartialEq, Eq, Debug, Default)]
    struct Rec {
        a: u32,
        items: InlineVec<u32, 2>,
        rank: Option<u64>,
    }
    crate::system::collections::clone_fields!(bitwise Rec { a, items, rank });

    fn rec() -> impl Strategy<Value = Rec> {
        // Up to 4 items: inline (at most 2) or spilled.
        (any::<u32>(), prop::collection::vec(any::<u32>(), 0..5), any::<Option<u64>>()).prop_map(|(a, v, rank)| Rec {
            a,
            items: InlineVec::from_slice(&v),
            rank,
        })
    }

    proptest! {
        /// Over any target (inline or spilled), a copy equals its source and stays usable.
        #[test]
        fn record_copies_equal(src in rec(), dst in rec()) {
            let both = dst.inline() && src.inline();
            let mut d = dst;
            d.clone_from(&src);
            prop_assert_eq!(&d, &src);
            // The whole-record copy leaves the target inline.
            prop_assert!(!both || d.inline());
            d.items.push(9);
            prop_assert_eq!(d.items.len(), src.items.len() + 1);
        }

        /// Vectors of optional records, of any lengths: equal after the copy.
        #[test]
        fn vectors_copy_equal(src in prop::collection::vec(prop::option::of(rec()), 0..4),
                              dst in prop::collection::vec(prop::option::of(rec()), 0..4)) {
            let mut d = dst;
            clone_vec_from(&mut d, &src);
            prop_assert_eq!(d, src);
        }
    }
}
