//! The adversarial suite: a deterministic mutation fuzzer over the binary.
//!
//! It takes the real inputs in the repository (models, replay models, specs, scenario files,
//! a Mooncake trace, conformance logs and KV-event streams with their step files), damages
//! each with one to three mutations (`adversarial/mutate.rs`) and runs the `kvmc` binary on
//! it, bounded (`check --max-states --timeout`, `replay --limit`). Every case must end with a
//! documented exit code (0, 2, 10 or 13; never 1, 101, 134 or a signal); an exit 2 must name
//! the damaged file and a position in it (`FILE:LINE`, or a line or byte offset); and no case
//! may outlive a wall-clock guard far above its bound (a hang detector, not a speed test).
//!
//! `KVMC_FUZZ_CASES` sets the number of cases (default [`DEFAULT_CASES`]), `KVMC_FUZZ_SEED`
//! the seed, `KVMC_FUZZ_THREADS` how many run at once (default 2), `KVMC_FUZZ_KIND` limits the
//! run to one input kind. Failing cases are kept under target/test-tmp/adversarial-failures/
//! with the command that failed; a summary (cases per kind, exits per class) is printed.

mod mutate;
mod regressions;

use crate::common::root;
use mutate::{Mutation, Rng, Syntax};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Cases run by default: 120 per input kind, well under a minute and a half in the
/// dev-fast profile on two shared cores.
pub const DEFAULT_CASES: usize = 840;
/// A case still running after this long is a hang: every run is bounded far below it (most
/// end in milliseconds; a replay model damaged into one-token steps runs its requests to the
/// livelock bound, some seconds). Generous, as the suite shares its cores with other work.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// What the damaged file is, and so how the binary is run on it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A checker model: `check --max-states --timeout`, or `explore --dry-run`.
    Model,
    /// A replay model (`[replay]`): `replay TRACE --model FILE --limit`.
    ReplayModel,
    /// A property spec: `explain --all --specs DIR`, or the gate of that spec, bounded.
    Spec,
    /// A scenario file: `replay FILE`, or `explore MODEL --path FILE --dry-run`.
    Scenario,
    /// A Mooncake trace: `replay FILE --model models/replay-mooncake.toml --limit`.
    Trace,
    /// A conformance log: `conform FILE`.
    ConformLog,
    /// A KV-event stream or its steps file: `conform LOG --kv-events FILE`.
    KvEvents,
}

const KINDS: &[Kind] =
    &[Kind::Model, Kind::ReplayModel, Kind::Spec, Kind::Scenario, Kind::Trace, Kind::ConformLog, Kind::KvEvents];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Model => "model",
            Kind::ReplayModel => "replay-model",
            Kind::Spec => "spec",
            Kind::Scenario => "scenario",
            Kind::Trace => "trace",
            Kind::ConformLog => "conform-log",
            Kind::KvEvents => "kv-events",
        }
    }
}

fn sorted_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The real inputs, per kind.
struct Corpus {
    models: Vec<PathBuf>,
    replay_models: Vec<PathBuf>,
    specs: Vec<PathBuf>,
    scenarios: Vec<PathBuf>,
    trace: Vec<u8>,
    logs: Vec<PathBuf>,
    /// KV-event streams that have a log of the same run and a steps file.
    kv_events: Vec<PathBuf>,
}

impl Corpus {
    fn load() -> Self {
        let r = root();
        let mut models = Vec::new();
        let mut replay_models = Vec::new();
        for p in sorted_files(&r.join("models"), ".toml")
            .into_iter()
            .chain(sorted_files(&r.join("tests/conformance/scenarios"), ".toml"))
        {
            let text = std::fs::read_to_string(&p).unwrap();
            if text.starts_with("[replay]") || text.contains("\n[replay]") {
                replay_models.push(p);
            } else {
                models.push(p);
            }
        }
        let fixtures = r.join("tests/conformance/fixtures");
        let kv_events = sorted_files(&fixtures, ".kvevents")
            .into_iter()
            .filter(|p| {
                let s = p.to_string_lossy();
                Path::new(&format!("{s}.steps.json")).exists() && Path::new(&s.replace(".kvevents", ".jsonl")).exists()
            })
            .collect();
        // The trace's first 40 rows: enough for sessions to share prefixes, small enough to
        // replay in a blink.
        let full = std::fs::read(r.join("tests/traces/conversation-head-300.jsonl")).unwrap();
        let cut = full.iter().enumerate().filter(|(_, &c)| c == b'\n').nth(39).map_or(full.len(), |(i, _)| i + 1);
        Corpus {
            models,
            replay_models,
            specs: sorted_files(&r.join("specs"), ".toml"),
            scenarios: sorted_files(&r.join("tests/adversarial"), ".scenario.toml"),
            trace: full[..cut].to_vec(),
            logs: sorted_files(&fixtures, ".jsonl"),
            kv_events,
        }
    }
}

