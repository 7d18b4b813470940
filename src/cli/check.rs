//! `kvmc check`: plan the explorations, run them `--jobs` at a time, print the report. Ctrl-C,
//! a deadline or the memory budget stop the explorations running (their rows are
//! `incomplete`, with the counts reached); the report is printed all the same (exit 130 after
//! Ctrl-C). If an exploration does not stop within the grace, the watchdog prints the same
//! partial report from the counts each exploration published and ends the process.

use crate::check::gate::{self, Job, Row};
use crate::check::specs;
use crate::check::{RunOpts, Strategy, Verdict};
use crate::error::{exit, KvmcError, Result};
use crate::model::KvModel;
use crate::report;
use crate::stop::{self, StopReason, Watch};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The most `--threads` accepted.
pub const MAX_THREADS: u64 = 1024;

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum Format {
    Text,
    Json,
    Junit,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tier {
    /// The CI gate: every expectation of the fast tier.
    Fast,
    /// The deep tier: workload-generic scopes (`tier = "deep"` expectation files).
    Deep,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum StrategyArg {
    Bfs,
    Dfs,
    Simulate,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Model files to check (all their properties, each expected to hold). None: the CI gate.
    pub paths: Vec<PathBuf>,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(short = 'b', long)]
    pub variant: Option<String>,
    /// Use this profile instead of the model's own (vllm-0.24, vllm-0.32, vllm-0.33, ...).
    #[arg(short, long)]
    pub profile: Option<String>,
    /// Check only this property (repeatable).
    #[arg(short = 'P', long = "property", value_name = "PROPERTY")]
    pub properties: Vec<String>,
    /// Search strategy: bfs (exhaustive, shortest counterexamples), dfs, or simulate (random
    /// walks, never `holds`).
    #[arg(long, value_enum, default_value = "bfs")]
    pub strategy: StrategyArg,
    /// Explorer threads per exploration (1 to 1024): the BFS expands each level on this many
    /// threads (same counts and counterexamples for any number); dfs and simulate run on one.
    /// --jobs runs explorations in parallel.
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=MAX_THREADS))]
    pub threads: u64,
    /// Symmetry reduction in the BFS: requests with the same role are interchangeable
    /// (docs/checker.md). Off by default: unique-state counts stay those of the full graph.
    #[arg(long, value_enum, default_value = "off")]
    pub symmetry: OnOff,
    /// Explorations run in parallel (default: available cores).
    #[arg(short, long)]
    pub jobs: Option<usize>,
    /// Stop an exploration before it holds more than this many distinct states (simulate:
    /// states visited; default 100000 for simulate when neither this nor --timeout is given).
    /// Verdicts become incomplete.
    #[arg(long)]
    pub max_states: Option<usize>,
    /// Do not expand states at this depth or deeper (verdicts become incomplete).
    #[arg(long)]
    pub max_depth: Option<usize>,
    /// Stop an exploration after this many seconds (verdicts become incomplete).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Stop the explorations running when the process's resident memory reaches this size
    /// (512M, 4G, 1.5GiB, or none); verdicts become incomplete. Default: 80% of the machine's
    /// (or the cgroup's) memory.
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
    /// Seed for --strategy simulate.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Report format: text, json (docs/schema/check.v1.json) or junit.
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: Format,
    /// Also write the JUnit report to FILE (the text or JSON report still goes to stdout):
    /// one run gives the CI log and its test view (docs/ci.md).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write the JSON report to FILE (docs/schema/check.v1.json).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write every counterexample here (JSON steps, ITF, DOT, scenario).
    #[arg(short, long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Run only slice I of N of the planned explorations ("I/N", 1-based); a `[workload]`
    /// model's workloads are split the same way. `kvmc merge` joins the shards' JSON reports.
    #[arg(long)]
    pub shard: Option<String>,
    /// With no path: which expectations to run (fast: the CI gate; deep: the deep tier).
    #[arg(long, value_enum, default_value = "fast")]
    pub tier: Tier,
    /// Print every counterexample with its final state, not only unexpected ones.
    #[arg(short, long)]
    pub verbose: bool,
    /// Read the specs here instead of the ones built into kvmc.
    #[arg(long, value_name = "DIR")]
    pub specs: Option<PathBuf>,
    /// Where the gate finds the models its specs name (default: ./models, else the models
    /// built into kvmc).
    #[arg(short = 'M', long, value_name = "DIR", default_value = "models")]
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
    if let Some(t) = a.timeout {
        if !(t > 0.0 && t.is_finite()) {
            return Err(KvmcError::Usage("--timeout must be a positive number of seconds".into()));
        }
    }
    let grace = stop::grace_from_env().map_err(KvmcError::Usage)?;
    let (max_memory, memory_note) = match &a.max_memory {
        Some(s) => (stop::parse_size(s).map_err(|e| KvmcError::Usage(format!("--max-memory {e}")))?, "--max-memory"),
        None => (stop::default_memory_budget(), "the default, 80% of the machine's memory"),
    };
    let opts = RunOpts {
        strategy: match a.strategy {
            StrategyArg::Bfs => Strategy::Bfs,
            StrategyArg::Dfs => Strategy::Dfs,
            StrategyArg::Simulate => Strategy::Simulate,
        },
        threads: a.threads as usize,
        symmetry: a.symmetry == OnOff::On,
        max_states: a.max_states,
        max_depth: a.max_depth,
        timeout: a.timeout.map(Duration::from_secs_f64),
        seed: a.seed,
        max_memory,
        watch: None,
    };
    if a.threads > 1 && opts.strategy != Strategy::Bfs {
        eprintln!(
            "note: --threads {} has no effect with --strategy {}: it explores on one thread (only bfs uses several); --jobs N runs N explorations in parallel",
            a.threads,
            opts.strategy.as_str()
        );
    }
    if opts.symmetry && opts.strategy != Strategy::Bfs {
        eprintln!("note: --symmetry on has no effect with --strategy {}: only bfs reduces", opts.strategy.as_str());
    }
    let specs_list = specs::load(a.specs.as_deref())?;
    let mut jobs: Vec<Job> = if a.paths.is_empty() {
        let models = crate::check::builtin_models::resolve(&a.models)?;
        gate::check_models_dir(&models)?;
        if a.variant.is_some() || a.profile.is_some() || !a.properties.is_empty() {
            return Err(KvmcError::Usage("--variant, --profile and --property apply to explicit model paths; with no path kvmc runs the specs' expectations".into()));
        }
        gate::plan_tier(&specs_list, &models, a.tier == Tier::Deep)?
    } else {
        if a.tier == Tier::Deep {
            return Err(KvmcError::Usage(
                "--tier applies to the gate (no model path): it picks the specs' expectations".into(),
            ));
        }
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
        jobs = crate::check::family::shard_jobs(jobs, i, n);
        if jobs.is_empty() {
            return Err(KvmcError::Usage(format!("--shard {s} selects nothing: the plan has {planned} explorations")));
        }
    }
    if let Some(g) = grace {
        stop::set_grace(g);
    }
    stop::catch_interrupt();
    let width = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1);
    if matches!(a.format, Format::Text) && !super::quiet() {
        out(&header(&opts, jobs.len(), width, memory_note));
    }
    let shard = a.shard.as_deref().map(parse_shard).transpose()?;
    let mut board = Board::new(jobs, opts, a.format, a.verbose);
    board.files = (a.junit.clone(), a.json.clone());
    board.shard = shard;
    if super::quiet() {
        board.bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    board.tier = if a.paths.is_empty() { Some(a.tier) } else { None };
    let board = Arc::new(board);
    let b = board.clone();
    stop::on_overrun(move |r| b.overrun(r));
    let rows = execute_all(&board, width)?;
    if let Some(dir) = &a.out {
        let find = |r: &Row| {
            if let Some(sc) = r.coverage.as_ref().and_then(|c| c.cx.as_ref()).and_then(|w| w.scope.clone()) {
                return KvModel::new(sc, Some(&r.profile), r.variant.as_deref(), vec![]).ok();
            }
            board
                .jobs
                .iter()
                .find(|j| j.scope.name == r.model && j.variant == r.variant)
                .and_then(|j| KvModel::new(j.scope.clone(), Some(&r.profile), j.variant.as_deref(), vec![]).ok())
        };
        report::write_counterexamples(&rows, dir, &find).map_err(|e| KvmcError::io(dir, e))?;
    }
    Ok(board.emit(&rows).unwrap_or(exit::INTERRUPTED))
}

