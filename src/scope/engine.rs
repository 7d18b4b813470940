//! A model file's `[engine]` table and its connector tables (`[offload]`, `[simple_cpu]`,
//! `[mooncake]`, `[router_replay]`) turned into an `EngineConfig`: shared by checker scopes
//! (`Scope::parse`) and trace replay models (`crate::scope::replay`).

use super::*;

/// The largest sizes a model file may ask for (docs/models.md, "Limits"). kvmc allocates the
/// GPU pool, SimpleCPU's CPU pool and (in trace replay) the host tier's table up front, one
/// entry per block or chunk; these bounds keep one engine within about 1.5 GiB, so a typo
/// is an input error instead of an allocation failure that aborts the process.
pub mod limits {
    /// `gpu_blocks` (about 80 bytes a block).
    pub const GPU_BLOCKS: u32 = 1_000_000;
    /// `cpu_blocks`: SimpleCPU's CPU pool is a block pool like G1 (about 80 bytes a block).
    pub const CPU_BLOCKS: u32 = 4_194_304;
    /// `host_chunks`: trace replay sizes the host tier's table for twice its capacity at
    /// start (about 320 bytes a chunk).
    pub const HOST_CHUNKS: u32 = 4_194_304;
    /// `max_num_seqs`: request ids are 16-bit, so no more than this many requests can ever
    /// run at once (the scheduler reserves room for `max_num_seqs` entries every step).
    pub const MAX_NUM_SEQS: u32 = 65_536;
}

