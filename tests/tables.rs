//! The tables kvmc keeps in one place: every switch of `Rules` has its row in the rules table
//! (docs/rules.md, `kvmc list --rules`, `Display for Rules`); every property of the catalogue
//! maps to what replay evaluates (always-properties) or reports as reached (guards).

use crate::common::*;
use kvmc::props::{Kind, CATALOGUE};
use kvmc::replay::config::ReplayModel;
use kvmc::replay::invariants;
use kvmc::replay::trace::Trace;
use kvmc::replay::{run_trace, Options};
use kvmc::system::rules::{self, RULE_ROWS};

/// The top-level field names of a `{:?}`-printed struct (`Name { a: x, b: Some(y) }`).
fn debug_fields(s: &str) -> Vec<String> {
    let body = s.split_once(" { ").map(|x| x.1).unwrap_or("").trim_end_matches(" }");
    body.split(", ").map(|f| f.split(':').next().unwrap_or("").to_string()).collect()
}

/// Every switch of `Rules` has exactly one row, and so appears in `Display for Rules`, in
/// `kvmc list --rules` and docs/rules.md (generated_docs_match_the_code keeps the file equal).
/// Two switches once had none (`aux_clamp_exempts_resumed`, `aux_emit_last_token`); the
/// struct and its rows now come from one macro (src/system/rules/table.rs).
#[test]
fn every_rules_switch_has_one_row() {
    let r = rules::resolve("vllm-0.33", None).unwrap();
    let fields = debug_fields(&format!("{r:?}"));
    let rows: Vec<&str> = RULE_ROWS.iter().map(|row| row.name).collect();
    assert!(fields.len() > 40, "{fields:?}");
    assert_eq!(fields, rows, "the rules table lists every switch of Rules once, in field order");
    let shown = r.to_string();
    let listed = stdout(&kvmc(&["list", "--rules"]));
    for f in &fields {
        assert!(shown.lines().any(|l| l.split_whitespace().next() == Some(f.as_str())), "Display lacks {f}");
        assert!(listed.contains(&format!("| `{f}` |")), "kvmc list --rules lacks {f}");
    }
    for f in ["aux_clamp_exempts_resumed", "aux_emit_last_token"] {
        assert!(rows.contains(&f), "{f}");
    }
}

/// Every always-property is evaluated by replay and every reachability guard is reported by
/// it when reached, both read from the property's catalogue entry (its ghost breaches, mark
/// or predicate), so a property without a replay mapping fails here.
#[test]
fn every_property_and_guard_has_a_replay_mapping() {
    for p in CATALOGUE {
        match p.kind {
            Kind::Always => assert!(invariants::handles(p.name), "replay does not evaluate {}", p.name),
            Kind::Sometimes => assert!(invariants::reports(p.name), "replay cannot report {} as reached", p.name),
        }
    }
    let guards = CATALOGUE.iter().filter(|p| p.kind == Kind::Sometimes).count();
    assert_eq!(guards, 28);
}

/// Replay's "situations reached" once left out the guards its own list did not map
/// (reach-readmit-full-table, reach-stale-pin, reach-partial-store, reach-host-refresh among
/// them). SimpleCPU under vllm-main on the first 100 rows of the real trace, with a CPU pool
/// under pressure, reaches all four; the run reaches the end (reach-all-finished).
#[test]
fn replay_reports_every_guard_it_reaches() {
    let path = root().join("tests/traces/conversation-head-300.jsonl");
    let text = std::fs::read_to_string(&path).expect("the trace excerpt (tests/traces/README.md)");
    let head: String = text.lines().take(100).map(|l| format!("{l}\n")).collect();
    let model = r#"
[engine]
profile = "vllm-main"
connector = "simple-cpu"
block_size = 16
gpu_blocks = 8192
max_num_batched_tokens = 8192
max_num_seqs = 64

[simple_cpu]
cpu_blocks = 512

[replay]
load = "closed-loop"
concurrency = 64
trace_block_size = 512
"#;
    let d = tempdir("reached");
    let t = Trace::parse(&path, &head, 512, None).expect("trace parses");
    let m = ReplayModel::parse("m", &d.join("m.toml"), model).expect("model parses");
    let opts =
        Options { out_dir: Some(d.clone()), skip_properties: vec!["final-store-kept".into()], ..Default::default() };
    let o = run_trace(&t, &m, &opts).expect("replay runs");
    assert!(o.finding.is_none(), "{:?}", o.finding);
    assert_eq!(
        o.checks.reached,
        [
            "reach-g1-hit",
            "reach-g1-eviction",
            "reach-preemption",
            "reach-host-hit",
            "reach-host-eviction",
            "reach-store-done",
            "reach-restart",
            "reach-finish-store",
            "reach-readmit-full-table",
            "reach-stale-pin",
            "reach-partial-store",
            "reach-host-refresh",
            "reach-all-finished",
        ]
    );
}
