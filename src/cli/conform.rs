//! `kvmc conform LOG`: text, JSON or JUnit reports (`--format`, as `kvmc check`).

use super::check::Format;
use crate::conform::profile::{self as choose, ProfileChoice, DEFAULT_PROFILE};
use crate::conform::{self, Report, StepChoice};
use crate::error::{exit, KvmcError, Result};
use crate::explorer::conform::ConformTarget;
use crate::schema;
use clap::Args;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// Event logs recorded from an implementation (docs/conformance-format.md).
    #[arg(required_unless_present = "kv_events")]
    pub logs: Vec<PathBuf>,
    /// A recorded stream of vLLM KV-event batches (msgpack) to check; with one LOG of the same
    /// run (and FILE.steps.json naming each batch's step), also against the model.
    #[arg(long)]
    pub kv_events: Option<PathBuf>,
    /// The rule set the implementation is expected to follow [default: the release the log's
    /// header names (vllm 0.24.0 is vllm-0.24), else vllm-0.33].
    #[arg(long)]
    pub profile: Option<String>,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(long)]
    pub variant: Option<String>,
    /// Log lines shown before a divergence.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Also fail (exit 10) when the run violates an invariant although it conforms.
    #[arg(long)]
    pub strict: bool,
    /// The report: text, json (one object) or junit (one test case per log).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// One log's outcome, and its exit code on its own.
struct Outcome {
    path: PathBuf,
    /// The profile the log was checked under, and where it came from.
    profile: ProfileChoice,
    report: Report,
    code: i32,
    /// What opens a divergence in the explorer (same log, profile and variant).
    explore: Option<ConformTarget>,
}

/// The KV-event stream's outcome: the problem found, if any, and whether it was compared with
/// the model step by step.
struct KvOutcome {
    path: PathBuf,
    problem: Option<String>,
    against_model: bool,
}

pub fn run(a: ConformArgs) -> Result<i32> {
    let given = a.profile.as_deref();
    crate::system::rules::resolve(given.unwrap_or(DEFAULT_PROFILE), a.variant.as_deref()).map_err(KvmcError::Usage)?;
    if a.kv_events.is_some() && a.logs.len() > 1 {
        return Err(KvmcError::Usage("--kv-events goes with at most one LOG (the same run)".into()));
    }
    let mut outcomes = Vec::new();
    // A log that cannot be read or parsed is reported where it stands and the batch goes on
    // (exit 2 at the end); with one log, or none readable, it is the run's error as before.
    let mut bad: Vec<(PathBuf, KvmcError)> = Vec::new();
    for path in &a.logs {
        let o = match check_one(&a, path, given) {
            Ok(o) => o,
            Err(e) if a.logs.len() > 1 && e.exit_code() == exit::USAGE => {
                eprintln!("error: {e}");
                if matches!(a.format, Format::Text) {
                    println!("{}: not checked, bad input: {}\n", path.display(), e.message());
                }
                bad.push((path.clone(), e));
                continue;
            }
            Err(e) => return Err(e),
        };
        if matches!(a.format, Format::Text) {
            print!("{}", text(&o));
        }
        outcomes.push(o);
    }
    if outcomes.is_empty() && !bad.is_empty() {
        return Err(bad.swap_remove(0).1);
    }
    let mut kv = None;
    if let Some(ev) = &a.kv_events {
        let steps_path = PathBuf::from(format!("{}.steps.json", ev.display()));
        let steps: Option<Vec<u32>> = if steps_path.exists() {
            let t = crate::error::read_text(&steps_path)?;
            Some(serde_json::from_str(&t).map_err(|e| {
                KvmcError::input(&steps_path, e.line(), format!("not a JSON list of step numbers: {e}"))
            })?)
        } else {
            None
        };
        let against = outcomes.last().map(|o| &o.report).filter(|r| r.divergence.is_none());
        let problem = conform::check_kv_events(ev, against, steps.as_deref())?;
        let k = KvOutcome { path: ev.clone(), problem, against_model: against.is_some() && steps.is_some() };
        if matches!(a.format, Format::Text) {
            match &k.problem {
                None => println!(
                    "{}: consistent{}",
                    k.path.display(),
                    if k.against_model { " and matches the model step by step" } else { "" }
                ),
                Some(why) => println!("{}: {why}", k.path.display()),
            }
        }
        kv = Some(k);
    }
    // 2 before 10 before 13 before 0 (docs/exit-codes.md).
    let mut code = exit::OK;
    for c in outcomes.iter().map(|o| o.code).chain(kv.iter().filter(|k| k.problem.is_some()).map(|_| exit::VERDICT)) {
        if c == exit::VERDICT || (c == exit::INCOMPLETE && code == exit::OK) {
            code = c;
        }
    }
    if !bad.is_empty() {
        code = exit::USAGE;
    }
    match a.format {
        Format::Text => {}
        Format::Json => {
            let v = json(&a, &outcomes, &bad, kv.as_ref(), code);
            println!("{}", serde_json::to_string_pretty(&v).expect("json"));
        }
        Format::Junit => print!("{}", junit(&outcomes, &bad, kv.as_ref())),
    }
    Ok(code)
}

