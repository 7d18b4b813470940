//! kvmc: a model checker and executable reference implementation for KV-cache offload in
//! vLLM-style inference engines.
//!
//! # Layers
//! - [`system`]: the reference implementation, one vLLM engine as a pure, deterministic
//!   transition system (G1 block pool and prefix cache, scheduler, offload connectors, host
//!   tier, routed-expert rows). Its input type ([`Input`]) and [`System::apply`] are the only
//!   way the drivers move it. Version differences are data (`system::rules`).
//! - [`scope`]: model files (`models/*.toml`), replay models and scenarios, parsed into
//!   system types. Every driver reads model files through it.
//! - [`props`]: the property registry, one entry per property keyed by [`PropId`]; predicates
//!   over system types only.
//! - The drivers, which never import one another: the checker ([`check`], with the stateright
//!   [`model`] and the generic [`search`] engine), [`replay`] (real request traces) and
//!   [`conform`] (event logs recorded from real vLLM).
//! - [`report`]: the checker's reports and counterexample files; [`schema`]: the JSON
//!   reports' contracts (docs/schema/); [`cli`]: the command line.
//! - Small neutral modules any layer may use: [`error`], [`stop`], [`hint`], [`util`],
//!   [`suggest`].
//!
//! docs/architecture.md has the map (which file holds which vLLM rule) and the recipes.
//!
//! # Using the system from another program
//! Build a system from a model file, step it with the inputs it enables, and evaluate the
//! properties that apply to it after every input:
//!
//! ```
//! use kvmc::{Events, Kind, Scope, REGISTRY};
//!
//! let scope = Scope::load(std::path::Path::new("models/shared-prefix.toml"))?;
//! let sys = scope.system(None, None).map_err(kvmc::KvmcError::Usage)?;
//! let props: Vec<_> = REGISTRY.iter().filter(|p| p.kind == Kind::Always && p.on.holds_for(&sys.cfg)).collect();
//! let mut engine = sys.init();
//! let mut inputs = Vec::new();
//! for _ in 0..50 {
//!     inputs.clear();
//!     sys.inputs(&engine, &mut inputs);
//!     // The first input that changes something (arrivals come first, then steps).
//!     let Some(next) = inputs.iter().find_map(|&i| sys.apply(&engine, i, &mut Events::off(), false)) else {
//!         break;
//!     };
//!     engine = next;
//!     for p in &props {
//!         assert!((p.check)(&sys, &engine), "{} is violated", p.name);
//!     }
//! }
//! assert!(engine.reqs.iter().all(|r| r.status.is_finished()), "every request finished");
//! # Ok::<(), kvmc::KvmcError>(())
//! ```

pub mod check;
pub mod cli;
pub mod conform;
pub mod error;
pub mod explorer;
pub mod hint;
pub mod model;
pub mod props;
pub mod replay;
pub mod report;
pub mod schema;
pub mod scope;
pub mod search;
pub mod stop;
pub mod suggest;
pub mod system;
pub mod util;
pub mod workload;

pub use error::KvmcError;
pub use props::{Kind, PropDef, PropId, REGISTRY};
pub use scope::Scope;
pub use system::{Engine, Events, Input, System};
