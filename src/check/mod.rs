//! Checking: runs of stateright over models, spec expectations, verdicts.

pub mod bfs;
pub mod gate;
pub mod run;
pub mod specs;

pub use run::{replay, run, RunOpts, RunResult, Strategy, Verdict};