/// Read and check one log under the profile its header (or `--profile`) names.
fn check_one(a: &ConformArgs, path: &Path, given: Option<&str>) -> Result<Outcome> {
    let log_text = crate::error::read_text(path)?;
    let profile = choose::choose(&log_text, given);
    let report = conform::check_text(path, &log_text, &profile.profile, a.variant.as_deref(), a.window)?;
    let code = match &report.divergence {
        // No order of vLLM's sets matched within the search bound: no verdict.
        Some(_) if report.search_bound.is_some() => exit::INCOMPLETE,
        Some(_) => exit::VERDICT,
        None if a.strict && !report.findings.is_empty() => exit::VERDICT,
        // Conforms only as far as the recorder got: no verdict on the whole run.
        None if report.partial.is_some() => exit::INCOMPLETE,
        None => exit::OK,
    };
    let explore = report.divergence.as_ref().map(|_| ConformTarget {
        log: path.display().to_string(),
        profile: profile.profile.clone(),
        variant: a.variant.clone(),
    });
    Ok(Outcome { path: path.to_path_buf(), profile, report, code, explore })
}

fn list(v: &[String]) -> String {
    v.join(", ")
}

/// The text lines of one choice point.
fn choice_text(c: &StepChoice) -> String {
    let whose = if c.chosen == c.canonical {
        "the model's order".to_string()
    } else {
        format!("the model's order was {}", list(&c.canonical))
    };
    format!(
        "step {}: {} in order {} ({whose}; {} of {} resolutions of the step match)",
        c.step,
        c.point,
        list(&c.chosen),
        c.matching,
        c.tried
    )
}

fn text(o: &Outcome) -> String {
    let (r, path) = (&o.report, o.path.display());
    let mut s = String::new();
    match &r.divergence {
        None if r.partial.is_some() => {
            let _ = writeln!(
                s,
                "{path}: PARTIAL log: the {} steps recorded conform ({} decisions compared); no verdict on the whole run",
                r.steps, r.decisions
            );
        }
        None => {
            let _ = writeln!(s, "{path}: conforms ({} steps, {} decisions compared)", r.steps, r.decisions);
        }
        Some(d) => {
            if let Some(b) = &r.search_bound {
                let _ = writeln!(
                    s,
                    "{path}:{}: INCOMPLETE: no order of vLLM's sets found that matches step {} ({}); the search stopped at its bound: {b}",
                    d.line, d.step, d.what
                );
            } else {
                let _ = writeln!(s, "{path}:{}: diverges at step {} ({})", d.line, d.step, d.what);
            }
            let _ = writeln!(s, "  implementation: {}", d.logged);
            let _ = writeln!(s, "  model:          {}", d.model);
            if !d.under.is_empty() {
                let orders: Vec<String> =
                    d.under.iter().map(|c| format!("{} [{}]", c.point, list(&c.chosen))).collect();
                let _ = writeln!(
                    s,
                    "  none of the {} resolutions of vLLM's set orders in this step matches; shown under {}",
                    d.tried,
                    orders.join(", ")
                );
            }
            if !d.window.is_empty() {
                let _ = writeln!(s, "  preceding events:");
                for (no, t) in &d.window {
                    let _ = writeln!(s, "    {no:>5}  {t}");
                }
            }
            if let Some(t) = &o.explore {
                let _ = writeln!(s, "  explore: {}", t.command());
                let _ = writeln!(s, "  open:    http://127.0.0.1:3000{}", t.url_path());
            }
        }
    }
    // Under the verdict's line: which rule set, when the log's header chose one other than the
    // default, and any disagreement between the header and --profile.
    let mut prof = String::new();
    if o.profile.from == choose::ProfileFrom::Header && o.profile.profile != DEFAULT_PROFILE {
        let _ = writeln!(prof, "  checked under {} (the release the log's header names)", o.profile.profile);
    }
    if let Some(n) = &o.profile.note {
        let _ = writeln!(prof, "  note: {n}");
    }
    let first = s.find('\n').map_or(s.len(), |i| i + 1);
    s.insert_str(first, &prof);
    if let Some(p) = &r.partial {
        let _ = writeln!(
            s,
            "  {path}:{}: partial log: the recorder stopped in step {}: {} (that step and later ones are not in the log)",
            p.line,
            p.step,
            if p.error.is_empty() { "no reason given" } else { &p.error }
        );
        match r.death.as_ref().map(|d| (&d.found, d.states)) {
            Some((None, n)) if r.death.as_ref().is_some_and(|d| d.bounded) => {
                let _ = writeln!(
                    s,
                    "  whether the model dies in its next step is not known: the search stopped at its bound of {n} states"
                );
            }
            Some((Some((prop, detail, inputs)), _)) => {
                let _ = writeln!(s, "  the model dies there too: {prop}, after {}: {detail}", inputs.join(", "));
            }
            Some((None, n)) => {
                let _ = writeln!(
                    s,
                    "  the model does not die in its next step ({n} states tried; that step's inputs, such as a session's end or an abort, are not in the log)"
                );
            }
            None => {}
        }
    }
    for c in &r.choices {
        let _ = writeln!(s, "  {}", choice_text(c));
    }
    for (p, step) in &r.findings {
        let _ = writeln!(s, "  invariant {p} is violated from step {step} on (the implementation does this too)");
    }
    s
}

