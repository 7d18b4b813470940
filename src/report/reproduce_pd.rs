//! `kvmc reproduce` for NixlConnector's P/D producer (`connector = "nixl"` without router
//! replay): the recorder runs vLLM's real NixlConnector scheduler side as the prefill instance
//! in host-buffer mode and reads for the decode instance (tests/conformance/vllm/nixlprod.py).
//! The counterexample's `consumer reads X` actions become `[[consumer_read]]` entries, read
//! before the recorder step they precede; a request that holds its blocks for the consumer
//! when the counterexample ends, unread, is read after its last step (the recorder would
//! otherwise read it at the earliest step, which may come before the story is over).

use crate::system::connector::Connector;
use crate::system::types::ReqId;
use crate::system::{Engine, Workload};
use std::fmt::Write as _;

/// The `[[consumer_read]]` entries: `reads` are (request, the step the read precedes) in
/// action order; `end` is the counterexample's last engine step and `last` its final state.
pub(super) fn consumer_reads(reads: &[(ReqId, u32)], last: &Engine, end: u32, wl: &Workload) -> String {
    let mut s = String::new();
    let held: Vec<ReqId> = match &last.conn {
        Connector::Nixl(n) => n.readable().filter(|r| !reads.iter().any(|(x, _)| x == r)).collect(),
        _ => Vec::new(),
    };
    let all = reads.iter().copied().chain(held.iter().map(|&r| (r, end + 1)));
    for (r, at) in all {
        let _ = writeln!(s, "\n[[consumer_read]]\nrequest = {:?}\nat_step = {at}", wl.requests[r as usize].name);
    }
    s
}

/// vLLM's KV-cache planner refuses a pool that cannot hold one request of `max_model_len`
/// tokens (`_check_enough_kv_cache_memory`), and its scheduler computes at most
/// `max_model_len - 1` tokens of a request: the GPU blocks the scenario needs, at least the
/// model's (the null block included).
pub(super) fn gpu_blocks(num_gpu_blocks: u32, max_model_len: u32, block_size: u32) -> u32 {
    num_gpu_blocks.max(max_model_len.div_ceil(block_size) + 1)
}
