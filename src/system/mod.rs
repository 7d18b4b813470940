//! The reference system: a pure, deterministic model of one vLLM engine (G1 pool, scheduler,
//! OffloadingConnector, SimpleCPUOffloadConnector or MooncakeStoreConnector, host tier or shared pool), following vLLM 0.33.0. All three drivers (the checker,
//! replay, conformance) run exactly this code.

pub mod config;
pub mod connector;
pub mod engine;
pub mod events;
pub mod expert_rows;
pub mod ghost;
pub mod gpu_pool;
pub mod host_arc;
pub mod host_order;
pub mod host_tier;
pub mod kv_manager;
pub mod pos_map;
pub mod rank_queue;
pub mod request;
pub mod rules;
pub mod scheduler;
pub mod scheduler_output;
pub mod side;
pub mod symmetry;
pub mod types;
pub mod worker;
pub mod workload;

pub use config::{
    ConnectorConfig, ConnectorKind, EngineConfig, EvictionPolicy, KvRole, LoadFailurePolicy, MooncakeConfig,
    OffloadConfig, SimpleCpuConfig,
};
pub use engine::{Ctx, Direction, Engine};
pub use events::{Event, Events};
pub use rules::Rules;
pub use workload::{EndKind, RequestSpec, Workload};
