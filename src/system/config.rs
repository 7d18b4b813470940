//! Engine configuration: the vLLM settings that decide anything in the model.
//!
//! Names follow vLLM's config fields (`SchedulerConfig`, `CacheConfig`, `KVTransferConfig`).

/// `kv_load_failure_policy` (vLLM `config/kv_transfer.py`; default `fail`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum LoadFailurePolicy {
    /// Finish every affected request with `FINISHED_ERROR`; evict the invalid blocks' hashes.
    Fail,
    /// Rewind the affected requests and recompute; hashes are kept.
    Recompute,
}

/// The OffloadingConnector's settings (`kv_connector_extra_config`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct OffloadConfig {
    /// Host tier capacity in chunks (`cpu_bytes_to_use` / chunk bytes).
    pub host_chunks: u32,
    /// GPU blocks per offload chunk (`blocks_per_chunk`, default 1).
    pub blocks_per_chunk: u32,
    /// `offload_prompt_only` (vLLM default true: decode blocks are not stored).
    pub offload_prompt_only: bool,
    /// Sync-load budget in tokens (`sync_load_budget_bytes` / kv bytes per token; 0 = off).
    pub sync_load_budget_tokens: u32,
    /// The CPU tier's cache policy (`eviction_policy`, default "lru").
    pub eviction_policy: EvictionPolicy,
}

/// `kv_connector_extra_config["eviction_policy"]`: the CPU manager's `CachePolicy`.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default)]
pub enum EvictionPolicy {
    /// `LRUCachePolicy` (which LRU: the profile's rule `host_lru`).
    #[default]
    Lru,
    /// `ARCCachePolicy` (`system/connector/offloading/host_arc.rs`).
    Arc,
}

/// SimpleCPUOffloadConnector's settings (`kv_connector_extra_config`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct SimpleCpuConfig {
    /// `num_cpu_blocks`: the CPU `BlockPool`'s size, including its null block 0 (one CPU block
    /// per GPU block; usable blocks are 1..n-1, as in the GPU pool).
    pub cpu_blocks: u32,
    /// `lazy_offload`: stores are chosen by a walk of the G1 free queue (blocks near
    /// eviction), not per request as they are computed (eager, the default).
    pub lazy: bool,
}

/// `kv_transfer_config.kv_role` (decides what the Mooncake store connector saves).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum KvRole {
    /// `kv_both` (an instance that loads and saves; the colocated default).
    Both,
    /// `kv_producer` (a P/D prefill instance: saves its prompt blocks).
    Producer,
    /// `kv_consumer` (a P/D decode instance: saves nothing unless `save_decode_cache`).
    Consumer,
}

/// MooncakeStoreConnector's settings (`kv_connector_extra_config`) and the shared pool's
/// contents at start.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct MooncakeConfig {
    pub kv_role: KvRole,
    /// `save_decode_cache` (default false): decode-phase blocks are saved too.
    pub save_decode_cache: bool,
    /// `enable_lookup` (default true): with it off the connector never reports a hit.
    pub enable_lookup: bool,
    /// Keys (block hashes) another instance already put into the pool, with their KV.
    pub preload: Vec<crate::system::types::BlockHash>,
}

/// Which KV connector the engine runs.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum ConnectorConfig {
    None,
    Offloading(OffloadConfig),
    SimpleCpu(SimpleCpuConfig),
    Mooncake(MooncakeConfig),
    /// NixlConnector, producer (prefill) side, host-buffer mode (`kv_buffer_device = "cpu"`):
    /// every request is a P/D prefill request (`do_remote_decode`).
    Nixl,
    /// NixlConnector, consumer (decode) side: the decode instance of a P/D pair
    /// (`src/system/pd`), loading each request's prompt KV from the producer.
    NixlDecode,
    /// A P/D pair's prefill instance with decode-saved KV: MultiConnector(NixlConnector,
    /// MooncakeStoreConnector) over a Mooncake pool both instances share (`src/system/pd/store.rs`).
    NixlStore(MooncakeConfig),
    /// The decode instance of that pair: MultiConnector(NixlConnector's consumer side,
    /// MooncakeStoreConnector as `kv_consumer`, `save_decode_cache` as the table says).
    NixlDecodeStore(MooncakeConfig),
}

/// Which connector, without its settings (what a property or an action applies to).
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum ConnectorKind {
    None,
    Offloading,
    SimpleCpu,
    Mooncake,
    Nixl,
}

/// Router replay (`AuxOutputConfig` with routed experts enabled).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct RowsConfig {
    /// Row-store capacity in objects (vLLM's default: one per GPU block).
    pub(crate) store_objects: u32,
}

