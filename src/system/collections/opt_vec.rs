//! [`OptVec`]: a `Vec<Option<T>>` (per-request records that exist once a request arrives) whose
//! `clone_from` copies the records in one `memcpy` when the lengths match and every record on
//! both sides is inline (`bitwise::clone_vec_from`), record by record otherwise. Equality,
//! hash, the packed form, serde's forms and `Debug` are the inner vector's, so fingerprints,
//! the encoded frontier and every count stay as they would be with the plain vector.

use std::fmt;
use std::ops::{Deref, DerefMut};

#[derive(PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
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

    /// The serde forms are the plain vector's (bincode and JSON) and read back equal.
    #[test]
    fn serde_form_is_the_vectors() {
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
            assert_eq!(codec.deserialize::<OptVec<Vec<u32>>>(&bytes).unwrap(), o);
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, serde_json::to_string(v).unwrap());
            assert_eq!(serde_json::from_str::<OptVec<Vec<u32>>>(&json).unwrap(), o);
        }
        let o = OptVec(vals[2].clone());
        assert_eq!(serde_json::to_string(&o).unwrap(), "[[1,2],null,[]]");
        assert_eq!(
            codec.serialize(&OptVec(vec![None, Some(vec![5u32])])).unwrap(),
            [
                2, 0, 0, 0, 0, 0, 0, 0, // two records
                0, // None
                1, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, // Some([5])
            ]
        );
    }
}
