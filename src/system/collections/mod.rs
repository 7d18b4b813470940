//! Fast collections for trace replay, behind small APIs: each stands in for a plain std type
//! (a `BTreeSet`, a `BTreeMap`, a sorted `Vec`) with the same order, equality and hash, so the
//! vLLM components read the same whichever representation runs and state counts do not move.
//! The checker's small maps, sets and vectors keep their entries inline ([`vec_map`],
//! [`inline_vec`]), so cloning, comparing and dropping a state allocates and frees little.
//! Nothing here knows a vLLM rule.

pub mod bit_set;
pub mod bitwise;
pub mod inline_vec;
pub mod opt_vec;
pub mod pack;
pub mod pos_map;
pub mod rank_queue;
pub mod rank_set;
pub mod side;
pub mod vec_map;

/// `impl Clone` for a struct, field by field, with a `clone_from` that reuses the target's
/// allocations (the derived `Clone` keeps the default `clone_from`, a fresh `clone()`). The
/// checker's search writes each successor into a reused engine (`System::apply_into`), so the
/// vectors of a state are copied, not allocated, for every successor it then drops. Both
/// methods destructure the struct without `..`: a field added later and not listed here is a
/// compile error, never a field silently left uncopied. A state type invokes it through
/// `pack_fields!(clone ..)` or `pack_fields!(clone_bitwise ..)` (`pack`), the one field list
/// for this and its `Pack`.
macro_rules! clone_fields {
    ($t:ident { $($f:ident),* $(,)? }) => {
        $crate::system::collections::clone_fields!(@impl plain $t { $($f),* });
    };
    // A record whose every field is `Bitwise` (`bitwise`): `clone_from` copies the whole record
    // in one `memcpy` when both records are inline, field by field otherwise, and the record is
    // `Bitwise` itself (inline iff every field is). It must have no `Drop` of its own.
    (bitwise $t:ident { $($f:ident),* $(,)? }) => {
        $crate::system::collections::clone_fields!(@impl bitwise $t { $($f),* });
        // SAFETY: every field is `Bitwise` (a field that is not fails to compile here), the
        // record is inline only when all of them are, and it has no `Drop` of its own.
        unsafe impl $crate::system::collections::bitwise::Bitwise for $t {
            #[inline]
            fn inline(&self) -> bool {
                let $t { $($f),* } = self;
                true $( && $crate::system::collections::bitwise::Bitwise::inline($f) )*
            }
        }
    };
    (@impl $mode:ident $t:ident { $($f:ident),* }) => {
        impl Clone for $t {
            #[inline]
            fn clone(&self) -> Self {
                let $t { $($f),* } = self;
                $t { $($f: Clone::clone($f)),* }
            }
            #[inline]
            fn clone_from(&mut self, src: &Self) {
                if $crate::system::collections::clone_fields!(@whole $mode self, src) {
                    return;
                }
                let $t { $($f),* } = self;
                $( Clone::clone_from($f, &src.$f); )*
            }
        }
    };
    (@whole plain $dst:expr, $src:expr) => {
        false
    };
    (@whole bitwise $dst:expr, $src:expr) => {
        $crate::system::collections::bitwise::copy_whole($dst, $src)
    };
}
pub(crate) use clone_fields;