/// One engine instance's configuration.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct EngineConfig {
    /// Tokens per GPU block (`CacheConfig.block_size`); hash block size is the same.
    pub block_size: u32,
    /// `num_gpu_blocks`, including the null block 0 (usable blocks are 1..n-1).
    pub num_gpu_blocks: u32,
    /// `max_num_batched_tokens` (= `max_num_scheduled_tokens`): the per-step token budget.
    pub max_num_batched_tokens: u32,
    /// `max_num_seqs`: the most requests in `running`.
    pub max_num_seqs: u32,
    /// `max_model_len`.
    pub max_model_len: u32,
    /// `long_prefill_token_threshold` (0 = off; only applies with more than one eligible request).
    pub long_prefill_token_threshold: u32,
    /// `kv_load_failure_policy`.
    pub load_failure_policy: LoadFailurePolicy,
    /// `CacheConfig.enable_prefix_caching` (default true): with it off, G1 never hashes a
    /// block and lookups find nothing locally.
    pub enable_prefix_caching: bool,
    /// `SchedulerConfig.async_scheduling` (vLLM 0.33's default is true): the engine keeps two
    /// batches in flight; step k+1 is scheduled before step k's output is processed.
    pub async_scheduling: bool,
    /// `SchedulerConfig.scheduler_reserve_full_isl` (default true): a waiting request is
    /// admitted only if its whole current sequence fits in the free blocks.
    pub reserve_full_isl: bool,
    /// `SchedulerConfig.cache_aware_admission_window` (0.34+, default 0 = off): how many of the
    /// first waiting requests cache-aware admission may reorder (rule `cache_aware_admission`).
    pub cache_aware_admission_window: u32,
    /// `SchedulerConfig.cache_aware_admission_threshold` in thousandths (default 500 = 0.5): the
    /// window applies only once the KV cache usage is at least this.
    pub cache_aware_admission_threshold_permille: u32,
    pub connector: ConnectorConfig,
    /// Router replay (routed-expert rows captured and returned), if on.
    pub router_replay: Option<RowsConfig>,
}

impl EngineConfig {
    pub fn offload(&self) -> Option<&OffloadConfig> {
        match &self.connector {
            ConnectorConfig::Offloading(c) => Some(c),
            _ => None,
        }
    }
    pub fn simple_cpu(&self) -> Option<&SimpleCpuConfig> {
        match &self.connector {
            ConnectorConfig::SimpleCpu(c) => Some(c),
            _ => None,
        }
    }
    pub fn mooncake(&self) -> Option<&MooncakeConfig> {
        match &self.connector {
            ConnectorConfig::Mooncake(c) | ConnectorConfig::NixlStore(c) | ConnectorConfig::NixlDecodeStore(c) => {
                Some(c)
            }
            _ => None,
        }
    }
    pub fn connector_kind(&self) -> ConnectorKind {
        match &self.connector {
            ConnectorConfig::None => ConnectorKind::None,
            ConnectorConfig::Offloading(_) => ConnectorKind::Offloading,
            ConnectorConfig::SimpleCpu(_) => ConnectorKind::SimpleCpu,
            ConnectorConfig::Mooncake(_) => ConnectorKind::Mooncake,
            ConnectorConfig::Nixl
            | ConnectorConfig::NixlDecode
            | ConnectorConfig::NixlStore(_)
            | ConnectorConfig::NixlDecodeStore(_) => ConnectorKind::Nixl,
        }
    }
    /// The decode instance of a P/D pair (its requests are decode-side: `_is_pd_decode_request`).
    pub fn is_pd_decode(&self) -> bool {
        matches!(self.connector, ConnectorConfig::NixlDecode | ConnectorConfig::NixlDecodeStore(_))
    }
    /// NixlConnector's producer side (alone, or with the Mooncake store for decode-saved KV).
    pub fn is_nixl_producer(&self) -> bool {
        matches!(self.connector, ConnectorConfig::Nixl | ConnectorConfig::NixlStore(_))
    }
    /// The engine runs an offload connector (any kind).
    pub fn has_connector(&self) -> bool {
        self.connector_kind() != ConnectorKind::None
    }
    /// `Scheduler.defer_block_free`: with overlapping batches and a KV-consumer connector
    /// (`kv_both` counts), freed blocks wait until every step scheduled before is processed.
    pub fn defer_block_free(&self) -> bool {
        self.async_scheduling && self.has_connector()
    }

    pub fn tokens_per_chunk(&self) -> u32 {
        self.offload().map_or(self.block_size, |c| c.blocks_per_chunk * self.block_size)
    }
}

/// `cache_aware_admission_threshold` (a fraction in 0.0..=1.0) in thousandths; more precision
/// than 0.001 is refused (the model compares the usage exactly).
pub fn threshold_permille(t: f64) -> Result<u32, String> {
    let p = (t * 1000.0).round();
    if !(0.0..=1.0).contains(&t) || (t * 1000.0 - p).abs() > 1e-6 {
        return Err(format!("cache_aware_admission_threshold must be 0.0..=1.0 in steps of 0.001, got {t}"));
    }
    Ok(p as u32)
}
