//! The engine's packed form (`collections::pack`): the checker's frontier format. The search
//! keeps each frontier state as the bytes [`Pack::pack`] writes for its engine, keys it by
//! their fingerprint, and [`Pack::unpack`]s them into the engine its thread reuses when it
//! expands the state (the checker's hooks, src/check/hooks.rs).
//!
//! Every field in declaration order, each as its type packs it (next to the type, or in a
//! `pack.rs` beside it). The engine's field list (and its batch's) is beside its definition
//! (`pack_fields!(clone ..)`: one list for its field-wise `Clone` and its `Pack`); this file
//! keeps the decoders' starting values. What is not state packs to nothing: the trace-replay side data
//! (`Side`) decodes as off, and the step memo's [`Stamp`](crate::system::collections::side::Stamp)
//! (`#[serde(skip)]`) as unstamped, as serde's derive decodes a skipped field; the search then
//! stamps the decoded engine afresh.
//!
//! [`Pack::pack`]: crate::system::collections::pack::Pack::pack
//! [`Pack::unpack`]: crate::system::collections::pack::Pack::unpack

use super::{Batch, Engine};
use crate::system::connector::Connector;
use crate::system::gpu_pool::GpuPool;

/// Decoders' starting values (every field is then decoded).
impl Default for Batch {
    fn default() -> Self {
        Batch { out: Default::default(), wout: Default::default() }
    }
}
impl Default for Engine {
    fn default() -> Self {
        Engine {
            pool: GpuPool::default(),
            reqs: Vec::new(),
            running: Vec::new(),
            waiting: Vec::new(),
            kv_holding: Vec::new(),
            finished_since: Vec::new(),
            finished_recving: Vec::new(),
            failed_recving: Vec::new(),
            conn: Connector::None,
            ghost: Default::default(),
            batches: Vec::new(),
            sched_seq: 0,
            processed_seq: 0,
            deferred_frees: Vec::new(),
            streaming_waiting: 0,
            aux: None,
            reads: Default::default(),
            pd: None,
            stamp: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::collections::pack::{unpack_all, Pack, Reader};
    use proptest::prelude::*;

    /// A decoder's starting engine round-trips (engines reached by a model's steps round-trip
    /// through the search's hooks: the tests in src/check/hooks/tests.rs).
    #[test]
    fn default_round_trips() {
        let mut bytes = Vec::new();
        Engine::default().pack(&mut bytes);
        let mut e = Engine::default();
        e.streaming_waiting = 3;
        unpack_all(&mut e, &bytes).expect("our own bytes");
        assert_eq!(e, Engine::default());
    }

    proptest! {
        /// Any bytes: `None` or an engine, never a panic or a huge allocation.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let mut e = Engine::default();
            let _ = e.unpack(&mut Reader(&bytes));
        }
    }
}
