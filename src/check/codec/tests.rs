//! The codec against bincode 1 (fixed-width): the same bytes written, the same values read,
//! and no panic on any input.

use super::{decode, decode_in_place, encode};
use bincode::Options;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

fn bincode_opts() -> impl Options {
    bincode::DefaultOptions::new().with_fixint_encoding()
}

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
enum Kind {
    Unit,
    New(u16),
    Tuple(u8, i64),
    Struct { a: Option<u32>, b: Vec<bool> },
}

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
struct Newtype(u64);

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
struct Unit;

#[derive(Serialize, Deserialize, PartialEq, Debug, Clone)]
struct All {
    small: (u8, i8, u16, i16),
    words: (u32, i32, u64, i64, u128, i128),
    float: (f32, f64),
    flag: bool,
    ch: char,
    text: String,
    opt: Option<Box<All>>,
    list: Vec<Kind>,
    map: BTreeMap<u32, Vec<u8>>,
    nt: Newtype,
    unit: Unit,
    empty: (),
    inline: smallvec::SmallVec<[u32; 2]>,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Unit),
        any::<u16>().prop_map(Kind::New),
        (any::<u8>(), any::<i64>()).prop_map(|(a, b)| Kind::Tuple(a, b)),
        (any::<Option<u32>>(), prop::collection::vec(any::<bool>(), 0..4)).prop_map(|(a, b)| Kind::Struct { a, b }),
    ]
}

fn leaf() -> impl Strategy<Value = All> {
    (
        (any::<u8>(), any::<i8>(), any::<u16>(), any::<i16>()),
        (any::<u32>(), any::<i32>(), any::<u64>(), any::<i64>(), any::<u128>(), any::<i128>()),
        (any::<u32>(), any::<u64>(), any::<bool>(), any::<char>(), ".{0,6}"),
        prop::collection::vec(kind(), 0..5),
        prop::collection::btree_map(any::<u32>(), prop::collection::vec(any::<u8>(), 0..3), 0..3),
        (any::<u64>(), prop::collection::vec(any::<u32>(), 0..4)),
    )
        .prop_map(|(small, words, (f, g, flag, ch, text), list, map, (nt, inline))| All {
            small,
            words,
            // Bits, so that NaN payloads round-trip and compare by bits below.
            float: (f32::from_bits(f), f64::from_bits(g)),
            flag,
            ch,
            text,
            opt: None,
            list,
            map,
            nt: Newtype(nt),
            unit: Unit,
            empty: (),
            inline: inline.into_iter().collect(),
        })
}

fn all() -> impl Strategy<Value = All> {
    (leaf(), prop::option::of(leaf())).prop_map(|(mut a, b)| {
        a.opt = b.map(Box::new);
        a
    })
}

/// Floats compared by bits (NaN is not equal to itself).
fn same(a: &All, b: &All) -> bool {
    let bits = |x: &All| (x.float.0.to_bits(), x.float.1.to_bits());
    let strip = |x: &All| {
        let mut y = x.clone();
        y.float = (0.0, 0.0);
        if let Some(o) = &mut y.opt {
            o.float = (0.0, 0.0);
        }
        y
    };
    bits(a) == bits(b) && a.opt.as_ref().map(|o| bits(o)) == b.opt.as_ref().map(|o| bits(o)) && strip(a) == strip(b)
}

proptest! {
    #[test]
    fn writes_bincodes_bytes_and_reads_them_back(v in all(), w in all()) {
        let mut ours = vec![7u8];
        encode(&v, &mut ours).unwrap();
        let theirs = bincode_opts().serialize(&v).unwrap();
        prop_assert_eq!(&ours[1..], &theirs[..], "appended after what the buffer held");
        let back: All = decode(&theirs).unwrap();
        prop_assert!(same(&back, &v));
        // In place over another value: the same as decoded whole.
        let mut place = w.clone();
        decode_in_place(&theirs, &mut place).unwrap();
        prop_assert!(same(&place, &v));
    }

    #[test]
    fn any_bytes_read_as_bincode_reads_them_and_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..200),
        v in all(),
        cut in 0usize..400,
        flip in any::<(usize, u8)>(),
    ) {
        // Random bytes, and a real encoding truncated or with one byte changed.
        let mut real = bincode_opts().serialize(&v).unwrap();
        let truncated = real[..cut.min(real.len())].to_vec();
        let i = flip.0 % real.len();
        real[i] ^= flip.1 | 1;
        for b in [&bytes, &truncated, &real] {
            let ours = decode::<All>(b);
            let theirs: Result<All, _> = bincode_opts().deserialize(b);
            match (ours, theirs) {
                (Ok(a), Ok(t)) => prop_assert!(same(&a, &t)),
                (Err(_), Err(_)) => {}
                (a, t) => prop_assert!(false, "ours {:?}, bincode's {:?}", a.is_ok(), t.is_ok()),
            }
        }
    }
}

#[test]
fn errors_name_what_is_wrong() {
    assert!(decode::<u32>(&[1, 2]).unwrap_err().to_string().contains("ends early"));
    assert!(decode::<bool>(&[2]).unwrap_err().to_string().contains("not 0 or 1"));
    assert!(decode::<u8>(&[1, 2]).unwrap_err().to_string().contains("remain"));
    // A sequence of unknown length cannot be written (bincode refuses it too).
    struct Unsized;
    impl Serialize for Unsized {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            s.serialize_seq(None)?.end()
        }
    }
    assert!(encode(&Unsized, &mut Vec::new()).is_err());
}
