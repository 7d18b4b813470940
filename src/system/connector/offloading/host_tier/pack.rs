//! The host tier's packed form (`collections::pack`): its part of the search frontier's bytes.

use super::{HostEntry, HostTier, ReqAccess};
use crate::system::collections::pack::pack_fields;
use crate::system::rules::HostLru;

pack_fields!(HostEntry { ref_cnt, slot, rank, content });
pack_fields!(ReqAccess { rank, seen, finished, inserted, reused, store_missed });
pack_fields!(HostTier {
    capacity,
    num_allocated,
    free_list,
    entries,
    evictable,
    next_rank,
    num_evictable,
    num_write_pending,
    policy,
    evict_mru,
    order,
    arc,
    log
});

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
