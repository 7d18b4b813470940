//! The command line (clap derive) and dispatch. One file per subcommand.

mod bench;
mod check;
mod conform;
pub mod explain;
mod explore;
pub mod list;
pub mod replay;

use crate::error::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "kvmc",
    version,
    about = "Model checker and reference implementation for KV-cache offload in vLLM-style engines"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Check models. With no path: every expectation in specs/ (the CI gate).
    Check(check::CheckArgs),
    /// List models, profiles, variants, properties and guards (--rules: the rules table).
    List(list::ListArgs),
    /// Explain a property: what it means, the bugs it guards, its expected verdicts.
    Explain(explain::ExplainArgs),
    /// Serve stateright's Explorer for a model on loopback.
    Explore(explore::ExploreArgs),
    /// Measure exploration speed and memory: unique states, states/s, peak memory.
    Bench(bench::BenchArgs),
    /// Check event logs recorded from a real implementation against the model.
    Conform(conform::ConformArgs),
    /// Run the reference implementation over a trace (Mooncake JSONL or a kvmc scenario):
    /// metrics, and every invariant checked after every action.
    Replay(replay::ReplayArgs),
}

/// Run the command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Check(a) => check::run(a),
        Cmd::List(a) => list::run(a),
        Cmd::Explain(a) => explain::run(a),
        Cmd::Explore(a) => explore::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Conform(a) => conform::run(a),
        Cmd::Replay(a) => replay::run(a),
    }
}
