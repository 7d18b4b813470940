//! `kvmc reproduce`: checker counterexamples turned into recorder scenarios
//! (tests/conformance/reproduced/), recorded on real vLLM by scripts/reproduce.sh
//! (tests/conformance/fixtures/reproduced/), and conformed here without Python: each log must
//! conform to its profile and show every property its counterexample violates.

use crate::common::*;
use kvmc::conform;
use std::path::PathBuf;

fn header(text: &str, key: &str) -> String {
    let tag = format!("# {key}: ");
    text.lines().find_map(|l| l.strip_prefix(&tag)).unwrap_or_else(|| panic!("no {tag}")).to_string()
}

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

#[test]
fn every_reproduced_log_conforms_and_violates_the_counterexamples_properties() {
    let logs = files("tests/conformance/fixtures/reproduced", "jsonl");
    assert!(logs.len() >= 6, "the 0.33 rows of the gate are recorded");
    for log in &logs {
        let name = log.file_stem().unwrap().to_string_lossy().to_string();
        let sc = std::fs::read_to_string(root().join(format!("tests/conformance/reproduced/{name}.toml")))
            .unwrap_or_else(|_| panic!("{name}: the log has no scenario"));
        let version = header(&sc, "vllm-version");
        let profile = format!("vllm-{}", version.rsplit_once('.').unwrap().0);
        let want = header(&sc, "expect-violated");
        assert!(!want.is_empty(), "{name}: the counterexample violates something");
        let r = conform::check(log, &profile, None, 8).expect("log parses");
        assert!(r.divergence.is_none(), "{name}: {:?}", r.divergence);
        assert!(r.partial.is_none(), "{name}: partial log");
        for p in want.split_whitespace() {
            assert!(
                r.findings.iter().any(|(f, _)| f == p),
                "{name}: vLLM {version} does not violate {p}: {:?}",
                r.findings
            );
        }
        // A gate row's own property (the file name's last part) is among them.
        if let Some((_, row_prop)) = name.rsplit_once("__") {
            assert!(want.split_whitespace().any(|p| p == row_prop), "{name}");
        }
    }
    // A counterexample that kills the engine (queue-sound: vLLM raises in `schedule()`;
    // connector-assert: the OffloadingConnector raises in `update_connector_output`;
    // tokens-positive: 0.24's `update_from_output` asserts a positive count) is
    // recorded as far as the engine got: the recorder's partial log ends with vLLM's error.
    let partial = files("tests/conformance/fixtures/reproduced", "partial");
    let (mut crashes, mut hangs, mut then_hangs) = (0, 0, 0);
    for log in &partial {
        let name = log.file_name().unwrap().to_string_lossy().trim_end_matches(".jsonl.partial").to_string();
        let sc = std::fs::read_to_string(root().join(format!("tests/conformance/reproduced/{name}.toml"))).unwrap();
        let version = header(&sc, "vllm-version");
        let profile = format!("vllm-{}", version.rsplit_once('.').unwrap().0);
        if sc.contains("# expect-unfinished: ") {
            hangs += 1;
            check_hang(log, &name, &sc, &profile);
            continue;
        }
        let row_prop = name.rsplit_once("__").map(|x| x.1).unwrap();
        if !["queue-sound", "connector-assert", "tokens-positive"].contains(&row_prop) {
            // A safety property shown before vLLM hangs (finding 34's session-history on 0.32,
            // then finding 36's hang): every recorded step conforms and shows the property.
            then_hangs += 1;
            let r = conform::check(log, &profile, None, 8).unwrap();
            assert!(r.divergence.is_none() && r.partial.is_some(), "{name}: {:?}", r.divergence);
            for p in header(&sc, "expect-violated").split_whitespace() {
                assert!(r.findings.iter().any(|(f, _)| f == p), "{name}: {p} not violated: {:?}", r.findings);
            }
            continue;
        }
        crashes += 1;
        let error = match header(&sc, "expect-violated").split_whitespace().last() {
            Some("queue-sound") => "Invalid request status: ",
            Some("connector-assert") => "KeyError: ",
            Some("tokens-positive") => "AssertionError",
            other => panic!("{name}: {other:?} does not kill the engine"),
        };
        let text = std::fs::read_to_string(log).unwrap();
        let last = text.lines().last().unwrap();
        assert!(last.contains(r#""ev":"partial""#) && last.contains(error), "{name}: {last}");
        // Every step before the one that died conforms (finding 28's log ends before the
        // session's next input: the engine died in the step that would have sent it).
        let r = conform::check(log, &profile, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_some(), "{name}: {:?}", r.divergence);
        // And from its last recorded state the model dies in the next step, naming the row's
        // property (finding 28's next input is the placeholder of an input the log never sent).
        let found = r.death.and_then(|d| d.found).unwrap_or_else(|| panic!("{name}: the model does not die"));
        assert_eq!(Some(found.0.as_str()), name.rsplit_once("__").map(|x| x.1), "{name}: {found:?}");
    }
    assert_eq!(crashes, 5, "findings 28 and 29 (0.24), 35 (0.24 and 0.32), 37 (0.24)");
    // Finding 20: mooncake-load-retry (0.32, 0.33, 0.34) and offload-load-retry (0.24, 0.32,
    // 0.33); stream-sessions-hold-pool (finding 33: 0.24 to 0.34), stream-park-count (finding 30:
    // 0.24), stream-preempt-lost (finding 36: 0.24, 0.32).
    // With finding 20 under async scheduling (mooncake-load-retry-async, 0.33), and finding 31
    // with a streaming session as the holder (stream-behind-head, 0.24).
    assert_eq!(hangs, 15, "the gate's requests-finish rows the recorder can drive, and one more");
    assert_eq!(then_hangs, 1, "stream-preempt-lost, 0.32, session-history");
    // Every scenario has its log (0.24, 0.32 and 0.33), 0.24's SimpleCPU ones too since
    // observe.py splits `_prepare_eager_store_specs`'s store event per request.
    for sc in files("tests/conformance/reproduced", "toml")
        .into_iter()
        .filter(|p| !p.to_string_lossy().ends_with(".model.toml"))
    {
        let n = sc.file_stem().unwrap().to_string_lossy().to_string();
        let recorded = logs.iter().chain(&partial).any(|l| {
            l.file_name().unwrap().to_string_lossy().trim_end_matches(".partial").trim_end_matches(".jsonl") == n
        });
        assert!(recorded, "{n}: recorded on its vLLM release");
    }
}

/// A hang (requests-finish) recorded on vLLM: the recorder stopped at its step bound, or vLLM
/// went idle with requests unfinished; every recorded step conforms, the requests the checker
/// starves never finish, vLLM did not die (the model does not die either), and the invariants
/// the counterexample violates on the way are violated on the log too.
fn check_hang(log: &std::path::Path, name: &str, sc: &str, profile: &str) {
    let text = std::fs::read_to_string(log).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.contains(r#""ev":"partial""#)
            && (last.contains("did not finish in") || last.contains("the engine went idle with unfinished requests")),
        "{name}: {last}"
    );
    for r in header(sc, "expect-unfinished").split_whitespace() {
        let finish = r#""ev":"finish","#;
        let req = format!(r#""req":"{r}""#);
        assert!(!text.lines().any(|l| l.contains(finish) && l.contains(&req)), "{name}: {r} finishes");
    }
    let r = conform::check(log, profile, None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_some(), "{name}: {:?}", r.divergence);
    assert!(r.death.as_ref().and_then(|d| d.found.as_ref()).is_none(), "{name}: a hang is not a death");
    for p in header(sc, "expect-violated").split_whitespace() {
        assert!(r.findings.iter().any(|(f, _)| f == p), "{name}: {p} not violated: {:?}", r.findings);
    }
}

#[test]
fn strict_conform_of_a_reproduced_log_exits_10_naming_the_property() {
    let log = "tests/conformance/fixtures/reproduced/sync-load-failure__vllm-0.33__g1-cache-sound.jsonl";
    let o = kvmc(&["conform", "--strict", log]);
    assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
    assert!(stdout(&o).contains("conforms"), "{}", stdout(&o));
    assert!(stdout(&o).contains("invariant g1-cache-sound is violated from step 5 on"), "{}", stdout(&o));
}

/// The two switches the recorder now carries in the log header (written only when off): the
/// reproduced logs conform with them and diverge without them, so the header is what kvmc reads.
#[test]
fn prefix_caching_and_whole_sequence_admission_off_are_read_from_the_header() {
    let d = tempdir("reproduce-switches");
    for (name, field, at) in [
        ("final-store__vllm-0.33__final-store-kept", ",\"enable_prefix_caching\":false", "diverges at step 1 (g1)"),
        (
            "scpu-shared-prefix__vllm-0.33__final-store-kept",
            ",\"scheduler_reserve_full_isl\":false",
            "diverges at step 2 (schedule)",
        ),
    ] {
        let log = root().join(format!("tests/conformance/fixtures/reproduced/{name}.jsonl"));
        let text = std::fs::read_to_string(&log).unwrap();
        let header = text.lines().next().unwrap();
        assert!(header.contains(field), "{header}");
        let o = kvmc(&["conform", log.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
        let without = d.join(format!("{name}.jsonl"));
        std::fs::write(&without, text.replacen(field, "", 1)).unwrap();
        let o = kvmc(&["conform", without.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(10), "{}", stdout(&o));
        assert!(stdout(&o).contains(at), "{}", stdout(&o));
    }
}

#[test]
fn reproduce_gate_writes_the_committed_scenarios_and_lists_the_rest() {
    let dir = tempdir("reproduce-gate");
    let o = kvmc(&["reproduce", "--gate", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let committed: Vec<PathBuf> = files("tests/conformance/reproduced", "toml")
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("__vllm-"))
        .collect();
    let mut written: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    written.sort();
    let names = |v: &[PathBuf]| v.iter().map(|p| p.file_name().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&written),
        "regenerate with `kvmc reproduce --gate --out-dir tests/conformance/reproduced`"
    );
    for (c, w) in committed.iter().zip(&written) {
        assert_eq!(std::fs::read_to_string(c).unwrap(), std::fs::read_to_string(w).unwrap(), "{}", c.display());
    }
    // Every released-profile violation of the gate is either written or listed with a reason.
    // NIXL's producer (#59102, pd-chunked on every release and pd-shared on 0.33) is written
    // since the recorder drives NixlConnector's scheduler side and plays the consumer's reads.
    for p in ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        assert!(dir.join(format!("pd-chunked__{p}__handoff-integrity.toml")).exists(), "{out}");
    }
    assert!(dir.join("pd-shared__vllm-0.33__handoff-integrity.toml").exists(), "{out}");
    assert!(!out.contains("NixlConnector"), "{out}");
    // A requests-finish counterexample is written (vLLM does not finish either), Mooncake's
    // too; not one that ends with every request finished and work held (finding 27).
    assert!(dir.join("mooncake-load-retry__vllm-0.33__requests-finish.toml").exists(), "{out}");
    assert!(out.contains("scpu-pressure__vllm-0.24__requests-finish") && out.contains("finding 27"), "{out}");
    // Async scheduling is recorded (AsyncScheduler + step_with_batch_queue): written now.
    assert!(dir.join("scpu-async-abort__vllm-0.33__store-coverage.toml").exists(), "{out}");
    assert!(!out.contains("async scheduling is not"), "{out}");
    assert!(!out.contains("pre-29870"), "variants are not released code: {out}");
    let listed = out.lines().filter(|l| l.contains("__vllm-0.")).count();
    // offload-load-retry (0.24, 0.32, 0.33): requests-finish, written.
    assert!(dir.join("offload-load-retry__vllm-0.33__requests-finish.toml").exists(), "{out}");
    // scpu-lazy (0.32, 0.33): finding 26, lazy mode (recorded by hand: tests/conformance/findings/).
    assert!(out.contains("scpu-lazy__vllm-0.33__requests-finish") && out.contains("lazy-mode"), "{out}");
    // 48 since kvmc refuses Mooncake and router-replay scopes under vllm-0.24 (mooncake-a,
    // mooncake-load-retry and rows-offload had a 0.24 row each); 49 with rows-live-store's 0.32
    // row (the bounded row store, rule aux_store_grows), listed: the recorder has no router replay;
    // 52 with stream-sessions-hold-pool's three (finding 33, requests-finish: written, and
    // recorded vLLM does not finish, as tests/conformance/findings/sessions-hold-pool.toml shows).
    assert!(dir.join("stream-sessions-hold-pool__vllm-0.33__requests-finish.toml").exists(), "{out}");
    // 54 with stream-resume-fence's two (finding 35, connector-assert under vllm-0.24 and
    // vllm-0.32): written, and recorded on vLLM 0.32.0 it raises the same KeyError.
    assert!(dir.join("stream-resume-fence__vllm-0.32__connector-assert.toml").exists(), "{out}");
    // 58 with stream-preempt-lost's four (findings 34 and 36 under vllm-0.24 and vllm-0.32:
    // requests-finish and session-history): all written now.
    assert!(dir.join("stream-preempt-lost__vllm-0.32__session-history.toml").exists(), "{out}");
    // 59 with stream-outgrow-len's (finding 37, tokens-positive under vllm-0.24): written, and
    // recorded on vLLM 0.24.0 it fails the same assert.
    assert!(dir.join("stream-outgrow-len__vllm-0.24__tokens-positive.toml").exists(), "{out}");
    // Prefix caching off (final-store, stream-resume-reader, stream-stale-key) and whole-sequence
    // admission off (scpu-shared-prefix): written since the recorder carries both switches.
    assert!(!out.contains("prefix caching") && !out.contains("reserve_full_isl"), "{out}");
    // Finding 24's reader: B's prompt spells the token S sampled, as the recorder samples it.
    let stale = std::fs::read_to_string(dir.join("stream-stale-key__vllm-0.24__kv-read-integrity.toml")).unwrap();
    assert!(stale.contains("\"o120_2127:1\""), "{stale}");
    let written = out.lines().filter(|l| l.contains("__vllm-0.") && l.contains(" -> ")).count();
    // 44 with the nine requests-finish rows the recorder can drive (a hang: `# expect-unfinished:`),
    // 46 with stream-preempt-lost's two session-history rows (finding 34), 53 with vllm-0.34's
    // four and mooncake-load-retry's three (Mooncake scenarios: `[mooncake] preload`), 58
    // with NIXL's five (pd-chunked on 0.24, 0.32, 0.33 and 0.34, pd-shared on 0.33), 59 with
    // stream-behind-head (finding 31 with a streaming session as the holder, 0.24).
    assert!(dir.join("stream-behind-head__vllm-0.24__requests-finish.toml").exists(), "{out}");
    assert_eq!(written, 59, "{out}");
    // 66 with vllm-0.34's seven rows (mooncake-load-retry, scpu-async-abort, scpu-pressure
    // and stream-sessions-hold-pool written; final-store, pd-chunked and scpu-lazy listed).
    assert!(dir.join("scpu-async-abort__vllm-0.34__store-coverage.toml").exists(), "{out}");
    assert_eq!(listed, 67, "{out}");
}

#[test]
fn reproduce_reads_a_counterexample_file_or_finds_one() {
    let dir = tempdir("reproduce-cx");
    let o = kvmc(&[
        "check",
        "models/error-mid-prefill.toml",
        "--profile",
        "vllm-0.33",
        "--property",
        "host-integrity",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let cx = dir.join("error-mid-prefill__vllm-0.33__fixed__host-integrity.scenario.toml");
    let out = dir.join("r.toml");
    let o = kvmc(&["reproduce", cx.to_str().unwrap(), "-o", out.to_str().unwrap(), "--name", "emp"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let a = std::fs::read_to_string(&out).unwrap();
    // The story: A arrives before step 1, errors before step 2 (its finish-time store), and
    // the store copy finishes within step 3 (reported there: delay 1 from step 2).
    for want in [
        "# vllm-version: 0.33.0",
        "# expect-violated: host-integrity source-freshness",
        "name = \"emp\"",
        "block_size = 2\ngpu_blocks = 5\nmax_num_batched_tokens = 3\nmax_num_seqs = 3\n",
        "[[event]]\nerror = \"A\"\nstep = 2",
        "[[transfer_delay]]\nreq = \"A\"\nkind = \"store\"\nnth = 2\ndelay = 1",
        "prompt = [\"t97:1\", \"t98:1\", \"t99:1\", \"t100:1\", \"t101:1\", \"t102:1\"]",
    ] {
        assert!(a.contains(want), "{want:?} not in\n{a}");
    }
    // The same counterexample found by the checker gives the same scenario.
    let o = kvmc(&[
        "reproduce",
        "models/error-mid-prefill.toml",
        "--property",
        "host-integrity",
        "--profile",
        "vllm-0.33",
        "--name",
        "emp",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let body = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("# counterexample") && !l.starts_with("description"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(body(&stdout(&o)), body(&a));
}

#[test]
fn reproduce_refuses_what_released_vllm_cannot_run_and_bad_files() {
    let dir = tempdir("reproduce-bad");
    let w = |n: &str, t: &str| {
        let p = dir.join(n);
        std::fs::write(&p, t).unwrap();
        p.to_str().unwrap().to_string()
    };
    let model = root().join("models/error-mid-prefill.toml");
    let m = model.to_str().unwrap();
    // An action that is not enabled: exit 2 naming the file and its line.
    let p = w(
        "off.toml",
        &format!("model = {m:?}\nprofile = \"vllm-0.33\"\nactions = [\n  \"arrive A\",\n  \"abort B\",\n]\n"),
    );
    let o = kvmc(&["reproduce", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{p}:5:")), "{}", stderr(&o));
    // Malformed TOML and an unknown key: exit 2 with the line.
    let p = w("bad.toml", &format!("model = {m:?}\nactions = [\"arrive A\",\n"));
    let o = kvmc(&["reproduce", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{p}:")), "{}", stderr(&o));
    let p = w("key.toml", &format!("model = {m:?}\nsteps = 3\nactions = []\n"));
    let o = kvmc(&["reproduce", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("{p}:2:")), "{}", stderr(&o));
    // A variant is not released code; vllm-main is no release.
    let p = w(
        "var.toml",
        &format!("model = {m:?}\nprofile = \"vllm-0.33\"\nvariant = \"fix-63937\"\nactions = [\"arrive A\"]\n"),
    );
    let o = kvmc(&["reproduce", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("variant fix-63937"), "{}", stderr(&o));
    let o =
        kvmc(&["reproduce", "models/error-mid-prefill.toml", "--property", "host-integrity", "--profile", "vllm-main"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no vLLM release"), "{}", stderr(&o));
    // The MooncakeStoreConnector with router replay: the recorder captures no rows.
    let o = kvmc(&["reproduce", "models/mooncake-a.toml", "--property", "rows-present", "--profile", "vllm-0.32"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("router replay"), "{}", stderr(&o));
    // A property that holds has no counterexample.
    let o = kvmc(&["reproduce", "models/error-mid-prefill.toml", "--property", "g1-accounting"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds"), "{}", stderr(&o));
}

#[test]
fn finding_23a_is_reproduced_on_vllm_033() {
    // The committed scenario is what kvmc reproduce makes of the finding's model today.
    let o = kvmc(&[
        "reproduce",
        "tests/conformance/reproduced/finding-23a.model.toml",
        "--property",
        "store-coverage",
        "--name",
        "finding-23a",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let committed = std::fs::read_to_string(root().join("tests/conformance/reproduced/finding-23a.toml")).unwrap();
    assert_eq!(stdout(&o), committed);
    // vLLM 0.33's log: B loads A.0 (job 1), C's store evicts A.0 from the host tier while B
    // waits, B finishes after recomputing its last token, and no store of A.0 follows.
    let log = root().join("tests/conformance/fixtures/reproduced/finding-23a.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#"{"ev":"load","step":3,"job":1,"req":"B","keys":["A.0"]"#), "{text}");
    assert!(text.contains(r#"{"ev":"evict","step":4,"medium":"CPU","keys":["A.0"]}"#), "{text}");
    assert!(text.contains(r#"{"ev":"finish","step":5,"req":"B","reason":"length"}"#), "{text}");
    assert!(!text.lines().any(|l| l.contains(r#""ev":"store""#) && l.contains(r#""req":"B""#)), "B never stores");
    let r = conform::check(&log, "vllm-0.33", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    assert_eq!(r.findings, vec![("store-coverage".to_string(), 6)]);
}

/// The models `kvmc testgen` was shown on, per connector (docs/conformance.md, "Test generation").
const TESTGEN: &[&str] = &[
    "sync-load-failure",
    "restart-recompute",
    "load-reservation",
    "preempt-store",
    "error-mid-prefill",
    "stream-resume",
    "scpu-preempt",
    "scpu-pressure",
    "scpu-stream-resume",
    // The MooncakeStoreConnector: preload, save delays (a save done between steps), a failed
    // load, an abort, a preemption while a save pins blocks.
    "mooncake-preempt",
];

#[test]
fn testgen_writes_the_committed_scenarios_and_covers_every_item_it_reaches() {
    let dir = tempdir("testgen");
    let mut written = 0;
    for m in TESTGEN {
        let o = kvmc(&["testgen", &format!("models/{m}.toml"), "--out-dir", dir.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let out = stdout(&o);
        let head = out.lines().next().unwrap();
        let items: usize = head.split(": ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        // One line per item, each naming the scenario that covers it.
        let lines: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(lines.len(), items, "{out}");
        assert!(lines.iter().all(|l| l.contains(&format!("{m}-t"))), "{out}");
        assert!(lines.iter().any(|l| l.contains("action: step")), "{out}");
        written = std::fs::read_dir(&dir).unwrap().count();
    }
    let committed = files("tests/conformance/testgen", "toml");
    assert_eq!(
        committed.len(),
        written,
        "regenerate with kvmc testgen models/M.toml --out-dir tests/conformance/testgen"
    );
    for c in &committed {
        let w = dir.join(c.file_name().unwrap());
        assert_eq!(std::fs::read_to_string(c).unwrap(), std::fs::read_to_string(&w).unwrap(), "{}", c.display());
    }
}

#[test]
fn every_testgen_log_recorded_on_vllm_033_conforms() {
    let logs = files("tests/conformance/fixtures/testgen", "jsonl");
    assert_eq!(logs.len(), files("tests/conformance/testgen", "toml").len(), "every generated scenario is recorded");
    for log in &logs {
        let name = log.file_stem().unwrap().to_string_lossy().to_string();
        let sc = std::fs::read_to_string(root().join(format!("tests/conformance/testgen/{name}.toml"))).unwrap();
        let r = conform::check(log, "vllm-0.33", None, 8).expect("log parses");
        assert!(r.divergence.is_none(), "{name}: {:?}", r.divergence);
        assert!(r.partial.is_none(), "{name}");
        let want = header(&sc, "expect-violated");
        for p in want.split_whitespace() {
            assert!(r.findings.iter().any(|(f, _)| f == p), "{name}: {p} not violated: {:?}", r.findings);
        }
    }
}

/// requests-finish: the checker's path to a state from which a request never finishes becomes
/// a scenario naming that request (`# expect-unfinished:`) with a step bound past the path;
/// a hang of work that no request waits for is refused with the reason.
#[test]
fn a_hang_is_written_with_the_requests_that_never_finish() {
    let o = kvmc(&[
        "reproduce",
        "models/offload-load-retry.toml",
        "--property",
        "requests-finish",
        "--profile",
        "vllm-0.33",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sc = stdout(&o);
    assert_eq!(header(&sc, "expect-unfinished"), "B", "{sc}");
    assert!(sc.contains("max_steps = 45"), "{sc}");
    assert!(stderr(&o).contains("never finishes: B"), "{}", stderr(&o));
    let o =
        kvmc(&["reproduce", "models/scpu-pressure.toml", "--property", "requests-finish", "--profile", "vllm-0.24"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("every request of the counterexample finishes"), "{}", stderr(&o));
    // A reachability guard (`sometimes`) is no counterexample to reproduce.
    let o = kvmc(&["reproduce", "models/offload-load-retry.toml", "--property", "reach-all-finished"]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("only safety properties"), "{}", stderr(&o));
}

/// Finding 20 with the MooncakeStoreConnector, from the checker: `kvmc reproduce` writes the
/// pool's preload, the failed load and its timing, and vLLM 0.32.0, 0.33.0 and 0.34.0 run the
/// written scenario line for line as the hand-written one
/// (tests/conformance/findings/mooncake-load-retry.toml) up to that one's 40-step bound.
#[test]
fn finding_20_from_the_checker_is_the_hand_written_mooncake_scenario() {
    let o = kvmc(&["reproduce", "models/mooncake-load-retry.toml", "--property", "requests-finish", "--name", "mlr"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sc = stdout(&o);
    for want in [
        "# expect-unfinished: A\n",
        "connector = \"mooncake\"\n\n[mooncake]\npreload = [[\"t97:1\", \"t98:1\"]]\n",
        "max_steps = 43\n",
        "prompt = [\"t97:1\", \"t98:1\", \"t99:1\", \"t100:1\", \"t101:1\"]\n",
        "[[load_failure]]\nreq = \"A\"\nnth = 1\nfrom_block = 0\n",
        "[[transfer_delay]]\nreq = \"A\"\nkind = \"load\"\nnth = 1\ndelay = 1\n",
    ] {
        assert!(sc.contains(want), "{want:?} not in\n{sc}");
    }
    // The recorded logs: the same lines but the prompt's token ids (and the header).
    let strip = |l: &str| match (l.find(r#""prompt":["#), l.find("],\"max_tokens\"")) {
        (Some(a), Some(b)) => format!("{}{}", &l[..a], &l[b + 2..]),
        _ => l.to_string(),
    };
    for v in ["0.32", "0.33", "0.34"] {
        let hand = std::fs::read_to_string(
            root().join(format!("tests/conformance/findings/vllm-{v}/mooncake-load-retry.jsonl.partial")),
        )
        .unwrap();
        let ours = std::fs::read_to_string(root().join(format!(
            "tests/conformance/fixtures/reproduced/mooncake-load-retry__vllm-{v}__requests-finish.jsonl.partial"
        )))
        .unwrap();
        let hand: Vec<String> = hand.lines().skip(1).map(strip).collect();
        let ours: Vec<String> = ours.lines().skip(1).map(strip).collect();
        let n = hand.len() - 1; // up to the hand-written scenario's bound (its partial line)
        assert!(n > 150 && hand[n].contains("did not finish in 40 steps"), "{v}");
        assert!(hand[0].contains(r#""ev":"arrive""#) && hand[0].contains(r#""req":"A""#), "{v}: {}", hand[0]);
        assert_eq!(hand[..n], ours[..n], "vLLM {v}");
        assert!(ours.last().unwrap().contains("did not finish in 43 steps"), "vLLM {v}");
    }
}

/// Finding 20 with the MooncakeStoreConnector under async scheduling: the committed scenario is
/// what `kvmc reproduce` makes of the model today, and on vLLM 0.33.0 A's lookup finds the
/// preloaded block again every step and nothing is scheduled until the recorder's bound.
#[test]
fn finding_20_under_async_scheduling_is_reproduced_on_vllm_033() {
    let m = "tests/conformance/reproduced/mooncake-load-retry-async.model.toml";
    let o = kvmc(&["reproduce", m, "--property", "requests-finish", "--name", "mooncake-load-retry-async"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let committed =
        std::fs::read_to_string(root().join("tests/conformance/reproduced/mooncake-load-retry-async.toml")).unwrap();
    assert_eq!(stdout(&o), committed);
    assert!(committed.contains("async_scheduling = true\nconnector = \"mooncake\""), "{committed}");
    let log = root().join("tests/conformance/fixtures/reproduced/mooncake-load-retry-async.jsonl.partial");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""connector":"mooncake","async_scheduling":true"#));
    assert!(text.lines().last().unwrap().contains("did not finish in 44 steps"));
    for step in 4..=44 {
        let lookup = format!(r#"{{"ev":"lookup","step":{step},"req":"A","local":0,"external":2,"async":true}}"#);
        assert!(text.contains(&lookup), "step {step}: A's lookup finds the block again");
    }
    let r = conform::check(&log, "vllm-0.33", None, 8).unwrap();
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    assert_eq!(r.steps, 44);
}

/// A Mooncake model with `save_decode_cache` is written with that key (the recorder takes it
/// since it records decode saves; recorded on 0.33.0 the scenario hangs as finding 20 does).
#[test]
fn a_mooncake_scenario_keeps_save_decode_cache() {
    let d = tempdir("reproduce-sdc");
    let text = std::fs::read_to_string(root().join("models/mooncake-load-retry.toml")).unwrap();
    let model = d.join("mlr-sdc.toml");
    std::fs::write(&model, text.replacen("preload = [\"ab\"]", "preload = [\"ab\"]\nsave_decode_cache = true", 1))
        .unwrap();
    let o = kvmc(&["reproduce", model.to_str().unwrap(), "--property", "requests-finish"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("[mooncake]\npreload = [[\"t97:1\", \"t98:1\"]]\nsave_decode_cache = true\n"),
        "{}",
        stdout(&o)
    );
}

/// NIXL's producer (#59102): the counterexample's `consumer reads A` becomes a
/// `[[consumer_read]]` before the recorder step it precedes, and the model's pool (3 blocks,
/// `max_model_len` 6) grows to one vLLM's planner accepts (4: the pool holds `max_model_len`).
/// Recorded on every release, the consumer reads A's half-written copy (handoff-integrity).
#[test]
fn reproduce_writes_a_nixl_producer_scenario() {
    let o = kvmc(&["reproduce", "models/pd-chunked.toml", "--property", "handoff-integrity", "--name", "pdc"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let a = stdout(&o);
    for want in [
        "# expect-violated: handoff-integrity",
        "# 3 GPU blocks in the model: vLLM's pool must hold max_model_len\ngpu_blocks = 4\n",
        "max_model_len = 6",
        "connector = \"nixl\"",
        "max_tokens = 1",
        "[[consumer_read]]\nrequest = \"A\"\nat_step = 3",
    ] {
        assert!(a.contains(want), "{want:?} not in\n{a}");
    }
    for p in ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log =
            root().join(format!("tests/conformance/fixtures/reproduced/pd-chunked__{p}__handoff-integrity.jsonl"));
        let r = conform::check(&log, p, None, 8).unwrap();
        assert_eq!(r.findings, vec![("handoff-integrity".to_string(), 3)], "{p}");
    }
}
