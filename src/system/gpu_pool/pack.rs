//! The pool's packed form (`collections::pack`): its fields in order (listed once, beside the
//! type: `pack_fields!(clone ..)`), the block records as one length and their bytes
//! (`slots.rs`), replay's cached map (empty in the checker) and change log (off) as their
//! collections pack them.

use super::{GpuPool, Medium, Slots, NIL};
use crate::system::collections::pack::pack_unit_enum;

pack_unit_enum!(Medium { Gpu, Cpu });

/// A decoder's starting value (every field is then decoded): no blocks.
impl Default for GpuPool {
    fn default() -> Self {
        GpuPool {
            medium: Medium::Gpu,
            slots: Slots::default(),
            head: NIL,
            tail: NIL,
            num_free: 0,
            cached: Default::default(),
            log: Default::default(),
        }
    }
}
