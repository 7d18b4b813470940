//! `kvmc check`.

use crate::check::gate::{self, Job, Row};
use crate::check::specs;
use crate::check::{RunOpts, Strategy};
use crate::error::{exit, KvmcError, Result};
use crate::model::KvModel;
use crate::report;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Junit,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum StrategyArg {
    Bfs,
    Dfs,
    Simulate,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Model files to check (all their properties, each expected to hold). None: the CI gate.
    pub paths: Vec<PathBuf>,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(long)]
    pub variant: Option<String>,
    /// Use this profile instead of the model's own.
    #[arg(long)]
    pub profile: Option<String>,
    /// Check only this property (repeatable).
    #[arg(long = "property")]
    pub properties: Vec<String>,
    #[arg(long, value_enum, default_value = "bfs")]
    pub strategy: StrategyArg,
    /// Checker threads per exploration (>1 with bfs: counterexamples may not be shortest).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Explorations run in parallel (default: available cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Stop an exploration after this many generated states (verdicts become incomplete).
    #[arg(long)]
    pub max_states: Option<usize>,
    /// Do not expand states at this depth or deeper (verdicts become incomplete).
    #[arg(long)]
    pub max_depth: Option<usize>,
    /// Stop an exploration after this many seconds (verdicts become incomplete).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Seed for --strategy simulate.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write every counterexample here (JSON steps, ITF, DOT, scenario).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only slice I of N of the planned explorations ("I/N", 1-based).
    #[arg(long)]
    pub shard: Option<String>,
    /// Print every counterexample with its final state, not only unexpected ones.
    #[arg(long)]
    pub verbose: bool,
    /// Read the specs here instead of the ones built into kvmc.
    #[arg(long, value_name = "DIR")]
    pub specs: Option<PathBuf>,
    /// Where the gate finds the models its specs name.
    #[arg(long, value_name = "DIR", default_value = "models")]
    pub models: PathBuf,
}

fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || KvmcError::Usage(format!("--shard {s}: expected I/N with 1 <= I <= N"));
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (i.parse().map_err(|_| bad())?, n.parse().map_err(|_| bad())?);
    if i == 0 || n == 0 || i > n {
        return Err(bad());
    }
    Ok((i, n))
}

pub fn run(a: CheckArgs) -> Result<i32> {
    if a.threads == 0 {
        return Err(KvmcError::Usage("--threads must be at least 1".into()));
    }
    if let Some(t) = a.timeout {
        if !(t > 0.0 && t.is_finite()) {
            return Err(KvmcError::Usage("--timeout must be a positive number of seconds".into()));
        }
    }
    let opts = RunOpts {
        strategy: match a.strategy {
            StrategyArg::Bfs => Strategy::Bfs,
            StrategyArg::Dfs => Strategy::Dfs,
            StrategyArg::Simulate => Strategy::Simulate,
        },
        threads: a.threads,
        max_states: a.max_states,
        max_depth: a.max_depth,
        timeout: a.timeout.map(Duration::from_secs_f64),
        seed: a.seed,
    };
    if a.threads > 1 && opts.strategy == Strategy::Bfs {
        eprintln!("warning: --threads > 1 with bfs: counterexamples may not be the shortest");
    }
    let specs_list = specs::load(a.specs.as_deref())?;
    let mut jobs: Vec<Job> = if a.paths.is_empty() {
        gate::check_models_dir(&a.models)?;
        if a.variant.is_some() || a.profile.is_some() || !a.properties.is_empty() {
            return Err(KvmcError::Usage("--variant, --profile and --property apply to explicit model paths; with no path kvmc runs the specs' expectations".into()));
        }
        gate::plan_specs(&specs_list, &a.models)?
    } else {
        if let Some(p) = &a.profile {
            crate::system::rules::resolve(p, None).map_err(KvmcError::Usage)?;
        }
        if let Some(v) = &a.variant {
            crate::system::rules::resolve("vllm-0.33", Some(v)).map_err(KvmcError::Usage)?;
        }
        gate::plan_paths(&a.paths, a.profile.as_deref(), a.variant.as_deref(), &a.properties, &specs_list)?
    };
    if let Some(s) = &a.shard {
        let (i, n) = parse_shard(s)?;
        let planned = jobs.len();
        jobs = jobs.into_iter().enumerate().filter(|(k, _)| k % n == i - 1).map(|(_, j)| j).collect();
        if jobs.is_empty() {
            return Err(KvmcError::Usage(format!("--shard {s} selects nothing: the plan has {planned} explorations")));
        }
    }
    let rows = execute_all(&jobs, &opts, a.jobs)?;
    if let Some(dir) = &a.out {
        let find = |r: &Row| {
            jobs.iter()
                .find(|j| j.scope.name == r.model && j.variant == r.variant)
                .and_then(|j| KvModel::new(j.scope.clone(), Some(&r.profile), j.variant.as_deref(), vec![]).ok())
        };
        report::write_counterexamples(&rows, dir, &find).map_err(|e| KvmcError::io(dir, e))?;
    }
    let peak = crate::check::run::peak_rss_bytes();
    match a.format {
        Format::Text => print!("{}", report::text(&rows, a.verbose)),
        Format::Json => println!("{}", serde_json::to_string_pretty(&report::json(&rows, peak)).expect("json")),
        Format::Junit => print!("{}", report::junit(&rows)),
    }
    Ok(gate::exit_code(&rows))
}

/// Run the jobs, `parallel` at a time, keeping the planned order in the output.
pub fn execute_all(jobs: &[Job], opts: &RunOpts, parallel: Option<usize>) -> Result<Vec<Row>> {
    let width = parallel.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    let bar =
        indicatif::ProgressBar::with_draw_target(Some(jobs.len() as u64), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} explorations {msg}").expect("template"),
    );
    let results: Vec<Mutex<Option<Result<Vec<Row>>>>> = jobs.iter().map(|_| Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..width.min(jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= jobs.len() {
                    break;
                }
                let r = gate::execute(&jobs[i], opts);
                *results[i].lock().unwrap() = Some(r);
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let mut rows = Vec::new();
    for r in results {
        rows.extend(r.into_inner().unwrap().expect("every job ran")?);
    }
    let _ = exit::OK;
    Ok(rows)
}
