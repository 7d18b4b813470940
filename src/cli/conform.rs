//! `kvmc conform LOG`.

use crate::conform;
use crate::error::{exit, KvmcError, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ConformArgs {
    /// Event logs recorded from an implementation (docs/conformance-format.md).
    #[arg(required = true)]
    pub logs: Vec<PathBuf>,
    /// The rule set the implementation is expected to follow.
    #[arg(long, default_value = "vllm-0.33")]
    pub profile: String,
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
    for path in &a.logs {
        let r = conform::check(path, &a.profile, a.variant.as_deref(), a.window)?;
        match &r.divergence {
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
        for (p, step) in &r.findings {
            println!("  invariant {p} is violated from step {step} on (the implementation does this too)");
            if a.strict {
                code = exit::VERDICT;
            }
        }
    }
    Ok(code)
}
