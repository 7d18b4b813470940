//! Scope files (`models/NAME.toml`): one bounded scope to explore. See docs/models.md.
//!
//! ```toml
//! description = "two requests sharing a prefix, one host chunk"
//! [engine]
//! profile = "vllm-0.33"
//! connector = "offloading"          # or "none", "simple-cpu", "mooncake", "nixl"
//! block_size = 2
//! gpu_blocks = 4                    # num_gpu_blocks, including the null block 0
//! max_num_batched_tokens = 4
//! load_failure_policy = "fail"      # or "recompute"
//! [offload]                        # with connector = "offloading"
//! host_chunks = 2
//! # [simple_cpu]                   # with connector = "simple-cpu"
//! # cpu_blocks = 3                 # num_cpu_blocks, including the CPU pool's null block 0
//! # [mooncake]                     # optional with connector = "mooncake"
//! # preload = ["P", "ab|cd"]       # prefixes another instance already put into the pool
//! [[request]]
//! name = "A"
//! prompt = "ab|cd"                  # one token per character; '|' and spaces are ignored
//! output = "x"                      # the tokens it will sample (max_tokens = 1)
//! # end = "stop"                     # the last output token is EOS (default "length")
//! # max_tokens = 3                   # with end = "stop": room past the EOS
//! [faults]
//! abort = true
//! [bounds]
//! arrivals = "in-order"             # or "any"
//! ```

use crate::error::{line_of_offset, read_text, toml_error, KvmcError, Result};
use crate::system::config::RowsConfig;
use crate::system::workload::{next_turn_spec, stop_outputs, TurnInput};
use crate::system::{
    ConnectorConfig, EndKind, EngineConfig, EvictionPolicy, LoadFailurePolicy, OffloadConfig, RequestSpec,
    SimpleCpuConfig, Workload,
};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

mod engine;
mod mooncake;
mod refusals;
pub mod replay;
pub mod scenario;

