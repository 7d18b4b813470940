//! `kvmc replay TRACE --model MODEL`: the reference implementation over a trace (docs/replay.md).
//! Ctrl-C stops a trace replay between steps: the report of what was reached, marked
//! incomplete, then exit 130.

use crate::error::{exit, KvmcError, Result};
use crate::replay::trace::{Format, Trace};
use crate::replay::{self, report, Options};
use crate::scope::replay::ReplayModel;
use clap::{Args, ValueEnum};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum OutFormat {
    /// For people.
    Text,
    /// One JSON document (docs/schema/).
    Json,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormat {
    /// A `.toml` file is a kvmc scenario; JSONL is `mooncake-delta` if any row has a session_id.
    Auto,
    /// Every row is a whole prompt (sessions only order the rows in time).
    Mooncake,
    /// A session's later row carries only its new input.
    MooncakeDelta,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// A Mooncake JSONL trace, or a kvmc scenario file (.toml).
    pub trace: PathBuf,
    /// The replay model (a model file with a [replay] table; a scenario names its own model).
    #[arg(short, long)]
    pub model: Option<PathBuf>,
    /// Use this profile instead of the model's (or scenario's) own.
    #[arg(short, long)]
    pub profile: Option<String>,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(short = 'b', long)]
    pub variant: Option<String>,
    /// How to read a JSONL trace (a .toml file is a scenario).
    #[arg(long, value_enum, default_value = "auto")]
    pub trace_format: TraceFormat,
    /// Report format: text or json (docs/schema/replay.v1.json, replay-scenario.v1.json).
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: OutFormat,
    /// One row per request (text table, or "requests" in JSON).
    #[arg(long)]
    pub per_request: bool,
    /// One row per session (its turns added up) and a total: prompt, G1 hits, restored,
    /// prefill, recomputed, preemptions ("sessions" in JSON).
    #[arg(long)]
    pub per_session: bool,
    /// Also evaluate every invariant over the whole state every N engine steps (1: after
    /// every action, cross-checking the incremental evaluation).
    #[arg(long)]
    pub full_check_every: Option<u64>,
    /// Where a violation's model file and scenario are written (default: current directory).
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Replay only the first N requests of the trace.
    #[arg(short = 'n', long, value_name = "N")]
    pub limit: Option<usize>,
    /// Do not evaluate this always-property (repeatable): e.g. final-store-kept, a quality
    /// finding every release violates, to replay small host tiers to the end.
    #[arg(long, value_name = "PROPERTY")]
    pub skip_property: Vec<String>,
    /// Scenarios: show every action, not only the last few.
    #[arg(short, long)]
    pub verbose: bool,
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn out(s: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}

pub fn run(a: ReplayArgs) -> Result<i32> {
    let scenario = match a.trace_format {
        TraceFormat::Auto => replay::is_scenario(&a.trace),
        _ => false,
    };
    if a.limit == Some(0) {
        return Err(KvmcError::Usage("--limit 0 replays nothing: give a positive number of requests".into()));
    }
    if scenario && a.limit.is_some() {
        return Err(KvmcError::Usage("--limit applies to JSONL traces; a scenario replays all its actions".into()));
    }
    if scenario {
        let o =
            replay::scenario::run_scenario(&a.trace, a.model.as_deref(), a.profile.as_deref(), a.variant.as_deref())?;
        match a.format {
            OutFormat::Text => print!("{}", report::scenario_text(&o, a.verbose)),
            OutFormat::Json => {
                println!("{}", serde_json::to_string_pretty(&report::scenario_json(&o)).unwrap_or_default())
            }
        }
        return Ok(if o.violation.is_some() { exit::VERDICT } else { exit::OK });
    }
    let Some(model_path) = &a.model else {
        return Err(KvmcError::Usage("kvmc replay TRACE needs --model MODEL (a replay model file)".into()));
    };
    let model = ReplayModel::load(model_path)?;
    model.warnings.iter().for_each(|w| eprintln!("{w}"));
    let profile = a.profile.as_deref().unwrap_or(&model.profile);
    crate::system::rules::resolve(profile, a.variant.as_deref()).map_err(KvmcError::Usage)?;
    if let Some(v) = a.variant.as_deref() {
        // As for `check`: a variant that changes nothing this model reads is refused (replay
        // injects no load failures).
        crate::check::gate::variant_applies_to(&model.name, &model.cfg, false, profile, v)
            .map_err(|why| KvmcError::Usage(format!("--variant {v}: {why}")))?;
    }
    let fmt = match a.trace_format {
        TraceFormat::Auto => None,
        TraceFormat::Mooncake => Some(Format::Mooncake),
        TraceFormat::MooncakeDelta => Some(Format::MooncakeDelta),
    };
    let mut trace = Trace::load(&a.trace, model.replay.trace_block_size, fmt)?;
    if let Some(n) = a.limit {
        if n > trace.rows.len() {
            eprintln!("note: --limit {n} is beyond the trace's {} requests: replaying all of them", trace.rows.len());
        }
        truncate(&mut trace, n);
    }
    crate::stop::catch_interrupt();
    let opts = Options {
        profile: a.profile.clone(),
        variant: a.variant.clone(),
        full_check_every: a.full_check_every,
        out_dir: a.out.clone(),
        progress: !super::quiet() && std::io::stderr().is_terminal(),
        skip_properties: a.skip_property.clone(),
    };
    let o = replay::run_trace(&trace, &model, &opts)?;
    match a.format {
        OutFormat::Text => {
            out(&report::text(&o));
            if a.per_request {
                out(&report::requests_text(&o));
            }
            if a.per_session {
                out(&report::sessions_text(&o));
            }
        }
        OutFormat::Json => out(&format!("{:#}\n", report::json(&o, a.per_request, a.per_session))),
    }
    Ok(if o.finding.is_some() {
        exit::VERDICT
    } else if o.interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}

/// Keep the first `n` rows (and cut sessions there).
pub fn truncate(t: &mut Trace, n: usize) {
    t.rows.truncate(n);
    let len = t.rows.len() as u32;
    for r in &mut t.rows {
        if r.next.is_some_and(|x| x >= len) {
            r.next = None;
        }
    }
}
