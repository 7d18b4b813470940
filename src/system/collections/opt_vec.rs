//! [`OptVec`]: a `Vec<Option<T>>` (per-request records that exist once a request arrives)
//! whose `deserialize_in_place` decodes a `Some` into the record already there. Serde has no
//! in-place form for `Option`, so the derive decoded every `Some` afresh: a new record, its
//! vectors allocated, the old one dropped, for every request of every frontier state the
//! search decodes (src/check/hooks.rs). Equality, hash, encoding and `Debug` are the inner
//! vector's, so fingerprints, the encoded frontier and every count stay as they were.

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::ops::{Deref, DerefMut};

#[derive(PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct OptVec<T>(pub Vec<Option<T>>);

impl<T> Deref for OptVec<T> {
    type Target = Vec<Option<T>>;
    #[inline]
    fn deref(&self) -> &Vec<Option<T>> {
        &self.0
    }
}

impl<T> DerefMut for OptVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<Option<T>> {
        &mut self.0
    }
}

impl<T: fmt::Debug> fmt::Debug for OptVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Clone + super::bitwise::Bitwise> Clone for OptVec<T> {
    #[inline]
    fn clone(&self) -> Self {
        OptVec(self.0.clone())
    }
    /// `Vec::clone_from`: a `Some` over a `Some` is cloned into it (see `clone_fields`); where
    /// every record on both sides is inline, one copy of them all (`bitwise`).
    #[inline]
    fn clone_from(&mut self, src: &Self) {
        super::bitwise::clone_vec_from(&mut self.0, &src.0);
    }
}

/// Decodes into one `Option<T>`: a `Some` over a `Some` in place.
struct OptInto<'a, T>(&'a mut Option<T>);

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for OptInto<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for OptInto<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an option")
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        *self.0 = None;
        Ok(())
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        *self.0 = None;
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        match self.0 {
            Some(x) => T::deserialize_in_place(d, x),
            place => {
                *place = Some(T::deserialize(d)?);
                Ok(())
            }
        }
    }
}

/// Decodes a sequence into the vector: element by element over those already there, then
/// pushed; the surplus dropped.
struct SeqInto<'a, T>(&'a mut Vec<Option<T>>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqInto<'_, T> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let v = self.0;
        let mut n = 0;
        while n < v.len() {
            if seq.next_element_seed(OptInto(&mut v[n]))?.is_none() {
                v.truncate(n);
                return Ok(());
            }
            n += 1;
        }
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OptVec<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::deserialize(d).map(OptVec)
    }

    fn deserialize_in_place<D: Deserializer<'de>>(d: D, place: &mut Self) -> Result<(), D::Error> {
        d.deserialize_seq(SeqInto(&mut place.0))
    }
}

/// Packed (`super::pack`): the vector's; a `Some` decoded into the record there.
impl<T: super::pack::Pack + Default> super::pack::Pack for OptVec<T> {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bincode::Options;

    /// In place over every shape of target, the result is the fresh decode's (bincode and
    /// JSON), and the encoding is the plain vector's.
    #[test]
    fn decodes_in_place_as_fresh() {
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        let vals: Vec<Vec<Option<Vec<u32>>>> = vec![
            vec![],
            vec![None],
            vec![Some(vec![1, 2]), None, Some(vec![])],
            vec![Some(vec![7]), Some(vec![8, 9, 10]), None, None],
        ];
        for v in &vals {
            let o = OptVec(v.clone());
            let bytes = codec.serialize(&o).unwrap();
            assert_eq!(bytes, codec.serialize(v).unwrap());
            assert_eq!(serde_json::to_string(&o).unwrap(), serde_json::to_string(v).unwrap());
            assert_eq!(codec.deserialize::<OptVec<Vec<u32>>>(&bytes).unwrap(), o);
            for p in &vals {
                let mut place = OptVec(p.clone());
                let mut d = bincode::Deserializer::from_slice(&bytes, codec);
                OptVec::deserialize_in_place(&mut d, &mut place).unwrap();
                assert_eq!(place, o);
                let json = serde_json::to_string(v).unwrap();
                let mut place = OptVec(p.clone());
                OptVec::deserialize_in_place(&mut serde_json::Deserializer::from_str(&json), &mut place).unwrap();
                assert_eq!(place, o);
            }
        }
    }
}