/// Parse a model file's `[engine]` and connector tables (shared by scopes and replay models).
/// Also returns warnings (`FILE:LINE: ...`) about settings that are legal but cannot work.
pub(crate) fn parse_engine(path: &Path, text: &str) -> Result<(RawScope, String, EngineConfig, Vec<String>)> {
    let raw: RawScope = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
    let at = |sp: std::ops::Range<usize>| line_of_offset(text, sp.start);
    let bad = |sp: std::ops::Range<usize>, msg: String| KvmcError::input(path, at(sp), msg);
    let e = &raw.engine;
    let profile = e.profile.get_ref().clone();
    if crate::system::rules::profile(&profile).is_none() {
        return Err(bad(e.profile.span(), crate::system::rules::resolve(&profile, None).unwrap_err()));
    }
    let b = *e.block_size.get_ref();
    if !(1..=64).contains(&b) {
        return Err(bad(e.block_size.span(), format!("block_size must be 1..=64, got {b}")));
    }
    let n = *e.gpu_blocks.get_ref();
    if !(2..=limits::GPU_BLOCKS).contains(&n) {
        return Err(bad(
            e.gpu_blocks.span(),
            format!("gpu_blocks must be 2..={} (block 0 is the null block), got {n}", limits::GPU_BLOCKS),
        ));
    }
    // G1's usable capacity in tokens (block 0 is the null block).
    let g1_tokens = (n - 1) * b;
    let budget = *e.max_num_batched_tokens.get_ref();
    if budget == 0 {
        return Err(bad(e.max_num_batched_tokens.span(), "max_num_batched_tokens must be positive".into()));
    }
    if let Some(s) = e.max_num_seqs.as_ref().filter(|s| *s.get_ref() > limits::MAX_NUM_SEQS) {
        return Err(bad(
            s.span(),
            format!(
                "max_num_seqs must be at most {} (request ids are 16-bit), got {}",
                limits::MAX_NUM_SEQS,
                s.get_ref()
            ),
        ));
    }
    let mut warnings = Vec::new();
    let max_model_len = match &e.max_model_len {
        Some(m) if *m.get_ref() < 2 => return Err(bad(m.span(), "max_model_len must be at least 2".into())),
        Some(m) => {
            if *m.get_ref() > g1_tokens {
                // vLLM refuses to start with this (get_kv_cache_configs: "To serve at least one
                // request with the model's max seq len ..."); kvmc runs it, as the scopes that
                // starve a request on purpose need.
                warnings.push(format!(
                    "{}:{}: warning: max_model_len = {} does not fit in G1: {} usable GPU blocks of {b} tokens \
                     hold {g1_tokens} tokens (gpu_blocks = {n} counts the null block), so no request longer \
                     than that can ever be scheduled (vLLM refuses to start with this)",
                    path.display(),
                    at(m.span()),
                    m.get_ref(),
                    n - 1
                ));
            }
            *m.get_ref()
        }
        None => g1_tokens,
    };
    let policy = match e.load_failure_policy.get_ref().as_str() {
        "fail" => LoadFailurePolicy::Fail,
        "recompute" => LoadFailurePolicy::Recompute,
        other => {
            return Err(bad(
                e.load_failure_policy.span(),
                format!("load_failure_policy must be \"fail\" or \"recompute\", got \"{other}\""),
            ))
        }
    };
    if raw.offload.is_some() && e.connector.get_ref() != "offloading" {
        return Err(bad(e.connector.span(), "an [offload] table needs connector = \"offloading\"".into()));
    }
    if raw.simple_cpu.is_some() && e.connector.get_ref() != "simple-cpu" {
        return Err(bad(e.connector.span(), "a [simple_cpu] table needs connector = \"simple-cpu\"".into()));
    }
    // A P/D pair (nixl with [router_replay]) may share a Mooncake pool: decode-saved KV.
    let pd_store = e.connector.get_ref() == "nixl" && raw.router_replay.is_some();
    if raw.mooncake.is_some() && e.connector.get_ref() != "mooncake" && !pd_store {
        return Err(bad(
            e.connector.span(),
            "a [mooncake] table needs connector = \"mooncake\" (or a P/D pair: nixl with [router_replay])".into(),
        ));
    }
    let connector = match e.connector.get_ref().as_str() {
        "none" => ConnectorConfig::None,
        "simple-cpu" => {
            let Some(sc) = &raw.simple_cpu else {
                return Err(bad(
                    e.connector.span(),
                    "connector = \"simple-cpu\" needs a [simple_cpu] table with cpu_blocks".into(),
                ));
            };
            let lazy = match sc.mode.as_ref().map(|m| (m, m.get_ref().as_str())) {
                None | Some((_, "eager")) => false,
                Some((_, "lazy")) => true,
                Some((m, other)) => {
                    return Err(bad(m.span(), format!("mode must be \"eager\" or \"lazy\", got \"{other}\"")))
                }
            };
            let n = *sc.cpu_blocks.get_ref();
            if !(2..=limits::CPU_BLOCKS).contains(&n) {
                return Err(bad(
                    sc.cpu_blocks.span(),
                    format!(
                        "cpu_blocks must be 2..={} (block 0 is the CPU pool's null block), got {n}",
                        limits::CPU_BLOCKS
                    ),
                ));
            }
            if !e.enable_prefix_caching {
                return Err(bad(
                    e.connector.span(),
                    "SimpleCPU disables itself without GPU prefix caching (enable_prefix_caching = false)".into(),
                ));
            }
            ConnectorConfig::SimpleCpu(SimpleCpuConfig { cpu_blocks: n, lazy })
        }
        "nixl" => {
            // The producer side in host-buffer mode, synchronous scheduling only.
            if e.async_scheduling {
                return Err(bad(
                    e.connector.span(),
                    "connector = \"nixl\" is modelled with synchronous scheduling only (async_scheduling = false)"
                        .into(),
                ));
            }
            if raw.router_replay.is_some()
                && crate::system::rules::resolve(&profile, None).is_ok_and(|r| !r.aux_pd_bypass)
            {
                // vLLM refuses routed experts with a P/D connector; prime-rl bypasses it (a P/D
                // pair: src/system/pd).
                return Err(bad(e.connector.span(), super::pd_refusal(&profile)));
            }
            match raw.mooncake.as_ref() {
                // MultiConnector(NixlConnector, MooncakeStoreConnector) on both instances; the
                // pair sets the roles (P kv_producer, D kv_consumer).
                Some(mc) => {
                    if let Some(sp) = super::mooncake::role_span(mc) {
                        return Err(bad(sp, "a P/D pair sets kv_role itself (P kv_producer, D kv_consumer)".into()));
                    }
                    let mut m = super::mooncake::config(Some(mc), &bad)?;
                    m.kv_role = crate::system::KvRole::Producer;
                    ConnectorConfig::NixlStore(m)
                }
                None => ConnectorConfig::Nixl,
            }
        }
        "mooncake" => ConnectorConfig::Mooncake(super::mooncake::config(raw.mooncake.as_ref(), &bad)?),
        "offloading" => {
            let Some(o) = &raw.offload else {
                return Err(bad(
                    e.connector.span(),
                    "connector = \"offloading\" needs an [offload] table with host_chunks".into(),
                ));
            };
            let bpc = *o.blocks_per_chunk.get_ref();
            if !(1..n).contains(&bpc) {
                return Err(bad(
                    o.blocks_per_chunk.span(),
                    format!(
                        "blocks_per_chunk must be 1..={} (the usable GPU blocks: a larger chunk never fills), got {bpc}",
                        n - 1
                    ),
                ));
            }
            let (hc, hc_span) = host_chunks_of(o, bpc, e.connector.span()).map_err(|(sp, m)| bad(sp, m))?;
            if !(1..=u64::from(limits::HOST_CHUNKS)).contains(&hc) {
                return Err(bad(hc_span, format!("host_chunks must be 1..={}, got {hc}", limits::HOST_CHUNKS)));
            }
            if o.sync_load_budget_tokens.get_ref() > &g1_tokens {
                return Err(bad(
                    o.sync_load_budget_tokens.span(),
                    format!(
                        "sync_load_budget_tokens must be 0..={g1_tokens} (what G1's {} usable blocks hold: \
                         no step loads more), got {}",
                        n - 1,
                        o.sync_load_budget_tokens.get_ref()
                    ),
                ));
            }
            let eviction_policy = match &o.eviction_policy {
                None => EvictionPolicy::Lru,
                Some(p) => match p.get_ref().as_str() {
                    "lru" => EvictionPolicy::Lru,
                    "arc" => EvictionPolicy::Arc,
                    other => {
                        return Err(bad(
                            p.span(),
                            format!("eviction_policy must be \"lru\" or \"arc\", got \"{other}\""),
                        ))
                    }
                },
            };
            ConnectorConfig::Offloading(OffloadConfig {
                eviction_policy,
                host_chunks: hc as u32,
                blocks_per_chunk: bpc,
                offload_prompt_only: o.offload_prompt_only,
                sync_load_budget_tokens: *o.sync_load_budget_tokens.get_ref(),
            })
        }
        other => {
            let known = "\"none\", \"offloading\", \"simple-cpu\", \"mooncake\" or \"nixl\"";
            return Err(bad(e.connector.span(), format!("connector must be {known}, got \"{other}\"")));
        }
    };
    let (window, threshold) = cache_aware_admission(e, &profile, &bad)?;
    let cfg = EngineConfig {
        cache_aware_admission_window: window,
        cache_aware_admission_threshold_permille: threshold,
        block_size: b,
        num_gpu_blocks: n,
        max_num_batched_tokens: budget,
        max_num_seqs: e.max_num_seqs.as_ref().map_or(256, |s| *s.get_ref()).max(1),
        max_model_len,
        long_prefill_token_threshold: e.long_prefill_token_threshold,
        load_failure_policy: policy,
        async_scheduling: e.async_scheduling,
        enable_prefix_caching: e.enable_prefix_caching,
        reserve_full_isl: e.scheduler_reserve_full_isl,
        connector,
        router_replay: match &raw.router_replay {
            None => None,
            Some(rr) => {
                let objects = rr.store_objects.as_ref().map_or(n, |s| *s.get_ref());
                if e.async_scheduling {
                    return Err(bad(
                        e.max_num_batched_tokens.span(),
                        "[router_replay] is modelled with synchronous scheduling only (async_scheduling = false)"
                            .into(),
                    ));
                }
                if objects == 0 {
                    let sp = rr.store_objects.as_ref().map(|s| s.span()).unwrap_or(0..0);
                    return Err(bad(sp, "store_objects must be positive".into()));
                }
                Some(RowsConfig { store_objects: objects })
            }
        },
    };
    // A release kvmc does not model for this configuration (docs/rules.md): refused at the
    // profile's line.
    if let Some(why) =
        crate::system::rules::resolve(&profile, None).ok().and_then(|r| super::unmodelled(&cfg, &r, &profile))
    {
        return Err(bad(e.profile.span(), why));
    }
    Ok((raw, profile, cfg, warnings))
}