fn choice_doc(c: &StepChoice) -> schema::ConformChoice {
    schema::ConformChoice {
        step: u64::from(c.step),
        set: c.point.to_string(),
        canonical: c.canonical.clone(),
        chosen: c.chosen.clone(),
        canonical_order: c.chosen == c.canonical,
        orders: u64::from(c.orders),
        resolutions_tried: u64::from(c.tried),
        resolutions_matching: u64::from(c.matching),
    }
}

fn verdict(o: &Outcome) -> &'static str {
    match (&o.report.divergence, &o.report.search_bound, &o.report.partial) {
        (Some(_), Some(_), _) => "incomplete",
        (Some(_), None, _) => "diverges",
        (None, _, Some(_)) => "partial",
        (None, _, None) => "conforms",
    }
}

fn json(
    a: &ConformArgs,
    outcomes: &[Outcome],
    bad: &[(PathBuf, KvmcError)],
    kv: Option<&KvOutcome>,
    code: i32,
) -> serde_json::Value {
    let logs = outcomes
        .iter()
        .map(|o| {
            let r = &o.report;
            schema::ConformLog {
                log: o.path.display().to_string(),
                verdict: verdict(o).to_string(),
                ok: o.code == exit::OK,
                profile: o.profile.profile.clone(),
                profile_from: o.profile.from.as_str().to_string(),
                profile_note: o.profile.note.clone(),
                steps: u64::from(r.steps),
                decisions: r.decisions as u64,
                divergence: r.divergence.as_ref().map(|d| schema::ConformDivergence {
                    line: d.line as u64,
                    step: u64::from(d.step),
                    kind: d.what.clone(),
                    implementation: d.logged.clone(),
                    model: d.model.clone(),
                    under: d.under.iter().map(choice_doc).collect(),
                    resolutions_tried: u64::from(d.tried),
                    window: d
                        .window
                        .iter()
                        .map(|(no, t)| schema::ConformLine { line: *no as u64, text: t.clone() })
                        .collect(),
                    explore: o
                        .explore
                        .as_ref()
                        .map(|t| schema::ConformExplore { command: t.command(), url: t.url_path() }),
                }),
                partial: r.partial.as_ref().map(|p| schema::ConformPartial {
                    line: p.line as u64,
                    step: u64::from(p.step),
                    error: p.error.clone(),
                    model_death: r.death.as_ref().map(|d| schema::ConformDeath {
                        states: d.states as u64,
                        bounded: d.bounded,
                        property: d.found.as_ref().map(|f| f.0.clone()),
                        detail: d.found.as_ref().map(|f| f.1.clone()),
                        inputs: d.found.as_ref().map(|f| f.2.clone()).unwrap_or_default(),
                    }),
                }),
                findings: r
                    .findings
                    .iter()
                    .map(|(p, s)| schema::ConformFinding { property: p.clone(), from_step: u64::from(*s) })
                    .collect(),
                choices: r.choices.iter().map(choice_doc).collect(),
                search_bound: r.search_bound.clone(),
            }
        })
        .collect();
    let doc = schema::ConformReport {
        schema_version: schema::SCHEMA_VERSION,
        kvmc_version: env!("CARGO_PKG_VERSION").to_string(),
        ok: code == exit::OK,
        exit_code: code,
        profile: a.profile.clone().unwrap_or_else(|| DEFAULT_PROFILE.to_string()),
        variant: a.variant.clone(),
        strict: a.strict,
        logs,
        bad_logs: bad
            .iter()
            .map(|(path, e)| schema::ConformBadLog {
                log: path.display().to_string(),
                kind: e.kind().to_string(),
                message: e.message(),
                line: e.location().1.map(|l| l as u64),
            })
            .collect(),
        kv_events: kv.map(|k| schema::ConformKvEvents {
            file: k.path.display().to_string(),
            ok: k.problem.is_none(),
            problem: k.problem.clone(),
            against_model: k.against_model,
        }),
    };
    serde_json::to_value(doc).expect("a conform report serializes")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// JUnit XML: one test suite, one test case per log (and one for the KV-event stream). A
/// divergence (or, with `--strict`, a violated invariant) is a failure; a partial log or a
/// search stopped by its bound is skipped.
fn junit(outcomes: &[Outcome], bad: &[(PathBuf, KvmcError)], kv: Option<&KvOutcome>) -> String {
    let mut cases = String::new();
    let (mut failures, mut skipped, mut tests, mut errors) = (0, 0, 0, 0);
    let mut case = |name: &Path, result: Option<(bool, String, String)>, explore: Option<&ConformTarget>| {
        tests += 1;
        let n = xml_escape(&name.display().to_string());
        let _ = write!(cases, "    <testcase classname=\"conform\" name=\"{n}\"");
        // As `kvmc check`'s JUnit: the command and URL that open the divergence.
        let props = explore.map_or(String::new(), |t| {
            format!(
                "<properties><property name=\"explore_command\" value=\"{}\"/><property name=\"explore_url\" value=\"{}\"/></properties>",
                xml_escape(&t.command()),
                xml_escape(&t.url_path())
            )
        });
        match result {
            None => cases.push_str("/>\n"),
            Some((true, msg, _)) => {
                skipped += 1;
                let _ = writeln!(cases, ">{props}<skipped message=\"{}\"/></testcase>", xml_escape(&msg));
            }
            Some((false, msg, body)) => {
                failures += 1;
                let _ = writeln!(
                    cases,
                    ">{props}<failure message=\"{}\">{}</failure></testcase>",
                    xml_escape(&msg),
                    xml_escape(&body)
                );
            }
        }
    };
    for o in outcomes {
        let r = &o.report;
        let result = match (&r.divergence, o.code) {
            (Some(d), c) => Some((
                c == exit::INCOMPLETE,
                format!("{}:{}: {} at step {} ({})", o.path.display(), d.line, verdict(o), d.step, d.what),
                text(o),
            )),
            (None, c) if c == exit::VERDICT => Some((
                false,
                format!("{}: conforms, but the run violates an invariant (--strict)", o.path.display()),
                text(o),
            )),
            (None, c) if c == exit::INCOMPLETE => {
                Some((true, format!("{}: partial log, no verdict on the whole run", o.path.display()), String::new()))
            }
            _ => None,
        };
        case(&o.path, result, o.explore.as_ref());
    }
    if let Some(k) = kv {
        case(&k.path, k.problem.as_ref().map(|p| (false, p.clone(), p.clone())), None);
    }
    // A log that could not be checked is a test case that errored (as a run's own error is).
    for (path, e) in bad {
        tests += 1;
        errors += 1;
        let _ = writeln!(
            cases,
            "    <testcase classname=\"conform\" name=\"{}\"><error message=\"{}\"/></testcase>",
            xml_escape(&path.display().to_string()),
            xml_escape(&e.to_string())
        );
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvmc\">\n  <testsuite name=\"conform\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">\n{cases}  </testsuite>\n</testsuites>\n"
    )
}
