//! `kvmc testgen MODEL --out-dir DIR`: recorder scenarios covering every decision kind and
//! action kind the model's exploration reaches (src/report/testgen.rs), with the coverage.

use crate::error::{KvmcError, Result};
use crate::model::KvModel;
use crate::report::testgen::generate;
use crate::scope::Scope;
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct TestgenArgs {
    /// A model file the recorder can drive (docs/conformance.md, "Test generation").
    pub model: PathBuf,
    /// The released profile to generate for (default: the model's own).
    #[arg(long)]
    pub profile: Option<String>,
    /// Where to write NAME-tNN.toml.
    #[arg(long)]
    pub out_dir: PathBuf,
    /// Stop exploring after this many states (coverage is then of what was reached).
    #[arg(long, default_value_t = 200_000)]
    pub max_states: usize,
}

pub fn run(a: TestgenArgs) -> Result<i32> {
    let scope = Arc::new(Scope::load(&a.model)?);
    let name = scope.name.clone();
    let model = KvModel::new(scope, a.profile.as_deref(), None, Vec::new()).map_err(KvmcError::Usage)?;
    let source = a.model.display().to_string();
    let suite = generate(&model, &name, &source, a.max_states)
        .map_err(|why| KvmcError::Usage(format!("cannot generate: {why}")))?;
    std::fs::create_dir_all(&a.out_dir).map_err(|e| KvmcError::io(&a.out_dir, e))?;
    for r in &suite.scenarios {
        let n =
            r.toml.lines().find_map(|l| l.strip_prefix("name = ")).unwrap_or_default().trim_matches('"').to_string();
        let p = a.out_dir.join(format!("{n}.toml"));
        std::fs::write(&p, &r.toml).map_err(|e| KvmcError::io(&p, e))?;
    }
    println!(
        "{}: {} coverage items (decision and action kinds) reached in {} states{}; {} scenarios cover all of them -> {}",
        a.model.display(),
        suite.items.len(),
        suite.unique_states,
        if suite.truncated { " (stopped at --max-states: not every state)" } else { "" },
        suite.scenarios.len(),
        a.out_dir.display()
    );
    for (item, k) in &suite.items {
        println!("  {item:<44} {name}-t{:02}", k + 1);
    }
    Ok(crate::error::exit::OK)
}
