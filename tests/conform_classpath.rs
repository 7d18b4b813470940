//! A connector loaded by class path (issue 22, item 5): `record.py --connector-class
//! MODULE:CLASS` builds vLLM's `KVTransferConfig(kv_connector=CLASS,
//! kv_connector_module_path=MODULE)`, and a connector that is not vLLM's OffloadingConnector
//! or SimpleCPU reports its own lines through `observe_api.py` (docs/conformance.md, "Test
//! generation for connector implementations"). The logs in
//! tests/conformance/fixtures/connector-class/ were recorded on vLLM 0.33.0:
//! * `vllm/`: vLLM's own connectors loaded by their class paths; each equals the by-name
//!   recording in fixtures/testgen/ line for line (the header also names the class);
//! * `self-reporting/`: example_connector/self_reporting.py, vLLM's OffloadingConnector
//!   reporting through the interface instead of observe.py's hooks; same logs again;
//! * `forgetful/`: example_connector/forgetful.py, an OffloadingConnector subclass that
//!   forgets a finished request's final store; conform finds the missing store job.

use crate::common::*;
use std::path::{Path, PathBuf};

fn dir(sub: &str) -> PathBuf {
    root().join("tests/conformance/fixtures/connector-class").join(sub)
}

fn logs(sub: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir(sub))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

/// The log without its header's `connector_class` (which must name `class`), as lines.
fn without_class(path: &Path, class: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let tail = format!(",\"connector_class\":\"{class}\"}}");
    assert!(lines[0].ends_with(&tail), "{}: header does not name {class}: {}", path.display(), lines[0]);
    let cut = lines[0].len() - tail.len();
    lines[0] = format!("{}}}", &lines[0][..cut]);
    lines
}

fn by_name(path: &Path) -> Vec<String> {
    let name = path.file_name().unwrap().to_str().unwrap();
    let f = root().join("tests/conformance/fixtures/testgen").join(name);
    std::fs::read_to_string(f).unwrap().lines().map(str::to_string).collect()
}

fn class_of(path: &Path) -> String {
    let head = std::fs::read_to_string(path).unwrap();
    let head = head.lines().next().unwrap();
    let v: serde_json::Value = serde_json::from_str(head).unwrap();
    v["connector_class"].as_str().expect("a connector_class in the header").to_string()
}

#[test]
fn vllms_connectors_by_class_path_record_the_same_logs_as_by_name() {
    let v = logs("vllm");
    assert!(v.len() >= 2, "{v:?}");
    let mut classes = std::collections::BTreeSet::new();
    for p in &v {
        let class = class_of(p);
        assert!(class.starts_with("vllm.distributed.kv_transfer.kv_connector.v1."), "{class}");
        assert_eq!(without_class(p, &class), by_name(p), "{}", p.display());
        classes.insert(class);
    }
    assert_eq!(classes.len(), 2, "both of vLLM's connectors: {classes:?}");
}

#[test]
fn a_connector_reporting_through_the_interface_records_the_hooks_logs() {
    let v = logs("self-reporting");
    assert!(v.len() >= 2, "{v:?}");
    for p in &v {
        let class = "example_connector.self_reporting:SelfReportingOffloadingConnector";
        assert_eq!(without_class(p, class), by_name(p), "{}", p.display());
        let o = kvmc(&["conform", "--profile", "vllm-0.33", p.to_str().unwrap()]);
        assert!(stdout(&o).contains(": conforms"), "{}{}", stdout(&o), stderr(&o));
    }
}

#[test]
fn the_forgetful_connectors_missing_final_store_diverges() {
    // restart-recompute t03 / t04: a request finishes (length) with a block computed after the
    // prompt's stores; vLLM's OffloadingConnector stores it in the next step's
    // build_connector_meta, the forgetful one does not, and the model's store job is missing.
    let expect = [
        ("restart-recompute-t03.jsonl", 35, "job 2 B keys=[\"B.0\"] blocks=[3] slots=[1]"),
        ("restart-recompute-t04.jsonl", 35, "job 2 C keys=[\"C.1\"] blocks=[3] slots=[1]"),
    ];
    let v = logs("forgetful");
    assert_eq!(v.len(), expect.len(), "{v:?}");
    for (name, line, model) in expect {
        let p = dir("forgetful").join(name);
        let class = "example_connector.forgetful:ForgetfulOffloadingConnector";
        assert_ne!(without_class(&p, class), by_name(&p), "the bug shows in the log");
        let o = kvmc(&["conform", "--profile", "vllm-0.33", p.to_str().unwrap()]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(10), "{out}{}", stderr(&o));
        assert!(out.contains(&format!("{name}:{line}: diverges at step 6 (store)")), "{out}");
        assert!(out.contains("implementation: (nothing)"), "{out}");
        assert!(out.contains(&format!("model:          {model}")), "{out}");
        // The same scenario on vLLM's own connector conforms.
        let good = root().join("tests/conformance/fixtures/testgen").join(name);
        let o = kvmc(&["conform", "--profile", "vllm-0.33", good.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stdout(&o));
    }
}

#[test]
fn the_observation_interface_writes_a_connectors_own_lines() {
    // tests/conformance/vllm/test_observe_api.py: the standard library only (vLLM replaced by
    // stand-ins); --connector-class parsing and observe_api.ConnectorObserver.
    python_unittest("tests/conformance/vllm/test_observe_api.py", 5);
}