/// Print to stdout and flush; a closed pipe is not an error.
fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// The run header (text format): what runs, how, and every bound in force.
fn header(opts: &RunOpts, jobs: usize, width: usize, memory_note: &str) -> String {
    let mut bounds = Vec::new();
    match (opts.max_states, opts.state_bound()) {
        (Some(n), _) => bounds.push(format!("--max-states {n}")),
        (None, Some(n)) => bounds
            .push(format!("--max-states {n} (simulate's default when neither --max-states nor --timeout is given)")),
        (None, None) => {}
    }
    if let Some(d) = opts.max_depth {
        bounds.push(format!("--max-depth {d}"));
    }
    if let Some(t) = opts.timeout {
        bounds.push(format!("--timeout {}", t.as_secs_f64()));
    }
    let strategy = match opts.strategy {
        Strategy::Bfs => "bfs (shortest counterexamples)".to_string(),
        Strategy::Dfs => "dfs".to_string(),
        Strategy::Simulate => {
            format!("simulate (seed {}; random walks never exhaust a model: no verdict is holds)", opts.seed)
        }
    };
    let memory = match opts.max_memory {
        Some(m) => format!("memory budget {} ({memory_note})", stop::human_bytes(m)),
        None => "no memory budget".to_string(),
    };
    format!(
        "kvmc check: {jobs} exploration{}, {} at a time, each on {}; strategy {strategy}{}; bounds: {}; {memory}\n",
        if jobs == 1 { "" } else { "s" },
        width.min(jobs.max(1)),
        match opts.threads {
            t if t > 1 && opts.strategy == Strategy::Bfs => format!("{t} threads"),
            _ => "one thread".to_string(),
        },
        if opts.symmetry && opts.strategy == Strategy::Bfs { ", symmetry on" } else { "" },
        if bounds.is_empty() { "none".to_string() } else { bounds.join(", ") },
    )
}