/// The host tier's size in chunks: `host_chunks`, or `cpu_bytes_to_use` converted as vLLM
/// 0.33's `CPUOffloadingSpec.__init__` converts it: a chunk holds `blocks_per_chunk` blocks of
/// `kv_bytes_per_block` bytes (the worker's GPU KV bytes per block, every layer) for each of
/// `world_size` workers, rounded up to the 4096-byte page (`SharedOffloadRegion`'s
/// alignment); the tier has `cpu_bytes_to_use // that` chunks. (MLA's replicated layout keeps
/// one copy: give `world_size = 1` for it.) Returns the count and the span to blame.
fn host_chunks_of(
    o: &super::RawOffload,
    bpc: u32,
    table: std::ops::Range<usize>,
) -> std::result::Result<(u64, std::ops::Range<usize>), (std::ops::Range<usize>, String)> {
    const PAGE: u64 = 4096;
    match (&o.host_chunks, &o.cpu_bytes_to_use) {
        (Some(h), None) => {
            if o.kv_bytes_per_block.is_some() || o.world_size.is_some() {
                return Err((h.span(), "kv_bytes_per_block and world_size go with cpu_bytes_to_use".into()));
            }
            Ok((u64::from(*h.get_ref()), h.span()))
        }
        (Some(h), Some(_)) => Err((h.span(), "give host_chunks or cpu_bytes_to_use, not both".into())),
        (None, None) => {
            Err((table, "connector = \"offloading\" needs host_chunks or cpu_bytes_to_use in [offload]".into()))
        }
        (None, Some(b)) => {
            let Some(kv) = &o.kv_bytes_per_block else {
                return Err((
                    b.span(),
                    "cpu_bytes_to_use needs kv_bytes_per_block (the worker's GPU KV bytes per block, every layer)"
                        .into(),
                ));
            };
            let ws = o.world_size.as_ref().map_or(1, |w| *w.get_ref());
            if *kv.get_ref() == 0 || ws == 0 {
                return Err((kv.span(), "kv_bytes_per_block and world_size must be positive".into()));
            }
            let chunk = kv
                .get_ref()
                .checked_mul(u64::from(ws) * u64::from(bpc))
                .and_then(|c| c.checked_next_multiple_of(PAGE))
                .ok_or_else(|| (kv.span(), "kv_bytes_per_block is too large".to_string()))?;
            let n = *b.get_ref() / chunk;
            if n == 0 {
                return Err((b.span(), format!("cpu_bytes_to_use = {} holds no chunk of {chunk} bytes", b.get_ref())));
            }
            Ok((n, b.span()))
        }
    }
}

/// `cache_aware_admission_window` and `cache_aware_admission_threshold` (in thousandths): only
/// a profile with the rule `cache_aware_admission` (vLLM 0.34+) has them.
fn cache_aware_admission(
    e: &super::RawEngine,
    profile: &str,
    bad: &dyn Fn(std::ops::Range<usize>, String) -> KvmcError,
) -> Result<(u32, u32)> {
    let window = e.cache_aware_admission_window.as_ref();
    if let Some(w) = window.filter(|w| *w.get_ref() > 0) {
        if crate::system::rules::resolve(profile, None).is_ok_and(|r| !r.cache_aware_admission) {
            return Err(bad(
                w.span(),
                format!("cache_aware_admission_window is new in vLLM 0.34: profile {profile} does not have it"),
            ));
        }
    }
    let threshold = match e.cache_aware_admission_threshold.as_ref() {
        None => 500,
        Some(t) => crate::system::config::threshold_permille(*t.get_ref()).map_err(|m| bad(t.span(), m))?,
    };
    Ok((window.map_or(0, |w| *w.get_ref()), threshold))
}
