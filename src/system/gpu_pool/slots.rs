//! The G1 pool's per-block state as one vector of plain 32-byte records (docs/benchmarks.md,
//! Round 24): a copy of the pool is one `memcpy`, and the packed form (the search frontier's)
//! and serde's non-human-readable forms write and read the records as one run of bytes (in a
//! human-readable format, such as JSON, one record after another). What a block holds, its
//! hash, its reference count, its free-queue links, prime-rl's load mark and, in the checker's
//! form of the pool, its place in the cached map are fields of one record instead of six
//! vectors of their own.

use crate::system::types::{BadKind, BlockHash, ContentTag};
use serde::de::{self, Visitor};
use std::fmt;

/// One block's record. Every field is an integer and the layout has no padding (checked below),
/// so every byte is initialised and the records can be written and read as bytes.
#[repr(C)]
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Slot {
    /// The block's hash (`block_hash`), when `flags` has [`HAS_HASH`]; 0 otherwise.
    pub hash: u64,
    /// `ContentTag::Kv`'s hash (0 for other contents).
    kv: u64,
    /// Free-queue links (`NIL` at an end, `OUT` outside the queue).
    pub prev: u32,
    pub next: u32,
    /// `ContentTag::Kv`'s length, or `ContentTag::Bad`'s kind (0 for `Empty`).
    kv_len: u16,
    pub ref_cnt: u16,
    /// The checker's form of the pool: the block's place among the cached map's blocks under
    /// `hash` (0 for the first inserted); always 0 in replay's form (its map keeps the order).
    pub rank: u16,
    /// 0 `Empty`, 1 `Kv`, 2 `Bad`.
    kind: u8,
    /// [`HAS_HASH`], [`LOADED`].
    pub flags: u8,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 32 && std::mem::align_of::<Slot>() == 8);

/// The block carries `hash` (and so is in the cached map).
pub(super) const HAS_HASH: u8 = 1;
/// prime-rl's scheduler-side mark: an external load filled the block.
pub(super) const LOADED: u8 = 2;

impl Slot {
    /// An empty block with both free-queue links `link`.
    pub fn unlinked(link: u32) -> Self {
        Slot { prev: link, next: link, ..Slot::default() }
    }

    #[inline(always)]
    pub fn hash(&self) -> Option<BlockHash> {
        (self.flags & HAS_HASH != 0).then_some(BlockHash(self.hash))
    }

    #[inline(always)]
    pub fn set_hash(&mut self, h: Option<BlockHash>) {
        match h {
            Some(h) => {
                self.hash = h.0;
                self.flags |= HAS_HASH;
            }
            None => {
                self.hash = 0;
                self.flags &= !HAS_HASH;
            }
        }
    }

    #[inline(always)]
    pub fn content(&self) -> ContentTag {
        match self.kind {
            0 => ContentTag::Empty,
            1 => ContentTag::Kv { hash: self.kv, len: self.kv_len },
            _ => ContentTag::Bad(match self.kv_len {
                0 => BadKind::Tainted,
                1 => BadKind::LoadFailed,
                _ => BadKind::Torn,
            }),
        }
    }

    #[inline(always)]
    pub fn set_content(&mut self, t: ContentTag) {
        (self.kind, self.kv, self.kv_len) = match t {
            ContentTag::Empty => (0, 0, 0),
            ContentTag::Kv { hash, len } => (1, hash, len),
            ContentTag::Bad(k) => (
                2,
                0,
                match k {
                    BadKind::Tainted => 0,
                    BadKind::LoadFailed => 1,
                    BadKind::Torn => 2,
                },
            ),
        };
    }
}

/// The records, serialized as one byte string where the format is not human-readable.
#[derive(PartialEq, Eq, Hash, Debug, Default)]
pub(super) struct Slots(pub Vec<Slot>);

impl Clone for Slots {
    fn clone(&self) -> Self {
        Slots(self.0.clone())
    }
    /// Copies into the target's buffer (the derived `clone_from` allocates a fresh one): the
    /// checker writes every successor into a reused engine (`System::apply_into`).
    fn clone_from(&mut self, src: &Self) {
        self.0.clone_from(&src.0)
    }
}

impl Slots {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `Slot` is `repr(C)` with integer fields only and no padding (the assertion
        // above), so its memory is initialised bytes; the length covers exactly the records.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), std::mem::size_of_val(self.0.as_slice())) }
    }

    /// Overwrite the records with `b` (a whole number of records), reusing the buffer.
    fn set_bytes<E: de::Error>(&mut self, b: &[u8]) -> Result<(), E> {
        if !b.len().is_multiple_of(std::mem::size_of::<Slot>()) {
            return Err(E::invalid_length(b.len(), &"a whole number of 32-byte block records"));
        }
        self.copy_from(b);
        Ok(())
    }

    /// Overwrite the records with `b`, whose length is a whole number of records.
    #[inline]
    fn copy_from(&mut self, b: &[u8]) {
        let size = std::mem::size_of::<Slot>();
        debug_assert!(b.len().is_multiple_of(size));
        let n = b.len() / size;
        self.0.clear();
        self.0.reserve(n);
        // SAFETY: the buffer has room for `n` records, `b` fills exactly those bytes before the
        // length covers them, any byte pattern is a valid `Slot` (integers only), and the source
        // and the vector do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), self.0.as_mut_ptr().cast::<u8>(), b.len());
            self.0.set_len(n);
        }
    }
}

