//! What kvmc refuses to give a verdict for, and why: configurations vLLM itself refuses (routed
//! experts with a P/D connector) and releases whose connector or row store kvmc does not model
//! (vLLM 0.24's Mooncake store and routed-expert capture). Every driver asks [`unmodelled`].

use crate::system::config::EngineConfig;

/// vLLM's refusal of routed experts with a P/D connector (`VllmConfig._verify_aux_output_compatibility`,
/// 0.33: NixlConnector, NixlPullConnector, NixlPushConnector, MoRIIOConnector, MooncakeConnector,
/// also as MultiConnector children); prime-rl bypasses it for NixlConnector only.
pub(crate) fn pd_refusal(profile: &str) -> String {
    format!(
        "--enable-return-routed-experts is incompatible with NixlConnector; PD auxiliary output is not supported \
         (vLLM's _verify_aux_output_compatibility under profile {profile}; only prime-rl's patch bypasses it, for NixlConnector)"
    )
}

/// Why kvmc gives no verdict for `cfg` under this profile's rules, if it does not model that
/// release there (a connector or row store that works differently in it): every driver refuses
/// such a scope rather than report the later release's verdicts.
pub(crate) fn unmodelled(cfg: &EngineConfig, rules: &crate::system::rules::Rules, profile: &str) -> Option<String> {
    if cfg.mooncake().is_some() && !rules.mc_store_032 {
        return Some(mooncake_refusal(profile));
    }
    if cfg.router_replay.is_some() && !rules.aux_row_store {
        return Some(rows_refusal(profile));
    }
    None
}

/// vLLM 0.24 has no AuxOutput connector and no row store: `RoutedExpertsManager` keeps rows in
/// a buffer indexed by GPU KV slot (`v1/core/sched/scheduler.py`), and `VllmConfig.__post_init__`
/// refuses `--enable-return-routed-experts` with any KV transfer instance, KV offload included.
/// kvmc's rows model is 0.32's and later's, so a 0.24 verdict would be theirs: refused.
fn rows_refusal(profile: &str) -> String {
    format!(
        "profile {profile}: vLLM 0.24 captures routed experts in a slot-indexed buffer (no AuxOutput row store, \
         which kvmc models as vLLM 0.32 and later have it) and refuses --enable-return-routed-experts with any KV \
         connector (\"incompatible with KV connectors (PD disaggregation, KV cache offload)\"); use vllm-0.32 or later"
    )
}

/// kvmc models MooncakeStoreConnector as vLLM 0.32 to 0.34 have it; 0.24's store works
/// differently (rule `mc_store_032`, docs/rules.md) and is not modelled, so its verdicts would
/// be those of the later store: refused rather than reported.
fn mooncake_refusal(profile: &str) -> String {
    format!(
        "profile {profile}: kvmc models MooncakeStoreConnector as vLLM 0.32 to 0.34 have it; this release's store \
         (no block references for save jobs, a finished request's free delayed until its saves are sent) is not \
         modelled, so kvmc gives no verdict for it (use vllm-0.32 or later)"
    )
}
