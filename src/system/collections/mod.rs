//! Fast collections for trace replay, behind small APIs: each stands in for a plain std type
//! (a `BTreeSet`, a `BTreeMap`, a sorted `Vec`) with the same order, equality and hash, so the
//! vLLM components read the same whichever representation runs and state counts do not move.
//! Nothing here knows a vLLM rule.

pub mod bit_set;
pub mod pos_map;
pub mod rank_queue;
pub mod side;
