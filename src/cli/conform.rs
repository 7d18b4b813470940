//! `kvmc conform LOG`.

use crate::conform;
use crate::error::{exit, KvmcError, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// Event logs recorded from an implementation (docs/conformance-format.md).
    #[arg(required_unless_present = "kv_events")]
    pub logs: Vec<PathBuf>,
    /// A recorded stream of vLLM KV-event batches (msgpack) to check; with one LOG of the same
    /// run (and FILE.steps.json naming each batch's step), also against the model.
    #[arg(long)]
    pub kv_events: Option<PathBuf>,
    /// The rule set the implementation is expected to follow.
    #[arg(long, default_value = "vllm-0.33")]
    pub profile: String,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(long)]
    pub variant: Option<String>,
    /// Log lines shown before a divergence.
    #[arg(long, default_value_t = 8)]
    pub window: usize,
    /// Also fail (exit 10) when the run violates an invariant although it conforms.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(a: ConformArgs) -> Result<i32> {
    crate::system::rules::resolve(&a.profile, a.variant.as_deref()).map_err(KvmcError::Usage)?;
    let mut code = exit::OK;
    if a.kv_events.is_some() && a.logs.len() > 1 {
        return Err(KvmcError::Usage("--kv-events goes with at most one LOG (the same run)".into()));
    }
    let mut last = None;
    for path in &a.logs {
        let r = conform::check(path, &a.profile, a.variant.as_deref(), a.window)?;
        last = Some(r.clone());
        match &r.divergence {
            None if r.partial.is_some() => {
                // Conforms only as far as the recorder got: no verdict on the whole run.
                if code != exit::VERDICT {
                    code = exit::INCOMPLETE;
                }
                println!(
                    "{}: PARTIAL log: the {} steps recorded conform ({} decisions compared); no verdict on the \
                     whole run",
                    path.display(),
                    r.steps,
                    r.decisions
                );
            }
            None => {
                println!("{}: conforms ({} steps, {} decisions compared)", path.display(), r.steps, r.decisions);
            }
            Some(d) => {
                code = exit::VERDICT;
                println!("{}:{}: diverges at step {} ({})", path.display(), d.line, d.step, d.what);
                println!("  implementation: {}", d.logged);
                println!("  model:          {}", d.model);
                if !d.window.is_empty() {
                    println!("  preceding events:");
                    for (no, t) in &d.window {
                        println!("    {no:>5}  {t}");
                    }
                }
            }
        }
        if let Some(p) = &r.partial {
            println!(
                "  {}:{}: partial log: the recorder stopped in step {}: {} (that step and later ones are not in the log)",
                path.display(),
                p.line,
                p.step,
                if p.error.is_empty() { "no reason given" } else { &p.error }
            );
        }
        for (p, step) in &r.findings {
            println!("  invariant {p} is violated from step {step} on (the implementation does this too)");
            if a.strict {
                code = exit::VERDICT;
            }
        }
    }
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
        let against = last.as_ref().filter(|r| r.divergence.is_none());
        match conform::check_kv_events(ev, against, steps.as_deref())? {
            None => println!(
                "{}: consistent{}",
                ev.display(),
                if against.is_some() && steps.is_some() { " and matches the model step by step" } else { "" }
            ),
            Some(why) => {
                code = exit::VERDICT;
                println!("{}: {why}", ev.display());
            }
        }
    }
    Ok(code)
}
