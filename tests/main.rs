//! kvmc's integration tests: one binary, one module per concern.

mod arc;
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
mod search;
mod search_kv;
mod search_live;
mod simple_cpu;
mod system;
