//! The rows a report renders: one (model, profile, variant, property) each, with its verdict
//! and expectation. The checker fills them in (src/check/gate.rs); the report renders them.

use super::counterexample::Counterexample;

/// The verdict on one property in one run.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Verdict {
    Holds,
    Violated,
    Incomplete,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Incomplete => "incomplete",
        }
    }
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Row {
    pub model: String,
    pub profile: String,
    pub variant: Option<String>,
    pub property: String,
    /// From a spec; `None` for explicit runs.
    pub expected: Option<Verdict>,
    pub verdict: Verdict,
    /// Guards of this property that were never reached (a `holds` over nothing).
    pub unreached: Vec<String>,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    pub cut_by: Option<String>,
    pub counterexample: Option<Counterexample>,
    /// A `[workload]` model's row: what its workloads covered.
    pub coverage: Option<std::sync::Arc<crate::report::coverage::Coverage>>,
}

#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Status {
    Ok,
    /// The verdict differs from the expectation, or a `holds` is vacuous.
    Mismatch,
    Incomplete,
}

impl Row {
    pub fn status(&self) -> Status {
        let want = self.expected.unwrap_or(Verdict::Holds);
        match self.verdict {
            Verdict::Incomplete => Status::Incomplete,
            Verdict::Holds if !self.unreached.is_empty() => Status::Mismatch,
            v if v == want => Status::Ok,
            _ => Status::Mismatch,
        }
    }
}
