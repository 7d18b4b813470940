//! `kvmc bench`: exhaustive exploration speed and memory, per model.

use crate::check::{self, RunOpts};
use crate::error::{KvmcError, Result};
use crate::model::scope::Scope;
use crate::model::KvModel;
use crate::props::{self, Kind};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Models to measure (default: every model in --models).
    pub paths: Vec<PathBuf>,
    #[arg(long)]
    pub variant: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    #[arg(long, default_value = "models")]
    pub models: PathBuf,
}

pub fn run(a: BenchArgs) -> Result<i32> {
    let mut paths = a.paths.clone();
    if paths.is_empty() {
        let rd = std::fs::read_dir(&a.models).map_err(|e| KvmcError::io(&a.models, e))?;
        paths = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .filter(|p| !crate::model::scope::is_replay_model(p))
            .collect();
        paths.sort();
    }
    println!(
        "{:<30} {:>12} {:>12} {:>8} {:>10} {:>12} {:>10}",
        "model", "unique", "generated", "depth", "seconds", "unique/s", "peak MiB"
    );
    for p in paths {
        let scope = Arc::new(Scope::load(&p)?);
        let defs: Vec<_> =
            props::CATALOGUE.iter().filter(|d| d.kind == Kind::Always && props::applies(d, &scope.cfg)).collect();
        let m = KvModel::new(scope.clone(), None, a.variant.as_deref(), defs).map_err(KvmcError::Usage)?;
        let r = check::run(m, &RunOpts { threads: a.threads, ..Default::default() });
        let peak = crate::check::run::peak_rss_bytes().map_or(0.0, |b| b as f64 / 1048576.0);
        println!(
            "{:<30} {:>12} {:>12} {:>8} {:>10.3} {:>12.0} {:>10.1}{}",
            scope.name,
            r.unique_states,
            r.states,
            r.max_depth,
            r.seconds,
            r.unique_states as f64 / r.seconds.max(1e-9),
            peak,
            if r.complete { "" } else { "  (incomplete)" }
        );
    }
    Ok(0)
}