/// The explorations of one `kvmc check` and what each reached: the report is built from it,
/// and so is the partial report the watchdog prints when an exploration does not stop in time.
struct Board {
    jobs: Vec<Job>,
    opts: RunOpts,
    format: Format,
    verbose: bool,
    results: Vec<Mutex<Option<Result<Vec<Row>>>>>,
    /// The stop signal of each exploration that started.
    watches: Vec<Mutex<Option<Arc<Watch>>>>,
    /// Set by whoever prints the report first (the run, or the watchdog).
    printed: Mutex<bool>,
    bar: indicatif::ProgressBar,
    /// The explorations running now (the progress bar's message).
    running: Mutex<std::collections::BTreeMap<usize, String>>,
    /// `--shard I/N` (written into the JSON report for `kvmc merge`).
    shard: Option<(usize, usize)>,
    /// The gate's tier (None for explicit model paths).
    tier: Option<Tier>,
    /// `--junit FILE`, `--json FILE`: the report also written there.
    files: (Option<PathBuf>, Option<PathBuf>),
}

impl Board {
    fn new(jobs: Vec<Job>, opts: RunOpts, format: Format, verbose: bool) -> Self {
        let bar =
            indicatif::ProgressBar::with_draw_target(Some(jobs.len() as u64), indicatif::ProgressDrawTarget::stderr());
        bar.set_style(crate::util::progress_style("explorations"));
        Board {
            results: jobs.iter().map(|_| Mutex::new(None)).collect(),
            watches: jobs.iter().map(|_| Mutex::new(None)).collect(),
            jobs,
            opts,
            format,
            verbose,
            printed: Mutex::new(false),
            running: Mutex::new(Default::default()),
            bar,
            shard: None,
            tier: None,
            files: (None, None),
        }
    }

    /// Run job `i` (or, after Ctrl-C, record that it never started).
    fn run_job(&self, i: usize) {
        let job = &self.jobs[i];
        self.show_running(i, Some(job));
        let r = if stop::interrupted() {
            Ok(incomplete_rows(job, (0, 0, 0), 0.0, "interrupt (Ctrl-C) before it started".into()))
        } else {
            let w = Watch::start(self.opts.timeout, self.opts.max_memory);
            *self.watches[i].lock().unwrap() = Some(w.clone());
            gate::execute(job, &RunOpts { watch: Some(w), ..self.opts.clone() })
        };
        *self.results[i].lock().unwrap() = Some(r);
        self.show_running(i, None);
        self.bar.inc(1);
    }

