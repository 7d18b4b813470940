//! What a `[workload]` family's row covered: the workloads explored per class, and the
//! workload that gave the counterexample (data for the text, JSON and merged reports).

use crate::scope::Scope;
use std::sync::Arc;

/// Workload `k`'s label in reports (`w1`, `w2`, ...).
pub fn workload_label(k: usize) -> String {
    format!("w{}", k + 1)
}

/// What one class of workloads (those with `requests` requests) covered for one property.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCoverage {
    pub requests: usize,
    /// Workloads explored for this property.
    pub workloads: usize,
    pub unique_states: usize,
    pub states: usize,
    pub violated: usize,
    pub incomplete: usize,
}

/// The workload that gave a family row its counterexample.
#[derive(Clone, Debug)]
pub struct CxWorkload {
    /// 0-based index in the family's workload list (`w{index+1}`).
    pub index: usize,
    pub summary: String,
    /// The workload as an ordinary model file.
    pub model_text: String,
    pub scope: Option<Arc<Scope>>,
}

/// What a family row covered.
#[derive(Clone, Debug)]
pub struct Coverage {
    pub family: String,
    /// Distinct workloads in the whole space, before sharding.
    pub total: usize,
    /// Workloads enumerated before deduplication, and dropped for not fitting.
    pub raw: u64,
    pub pruned: usize,
    pub shard: (usize, usize),
    /// Workloads of this shard, and how many of them were explored for this property.
    pub in_shard: usize,
    pub explored: usize,
    /// Workloads not explored for this property because it was already violated.
    pub skipped_after_violation: usize,
    pub classes: Vec<ClassCoverage>,
    pub cx: Option<CxWorkload>,
}

impl Coverage {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "family": self.family,
            "total": self.total,
            "raw": self.raw,
            "pruned": self.pruned,
            "shard": [self.shard.0, self.shard.1],
            "in_shard": self.in_shard,
            "explored": self.explored,
            "skipped_after_violation": self.skipped_after_violation,
            "classes": self.classes.iter().map(|c| serde_json::json!({
                "requests": c.requests, "workloads": c.workloads, "unique_states": c.unique_states,
                "states": c.states, "violated": c.violated, "incomplete": c.incomplete,
            })).collect::<Vec<_>>(),
            "counterexample_workload": self.cx.as_ref().map(|c| serde_json::json!({
                "index": c.index, "name": workload_label(c.index), "summary": c.summary, "model": c.model_text,
            })),
        })
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        let classes: Vec<String> = self
            .classes
            .iter()
            .map(|c| {
                let mut s = format!("{} req: {} workloads, {} states", c.requests, c.workloads, c.unique_states);
                if c.violated > 0 {
                    s.push_str(&format!(", {} violated", c.violated));
                }
                if c.incomplete > 0 {
                    s.push_str(&format!(", {} incomplete", c.incomplete));
                }
                s
            })
            .collect();
        let shard =
            if self.shard.1 > 1 { format!(" (shard {}/{})", self.shard.0, self.shard.1) } else { String::new() };
        let mut s = format!(
            "workloads {}/{} explored of {} distinct{shard}: {}",
            self.explored,
            self.in_shard,
            self.total,
            classes.join("; ")
        );
        if self.skipped_after_violation > 0 {
            s.push_str(&format!("; {} not explored after the first counterexample", self.skipped_after_violation));
        }
        if let Some(c) = &self.cx {
            s.push_str(&format!("; first counterexample in {}: {}", workload_label(c.index), c.summary));
        }
        s
    }
}
