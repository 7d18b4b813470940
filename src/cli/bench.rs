//! `kvmc bench`: exhaustive exploration speed and memory, per model: unique states, states per
//! second, visited-set bytes per state (and the liveness graph's, apart), peak memory, threads,
//! symmetry; with `--stateright`,
//! stateright's own BFS and DFS on the same `Model` side by side (their time over kvmc's).

use crate::check::{self, RunOpts};
use crate::error::{KvmcError, Result};
use crate::model::KvModel;
use crate::props::{self, Kind};
use crate::schema;
use crate::scope::Scope;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Models to measure (default: every model in --models).
    pub paths: Vec<PathBuf>,
    /// Apply a bug variant on top of each model's profile.
    #[arg(short = 'b', long)]
    pub variant: Option<String>,
    /// Explorer threads (1 to 1024, as for `check`).
    #[arg(short, long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=super::check::MAX_THREADS))]
    pub threads: u64,
    /// Symmetry reduction in kvmc's BFS (as `kvmc check --symmetry`).
    #[arg(long, value_enum, default_value = "off")]
    pub symmetry: crate::cli::check::OnOff,
    /// Also explore each model with stateright's own BFS and DFS checkers (same `Model`, same
    /// threads) and print their time against kvmc's as a ratio.
    #[arg(long)]
    pub stateright: bool,
    /// Where the models are (with no path: every model there).
    #[arg(short = 'M', long, value_name = "DIR", default_value = "models")]
    pub models: PathBuf,
    /// Measure trace replay instead: this trace through `--model` (invariants checked after
    /// every action, as `kvmc replay` does).
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// The replay model (with --replay).
    #[arg(short, long, requires = "replay")]
    pub model: Option<PathBuf>,
    /// Replay runs (the fastest is reported with the first's figures).
    #[arg(long, default_value_t = 1, requires = "replay")]
    pub runs: usize,
    /// text (a table) or json (one document, docs/schema/bench.v1.json).
    #[arg(short, long, value_enum, default_value = "text")]
    pub format: super::replay::OutFormat,
}

/// Print the table's lines only for `--format text`.
macro_rules! line {
    ($json:expr, $($t:tt)*) => { if !$json { println!($($t)*) } };
}

fn print_json(models: Vec<schema::BenchModel>, replays: Vec<schema::BenchReplay>) {
    let doc = schema::BenchReport {
        schema_version: schema::SCHEMA_VERSION,
        kvmc_version: env!("CARGO_PKG_VERSION").to_string(),
        models,
        replays,
    };
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
}

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn bench_replay(trace: &std::path::Path, model: &std::path::Path, runs: usize, json: bool) -> Result<i32> {
    use crate::replay::{self, trace::Trace};
    use crate::scope::replay::ReplayModel;
    let m = ReplayModel::load(model)?;
    let mut docs = Vec::new();
    line!(
        json,
        "{:<28} {:>8} {:>10} {:>10} {:>12} {:>9} {:>9} {:>10} {:>9}",
        "trace",
        "requests",
        "steps",
        "actions",
        "checks",
        "wall s",
        "cpu s",
        "steps/s",
        "peak MiB"
    );
    let mut best: Option<(f64, f64)> = None;
    for _ in 0..runs.max(1) {
        let c0 = cpu_seconds();
        let t0 = std::time::Instant::now();
        let t = Trace::load(trace, m.replay.trace_block_size, None)?;
        let o = replay::run_trace(&t, &m, &replay::Options::default())?;
        let wall = t0.elapsed().as_secs_f64();
        let cpu = match (c0, cpu_seconds()) {
            (Some(a), Some(b)) => b - a,
            _ => f64::NAN,
        };
        let peak = o.peak_rss_bytes.map_or(0.0, |b| b as f64 / 1048576.0);
        let name = trace.file_name().map_or(String::new(), |f| f.to_string_lossy().into_owned());
        docs.push(schema::BenchReplay {
            trace: name.clone(),
            requests: o.metrics.finished,
            steps: o.metrics.steps,
            actions: o.metrics.actions,
            evaluations: o.checks.evaluations,
            seconds: wall,
            cpu_seconds: cpu.is_finite().then_some(cpu),
            steps_per_second: o.metrics.steps as f64 / wall.max(1e-9),
            peak_rss_bytes: o.peak_rss_bytes,
            violation: o.finding.is_some(),
        });
        line!(
            json,
            "{:<28} {:>8} {:>10} {:>10} {:>12} {:>9.2} {:>9.2} {:>10.0} {:>9.1}{}",
            name,
            o.metrics.finished,
            o.metrics.steps,
            o.metrics.actions,
            o.checks.evaluations,
            wall,
            cpu,
            o.metrics.steps as f64 / wall.max(1e-9),
            peak,
            if o.finding.is_some() { "  (VIOLATION)" } else { "" }
        );
        best = Some(best.map_or((wall, cpu), |(w, c)| (w.min(wall), c.min(cpu))));
    }
    if let (Some((w, c)), true) = (best, runs > 1) {
        line!(json, "fastest of {runs}: {w:.2} s wall, {c:.2} s cpu");
    }
    if json {
        print_json(Vec::new(), docs);
    }
    Ok(0)
}