/// Packed (`collections::pack`): the number of records, then their bytes (the byte string of
/// the serde form, in the machine's byte order: the frontier never leaves the process), decoded
/// into the vector's buffer by one copy.
impl crate::system::collections::pack::Pack for Slots {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        crate::system::collections::pack::put_len(out, self.0.len());
        out.extend_from_slice(self.bytes());
    }
    #[inline]
    fn unpack(&mut self, r: &mut crate::system::collections::pack::Reader<'_>) -> Option<()> {
        let size = std::mem::size_of::<Slot>() * r.len()?;
        let (b, rest) = r.0.split_at_checked(size)?;
        r.0 = rest;
        self.copy_from(b);
        Some(())
    }
}

impl serde::Serialize for Slots {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            self.0.serialize(s)
        } else {
            s.serialize_bytes(self.bytes())
        }
    }
}

/// Reads either form `Serialize` writes: the byte string (a whole number of records) or the
/// records one after another.
struct SlotsVisitor;

impl<'de> Visitor<'de> for SlotsVisitor {
    type Value = Slots;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the G1 pool's block records")
    }
    fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Slots, E> {
        let mut s = Slots::default();
        s.set_bytes(b)?;
        Ok(s)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Slots, A::Error> {
        let mut s = Slots::default();
        while let Some(x) = seq.next_element()? {
            s.0.push(x);
        }
        Ok(s)
    }
}

impl<'de> serde::Deserialize<'de> for Slots {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            d.deserialize_seq(SlotsVisitor)
        } else {
            d.deserialize_bytes(SlotsVisitor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tag() -> impl Strategy<Value = ContentTag> {
        prop_oneof![
            Just(ContentTag::Empty),
            (any::<u64>(), any::<u16>()).prop_map(|(hash, len)| ContentTag::Kv { hash, len }),
            prop_oneof![Just(BadKind::Tainted), Just(BadKind::LoadFailed), Just(BadKind::Torn)]
                .prop_map(ContentTag::Bad),
        ]
    }

    fn slot() -> impl Strategy<Value = Slot> {
        (any::<Option<u64>>(), tag(), any::<(u32, u32, u16, u16, bool)>()).prop_map(
            |(h, t, (prev, next, rc, rank, l))| {
                let mut s = Slot { prev, next, ref_cnt: rc, rank, ..Slot::default() };
                s.set_hash(h.map(BlockHash));
                s.set_content(t);
                if l {
                    s.flags |= LOADED;
                }
                s
            },
        )
    }

    proptest! {
        /// A content and a hash read back as written.
        #[test]
        fn fields_round_trip(h in any::<Option<u64>>(), t in tag()) {
            let mut s = Slot::default();
            s.set_content(t);
            s.set_hash(h.map(BlockHash));
            prop_assert_eq!(s.content(), t);
            prop_assert_eq!(s.hash(), h.map(BlockHash));
        }

        /// The records round-trip through bincode's fixed-width format as one byte string, and
        /// through JSON one record at a time.
        #[test]
        fn records_round_trip(a in prop::collection::vec(slot(), 0..8)) {
            use bincode::Options;
            let a = Slots(a);
            let opts = bincode::DefaultOptions::new().with_fixint_encoding();
            let bytes = opts.serialize(&a).unwrap();
            prop_assert_eq!(bytes.len(), 8 + 32 * a.0.len());
            prop_assert_eq!(&bytes[8..], a.bytes());
            prop_assert_eq!(opts.deserialize::<Slots>(&bytes).unwrap(), a.clone());
            let json = serde_json::to_string(&a).unwrap();
            prop_assert!(a.0.is_empty() || json.starts_with("[{"), "JSON: {}", json);
            prop_assert_eq!(serde_json::from_str::<Slots>(&json).unwrap(), a);
        }
    }

    /// The serde forms of one record, written out: JSON's record by record with the field
    /// names, bincode's one byte string (its length, then the record's 32 bytes); a byte string
    /// that is not a whole number of records is an error.
    #[test]
    fn serde_forms() {
        use bincode::Options;
        let mut s = Slot { prev: 1, next: 2, ref_cnt: 3, rank: 4, ..Slot::default() };
        s.set_hash(Some(BlockHash(5)));
        s.set_content(ContentTag::Kv { hash: 6, len: 7 });
        let a = Slots(vec![s]);
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"[{"hash":5,"kv":6,"prev":1,"next":2,"kv_len":7,"ref_cnt":3,"rank":4,"kind":1,"flags":1}]"#);
        assert_eq!(serde_json::from_str::<Slots>(&json).unwrap(), a);
        let opts = bincode::DefaultOptions::new().with_fixint_encoding();
        let bytes = opts.serialize(&a).unwrap();
        let mut want = vec![32, 0, 0, 0, 0, 0, 0, 0];
        want.extend(5u64.to_ne_bytes());
        want.extend(6u64.to_ne_bytes());
        want.extend(1u32.to_ne_bytes());
        want.extend(2u32.to_ne_bytes());
        want.extend(7u16.to_ne_bytes());
        want.extend(3u16.to_ne_bytes());
        want.extend(4u16.to_ne_bytes());
        want.extend([1, 1]);
        assert_eq!(bytes, want);
        assert_eq!(opts.deserialize::<Slots>(&bytes).unwrap(), a);
        let mut short = bytes.clone();
        short[0] = 31;
        short.pop();
        assert!(opts.deserialize::<Slots>(&short).is_err());
    }
}
