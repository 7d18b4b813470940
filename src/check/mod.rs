//! Checking: explorations of models (kvmc's BFS, DFS and random walks over the stateright
//! `Model`), spec expectations, verdicts.

pub mod bfs;
pub mod builtin_models;
pub mod dfs;
pub mod family;
pub mod gate;
pub mod hooks;
pub mod run;
pub mod simulate;
pub mod specs;

pub use run::{replay, run, RunOpts, RunResult, Strategy, Verdict};