pub fn run(a: BenchArgs) -> Result<i32> {
    let json = matches!(a.format, super::replay::OutFormat::Json);
    if let Some(trace) = &a.replay {
        let Some(model) = &a.model else {
            return Err(KvmcError::Usage("--replay TRACE needs --model MODEL".into()));
        };
        return bench_replay(trace, model, a.runs, json);
    }
    let mut paths = a.paths.clone();
    if paths.is_empty() {
        let rd = std::fs::read_dir(&a.models).map_err(|e| KvmcError::io(&a.models, e))?;
        paths = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .filter(|p| !crate::scope::is_replay_model(p))
            .collect();
        paths.sort();
    }
    let threads = a.threads as usize;
    let symmetry = a.symmetry == crate::cli::check::OnOff::On;
    let mut docs = Vec::new();
    line!(
        json,
        "{:<26} {:>11} {:>11} {:>6} {:>9} {:>9} {:>11} {:>7} {:>8} {:>9} {:>7} {:>8}",
        "model",
        "unique",
        "generated",
        "depth",
        "seconds",
        "cpu s",
        "states/s",
        "B/state",
        "graph B",
        "peak MiB",
        "threads",
        "symmetry"
    );
    for p in paths {
        if crate::scope::is_replay_model(&p) {
            eprintln!(
                "{}: a replay model, skipped (kvmc bench --replay TRACE --model {} measures it)",
                p.display(),
                p.display()
            );
            continue;
        }
        let scope = Arc::new(Scope::load(&p)?);
        let defs: Vec<_> =
            props::REGISTRY.iter().filter(|d| d.kind == Kind::Always && props::applies(d, &scope.cfg)).collect();
        let model = || KvModel::new(scope.clone(), None, a.variant.as_deref(), defs.clone()).map_err(KvmcError::Usage);
        let c0 = cpu_seconds();
        let r = check::run(model()?, &RunOpts { threads, symmetry, ..Default::default() });
        let cpu = match (c0, cpu_seconds()) {
            (Some(x), Some(y)) => y - x,
            _ => f64::NAN,
        };
        // The process's peak so far (models run one after another in this process).
        let peak_bytes = crate::check::run::peak_rss_bytes();
        let peak = peak_bytes.map_or(0.0, |b| b as f64 / 1048576.0);
        let mut doc = schema::BenchModel {
            model: scope.name.clone(),
            unique_states: r.unique_states as u64,
            states: r.states as u64,
            max_depth: r.max_depth as u64,
            seconds: r.seconds,
            cpu_seconds: cpu.is_finite().then_some(cpu),
            states_per_second: r.unique_states as f64 / r.seconds.max(1e-9),
            visited_bytes_per_state: r.visited_bytes as f64 / r.unique_states.max(1) as f64,
            graph_bytes_per_state: r.graph_bytes as f64 / r.unique_states.max(1) as f64,
            peak_rss_bytes: peak_bytes,
            threads: threads as u64,
            symmetry,
            complete: r.complete,
            stateright: Vec::new(),
        };
        line!(
            json,
            "{:<26} {:>11} {:>11} {:>6} {:>9.3} {:>9.2} {:>11.0} {:>7.1} {:>8.1} {:>9.1} {:>7} {:>8}{}",
            scope.name,
            r.unique_states,
            r.states,
            r.max_depth,
            r.seconds,
            cpu,
            r.unique_states as f64 / r.seconds.max(1e-9),
            r.visited_bytes as f64 / r.unique_states.max(1) as f64,
            r.graph_bytes as f64 / r.unique_states.max(1) as f64,
            peak,
            threads,
            if symmetry { "on" } else { "off" },
            if r.complete { "" } else { "  (incomplete)" }
        );
        if r.frontier.1 > 0 {
            let (bytes, states) = r.frontier;
            line!(
                json,
                "  frontier (encoded): peak {:.1} MiB for {states} states, {:.1} B per frontier state",
                bytes as f64 / 1048576.0,
                bytes as f64 / states as f64
            );
        }
        if a.stateright {
            use stateright::{Checker, Model};
            for (name, dfs) in [("bfs", false), ("dfs", true)] {
                let m = model()?;
                let t0 = std::time::Instant::now();
                let b = m.checker().threads(threads);
                let (unique, generated) = if dfs {
                    let c = b.spawn_dfs().join();
                    (c.unique_state_count(), c.state_count())
                } else {
                    let c = b.spawn_bfs().join();
                    (c.unique_state_count(), c.state_count())
                };
                let secs = t0.elapsed().as_secs_f64();
                doc.stateright.push(schema::BenchStateright {
                    checker: name.to_string(),
                    unique_states: unique as u64,
                    states: generated as u64,
                    seconds: secs,
                });
                line!(
                    json,
                    "  stateright {name}: unique {unique}, generated {generated}, {secs:.3} s on {threads} thread{}: \
                     {:.2}x kvmc's time{}",
                    if threads == 1 { "" } else { "s" },
                    secs / r.seconds.max(1e-9),
                    if symmetry { " (kvmc with symmetry on)" } else { "" }
                );
            }
        }
        docs.push(doc);
    }
    if json {
        print_json(docs, Vec::new());
    }
    Ok(0)
}
