//! [`Connector`]'s `Deserialize`, written out for `deserialize_in_place`: the search decodes a
//! frontier state into the engine it reuses (src/check/hooks.rs), and a connector of the same
//! kind is decoded into its box (its vectors reused) instead of a new box. The format is the
//! derive's: an enum of one unit variant and newtype variants over boxes, in declaration
//! order (variant index or name).

use super::Connector;
use crate::system::collections::in_place::{Into, VariantOf};
use serde::de::{Deserializer, EnumAccess, VariantAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// The variants in declaration order (the index the format writes).
const VARIANTS: &[&str] =
    &["None", "Offloading", "SimpleCpu", "Mooncake", "Nixl", "NixlDecode", "NixlStore", "NixlDecodeStore"];

struct InPlace<'a>(&'a mut Connector);

impl<'de> Visitor<'de> for InPlace<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("enum Connector")
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        let (i, v) = data.variant_seed(VariantOf(VARIANTS))?;
        // The same variant: decoded into its box; another: a new box.
        macro_rules! boxed {
            ($var:ident) => {
                match self.0 {
                    Connector::$var(b) => v.newtype_variant_seed(Into(&mut **b)),
                    place => {
                        *place = Connector::$var(v.newtype_variant()?);
                        Ok(())
                    }
                }
            };
        }
        match i {
            0 => {
                v.unit_variant()?;
                *self.0 = Connector::None;
                Ok(())
            }
            1 => boxed!(Offloading),
            2 => boxed!(SimpleCpu),
            3 => boxed!(Mooncake),
            4 => boxed!(Nixl),
            5 => boxed!(NixlDecode),
            6 => boxed!(NixlStore),
            _ => boxed!(NixlDecodeStore),
        }
    }
}

impl<'de> Deserialize<'de> for Connector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut c = Connector::None;
        Self::deserialize_in_place(d, &mut c)?;
        Ok(c)
    }

    fn deserialize_in_place<D: Deserializer<'de>>(d: D, place: &mut Self) -> Result<(), D::Error> {
        d.deserialize_enum("Connector", VARIANTS, InPlace(place))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::connector::OffloadingState;
    use bincode::Options;

    fn all() -> Vec<Connector> {
        let rules = crate::system::rules::resolve("vllm-0.33", None).unwrap();
        let cfg = crate::system::config::OffloadConfig {
            host_chunks: 2,
            blocks_per_chunk: 1,
            offload_prompt_only: true,
            sync_load_budget_tokens: 0,
            eviction_policy: Default::default(),
        };
        let o = OffloadingState::new(2, &cfg, &rules);
        let s = crate::system::connector::SimpleCpuState::new(2, 3, 0);
        vec![Connector::None, Connector::Offloading(Box::new(o)), Connector::SimpleCpu(Box::new(s))]
    }

    /// The written-out impl reads what the derive's `Serialize` writes (bincode by index,
    /// JSON by name), into a fresh connector and in place over each kind.
    #[test]
    fn reads_what_serialize_writes() {
        let codec = bincode::DefaultOptions::new();
        for (i, c) in all().into_iter().enumerate() {
            let json = serde_json::to_string(&c).unwrap();
            assert!(json.contains(VARIANTS[i]), "{json} names variant {i}");
            assert_eq!(serde_json::from_str::<Connector>(&json).unwrap(), c);
            let bytes = codec.serialize(&c).unwrap();
            assert_eq!(codec.deserialize::<Connector>(&bytes).unwrap(), c);
            for mut place in all() {
                let mut d = bincode::Deserializer::from_slice(&bytes, codec);
                Connector::deserialize_in_place(&mut d, &mut place).unwrap();
                assert_eq!(place, c);
            }
        }
    }
}
