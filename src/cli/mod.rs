//! The command line (clap derive) and dispatch. One file per subcommand.

mod bench;
mod check;
mod conform;
pub mod explain;
mod explore;
mod install;
pub mod list;
mod merge;
pub mod replay;
mod reproduce;
mod testgen;

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
    /// No progress bars and no run header (reports, notes and errors are still printed).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Colour in help and error messages: auto (a terminal, unless NO_COLOR is set), always,
    /// never.
    #[arg(long, value_enum, global = true, default_value = "auto", value_name = "WHEN")]
    pub color: ColorWhen,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

/// `--quiet` was given (no progress bars, no run header).
pub use crate::util::quiet;

/// The command line, coloured as `--color` (or NO_COLOR) among `args` asks: clap's own help
/// and errors follow it (parsed before the rest, since they are printed while parsing).
pub fn command_for(args: &[String]) -> clap::Command {
    use clap::CommandFactory;
    let when = args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--color") {
        Some("") => args.get(i + 1).map(String::as_str),
        Some(v) => v.strip_prefix('='),
        None => None,
    });
    let choice = match when {
        Some("always") => clap::ColorChoice::Always,
        Some("never") => clap::ColorChoice::Never,
        _ if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) => clap::ColorChoice::Never,
        _ => clap::ColorChoice::Auto,
    };
    Cli::command().color(choice)
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Check models. With no path: every expectation in specs/ (the CI gate).
    Check(check::CheckArgs),
    /// List models, profiles, variants, properties and guards (--rules: the rules table).
    List(list::ListArgs),
    /// Explain a property: what it means, the bugs it guards, its expected verdicts.
    Explain(explain::ExplainArgs),
    /// Serve kvmc's counterexample explorer for a model on loopback.
    Explore(explore::ExploreArgs),
    /// Measure exploration speed and memory: unique states, states/s, peak memory.
    Bench(bench::BenchArgs),
    /// Check event logs recorded from a real implementation against the model.
    Conform(conform::ConformArgs),
    /// Join the JSON reports of `kvmc check --shard I/N` into one verdict table and exit code.
    Merge(merge::MergeArgs),
    /// Run the reference implementation over a trace (Mooncake JSONL or a kvmc scenario):
    /// metrics, and every invariant checked after every action.
    Replay(replay::ReplayArgs),
    /// Turn a checker counterexample of a released vLLM profile into a scenario for the
    /// conformance recorder (scripts/reproduce.sh records it on that release).
    Reproduce(reproduce::ReproduceArgs),
    /// Write recorder scenarios covering every decision and action kind a model's exploration
    /// reaches, for conformance tests of a connector implementation.
    Testgen(testgen::TestgenArgs),
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    Completions(install::CompletionsArgs),
    /// Print kvmc's man page (roff), or write one per subcommand with --dir.
    Man(install::ManArgs),
}

/// The report format a command was asked for (`--format`): errors are reported in it too.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Json,
    Junit,
}

impl Cli {
    pub fn report_format(&self) -> ReportFormat {
        match &self.cmd {
            Cmd::Check(a) => match a.format {
                check::Format::Text => ReportFormat::Text,
                check::Format::Json => ReportFormat::Json,
                check::Format::Junit => ReportFormat::Junit,
            },
            Cmd::Conform(a) => match a.format {
                check::Format::Text => ReportFormat::Text,
                check::Format::Json => ReportFormat::Json,
                check::Format::Junit => ReportFormat::Junit,
            },
            Cmd::Replay(a) if matches!(a.format, replay::OutFormat::Json) => ReportFormat::Json,
            Cmd::Merge(a) if matches!(a.format, merge::MergeFormat::Json) => ReportFormat::Json,
            Cmd::Bench(a) if matches!(a.format, replay::OutFormat::Json) => ReportFormat::Json,
            _ => ReportFormat::Text,
        }
    }
}

/// `--format json|junit` among raw arguments that did not parse (for the error report).
pub fn report_format_of_args(args: &[String]) -> ReportFormat {
    let value = args.iter().enumerate().find_map(|(i, a)| match a.strip_prefix("--format") {
        Some("") => args.get(i + 1).map(String::as_str),
        Some(v) => v.strip_prefix('='),
        None => None,
    });
    match value {
        Some("json") => ReportFormat::Json,
        Some("junit") => ReportFormat::Junit,
        _ => ReportFormat::Text,
    }
}

/// Run the command line; returns the exit code.
pub fn run(cli: Cli) -> Result<i32> {
    crate::util::set_quiet(cli.quiet);
    match cli.cmd {
        Cmd::Check(a) => check::run(a),
        Cmd::List(a) => list::run(a),
        Cmd::Explain(a) => explain::run(a),
        Cmd::Explore(a) => explore::run(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Conform(a) => conform::run(a),
        Cmd::Replay(a) => replay::run(a),
        Cmd::Merge(a) => merge::run(a),
        Cmd::Reproduce(a) => reproduce::run(a),
        Cmd::Testgen(a) => testgen::run(a),
        Cmd::Completions(a) => install::completions(a),
        Cmd::Man(a) => install::man(a),
    }
}