/// One case: the files written, the command run, what was done to the input.
struct Case {
    kind: Kind,
    source: String,
    mutations: Vec<String>,
    /// The damaged file (errors must name it).
    target: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// A scenario names its model relative to its own directory: point it at the model in the
/// repository (before damaging it), as the copy lives elsewhere.
fn absolute_model(text: &[u8], from: &Path) -> Vec<u8> {
    let t = String::from_utf8_lossy(text);
    let mut out = String::new();
    for l in t.lines() {
        match l.trim_start().strip_prefix("model = \"").and_then(|r| r.strip_suffix('"')) {
            Some(rel) => out.push_str(&format!("model = {:?}\n", s(&from.parent().unwrap().join(rel)))),
            None => {
                out.push_str(l);
                out.push('\n');
            }
        }
    }
    out.into_bytes()
}

fn damage(rng: &mut Rng, bytes: &mut Vec<u8>, syntax: Syntax) -> Vec<String> {
    // Mostly one mutation, so that many cases stay close enough to valid to run.
    let n = *rng.pick(&[1, 1, 1, 1, 2, 2, 3]);
    (0..n)
        .map(|_| {
            let m: Mutation = *rng.pick(mutate::ALL);
            format!("{}: {}", m.name(), mutate::apply(rng, m, bytes, syntax))
        })
        .collect()
}

/// Build case `id` of the campaign seeded `seed`: write its files under `base`.
fn make_case(c: &Corpus, seed: u64, id: usize, base: &Path, only: Option<Kind>) -> Case {
    let mut rng = Rng::new(seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let kind = only.unwrap_or_else(|| KINDS[id % KINDS.len()]);
    let dir = base.join(format!("case-{id:06}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let r = root();
    let trace_path = dir.join("trace.jsonl");
    let bound = ["--max-states", "300", "--timeout", "5", "--max-memory", "2G"].map(String::from);
    let (source, target, mutations, args) = match kind {
        Kind::Model => {
            let src = rng.pick(&c.models).clone();
            let mut b = std::fs::read(&src).unwrap();
            let muts = damage(&mut rng, &mut b, Syntax::Toml);
            let t = dir.join(src.file_name().unwrap());
            std::fs::write(&t, &b).unwrap();
            let args = if rng.below(4) == 0 {
                vec!["explore".into(), s(&t), "--dry-run".into(), "--path".into(), "0/0/0".into()]
            } else {
                let strategy = *rng.pick(&["bfs", "bfs", "dfs", "simulate"]);
                let mut a =
                    vec!["check".into(), s(&t), "--jobs".into(), "1".into(), "--strategy".into(), strategy.into()];
                a.extend(bound.iter().cloned());
                a
            };
            (src, t, muts, args)
        }
        Kind::ReplayModel => {
            let src = rng.pick(&c.replay_models).clone();
            let mut b = std::fs::read(&src).unwrap();
            let muts = damage(&mut rng, &mut b, Syntax::Toml);
            let t = dir.join(src.file_name().unwrap());
            std::fs::write(&t, &b).unwrap();
            std::fs::write(&trace_path, &c.trace).unwrap();
            let mut args =
                ["replay", &s(&trace_path), "--model", &s(&t), "--limit", "6", "--quiet"].map(String::from).to_vec();
            if rng.below(3) == 0 {
                args.extend(["--full-check-every".into(), "1".into()]);
            }
            (src, t, muts, args)
        }
        Kind::Spec => {
            let src = rng.pick(&c.specs).clone();
            let mut b = std::fs::read(&src).unwrap();
            let muts = damage(&mut rng, &mut b, Syntax::Toml);
            let specs = dir.join("specs");
            std::fs::create_dir_all(&specs).unwrap();
            let t = specs.join(src.file_name().unwrap());
            std::fs::write(&t, &b).unwrap();
            let args = if rng.below(4) == 0 {
                let mut a: Vec<String> =
                    ["check", "--specs", &s(&specs), "--models", &s(&r.join("models"))].map(String::from).to_vec();
                a.extend(["--jobs", "2", "--max-states", "100"].map(String::from));
                a.extend(bound[2..].iter().cloned());
                a
            } else {
                vec!["explain".into(), "--all".into(), "--specs".into(), s(&specs)]
            };
            (src, t, muts, args)
        }
        Kind::Scenario => {
            let src = rng.pick(&c.scenarios).clone();
            let mut b = absolute_model(&std::fs::read(&src).unwrap(), &src);
            let muts = damage(&mut rng, &mut b, Syntax::Toml);
            let t = dir.join(src.file_name().unwrap());
            std::fs::write(&t, &b).unwrap();
            let args = if rng.below(3) == 0 {
                let model = String::from_utf8_lossy(&absolute_model(&std::fs::read(&src).unwrap(), &src))
                    .lines()
                    .find_map(|l| l.strip_prefix("model = \"").and_then(|x| x.strip_suffix('"')).map(String::from))
                    .expect("a fixture scenario names its model");
                vec!["explore".into(), model, "--dry-run".into(), "--path".into(), s(&t)]
            } else {
                vec!["replay".into(), s(&t)]
            };
            (src, t, muts, args)
        }
        Kind::Trace => {
            let mut b = c.trace.clone();
            let muts = damage(&mut rng, &mut b, Syntax::Json);
            std::fs::write(&trace_path, &b).unwrap();
            let model = s(&r.join("models/replay-mooncake.toml"));
            let fmt = *rng.pick(&["auto", "auto", "mooncake", "mooncake-delta"]);
            let args = ["replay", &s(&trace_path), "--model", &model, "--limit", "6", "--quiet", "--trace-format", fmt];
            (
                r.join("tests/traces/conversation-head-300.jsonl"),
                trace_path.clone(),
                muts,
                args.map(String::from).to_vec(),
            )
        }
        Kind::ConformLog => {
            let src = rng.pick(&c.logs).clone();
            let mut b = std::fs::read(&src).unwrap();
            let muts = damage(&mut rng, &mut b, Syntax::Json);
            let t = dir.join(src.file_name().unwrap());
            std::fs::write(&t, &b).unwrap();
            (src, t.clone(), muts, vec!["conform".into(), s(&t)])
        }
        Kind::KvEvents => {
            let src = rng.pick(&c.kv_events).clone();
            let name = src.file_name().unwrap().to_string_lossy().into_owned();
            let ev = dir.join(&name);
            let steps = dir.join(format!("{name}.steps.json"));
            let log = dir.join(name.replace(".kvevents", ".jsonl"));
            let mut evb = std::fs::read(&src).unwrap();
            let mut stb = std::fs::read(format!("{}.steps.json", s(&src))).unwrap();
            let (t, muts) = if rng.below(4) == 0 {
                let m = damage(&mut rng, &mut stb, Syntax::Json);
                (steps.clone(), m)
            } else {
                let m = damage(&mut rng, &mut evb, Syntax::Msgpack);
                (ev.clone(), m)
            };
            std::fs::write(&ev, &evb).unwrap();
            std::fs::write(&steps, &stb).unwrap();
            std::fs::copy(s(&src).replace(".kvevents", ".jsonl"), &log).unwrap();
            let args = if rng.below(4) == 0 {
                // The stream on its own: its consistency only.
                vec!["conform".into(), "--kv-events".into(), s(&ev)]
            } else {
                vec!["conform".into(), s(&log), "--kv-events".into(), s(&ev)]
            };
            (src, t, muts, args)
        }
    };
    Case { kind, source: s(&source), mutations, target, args, dir }
}

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Exit(i32),
    Signal(i32),
    Hang,
}

impl Outcome {
    fn class(&self) -> String {
        match self {
            Outcome::Exit(c) => format!("exit {c}"),
            Outcome::Signal(s) => format!("signal {s}"),
            Outcome::Hang => "hang".into(),
        }
    }
}

/// Run the binary, stdout and stderr to files, killed at the hang guard.
fn run_case(case: &Case) -> (Outcome, String, Duration) {
    let out = std::fs::File::create(case.dir.join("stdout")).unwrap();
    let err = std::fs::File::create(case.dir.join("stderr")).unwrap();
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvmc"))
        .args(&case.args)
        .current_dir(&case.dir)
        .env("KVMC_STOP_GRACE", "2")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("kvmc starts");
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t0.elapsed();
    let mut stderr = String::new();
    if let Ok(mut f) = std::fs::File::open(case.dir.join("stderr")) {
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        stderr = String::from_utf8_lossy(&b).into_owned();
    }
    let outcome = match status {
        None => Outcome::Hang,
        Some(st) => match st.code() {
            Some(c) => Outcome::Exit(c),
            None => {
                use std::os::unix::process::ExitStatusExt;
                Outcome::Signal(st.signal().unwrap_or(-1))
            }
        },
    };
    (outcome, stderr, took)
}

/// Does `err` name `file` with a position: `FILE:LINE`, or the file and a line or byte offset?
pub fn names_position(err: &str, file: &Path) -> bool {
    let f = s(file);
    let followed_by_line = err.match_indices(&f).any(|(i, _)| {
        let rest = &err[i + f.len()..];
        rest.strip_prefix(':').is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    });
    followed_by_line || (err.contains(&f) && (err.contains("line ") || err.contains("byte ")))
}

/// Why the case failed, if it did.
fn judge(case: &Case, outcome: &Outcome, stderr: &str) -> Option<String> {
    match outcome {
        Outcome::Exit(0 | 10 | 13) => None,
        Outcome::Exit(2) if names_position(stderr, &case.target) => None,
        // A replay model's trace_block_size is checked against the trace's rows: the row that
        // does not fit is the position.
        Outcome::Exit(2)
            if case.kind == Kind::ReplayModel
                && stderr.contains("trace_block_size")
                && names_position(stderr, &case.dir.join("trace.jsonl")) =>
        {
            None
        }
        Outcome::Exit(2) => Some("exit 2 without the damaged file and a position".into()),
        Outcome::Exit(c) => Some(format!("undocumented exit {c}")),
        Outcome::Signal(sig) => Some(format!("killed by signal {sig}")),
        Outcome::Hang => Some(format!("still running after {} s", HANG_GUARD.as_secs())),
    }
}

fn env_usize(k: &str) -> Option<usize> {
    std::env::var(k).ok().and_then(|v| v.parse().ok())
}

#[test]
fn mutated_inputs_end_with_documented_exits() {
    let cases = env_usize("KVMC_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let seed = std::env::var("KVMC_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(19);
    let threads = env_usize("KVMC_FUZZ_THREADS").unwrap_or(2).max(1);
    let only = std::env::var("KVMC_FUZZ_KIND")
        .ok()
        .map(|k| *KINDS.iter().find(|x| x.name() == k).unwrap_or_else(|| panic!("KVMC_FUZZ_KIND {k}: no such kind")));
    let corpus = Corpus::load();
    assert!(!corpus.scenarios.is_empty() && !corpus.kv_events.is_empty() && !corpus.replay_models.is_empty());
    let base = crate::common::tempdir("adversarial");
    let keep = root().join("target/test-tmp/adversarial-failures");
    let next = AtomicUsize::new(0);
    let tally: Mutex<BTreeMap<(Kind, String), usize>> = Mutex::new(BTreeMap::new());
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let slowest = Mutex::new((Duration::ZERO, String::new()));
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                let id = next.fetch_add(1, Ordering::SeqCst);
                if id >= cases {
                    break;
                }
                let case = make_case(&corpus, seed, id, &base, only);
                let (outcome, stderr, took) = run_case(&case);
                *tally.lock().unwrap().entry((case.kind, outcome.class())).or_default() += 1;
                {
                    let mut sl = slowest.lock().unwrap();
                    if took > sl.0 {
                        *sl = (took, format!("case {id} ({}): {}", case.kind.name(), case.args.join(" ")));
                    }
                }
                match judge(&case, &outcome, &stderr) {
                    None => {
                        let _ = std::fs::remove_dir_all(&case.dir);
                    }
                    Some(why) => {
                        let kept = keep.join(format!("seed{seed}-case-{id:06}"));
                        let _ = std::fs::remove_dir_all(&kept);
                        let _ = std::fs::create_dir_all(keep.as_path());
                        let _ = std::fs::rename(&case.dir, &kept);
                        let first: Vec<&str> = stderr.lines().take(3).collect();
                        failures.lock().unwrap().push(format!(
                            "case {id} ({kind}, from {src}): {why}\n  mutations: {muts}\n  command: kvmc {args}\n  \
                             kept in: {kept}\n  stderr: {err}",
                            kind = case.kind.name(),
                            src = case.source,
                            muts = case.mutations.join("; "),
                            args = case.args.join(" "),
                            kept = kept.display(),
                            err = first.join("\n          "),
                        ));
                    }
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&base);
    let tally = tally.into_inner().unwrap();
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_class: BTreeMap<String, usize> = BTreeMap::new();
    for ((k, class), n) in &tally {
        *per_kind.entry(k.name()).or_default() += n;
        *per_class.entry(class.clone()).or_default() += n;
    }
    eprintln!("adversarial: {cases} cases (seed {seed})");
    eprintln!("  per kind: {per_kind:?}");
    eprintln!("  per exit class: {per_class:?}");
    for ((k, class), n) in &tally {
        eprintln!("    {:<13} {class:<10} {n}", k.name());
    }
    let sl = slowest.into_inner().unwrap();
    eprintln!("  slowest: {:.1} s, {}", sl.0.as_secs_f64(), sl.1);
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
}
