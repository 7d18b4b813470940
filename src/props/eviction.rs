//! `eviction-order`: the host tier's victim is the one its policy names, checked inside
//! transitions against a reference order kept as ghost state beside the implementation
//! (OffloadingConnector: `system/connector/offloading/reference_order.rs`, per LRU policy; SimpleCPU: the FIFO-by-release
//! list in `connector/simple_cpu/`). Both raise `Breach::EvictionOrder`.

use crate::system::ghost::Breach;
use crate::system::{Engine, System};

/// `eviction-order` for any connector.
pub fn eviction_order(_m: &System, e: &Engine) -> bool {
    !e.ghost.has(Breach::EvictionOrder)
}

/// SimpleCPU's part: every block the CPU pool hands out (evicting its hash, if any) is the
/// head of the reference FIFO-by-release list the connector keeps as ghost state (released
/// hashed blocks join its tail in transfer order, head first; unhashed ones its head; a
/// pinned block leaves it; with #62444's refresh a GPU-side hit moves the block to the tail).
pub fn simple_cpu(m: &System, e: &Engine) -> bool {
    e.conn.simple_cpu().is_none() || eviction_order(m, e)
}
