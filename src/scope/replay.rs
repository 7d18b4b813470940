//! Replay models: a model file's `[engine]` and `[offload]` tables plus a `[replay]` table
//! (docs/models.md, docs/replay.md). Requests come from the trace, not from the file.
//!
//! ```toml
//! [replay]
//! load = "closed-loop"      # or "timestamps"
//! concurrency = 64          # closed loop: requests kept unfinished
//! prefill_ms = 60.0         # a step that computes any prefill token
//! decode_ms = 20.0          # a step that only decodes
//! store_steps = 0           # a store built in step k finishes within step k + 1, which submits it
//! load_steps = 0            # a load built (and submitted) in step k finishes at the end of step k
//! ```

use crate::error::{line_of_offset, read_text, KvmcError, Result};
use crate::scope::{parse_engine, raw_parts};
use crate::system::EngineConfig;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReplay {
    #[serde(default)]
    load: Option<Spanned<String>>,
    #[serde(default)]
    concurrency: Option<Spanned<u32>>,
    #[serde(default)]
    sessions: Option<Spanned<u32>>,
    #[serde(default)]
    same_time: Option<Spanned<String>>,
    #[serde(default)]
    prefill_ms: Option<Spanned<f64>>,
    #[serde(default)]
    decode_ms: Option<Spanned<f64>>,
    #[serde(default)]
    store_steps: Option<Spanned<u32>>,
    #[serde(default)]
    load_steps: Option<Spanned<u32>>,
    #[serde(default)]
    trace_block_size: Option<Spanned<u32>>,
    #[serde(default)]
    speedup: Option<Spanned<f64>>,
    #[serde(default)]
    progress_steps: Option<Spanned<u32>>,
    #[serde(default)]
    full_check_every: Option<u64>,
    #[serde(default)]
    engines: Option<Spanned<u32>>,
    #[serde(default)]
    router: Option<Spanned<String>>,
    #[serde(default)]
    pairs: Option<Spanned<u32>>,
}

/// When requests arrive.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Load {
    /// At the trace's timestamps (divided by `speedup`); a session's later turn `delay` ms
    /// after its previous turn finished.
    Timestamps,
    /// Keep this many requests unfinished, adding them in trace order (a session's later turn
    /// only once its previous turn finished and its `delay` passed).
    ClosedLoop(u32),
    /// Keep this many sessions in flight: a session (a row without `session_id` is a session
    /// of one turn) starts, in trace order, when fewer are active, and stays active until its
    /// last turn finished; a later turn arrives `delay` ms (its think time) after the
    /// previous turn finished, whatever the other sessions do.
    Sessions(u32),
}

/// What happens first when an arrival falls on the model time at which an engine's step
/// starts (the time its previous step, with any finishes, ended).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SameTime {
    /// The arrival is admitted first and joins that step (kvmc's default).
    ArrivalsFirst,
    /// The step is scheduled first: the arrival joins the step after (event-queue simulators
    /// that process a batch's end before arrivals at the same timestamp).
    StepFirst,
}

/// How traffic is spread over several engines.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Router {
    /// Request i goes to engine i mod N (a session's turns stay on its first turn's engine).
    RoundRobin,
    /// The engine with the fewest unfinished requests (ties: lowest index); sessions stick.
    LeastLoaded,
    /// The engine that served the request's longest trace-block prefix most recently
    /// (ties and misses: least loaded); sessions stick.
    Prefix,
}

impl Router {
    pub fn name(self) -> &'static str {
        match self {
            Router::RoundRobin => "round-robin",
            Router::LeastLoaded => "least-loaded",
            Router::Prefix => "prefix",
        }
    }
}

