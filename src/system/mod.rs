//! The reference system: a pure, deterministic model of one vLLM engine (G1 pool, scheduler,
//! OffloadingConnector, SimpleCPUOffloadConnector or MooncakeStoreConnector, host tier or shared pool), following vLLM 0.33.0. All three drivers (the checker,
//! replay, conformance) run exactly this code. A P/D pair with router replay (`pd`) is two
//! such engines, the decode one held by the prefill one, and prime-rl's router.

pub mod admission;
pub mod choice;
pub mod collections;
pub mod config;
pub mod connector;
pub mod display;
pub mod engine;
pub mod events;
pub mod expert_rows;
pub mod ghost;
pub mod gpu_pool;
pub mod input;
pub mod kv_manager;
pub mod layouts;
pub mod model_runner;
pub mod pd;
pub mod preemption;
pub mod request;
pub mod rules;
pub mod scheduler;
pub mod scheduler_output;
mod step_bufs;
pub mod symmetry;
pub mod types;
pub mod workload;

/// The OffloadingConnector's host tier (G2) and its ARC policy, at their old paths.
pub use connector::offloading::{host_arc, host_tier};

pub use config::{
    ConnectorConfig, ConnectorKind, EngineConfig, EvictionPolicy, KvRole, LoadFailurePolicy, MooncakeConfig,
    OffloadConfig, SimpleCpuConfig,
};
pub use engine::{Ctx, Direction, Engine};
pub use events::{Event, Events};
pub use input::{Input, System};
pub use rules::Rules;
pub use workload::{EndKind, RequestSpec, Workload};
