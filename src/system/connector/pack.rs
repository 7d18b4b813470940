//! The packed form (`collections::pack`) of the connector an engine runs and of what the
//! scheduler hands it each step (an in-flight batch keeps its `SchedOut`; its field list, and
//! `Scheduled`'s, is beside the type: `pack_fields!(clone ..)`).
//!
//! [`Connector`]: a one-byte tag, the variant's index in declaration order, then the boxed
//! state. The same variant decodes into its box (its vectors reused), another one into a new
//! box.

use super::{Connector, Scheduled};
use crate::system::collections::pack::{put, Pack, Reader};

impl Pack for Connector {
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            Connector::None => put(out, [0]),
            Connector::Offloading(s) => {
                put(out, [1]);
                s.pack(out);
            }
            Connector::SimpleCpu(s) => {
                put(out, [2]);
                s.pack(out);
            }
            Connector::Mooncake(s) => {
                put(out, [3]);
                s.pack(out);
            }
            Connector::Nixl(s) => {
                put(out, [4]);
                s.pack(out);
            }
            Connector::NixlDecode(s) => {
                put(out, [5]);
                s.pack(out);
            }
            Connector::NixlStore(s) => {
                put(out, [6]);
                s.pack(out);
            }
            Connector::NixlDecodeStore(s) => {
                put(out, [7]);
                s.pack(out);
            }
        }
    }

    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        // The same variant: decoded into its box; another: a new box.
        macro_rules! boxed {
            ($var:ident) => {
                match self {
                    Connector::$var(b) => b.unpack(r),
                    place => {
                        let mut b: Box<_> = Box::default();
                        Pack::unpack(&mut *b, r)?;
                        *place = Connector::$var(b);
                        Some(())
                    }
                }
            };
        }
        match r.tag()? {
            0 => {
                *self = Connector::None;
                Some(())
            }
            1 => boxed!(Offloading),
            2 => boxed!(SimpleCpu),
            3 => boxed!(Mooncake),
            4 => boxed!(Nixl),
            5 => boxed!(NixlDecode),
            6 => boxed!(NixlStore),
            7 => boxed!(NixlDecodeStore),
            _ => None,
        }
    }
}

/// A decoder's starting value (every field is then decoded).
impl Default for Scheduled {
    fn default() -> Self {
        Scheduled {
            req: 0,
            start: 0,
            tokens: 0,
            blocks: Vec::new(),
            full_table: false,
            samples: false,
            resumed: false,
            negative: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::collections::pack::unpack_all;

    fn all() -> Vec<Connector> {
        let rules = crate::system::rules::resolve("vllm-0.33", None).unwrap();
        let cfg = crate::system::config::OffloadConfig {
            host_chunks: 2,
            blocks_per_chunk: 1,
            offload_prompt_only: true,
            sync_load_budget_tokens: 0,
            eviction_policy: Default::default(),
        };
        let o = super::super::OffloadingState::new(2, &cfg, &rules);
        let s = super::super::SimpleCpuState::new(2, 3, 0);
        let n = super::super::NixlState::new(3);
        let d = super::super::NixlConsumer::new(2);
        vec![
            Connector::None,
            Connector::Offloading(Box::new(o)),
            Connector::SimpleCpu(Box::new(s)),
            Connector::Nixl(Box::new(n)),
            Connector::NixlDecode(Box::new(d)),
        ]
    }

    /// Every variant round-trips, into a fresh connector and in place over each kind; a
    /// truncated or longer input is refused.
    #[test]
    fn round_trip_in_place_over_each_kind() {
        for c in all() {
            let mut bytes = Vec::new();
            c.pack(&mut bytes);
            let mut fresh = Connector::None;
            unpack_all(&mut fresh, &bytes).expect("our own bytes");
            assert_eq!(fresh, c);
            for mut place in all() {
                unpack_all(&mut place, &bytes).expect("our own bytes");
                assert_eq!(place, c);
            }
            assert!(unpack_all(&mut Connector::None, &bytes[..bytes.len() - 1]).is_none());
            bytes.push(0);
            assert!(unpack_all(&mut Connector::None, &bytes).is_none());
        }
    }
}