    /// Job `i` starts (Some) or ends (None): the bar names the models being explored.
    fn show_running(&self, i: usize, job: Option<&Job>) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        match job {
            Some(j) => {
                let v = j.variant.as_deref().map_or(String::new(), |v| format!(" --variant {v}"));
                running.insert(i, format!("{}{v}", j.scope.name));
            }
            None => {
                running.remove(&i);
            }
        }
        self.bar.set_message(running.values().cloned().collect::<Vec<_>>().join(", "));
    }

    /// Print the report once; the exit code, or None if the watchdog printed it first.
    fn emit(&self, rows: &[Row]) -> Option<i32> {
        let mut printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        if *printed {
            return None;
        }
        *printed = true;
        let peak = stop::peak_rss_bytes();
        if let Some(p) = &self.files.0 {
            if let Err(e) = std::fs::write(p, report::junit(rows)) {
                eprintln!("error: {}: {e}", p.display());
            }
        }
        if let Some(p) = &self.files.1 {
            if let Err(e) = std::fs::write(p, format!("{:#}\n", self.json_report(rows, peak))) {
                eprintln!("error: {}: {e}", p.display());
            }
        }
        match self.format {
            Format::Text => out(&report::text(rows, self.verbose)),
            Format::Json => out(&format!("{:#}\n", self.json_report(rows, peak))),
            Format::Junit => out(&report::junit(rows)),
        }
        Some(if stop::interrupted() { exit::INTERRUPTED } else { gate::exit_code(rows) })
    }

    /// The JSON report with the run's settings.
    fn json_report(&self, rows: &[Row], peak: Option<u64>) -> serde_json::Value {
        let mut v = report::json(rows, peak);
        v["run"] = serde_json::json!({
            "strategy": self.opts.strategy.as_str(),
            "threads": if self.opts.strategy == Strategy::Bfs { self.opts.threads } else { 1 },
            "symmetry": self.opts.symmetry && self.opts.strategy == Strategy::Bfs,
            "seed": self.opts.seed,
            "max_states": self.opts.state_bound(),
            "max_depth": self.opts.max_depth,
            "timeout_seconds": self.opts.timeout.map(|t| t.as_secs_f64()),
            "max_memory_bytes": self.opts.max_memory,
            "interrupted": stop::interrupted(),
            "shard": self.shard.map(|(i, n)| serde_json::json!({"index": i, "count": n})),
            "tier": self.tier.map(|t| if t == Tier::Deep { "deep" } else { "fast" }),
        });
        v
    }

    /// The watchdog's path: an exploration outlived the grace after it was told to stop.
    /// Print the partial report (finished rows, and every other exploration `incomplete`
    /// with the counts it published) and end the process.
    fn overrun(&self, reason: StopReason) {
        self.bar.finish_and_clear();
        let mut rows = Vec::new();
        let grace = stop::grace().as_secs_f64();
        for (i, job) in self.jobs.iter().enumerate() {
            let finished = match self.results[i].try_lock() {
                Ok(r) => match r.as_ref() {
                    Some(Ok(done)) => Some(Some(done.clone())),
                    Some(Err(_)) => Some(None), // a bad input: the run's own error path reports it
                    None => None,
                },
                Err(_) => None, // being stored right now: report it from its watch
            };
            match finished {
                Some(done) => rows.extend(done.unwrap_or_default()),
                None => {
                    let w = self.watches[i].lock().unwrap_or_else(|e| e.into_inner()).clone();
                    rows.extend(match w {
                        Some(w) if w.is_done() => incomplete_rows(
                            job,
                            w.counts(),
                            w.seconds(),
                            format!(
                                "{}: the watchdog ended the run before this exploration's report was built",
                                w.poll().map_or("its report was being built".to_string(), |r| self.opts.describe(r))
                            ),
                        ),
                        Some(w) => incomplete_rows(
                            job,
                            w.counts(),
                            w.seconds(),
                            format!(
                                "{} (the exploration did not stop within the grace of {grace:.1}s; the watchdog ended the run)",
                                self.opts.describe(w.poll().unwrap_or(reason))
                            ),
                        ),
                        None => incomplete_rows(
                            job,
                            (0, 0, 0),
                            0.0,
                            format!("not started: the watchdog ended the run ({})", self.opts.describe(reason)),
                        ),
                    });
                }
            }
        }
        if let Some(code) = self.emit(&rows) {
            let code = if reason == StopReason::Interrupted { exit::INTERRUPTED } else { code };
            std::process::exit(code);
        }
    }
}

/// The rows of an exploration that reached no verdict: every check `incomplete`.
fn incomplete_rows(job: &Job, (unique, states, depth): (usize, usize, usize), seconds: f64, why: String) -> Vec<Row> {
    let profile = job.profile.clone().unwrap_or_else(|| job.scope.profile.clone());
    job.checks
        .iter()
        .map(|(p, expected)| Row {
            model: job.scope.name.clone(),
            profile: profile.clone(),
            variant: job.variant.clone(),
            property: p.clone(),
            expected: expected.map(|v| if v { Verdict::Violated } else { Verdict::Holds }),
            verdict: Verdict::Incomplete,
            unreached: Vec::new(),
            unique_states: unique,
            states,
            max_depth: depth,
            seconds,
            cut_by: Some(why.clone()),
            counterexample: None,
            coverage: None,
        })
        .collect()
}

/// Run the jobs, `width` at a time, keeping the planned order in the output.
fn execute_all(board: &Board, width: usize) -> Result<Vec<Row>> {
    let n = board.jobs.len();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..width.min(n.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= n {
                    break;
                }
                board.run_job(i);
            });
        }
    });
    board.bar.finish_and_clear();
    let mut rows = Vec::new();
    for r in &board.results {
        let r = r.lock().unwrap().take().expect("every job ran");
        rows.extend(r?);
    }
    Ok(rows)
}
