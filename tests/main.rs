//! kvmc's integration tests: one binary, one module per concern.

mod anywhere;
mod arc;
mod bad_input;
mod cli;
mod common;
mod conform;
mod models;
mod mooncake;
mod nixl;
mod parsers;
mod replay;
mod roundtrip;
mod rows;
mod simple_cpu;
mod system;
