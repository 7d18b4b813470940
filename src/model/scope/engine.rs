//! A model file's `[engine]` table and its connector tables (`[offload]`, `[simple_cpu]`,
//! `[mooncake]`, `[router_replay]`) turned into an `EngineConfig`: shared by checker scopes
//! (`Scope::parse`) and trace replay models (`crate::replay::config`).

use super::*;

/// Parse a model file's `[engine]` and connector tables (shared by scopes and replay models).
pub(crate) fn parse_engine(path: &Path, text: &str) -> Result<(RawScope, String, EngineConfig)> {
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
    if !(2..=1_000_000).contains(&n) {
        return Err(bad(
            e.gpu_blocks.span(),
            format!("gpu_blocks must be 2..=1000000 (block 0 is the null block), got {n}"),
        ));
    }
    let budget = *e.max_num_batched_tokens.get_ref();
    if budget == 0 {
        return Err(bad(e.max_num_batched_tokens.span(), "max_num_batched_tokens must be positive".into()));
    }
    let max_model_len = match &e.max_model_len {
        Some(m) if *m.get_ref() < 2 => return Err(bad(m.span(), "max_model_len must be at least 2".into())),
        Some(m) => *m.get_ref(),
        None => (n - 1) * b,
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
    if raw.mooncake.is_some() && e.connector.get_ref() != "mooncake" {
        return Err(bad(e.connector.span(), "a [mooncake] table needs connector = \"mooncake\"".into()));
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
            if let Some(m) = &sc.mode {
                match m.get_ref().as_str() {
                    "eager" => {}
                    "lazy" => {
                        return Err(bad(
                            m.span(),
                            "mode = \"lazy\" (lazy_offload) is not modelled; only \"eager\" is".into(),
                        ))
                    }
                    other => return Err(bad(m.span(), format!("mode must be \"eager\", got \"{other}\""))),
                }
            }
            let n = *sc.cpu_blocks.get_ref();
            if n < 2 {
                return Err(bad(
                    sc.cpu_blocks.span(),
                    format!("cpu_blocks must be at least 2 (block 0 is the CPU pool's null block), got {n}"),
                ));
            }
            if !e.enable_prefix_caching {
                return Err(bad(
                    e.connector.span(),
                    "SimpleCPU disables itself without GPU prefix caching (enable_prefix_caching = false)".into(),
                ));
            }
            ConnectorConfig::SimpleCpu(SimpleCpuConfig { cpu_blocks: n })
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
            if raw.router_replay.is_some() {
                return Err(bad(
                    e.connector.span(),
                    "[router_replay] with connector = \"nixl\" (P/D rows: decode floor, router merge) is not modelled"
                        .into(),
                ));
            }
            ConnectorConfig::Nixl
        }
        "mooncake" => ConnectorConfig::Mooncake(crate::model::scope_mooncake::config(
            raw.mooncake.as_ref(),
            e.async_scheduling,
            e.connector.span(),
            &bad,
        )?),
        "offloading" => {
            let Some(o) = &raw.offload else {
                return Err(bad(
                    e.connector.span(),
                    "connector = \"offloading\" needs an [offload] table with host_chunks".into(),
                ));
            };
            let bpc = *o.blocks_per_chunk.get_ref();
            if bpc == 0 {
                return Err(bad(o.blocks_per_chunk.span(), "blocks_per_chunk must be positive".into()));
            }
            if *o.host_chunks.get_ref() == 0 {
                return Err(bad(o.host_chunks.span(), "host_chunks must be positive".into()));
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
                host_chunks: *o.host_chunks.get_ref(),
                blocks_per_chunk: bpc,
                offload_prompt_only: o.offload_prompt_only,
                sync_load_budget_tokens: o.sync_load_budget_tokens,
            })
        }
        other => {
            let known = "\"none\", \"offloading\", \"simple-cpu\", \"mooncake\" or \"nixl\"";
            return Err(bad(e.connector.span(), format!("connector must be {known}, got \"{other}\"")));
        }
    };
    let cfg = EngineConfig {
        block_size: b,
        num_gpu_blocks: n,
        max_num_batched_tokens: budget,
        max_num_seqs: e.max_num_seqs.unwrap_or(256).max(1),
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
    Ok((raw, profile, cfg))
}
