//! A conformance log's header line (docs/conformance-format.md, "Header"): the engine and
//! connector configuration the implementation ran, and the checks that refuse one kvmc cannot
//! replay (exit 2, the header's line).

use crate::error::{KvmcError, Result};
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct Header {
    pub format: u32,
    pub implementation: String,
    pub version: String,
    #[serde(default)]
    pub scenario: String,
    pub connector: String,
    pub async_scheduling: bool,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    pub max_model_len: u32,
    #[serde(default)]
    pub long_prefill_token_threshold: u32,
    pub load_failure_policy: String,
    #[serde(default)]
    pub host_chunks: u32,
    #[serde(default = "one")]
    pub blocks_per_chunk: u32,
    #[serde(default = "yes")]
    pub offload_prompt_only: bool,
    #[serde(default)]
    pub eviction_policy: String,
    #[serde(default)]
    pub sync_load_budget_tokens: u32,
    #[serde(default = "yes")]
    pub enable_prefix_caching: bool,
    /// `SchedulerConfig.scheduler_reserve_full_isl` (absent = true, vLLM's default).
    #[serde(default = "yes")]
    pub scheduler_reserve_full_isl: bool,
    /// SimpleCPU's `num_cpu_blocks` (its CPU `BlockPool`, null block 0 included).
    #[serde(default)]
    pub cpu_blocks: u32,
    /// SimpleCPU's `lazy_offload` (absent = eager).
    #[serde(default)]
    pub lazy_offload: bool,
    /// `cache_aware_admission_window` (vLLM 0.34+; absent = 0, off).
    #[serde(default)]
    pub cache_aware_admission_window: u32,
    /// `cache_aware_admission_threshold` (absent = vLLM's default 0.5).
    #[serde(default = "half")]
    pub cache_aware_admission_threshold: f64,
    /// MooncakeStoreConnector (`"connector": "mooncake"`): the pool's contents at start.
    #[serde(default)]
    pub mooncake: Option<MooncakeHeader>,
}

/// The `mooncake` object of a Mooncake log's header.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MooncakeHeader {
    /// Token sequences whose full blocks another instance put into the pool before step 1.
    #[serde(default)]
    pub preload: Vec<Vec<u32>>,
    /// `save_decode_cache` (absent: vLLM's default, off): decode steps save their full blocks.
    #[serde(default)]
    pub save_decode_cache: bool,
}

fn half() -> f64 {
    0.5
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

/// A header size beyond what kvmc allocates: the same limits as a model file's
/// (docs/models.md, "Limits"), so that a typo cannot abort the process for lack of memory.
/// Names the key and the largest accepted value. (`sync_load_budget_tokens`, which allocates
/// nothing, is taken as the implementation ran it.)
fn header_size_error(h: &Header) -> Option<String> {
    use crate::scope::limits;
    let checks: [(&str, u32, u32, &str); 5] = [
        ("block_size", h.block_size, 64, " (as in a model file)"),
        ("num_gpu_blocks", h.num_gpu_blocks, limits::GPU_BLOCKS, " (G1 is allocated per block)"),
        ("max_num_seqs", h.max_num_seqs, limits::MAX_NUM_SEQS, " (request ids are 16-bit)"),
        ("cpu_blocks", h.cpu_blocks, limits::CPU_BLOCKS, " (the CPU pool is allocated per block)"),
        ("host_chunks", h.host_chunks, limits::HOST_CHUNKS, " (the host tier is allocated per chunk)"),
    ];
    if let Some((k, v, max, why)) = checks.iter().find(|(_, v, max, _)| v > max) {
        return Some(format!("{k} must be at most {max}{why}, got {v}"));
    }
    // A chunk's tokens (`blocks_per_chunk * block_size`) must not overflow: 2^31 blocks of 4
    // tokens wrapped to 0 and divided by zero. The model file's rule.
    (h.connector == "offloading" && h.blocks_per_chunk >= h.num_gpu_blocks).then(|| {
        format!(
            "blocks_per_chunk must be at most {} (the usable GPU blocks: a larger chunk never fills), got {}",
            h.num_gpu_blocks - 1,
            h.blocks_per_chunk
        )
    })
}

/// Refuse a header kvmc cannot replay: an unknown format, connector or policy, sizes out of
/// range, and connector fields that do not fit the connector.
pub(super) fn check(path: &Path, no: usize, h: &Header) -> Result<()> {
    if h.format != 1 {
        return Err(KvmcError::input(path, no, format!("unsupported log format {} (kvmc reads format 1)", h.format)));
    }
    if !["offloading", "none", "simple-cpu", "mooncake", "nixl"].contains(&h.connector.as_str()) {
        return Err(KvmcError::input(
            path,
            no,
            format!("connector {:?} is not modelled (offloading, simple-cpu, mooncake, nixl, none)", h.connector),
        ));
    }
    if h.connector == "nixl" && h.async_scheduling {
        // kvmc models the NIXL producer with synchronous scheduling only (docs/models.md).
        return Err(KvmcError::input(path, no, "the nixl connector is modelled with synchronous scheduling only"));
    }
    if let Some(why) = super::validate::mooncake_header_error(h) {
        return Err(KvmcError::input(path, no, why));
    }
    if h.connector == "simple-cpu" && !h.enable_prefix_caching {
        return Err(KvmcError::input(
            path,
            no,
            "the simple-cpu connector needs GPU prefix caching (vLLM disables it otherwise)",
        ));
    }
    if h.connector == "simple-cpu" && h.cpu_blocks < 2 {
        return Err(KvmcError::input(
            path,
            no,
            "cpu_blocks must be at least 2 with the simple-cpu connector (block 0 is the null block)",
        ));
    }
    if !["fail", "recompute"].contains(&h.load_failure_policy.as_str()) {
        return Err(KvmcError::input(path, no, format!("unknown load_failure_policy {:?}", h.load_failure_policy)));
    }
    if h.block_size == 0 || h.num_gpu_blocks < 2 || h.max_num_batched_tokens == 0 || h.blocks_per_chunk == 0 {
        return Err(KvmcError::input(
            path,
            no,
            "block_size, num_gpu_blocks (>= 2), max_num_batched_tokens and blocks_per_chunk must be positive",
        ));
    }
    if let Some(why) = header_size_error(h) {
        return Err(KvmcError::input(path, no, why));
    }
    if h.connector == "offloading" && h.host_chunks == 0 {
        return Err(KvmcError::input(path, no, "host_chunks must be positive with the offloading connector"));
    }
    if !matches!(h.eviction_policy.as_str(), "" | "lru" | "arc") {
        return Err(KvmcError::input(
            path,
            no,
            format!("eviction_policy {:?} is not modelled (lru or arc)", h.eviction_policy),
        ));
    }
    Ok(())
}
