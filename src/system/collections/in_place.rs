//! Pieces for written-out `Deserialize` impls that decode in place (`deserialize_in_place`):
//! the checker's search decodes every frontier state into the engine it reuses
//! (src/check/hooks.rs), so a container there keeps its heap buffer instead of being built
//! anew and the old one dropped. Each reads exactly what serde's derive writes.

use serde::de::{self, DeserializeSeed, Deserializer, Unexpected, Visitor};
use serde::Deserialize;
use smallvec::{Array, SmallVec};
use std::fmt;

/// An enum's variant, read by index (bincode) or by name (JSON) against the enum's variant
/// names in declaration order: `data.variant_seed(VariantOf(NAMES))` gives its index.
pub(crate) struct VariantOf(pub(crate) &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for VariantOf {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for VariantOf {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a variant index below {} or one of {:?}", self.0.len(), self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<usize, E> {
        match usize::try_from(v) {
            Ok(i) if i < self.0.len() => Ok(i),
            _ => Err(E::invalid_value(Unexpected::Unsigned(v), &self)),
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        self.0.iter().position(|n| *n == v).ok_or_else(|| E::unknown_variant(v, self.0))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<usize, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(Unexpected::Bytes(v), &self)),
        }
    }
}

/// Deserializes into the `T` there, in place (a seed for a field or a newtype variant).
pub(crate) struct Into<'a, T>(pub(crate) &'a mut T);

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Into<'_, T> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        T::deserialize_in_place(d, self.0)
    }
}

/// A sequence (or a newtype over one) into the `SmallVec` there, its buffer kept.
pub(crate) struct Seq<'a, A: Array>(pub(crate) &'a mut SmallVec<A>);

impl<'de, A: Array> Visitor<'de> for Seq<'_, A>
where
    A::Item: Deserialize<'de>,
{
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence")
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<S: de::SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        self.0.clear();
        // A length from the input is only a hint: never reserve much on its word.
        self.0.reserve(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(x) = seq.next_element()? {
            self.0.push(x);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::side::KeyMap;
    use bincode::Options;

    /// A variant index past the enum's, or an unknown name, is an error (never a panic or a
    /// wrong variant), in place as whole.
    #[test]
    fn an_unknown_variant_is_an_error() {
        let codec = bincode::DefaultOptions::new().with_fixint_encoding();
        let mut bytes = codec.serialize(&KeyMap::<u32, u16>::default()).unwrap();
        bytes[..4].copy_from_slice(&2u32.to_le_bytes());
        assert!(codec.deserialize::<KeyMap<u32, u16>>(&bytes).is_err());
        let mut place = KeyMap::<u32, u16>::default();
        let mut d = bincode::Deserializer::from_slice(&bytes, codec);
        assert!(serde::Deserialize::deserialize_in_place(&mut d, &mut place).is_err());
        let err = serde_json::from_str::<KeyMap<u32, u16>>(r#"{"Vec":{}}"#).unwrap_err().to_string();
        assert!(err.contains("unknown variant `Vec`"), "{err}");
    }
}
