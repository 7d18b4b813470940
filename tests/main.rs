//! kvmc's integration tests: one binary, one module per concern.

mod adversarial;
mod anywhere;
mod arc;
mod architecture;
mod bad_input;
mod bounds;
mod cli;
mod common;
mod conform;
mod conform_logs;
mod explore;
mod models;
mod mooncake;
mod nixl;
mod parsers;
mod pd_rows;
mod replay;
mod roundtrip;
mod rows;
mod search;
mod search_kv;
mod search_live;
mod simple_cpu;
mod system;
mod tables;
mod workload;