pub use crate::system::input::{Arrivals, Environment, Faults, StreamInput, System};
pub use engine::limits;
pub(crate) use engine::parse_engine;
pub(crate) use refusals::{pd_refusal, unmodelled};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawScope {
    #[serde(default)]
    description: String,
    engine: RawEngine,
    #[serde(default)]
    offload: Option<RawOffload>,
    #[serde(default)]
    simple_cpu: Option<RawSimpleCpu>,
    #[serde(default)]
    mooncake: Option<mooncake::RawMooncake>,
    router_replay: Option<RawRows>,
    #[serde(default, rename = "request")]
    requests: Vec<RawRequest>,
    #[serde(default = "no_faults")]
    faults: RawFaults,
    #[serde(default)]
    bounds: RawBounds,
    /// Trace replay's settings (read by `kvmc replay`, see crate::scope::replay).
    #[serde(default)]
    replay: Option<crate::scope::replay::RawReplay>,
    /// Workload bounds (read by `crate::workload`, which expands them into scopes).
    #[serde(default)]
    workload: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngine {
    #[serde(default = "default_profile")]
    profile: Spanned<String>,
    #[serde(default = "default_connector")]
    connector: Spanned<String>,
    block_size: Spanned<u32>,
    gpu_blocks: Spanned<u32>,
    max_num_batched_tokens: Spanned<u32>,
    #[serde(default)]
    max_num_seqs: Option<Spanned<u32>>,
    #[serde(default)]
    max_model_len: Option<Spanned<u32>>,
    #[serde(default)]
    long_prefill_token_threshold: u32,
    #[serde(default = "default_policy")]
    load_failure_policy: Spanned<String>,
    #[serde(default)]
    async_scheduling: bool,
    #[serde(default = "yes")]
    enable_prefix_caching: bool,
    #[serde(default = "yes")]
    scheduler_reserve_full_isl: bool,
    /// vLLM 0.34+ (`SchedulerConfig.cache_aware_admission_window`; 0 = off).
    #[serde(default)]
    cache_aware_admission_window: Option<Spanned<u32>>,
    /// `SchedulerConfig.cache_aware_admission_threshold` (0.0..=1.0, default 0.5).
    #[serde(default)]
    cache_aware_admission_threshold: Option<Spanned<f64>>,
}

fn no_faults() -> RawFaults {
    RawFaults { abort: false, error: false, load_failure: false, max_load_failures: 1 }
}

fn default_profile() -> Spanned<String> {
    Spanned::new(0..0, "vllm-0.33".to_string())
}
fn default_connector() -> Spanned<String> {
    Spanned::new(0..0, "none".to_string())
}
fn default_policy() -> Spanned<String> {
    Spanned::new(0..0, "fail".to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffload {
    /// The host tier in chunks, or as vLLM configures it: `cpu_bytes_to_use` with the
    /// worker's GPU KV bytes per block (engine.rs, `host_chunks_of`).
    #[serde(default)]
    host_chunks: Option<Spanned<u32>>,
    #[serde(default)]
    cpu_bytes_to_use: Option<Spanned<u64>>,
    #[serde(default)]
    kv_bytes_per_block: Option<Spanned<u64>>,
    #[serde(default)]
    world_size: Option<Spanned<u32>>,
    #[serde(default = "one")]
    blocks_per_chunk: Spanned<u32>,
    #[serde(default = "yes")]
    offload_prompt_only: bool,
    #[serde(default = "zero")]
    sync_load_budget_tokens: Spanned<u32>,
    #[serde(default)]
    eviction_policy: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimpleCpu {
    cpu_blocks: Spanned<u32>,
    #[serde(default)]
    mode: Option<Spanned<String>>,
}

fn one() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}
fn zero() -> Spanned<u32> {
    Spanned::new(0..0, 0)
}
fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    name: Spanned<String>,
    prompt: Spanned<String>,
    output: Spanned<String>,
    #[serde(default)]
    end: Option<Spanned<String>>,
    /// `max_tokens` past the output's EOS (`end = "stop"` only; default: the output's length).
    #[serde(default)]
    max_tokens: Option<Spanned<u32>>,
    #[serde(default)]
    after: Option<Spanned<String>>,
    /// Router replay: `routed_experts_prompt_start`, a number or "bridge" (the multi-turn
    /// client rule: the `after` request's prompt + output - 1).
    #[serde(default)]
    start: Option<Spanned<toml::Value>>,
    /// A streaming-input session's further inputs (`[[request.turn]]`).
    #[serde(default, rename = "turn")]
    turns: Vec<RawTurn>,
}

/// `[router_replay]`: routed-expert rows are captured and returned.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRows {
    /// Row-store capacity in objects (default: `gpu_blocks`, vLLM's default).
    #[serde(default)]
    store_objects: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTurn {
    input: Spanned<String>,
    output: Spanned<String>,
    #[serde(default)]
    end: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFaults {
    #[serde(default)]
    abort: bool,
    #[serde(default)]
    error: bool,
    #[serde(default)]
    load_failure: bool,
    #[serde(default = "one_u8")]
    max_load_failures: u8,
}

fn one_u8() -> u8 {
    1
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBounds {
    #[serde(default)]
    arrivals: Option<Spanned<String>>,
    #[serde(default)]
    progress_steps: Option<u32>,
    #[serde(default)]
    stream_input: Option<Spanned<String>>,
}

/// A parsed, validated scope.
#[derive(Clone, Debug)]
pub struct Scope {
    pub name: String,
    pub path: PathBuf,
    pub description: String,
    pub profile: String,
    pub cfg: EngineConfig,
    pub workload: Workload,
    /// `after[r]`: request that must have finished before `r` may arrive.
    pub after: Vec<Option<u16>>,
    pub faults: Faults,
    pub arrivals: Arrivals,
    pub stream_input: StreamInput,
    /// Engine steps without progress (a sampled token, a finish, an arrival) that count as a
    /// livelock for `requests-finish`.
    pub progress_steps: u32,
}

/// `end = "length" | "stop"` (default length).
fn end_kind(end: &Option<Spanned<String>>) -> std::result::Result<EndKind, (std::ops::Range<usize>, String)> {
    match end.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
        None | Some(("length", _)) => Ok(EndKind::Length),
        Some(("stop", _)) => Ok(EndKind::Stop),
        Some((other, sp)) => Err((sp, format!("end must be \"length\" or \"stop\", got \"{other}\""))),
    }
}

/// Tokens of a scope string: one token per character; '|' and whitespace are separators.
pub fn parse_tokens(s: &str) -> Vec<u32> {
    s.chars().filter(|c| *c != '|' && !c.is_whitespace()).map(|c| c as u32).collect()
}

impl Scope {
    /// The system this scope describes, under `profile` (default: the scope's own) and
    /// `variant`; an unknown profile or variant is an error message.
    pub fn system(&self, profile: Option<&str>, variant: Option<&str>) -> std::result::Result<System, String> {
        let profile = profile.unwrap_or(&self.profile);
        let rules = crate::system::rules::resolve(profile, variant)?;
        if let Some(why) = unmodelled(&self.cfg, &rules, profile) {
            return Err(why);
        }
        if self.is_pd() {
            // A P/D pair: P runs each request with max_tokens = 1, D with its whole output.
            if !rules.aux_pd_bypass {
                return Err(pd_refusal(profile));
            }
            let full = self.workload.clone();
            let b = full.block_size;
            let prefill: Vec<RequestSpec> = full
                .requests
                .iter()
                .map(|s| {
                    let prompt = s.tokens[..s.prompt_len as usize].to_vec();
                    let first = s.tokens[s.prompt_len as usize];
                    let mut p = RequestSpec::with_limits(&s.name, prompt, vec![first], 1, None, b);
                    p.rows_start = s.rows_start;
                    p
                })
                .collect();
            let pd = crate::system::pd::PdSys::new(&self.cfg, full);
            return Ok(System {
                cfg: self.cfg.clone(),
                workload: Workload::new(b, prefill),
                env: self.environment(),
                rules,
                pd: Some(Box::new(pd)),
            });
        }
        // vLLM 0.24 under async scheduling: a stopped turn's in-flight output stays, and the run
        // decides how the next input is laid out (a conformance log's scope has its own).
        let mut workload = self.workload.clone();
        // vLLM 0.24: a session's later inputs stop at its first input's max_tokens.
        if !rules.session_max_tokens {
            if let Some(w) = workload.with_first_max_tokens(self.cfg.max_model_len) {
                workload = w;
            }
        }
        // vLLM 0.24 and 0.32 under async scheduling: a session preempted while the output that
        // ends its input is in flight loses what it held (layout `Lost`).
        let offered = crate::system::workload::Offered {
            stale: !rules.session_stop_drops_in_flight && self.cfg.async_scheduling,
            lost: rules.session_keeps_computed_only && self.cfg.async_scheduling,
        };
        let sessions = (0..workload.requests.len() as u16).any(|r| workload.is_session(r));
        if (offered.stale || offered.lost) && sessions && !workload.has_layouts() {
            let max = offered.max_inputs();
            if let Some(r) = (0..workload.requests.len() as u16).find(|&r| workload.num_turns(r) as usize > max) {
                return Err(format!(
                    "session {} has {} inputs: under profile {profile} with async scheduling the checker explores every way each input follows the previous one (vLLM 0.24 keeps a stopped input's in-flight output, 0.24 and 0.32 lose a preempted session's history), for at most {max} inputs",
                    workload.requests[r as usize].name,
                    workload.num_turns(r)
                ));
            }
            let mml = self.cfg.max_model_len;
            workload = workload.with_layouts(&workload.later_inputs(mml), mml, true, offered);
        }
        // vLLM 0.24 keys a session's later inputs by the hashes it did not truncate.
        if !rules.session_rehash {
            workload = workload.unrehash_sessions();
        }
        Ok(System { cfg: self.cfg.clone(), workload, env: self.environment(), rules, pd: None })
    }

    /// A P/D pair (`connector = "nixl"` with `[router_replay]`): a prefill and a decode
    /// instance behind the router (src/system/pd).
    pub fn is_pd(&self) -> bool {
        self.cfg.is_nixl_producer() && self.cfg.router_replay.is_some()
    }

    /// What the environment may do in this scope.
    pub fn environment(&self) -> Environment {
        Environment {
            after: self.after.clone(),
            faults: self.faults.clone(),
            arrivals: self.arrivals,
            stream_input: self.stream_input,
            progress_steps: self.progress_steps,
        }
    }

    pub fn load(path: &Path) -> Result<Scope> {
        Ok(Scope::load_warn(path)?.0)
    }

    /// `load`, with the model file's warnings (`FILE:LINE: warning: ...`) for the caller to
    /// print: settings that are legal but cannot work (docs/models.md, "Limits").
    pub fn load_warn(path: &Path) -> Result<(Scope, Vec<String>)> {
        let text = read_text(path)?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Scope::parse_warn(&name, path, &text)
    }

    pub fn parse(name: &str, path: &Path, text: &str) -> Result<Scope> {
        Ok(Scope::parse_warn(name, path, text)?.0)
    }

    /// `parse`, with the model file's warnings.
    pub fn parse_warn(name: &str, path: &Path, text: &str) -> Result<(Scope, Vec<String>)> {
        // A checker scope names its requests: max_model_len beyond G1 only matters if one of
        // them cannot fit, which is warned about below instead.
        let (raw, profile, cfg, _) = parse_engine(path, text)?;
        let mut warnings = Vec::new();
        let at = |sp: std::ops::Range<usize>| line_of_offset(text, sp.start);
        let bad = |sp: std::ops::Range<usize>, msg: String| KvmcError::input(path, at(sp), msg);
        let b = cfg.block_size;
        let max_model_len = cfg.max_model_len;
        if let Some(w) = &raw.workload {
            let msg = "a [workload] model stands for many scopes: kvmc check explores each (one scope: \
                       kvmc check FILE --out DIR writes a counterexample's workload as a model file)";
            return Err(bad(w.span(), msg.into()));
        }
        if raw.requests.is_empty() {
            let msg = if raw.replay.is_some() {
                "a scope needs at least one [[request]] (this is a replay model: kvmc replay TRACE --model FILE)"
            } else {
                "a scope needs at least one [[request]]"
            };
            return Err(KvmcError::input(path, 1, msg));
        }
        if raw.requests.len() > u16::MAX as usize {
            return Err(KvmcError::input(path, 1, "at most 65535 requests per scope"));
        }
        let mut specs = Vec::new();
        let mut sessions = Vec::new();
        for r in &raw.requests {
            let nm = r.name.get_ref();
            if nm.is_empty() || nm.contains(|c: char| c.is_whitespace() || c == '.' || c == '@') {
                return Err(bad(
                    r.name.span(),
                    format!("request name {nm:?} must be non-empty, without spaces, dots or '@'"),
                ));
            }
            if specs.iter().any(|s: &RequestSpec| &s.name == nm) {
                return Err(bad(r.name.span(), format!("duplicate request name {nm:?}")));
            }
            let prompt = parse_tokens(r.prompt.get_ref());
            let output = parse_tokens(r.output.get_ref());
            if prompt.is_empty() {
                return Err(bad(r.prompt.span(), format!("request {nm}: the prompt is empty")));
            }
            if output.is_empty() {
                return Err(bad(
                    r.output.span(),
                    format!("request {nm}: output needs at least one token (max_tokens >= 1)"),
                ));
            }
            if (prompt.len() + output.len()) as u32 > max_model_len {
                return Err(bad(
                    r.prompt.span(),
                    format!("request {nm}: prompt + output exceed max_model_len {max_model_len}"),
                ));
            }
            let pd = cfg.router_replay.is_some();
            if cfg.is_nixl_producer() && ((!pd && output.len() != 1) || !r.turns.is_empty()) {
                return Err(bad(
                    r.output.span(),
                    format!(
                        "request {nm}: with connector = \"nixl\" every request is a P/D prefill request (max_tokens = 1): one output token, no further inputs"
                    ),
                ));
            }
            let end = end_kind(&r.end).map_err(|(sp, m)| bad(sp, m))?;
            let first = match &r.max_tokens {
                None => RequestSpec::new(nm, prompt, output, end, b),
                Some(m) => {
                    let (n, max) = (output.len() as u32, *m.get_ref());
                    if end != EndKind::Stop || max < n || prompt.len() as u32 + max > max_model_len {
                        return Err(bad(
                            m.span(),
                            format!(
                                "request {nm}: max_tokens needs end = \"stop\", at least the output's {n} tokens, and prompt + max_tokens within max_model_len {max_model_len}"
                            ),
                        ));
                    }
                    RequestSpec::with_limits(nm, prompt, output, max, Some(n - 1), b)
                }
            };
            let mut turns: Vec<RequestSpec> = Vec::new();
            for (i, t) in r.turns.iter().enumerate() {
                let input = parse_tokens(t.input.get_ref());
                let output = parse_tokens(t.output.get_ref());
                if input.is_empty() {
                    return Err(bad(t.input.span(), format!("request {nm}: input {} is empty", i + 2)));
                }
                if output.is_empty() {
                    return Err(bad(t.output.span(), format!("request {nm}: input {} needs output tokens", i + 2)));
                }
                if turns.len() >= 8 {
                    return Err(bad(t.input.span(), format!("request {nm}: at most 9 inputs per session")));
                }
                let end = end_kind(&t.end).map_err(|(sp, m)| bad(sp, m))?;
                let prev = turns.last().unwrap_or(&first);
                let tin = TurnInput { input, output, end };
                let next = next_turn_spec(prev, stop_outputs(prev, max_model_len), &tin, i + 1, b);
                if next.tokens.len() as u32 > max_model_len {
                    return Err(bad(
                        t.input.span(),
                        format!("request {nm}: input {} grows the session past max_model_len {max_model_len}", i + 2),
                    ));
                }
                turns.push(next);
            }
            // The KV a request needs: every token but the last sampled one.
            let g1_tokens = (cfg.num_gpu_blocks - 1) * b;
            let longest = turns.last().unwrap_or(&first).tokens.len() as u32;
            if longest - 1 > g1_tokens {
                warnings.push(format!(
                    "{}:{}: warning: request {nm} needs KV for {} tokens, more than G1's {} usable blocks hold \
                     ({g1_tokens} tokens): it can never finish",
                    path.display(),
                    at(r.name.span()),
                    longest - 1,
                    cfg.num_gpu_blocks - 1
                ));
            }
            specs.push(first);
            sessions.push(turns);
        }
        let mut after = Vec::new();
        for r in &raw.requests {
            after.push(match &r.after {
                None => None,
                Some(a) => match specs.iter().position(|s| &s.name == a.get_ref()) {
                    Some(i) if specs[i].name != *r.name.get_ref() => Some(i as u16),
                    _ => return Err(bad(a.span(), format!("after = {:?} names no other request", a.get_ref()))),
                },
            });
        }
        for (i, r) in raw.requests.iter().enumerate() {
            let Some(st) = &r.start else { continue };
            if cfg.router_replay.is_none() {
                return Err(bad(st.span(), "start needs a [router_replay] table".into()));
            }
            let s = match st.get_ref() {
                toml::Value::Integer(v) if *v >= 0 => *v,
                toml::Value::String(b) if b == "bridge" => match after[i] {
                    Some(a) => {
                        i64::from((specs[a as usize].prompt_len + specs[a as usize].max_tokens).saturating_sub(1))
                    }
                    None => return Err(bad(st.span(), "start = \"bridge\" needs after = the previous turn".into())),
                },
                _ => return Err(bad(st.span(), "start must be a token position or \"bridge\"".into())),
            };
            if s > i64::from(specs[i].prompt_len) {
                return Err(bad(st.span(), format!("start {s} is past the prompt ({} tokens)", specs[i].prompt_len)));
            }
            specs[i].rows_start = s as u32;
        }
        let arrivals = match raw.bounds.arrivals.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
            None | Some(("in-order", _)) => Arrivals::InOrder,
            Some(("any", _)) => Arrivals::Any,
            Some((other, sp)) => {
                return Err(bad(sp, format!("arrivals must be \"in-order\" or \"any\", got \"{other}\"")))
            }
        };
        let stream_input = match raw.bounds.stream_input.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
            None | Some(("any", _)) => StreamInput::Any,
            Some(("when-parked", _)) => StreamInput::WhenParked,
            Some((other, sp)) => {
                return Err(bad(sp, format!("stream_input must be \"any\" or \"when-parked\", got \"{other}\"")))
            }
        };
        let total: u32 = specs.iter().chain(sessions.iter().flatten()).map(|s| s.tokens.len() as u32).sum();
        let progress_steps = raw.bounds.progress_steps.unwrap_or(2 * total + 4 * specs.len() as u32 + 4);
        let faults = Faults {
            abort: raw.faults.abort,
            error: raw.faults.error,
            load_failure: raw.faults.load_failure,
            max_load_failures: raw.faults.max_load_failures,
        };
        let pd_pair = cfg.is_nixl_producer() && cfg.router_replay.is_some();
        if faults.load_failure && cfg.offload().is_none() && cfg.mooncake().is_none() && !pd_pair {
            return Err(KvmcError::input(
                path,
                1,
                "faults.load_failure needs connector = \"offloading\" or \"mooncake\", or a P/D pair (nixl with [router_replay]: the decoder's reads fail) (SimpleCPU's worker never reports load failures)",
            ));
        }
        let mut workload = Workload::with_sessions(b, specs, sessions);
        let mut cfg = cfg;
        if let (ConnectorConfig::Mooncake(m) | ConnectorConfig::NixlStore(m), Some(raw_mc)) =
            (&mut cfg.connector, &raw.mooncake)
        {
            mooncake::resolve_preload(m, raw_mc, &mut workload, &bad)?;
        }
        let scope = Scope {
            name: name.to_string(),
            path: path.to_path_buf(),
            description: raw.description,
            profile,
            cfg,
            workload,
            after,
            faults,
            arrivals,
            stream_input,
            progress_steps,
        };
        Ok((scope, warnings))
    }
}

/// A model file's description and replay table (for `kvmc replay`).
pub(crate) fn raw_parts(raw: RawScope) -> (String, Option<crate::scope::replay::RawReplay>) {
    (raw.description, raw.replay)
}

/// A replay model (a `[replay]` table and no `[[request]]`): `kvmc replay` reads it, the
/// checker does not.
pub fn is_replay_model(path: &Path) -> bool {
    let Ok(text) = read_text(path) else { return false };
    toml::from_str::<RawScope>(&text).is_ok_and(|r| r.replay.is_some() && r.requests.is_empty())
}
