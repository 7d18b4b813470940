//! The machine-readable outputs' contracts: one Rust type per JSON document kvmc prints, from
//! which the JSON Schemas under `docs/schema/` are generated (docs/schema/README.md). The
//! emitters build their documents with `serde_json`; the integration test `schema` runs them
//! and validates what they print against the committed schemas, so a field added, renamed or
//! retyped in an emitter without its type here fails it (every object refuses unknown fields).
//!
//! Versioning: every document carries `schema_version` ([`SCHEMA_VERSION`]). It is bumped when
//! a field is removed, renamed or changes meaning; a field added keeps it.

use schemars::JsonSchema;
use serde::Serialize;

/// The version of every report's layout (`"schema_version"` in each document).
pub use crate::util::SCHEMA_VERSION;

/// A verdict, or the expectation it is compared with.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerdictName {
    Holds,
    Violated,
    Incomplete,
}

/// `kvmc check --format json` (and `kvmc merge --format json`).
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// Always [`SCHEMA_VERSION`] for this layout.
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub kvmc_version: String,
    /// Every result as expected (no mismatch, nothing incomplete).
    pub ok: bool,
    /// The process's peak resident memory (null where unknown, and in merged reports).
    pub peak_rss_bytes: Option<u64>,
    /// One (model, profile, variant, property) each, in the planned order.
    pub results: Vec<CheckResult>,
    /// How the run was made (absent in merged reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<CheckRun>,
    /// `kvmc merge`: the shard reports joined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged: Option<Merged>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckResult {
    pub model: String,
    pub profile: String,
    /// The bug variant, or "fixed".
    pub variant: String,
    pub property: String,
    /// From a spec; null for explicit model paths (which expect `holds`).
    pub expected: Option<VerdictName>,
    pub verdict: VerdictName,
    /// The verdict is the expectation and the result is not vacuous.
    pub ok: bool,
    /// A `holds` over nothing: some reachability guard of the property was never reached.
    pub vacuous: bool,
    pub unreached_guards: Vec<String>,
    pub unique_states: u64,
    pub states: u64,
    pub max_depth: u64,
    pub seconds: f64,
    /// What stopped an incomplete run (a bound, the memory budget, a timeout, Ctrl-C).
    pub stopped_by: Option<String>,
    pub counterexample: Option<CounterexampleDoc>,
    /// A `[workload]` model's row: what its workloads covered.
    pub workloads: Option<WorkloadsDoc>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CounterexampleDoc {
    pub steps: Vec<CxStepDoc>,
    /// stateright's action-index path: `kvmc explore MODEL --path P` opens it.
    pub path: String,
    /// A lasso: steps from this 0-based index on lead back to the state before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle_start: Option<u64>,
    /// How to open this counterexample in the explorer (docs/counterexamples.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explore: Option<ExploreDoc>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExploreDoc {
    /// The `kvmc explore` command line that opens it (same model file, profile and variant).
    pub command: String,
    /// The URL path (and query) on a `kvmc explore` started where `kvmc check` ran.
    pub url: String,
    /// The model file.
    pub model: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CxStepDoc {
    /// The environment action ("step", "arrive A", ...).
    pub action: String,
    /// What the engine did, in vLLM's order.
    pub summary: String,
    /// What changed in G1, G2 and the requests.
    pub changes: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadsDoc {
    pub family: String,
    /// Distinct workloads in the whole space, before sharding.
    pub total: u64,
    /// Workloads enumerated before deduplication.
    pub raw: u64,
    /// Workloads dropped for not fitting.
    pub pruned: u64,
    /// [index, count] of the shard (1-based index).
    pub shard: [u64; 2],
    pub in_shard: u64,
    pub explored: u64,
    pub skipped_after_violation: u64,
    pub classes: Vec<WorkloadClassDoc>,
    pub counterexample_workload: Option<CxWorkloadDoc>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadClassDoc {
    pub requests: u64,
    pub workloads: u64,
    pub unique_states: u64,
    pub states: u64,
    pub violated: u64,
    pub incomplete: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CxWorkloadDoc {
    pub index: u64,
    /// `w{index+1}`.
    pub name: String,
    pub summary: String,
    /// The workload as a model file `kvmc check` re-runs.
    pub model: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRun {
    /// bfs, dfs or simulate.
    pub strategy: String,
    pub threads: u64,
    pub symmetry: bool,
    pub seed: u64,
    pub max_states: Option<u64>,
    pub max_depth: Option<u64>,
    pub timeout_seconds: Option<f64>,
    pub max_memory_bytes: Option<u64>,
    pub interrupted: bool,
    pub shard: Option<ShardDoc>,
    /// fast or deep for the gate; null for explicit model paths.
    pub tier: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShardDoc {
    pub index: u64,
    pub count: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Merged {
    pub shards: u64,
    pub reports: Vec<String>,
}

/// `--format json` when a command fails before it reports (docs/exit-codes.md).
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorReport {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub kvmc_version: String,
    /// Always false.
    pub ok: bool,
    pub exit_code: i32,
    /// Always empty: nothing ran.
    pub results: Vec<CheckResult>,
    pub error: ErrorDoc,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDoc {
    /// usage, input, io or internal.
    pub kind: String,
    pub message: String,
    pub file: Option<String>,
    pub line: Option<u64>,
    /// The whole message as printed on stderr.
    pub text: String,
}

/// `kvmc replay TRACE --model M --format json`.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayReport {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub kvmc_version: String,
    /// No invariant violated and the replay ran to the end.
    pub ok: bool,
    /// Ctrl-C stopped it: the figures are those reached.
    pub incomplete: bool,
    pub trace: String,
    /// mooncake or mooncake-delta.
    pub format: String,
    pub model: String,
    pub profile: String,
    pub variant: Option<String>,
    pub engines: u32,
    /// Each engine's pools, in usable units.
    pub pools: crate::scope::replay::Pools,
    pub metrics: crate::replay::Metrics,
    /// Each engine's metrics when there are several (null for one engine).
    pub per_engine: Option<Vec<crate::replay::Metrics>>,
    pub checks: crate::replay::Checks,
    pub violation: Option<crate::replay::Finding>,
    pub seconds: f64,
    pub peak_rss_bytes: Option<u64>,
    /// `--per-request`: one row per finished request (null otherwise).
    pub requests: Option<Vec<crate::replay::RequestRow>>,
    /// `--per-session`: one row per session (null otherwise).
    pub sessions: Option<Vec<crate::replay::report::SessionRow>>,
    /// P/D models: each instance's metrics and router-replay figures, each router's answers
    /// (null for colocated engines).
    #[serde(default)]
    pub pd: Option<crate::replay::pd::PdSummary>,
}

/// `kvmc replay SCENARIO.toml --format json`.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReport {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub kvmc_version: String,
    pub ok: bool,
    pub scenario: String,
    pub model: String,
    pub profile: String,
    pub variant: Option<String>,
    pub actions: u64,
    pub evaluations: u64,
    pub metrics: ScenarioMetrics,
    pub violation: Option<ScenarioViolation>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioMetrics {
    pub g1_hit_tokens: u64,
    pub host_hit_tokens: u64,
    pub prefill_tokens: u64,
    pub recomputed_tokens: u64,
    pub decode_tokens: u64,
    pub store_jobs: u64,
    pub stored_chunks: u64,
    pub load_jobs: u64,
    pub preemptions: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioViolation {
    pub property: String,
    /// The 1-based action after which it was violated.
    pub action: u64,
    pub label: String,
}

/// `kvmc bench --format json`.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchReport {
    #[schemars(range(min = 1, max = 1))]
    pub schema_version: u32,
    pub kvmc_version: String,
    /// Exploration measurements (empty with --replay).
    pub models: Vec<BenchModel>,
    /// Replay measurements, one per run (empty without --replay).
    pub replays: Vec<BenchReplay>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchModel {
    pub model: String,
    pub unique_states: u64,
    pub states: u64,
    pub max_depth: u64,
    pub seconds: f64,
    /// CPU seconds (user + system) of the exploration; null where unknown.
    pub cpu_seconds: Option<f64>,
    pub states_per_second: f64,
    pub visited_bytes_per_state: f64,
    pub graph_bytes_per_state: f64,
    /// The process's peak so far (models run one after another).
    pub peak_rss_bytes: Option<u64>,
    pub threads: u64,
    pub symmetry: bool,
    pub complete: bool,
    /// `--stateright`: stateright's own checkers on the same model.
    pub stateright: Vec<BenchStateright>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchStateright {
    /// bfs or dfs.
    pub checker: String,
    pub unique_states: u64,
    pub states: u64,
    pub seconds: f64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchReplay {
    pub trace: String,
    pub requests: u64,
    pub steps: u64,
    pub actions: u64,
    pub evaluations: u64,
    pub seconds: f64,
    pub cpu_seconds: Option<f64>,
    pub steps_per_second: f64,
    pub peak_rss_bytes: Option<u64>,
    pub violation: bool,
}

/// Every schema kvmc publishes: (file under docs/schema/, schema). Adding a report is one
/// line here and its type above.
pub fn all() -> Vec<(&'static str, serde_json::Value)> {
    fn one<T: JsonSchema>(id: &str) -> serde_json::Value {
        let mut s = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        s["$id"] = serde_json::Value::String(format!("urn:kvmc:schema:{id}:v{SCHEMA_VERSION}"));
        s
    }
    vec![
        ("check.v1.json", one::<CheckReport>("check")),
        ("error.v1.json", one::<ErrorReport>("error")),
        ("replay.v1.json", one::<ReplayReport>("replay")),
        ("replay-scenario.v1.json", one::<ScenarioReport>("replay-scenario")),
        ("bench.v1.json", one::<BenchReport>("bench")),
        ("conform.v1.json", one::<ConformReport>("conform")),
    ]
}

/// `kvmc conform --format json`.
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformReport {
    /// Always [`SCHEMA_VERSION`] for this layout.
    pub schema_version: u32,
    pub kvmc_version: String,
    pub ok: bool,
    pub exit_code: i32,
    /// `--profile`, or the default (vllm-0.33) for logs whose header names no release kvmc
    /// models; each log's own is its `profile`.
    pub profile: String,
    pub variant: Option<String>,
    pub strict: bool,
    pub logs: Vec<ConformLog>,
    /// Logs of the batch that were not checked: bad input (a file that cannot be read, a line
    /// that does not parse). The run exits 2; the other logs are still checked.
    pub bad_logs: Vec<ConformBadLog>,
    pub kv_events: Option<ConformKvEvents>,
}

/// A log of a batch that could not be checked (bad input).
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformBadLog {
    pub log: String,
    /// "io" (the file cannot be read) or "input" (a line is not valid).
    pub kind: String,
    pub message: String,
    /// The line the message points at, if any.
    pub line: Option<u64>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformLog {
    pub log: String,
    /// "conforms", "diverges", "partial" or "incomplete" (the choice search hit its bound).
    pub verdict: String,
    pub ok: bool,
    /// The profile this log was checked under.
    pub profile: String,
    /// Where that profile came from: "flag" (`--profile`), "header" (the release the log's
    /// header names) or "default" (neither: vllm-0.33).
    pub profile_from: String,
    /// Set when the header and the profile disagree, or the header names a release kvmc has
    /// no profile for.
    pub profile_note: Option<String>,
    pub steps: u64,
    pub decisions: u64,
    pub divergence: Option<ConformDivergence>,
    pub partial: Option<ConformPartial>,
    /// Invariants the implementation violates too (`--strict` fails on them).
    pub findings: Vec<ConformFinding>,
    /// The order each of vLLM's unordered sets was matched under, per step.
    pub choices: Vec<ConformChoice>,
    pub search_bound: Option<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformDivergence {
    pub line: u64,
    pub step: u64,
    pub kind: String,
    pub implementation: String,
    pub model: String,
    /// The set orders the shown divergence was computed under.
    pub under: Vec<ConformChoice>,
    pub resolutions_tried: u64,
    pub window: Vec<ConformLine>,
    /// How to open the divergence in the explorer: the log beside the model, step by step
    /// (docs/counterexamples.md).
    pub explore: Option<ConformExplore>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformExplore {
    /// The `kvmc explore --conform` command line (same log, profile and variant).
    pub command: String,
    /// The URL path (and query) on a `kvmc explore` started where `kvmc conform` ran.
    pub url: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformLine {
    pub line: u64,
    pub text: String,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformPartial {
    pub line: u64,
    pub step: u64,
    pub error: String,
    /// When the implementation raised (not a fault that never applied, a hang or an idle
    /// engine): whether the model dies in its next step from the last recorded state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_death: Option<ConformDeath>,
}

/// The model's own death after a partial log's last step (`kvmc conform`, src/conform/death.rs).
#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformDeath {
    /// Model states tried.
    pub states: u64,
    /// The search stopped at its bound of states: a null property is then no answer at all.
    pub bounded: bool,
    /// The property whose violation kills the engine; null when the model does not die
    /// within the search (the log lacks the inputs of the step that raised, so no verdict).
    pub property: Option<String>,
    pub detail: Option<String>,
    /// The inputs that got there, the engine step last.
    pub inputs: Vec<String>,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformFinding {
    pub property: String,
    pub from_step: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformChoice {
    pub step: u64,
    /// The choice point (docs/conformance.md lists them).
    pub set: String,
    pub canonical: Vec<String>,
    pub chosen: Vec<String>,
    pub canonical_order: bool,
    pub orders: u64,
    pub resolutions_tried: u64,
    pub resolutions_matching: u64,
}

#[derive(Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConformKvEvents {
    pub file: String,
    pub ok: bool,
    pub problem: Option<String>,
    pub against_model: bool,
}