/// The `[replay]` table, with defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayCfg {
    pub load: Load,
    /// Model time of a step that computes any prefill token, in microseconds.
    pub prefill_us: u64,
    /// Model time of a step that only decodes, in microseconds.
    pub decode_us: u64,
    /// A store built in step k is submitted at the start of step k + 1. 0 (the default): it
    /// finishes within that step, before the worker reports (vLLM when a copy takes less than
    /// a forward pass); n > 0: it finishes at the end of step k + n and is reported in the
    /// step after.
    pub store_steps: u32,
    /// A load built in step k (and submitted in it) completes at the end of step k +
    /// load_steps; 0 (the default) is vLLM with a copy shorter than a step: the request
    /// waits one step in WAITING_FOR_REMOTE_KVS.
    pub load_steps: u32,
    /// Tokens per trace block (`hash_ids` entry): 512 for Mooncake.
    pub trace_block_size: u32,
    /// Timestamps and delays are divided by this.
    pub speedup: f64,
    /// requests-finish: more engine steps than this without a sampled token, a finish or an
    /// arrival is a livelock (at most 65535).
    pub progress_steps: u32,
    /// Also evaluate every invariant over the whole state every this many steps (0: only at
    /// the end; 1: after every action, and compare with the incremental verdicts).
    pub full_check_every: u64,
    pub engines: u32,
    pub router: Router,
    pub same_time: SameTime,
    /// P/D models (`connector = "nixl"` with `[router_replay]`): prefill/decode pairs behind
    /// one router (src/replay/pd.rs).
    pub pairs: u32,
}

impl Default for ReplayCfg {
    fn default() -> Self {
        ReplayCfg {
            load: Load::ClosedLoop(64),
            prefill_us: 60_000,
            decode_us: 20_000,
            store_steps: 0,
            load_steps: 0,
            trace_block_size: 512,
            speedup: 1.0,
            progress_steps: 10_000,
            full_check_every: 0,
            engines: 1,
            router: Router::RoundRobin,
            same_time: SameTime::ArrivalsFirst,
            pairs: 1,
        }
    }
}

/// A replay model: one engine configuration (per engine) and the replay settings.
#[derive(Clone, Debug)]
pub struct ReplayModel {
    pub name: String,
    pub path: PathBuf,
    pub description: String,
    pub profile: String,
    pub cfg: EngineConfig,
    pub replay: ReplayCfg,
    /// Settings that are legal but cannot work (`FILE:LINE: warning: ...`), for the caller
    /// to print.
    pub warnings: Vec<String>,
}

/// One engine's pools as a replay reports them, in usable units: block 0 of a block pool
/// (G1, SimpleCPU's CPU pool) is its null block and never holds KV, so `gpu_blocks = 8192`
/// is 8,191 usable blocks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pools {
    pub block_size: u32,
    pub usable_gpu_blocks: u32,
    /// The OffloadingConnector's host tier, in chunks (every chunk usable).
    pub host_chunks: Option<u32>,
    pub blocks_per_chunk: Option<u32>,
    /// SimpleCPU's CPU pool, usable blocks (`cpu_blocks - 1`).
    pub usable_cpu_blocks: Option<u32>,
}

impl Pools {
    pub fn of(cfg: &EngineConfig) -> Pools {
        Pools {
            block_size: cfg.block_size,
            usable_gpu_blocks: cfg.num_gpu_blocks - 1,
            host_chunks: cfg.offload().map(|o| o.host_chunks),
            blocks_per_chunk: cfg.offload().map(|o| o.blocks_per_chunk),
            usable_cpu_blocks: cfg.simple_cpu().map(|c| c.cpu_blocks - 1),
        }
    }

    /// One line for the run header, e.g. "8,191 usable GPU blocks of 16 tokens (gpu_blocks =
    /// 8192 counts the null block); host tier 65,536 chunks of 1 block".
    pub fn text(&self) -> String {
        use crate::util::thousands;
        let mut s = format!(
            "{} usable GPU blocks of {} tokens (gpu_blocks = {} counts the null block)",
            thousands(u64::from(self.usable_gpu_blocks)),
            self.block_size,
            self.usable_gpu_blocks + 1
        );
        if let (Some(c), Some(b)) = (self.host_chunks, self.blocks_per_chunk) {
            s.push_str(&format!(
                "; host tier {} chunks of {b} block{}",
                thousands(u64::from(c)),
                if b == 1 { "" } else { "s" }
            ));
        }
        if let Some(c) = self.usable_cpu_blocks {
            s.push_str(&format!(
                "; CPU pool {} usable blocks (cpu_blocks = {} counts its null block)",
                thousands(u64::from(c)),
                c + 1
            ));
        }
        s
    }
}

/// The most blocks (G1 and SimpleCPU's CPU pool) and host chunks one replay holds over all its
/// engines (docs/models.md, "Limits"): every engine allocates its pools up front.
pub const MAX_TOTAL_BLOCKS: u64 = 16_777_216;
pub const MAX_TOTAL_HOST_CHUNKS: u64 = 4_194_304;

fn ms_to_us(ms: f64) -> u64 {
    (ms * 1000.0).round() as u64
}

