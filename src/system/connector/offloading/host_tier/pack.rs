//! The host tier's packed form (`collections::pack`): its part of the search frontier's bytes.
//! The tier's and its records' field lists are beside their definitions (`pack_fields!`, one
//! list for each type's `Clone` and `Pack`); here, the decoders' starting values.

use super::{HostEntry, HostTier};
use crate::system::rules::HostLru;

/// A decoder's starting value (every field is then decoded).
impl Default for HostEntry {
    fn default() -> Self {
        HostEntry { ref_cnt: 0, slot: 0, rank: (0, 0), content: Default::default() }
    }
}

/// A decoder's starting value (every field is then decoded).
impl Default for HostTier {
    fn default() -> Self {
        HostTier::with_policy(0, HostLru::RequestRank, false)
    }
}
