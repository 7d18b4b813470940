//! The tables kvmc keeps in one place: every switch of `Rules` has its row in the rules table
//! (docs/rules.md, `kvmc list --rules`, `Display for Rules`).

use crate::common::*;
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