impl ReplayModel {
    pub fn load(path: &Path) -> Result<ReplayModel> {
        let text = read_text(path)?;
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        Self::parse(&name, path, &text)
    }

    /// Any model file works: without a `[replay]` table the defaults apply (and its
    /// `[[request]]` entries, if any, are ignored).
    pub fn parse(name: &str, path: &Path, text: &str) -> Result<ReplayModel> {
        let (raw, profile, cfg, warnings) = parse_engine(path, text)?;
        let pd = cfg.connector_kind() == crate::system::ConnectorKind::Nixl;
        if pd && cfg.router_replay.is_none() {
            // Replay's decode instance is the P/D system's (src/system/pd), which needs router
            // replay.
            return Err(KvmcError::input(
                path,
                1,
                "trace replay models NIXL as a P/D pair with router replay: connector = \"nixl\" needs a [router_replay] table",
            ));
        }
        let (description, rr) = raw_parts(raw);
        let mut r = ReplayCfg::default();
        let at = |sp: std::ops::Range<usize>| line_of_offset(text, sp.start);
        let bad = |sp: std::ops::Range<usize>, msg: String| KvmcError::input(path, at(sp), msg);
        let mut rr_engines_line = None;
        if let Some(x) = rr {
            let conc = x.concurrency.as_ref().map(|c| (*c.get_ref(), c.span()));
            if let Some((c, sp)) = &conc {
                if *c == 0 {
                    return Err(bad(sp.clone(), "concurrency must be positive".into()));
                }
            }
            r.load = match x.load.as_ref().map(|s| (s.get_ref().as_str(), s.span())) {
                None | Some(("closed-loop", _)) => Load::ClosedLoop(conc.map_or(64, |c| c.0)),
                Some(("timestamps", sp)) => {
                    if let Some((_, csp)) = conc {
                        return Err(bad(csp, "concurrency goes with load = \"closed-loop\"".into()));
                    }
                    let _ = sp;
                    Load::Timestamps
                }
                Some(("sessions", sp)) => {
                    if let Some((_, csp)) = conc {
                        return Err(bad(csp, "load = \"sessions\" takes sessions = N, not concurrency".into()));
                    }
                    match &x.sessions {
                        Some(n) if *n.get_ref() > 0 => Load::Sessions(*n.get_ref()),
                        Some(n) => return Err(bad(n.span(), "sessions must be positive".into())),
                        None => {
                            return Err(bad(sp, "load = \"sessions\" needs sessions = N (sessions in flight)".into()))
                        }
                    }
                }
                Some((other, sp)) => {
                    return Err(bad(
                        sp,
                        format!("load must be \"closed-loop\", \"timestamps\" or \"sessions\", got \"{other}\""),
                    ))
                }
            };
            if let (Some(n), false) = (&x.sessions, matches!(r.load, Load::Sessions(_))) {
                return Err(bad(n.span(), "sessions goes with load = \"sessions\"".into()));
            }
            if let Some(t) = &x.same_time {
                r.same_time = match t.get_ref().as_str() {
                    "arrivals-first" => SameTime::ArrivalsFirst,
                    "step-first" => SameTime::StepFirst,
                    other => {
                        return Err(bad(
                            t.span(),
                            format!("same_time must be \"arrivals-first\" or \"step-first\", got \"{other}\""),
                        ))
                    }
                };
            }
            for (f, slot) in [(&x.prefill_ms, &mut r.prefill_us), (&x.decode_ms, &mut r.decode_us)] {
                if let Some(v) = f {
                    let ms = *v.get_ref();
                    if !(0.0..=3_600_000.0).contains(&ms) {
                        return Err(bad(v.span(), format!("step times are 0..=3600000 ms, got {ms}")));
                    }
                    *slot = ms_to_us(ms);
                }
            }
            if let Some(s) = &x.store_steps {
                r.store_steps = *s.get_ref();
            }
            if let Some(s) = &x.load_steps {
                r.load_steps = *s.get_ref();
            }
            if let Some(t) = &x.trace_block_size {
                if !(1..=1_048_576).contains(t.get_ref()) {
                    return Err(bad(t.span(), format!("trace_block_size must be 1..=1048576, got {}", t.get_ref())));
                }
                r.trace_block_size = *t.get_ref();
            }
            if let Some(s) = &x.speedup {
                let v = *s.get_ref();
                if !(v > 0.0 && v.is_finite()) {
                    return Err(bad(s.span(), format!("speedup must be positive, got {v}")));
                }
                r.speedup = v;
            }
            if let Some(p) = &x.progress_steps {
                if !(1..=65_535).contains(p.get_ref()) {
                    return Err(bad(p.span(), format!("progress_steps must be 1..=65535, got {}", p.get_ref())));
                }
                r.progress_steps = *p.get_ref();
            }
            // A copy that takes progress_steps steps leaves an engine idle long enough for
            // requests-finish to call it a livelock (and a huge one never finishes).
            for (key, v) in [("store_steps", &x.store_steps), ("load_steps", &x.load_steps)] {
                if let Some(v) = v.as_ref().filter(|v| *v.get_ref() >= r.progress_steps) {
                    return Err(bad(
                        v.span(),
                        format!(
                            "{key} must be 0..={} (below progress_steps = {}: a copy that takes that many \
                             steps looks like a livelock to requests-finish), got {}",
                            r.progress_steps - 1,
                            r.progress_steps,
                            v.get_ref()
                        ),
                    ));
                }
            }
            if let Some(f) = x.full_check_every {
                r.full_check_every = f;
            }
            if let Some(n) = &x.engines {
                if !(1..=1024).contains(n.get_ref()) {
                    return Err(bad(n.span(), format!("engines must be 1..=1024, got {}", n.get_ref())));
                }
                r.engines = *n.get_ref();
                rr_engines_line = Some(at(n.span()));
            }
            if let Some(n) = &x.pairs {
                if !pd {
                    return Err(bad(
                        n.span(),
                        "pairs goes with a P/D model (connector = \"nixl\" with [router_replay]); use engines".into(),
                    ));
                }
                if !(1..=512).contains(n.get_ref()) {
                    return Err(bad(n.span(), format!("pairs must be 1..=512, got {}", n.get_ref())));
                }
                if let Some(e) = &x.engines {
                    return Err(bad(e.span(), "a P/D model takes pairs = N, not engines".into()));
                }
                r.pairs = *n.get_ref();
                rr_engines_line = Some(at(n.span()));
            }
            if pd {
                if let Some(e) = &x.engines {
                    return Err(bad(e.span(), "a P/D model takes pairs = N, not engines".into()));
                }
            }
            if let Some(ro) = &x.router {
                r.router = match ro.get_ref().as_str() {
                    "round-robin" => Router::RoundRobin,
                    "least-loaded" => Router::LeastLoaded,
                    "prefix" => Router::Prefix,
                    other => {
                        return Err(bad(
                            ro.span(),
                            format!("router must be \"round-robin\", \"least-loaded\" or \"prefix\", got \"{other}\""),
                        ))
                    }
                };
            }
        }
        // Every engine allocates its pools up front: bound their sum.
        let engines = if pd { 2 * u64::from(r.pairs) } else { u64::from(r.engines) };
        let engines_at = rr_engines_line.unwrap_or(1);
        let blocks = u64::from(cfg.num_gpu_blocks) + cfg.simple_cpu().map_or(0, |c| u64::from(c.cpu_blocks));
        if engines * blocks > MAX_TOTAL_BLOCKS {
            return Err(KvmcError::input(
                path,
                engines_at,
                format!(
                    "{engines} engines of {blocks} blocks (gpu_blocks{}) are {} blocks, more than the {MAX_TOTAL_BLOCKS} \
                     one replay holds: at most {} engines of this size",
                    if cfg.simple_cpu().is_some() { " + cpu_blocks" } else { "" },
                    engines * blocks,
                    MAX_TOTAL_BLOCKS / blocks
                ),
            ));
        }
        if let Some(o) = cfg.offload() {
            let chunks = u64::from(o.host_chunks);
            if engines * chunks > MAX_TOTAL_HOST_CHUNKS {
                return Err(KvmcError::input(
                    path,
                    engines_at,
                    format!(
                        "{engines} engines of {chunks} host_chunks are {} host chunks, more than the \
                         {MAX_TOTAL_HOST_CHUNKS} one replay holds: at most {} engines of this size",
                        engines * chunks,
                        MAX_TOTAL_HOST_CHUNKS / chunks
                    ),
                ));
            }
        }
        Ok(ReplayModel {
            name: name.to_string(),
            path: path.to_path_buf(),
            description,
            profile,
            cfg,
            replay: r,
            warnings,
        })
    }
}
