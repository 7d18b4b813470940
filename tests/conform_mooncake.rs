//! MooncakeStoreConnector recorded on real vLLM (tests/conformance/vllm/mcstore.py; fixtures
//! mooncake-*.jsonl on 0.32, 0.33 and 0.34): what the logs show, that the model reproduces
//! them, that the save pins and the fake worker's completions drive the comparison, and that
//! bad Mooncake lines are input errors naming file and line.

use crate::common::*;
use kvmc::conform;
use std::path::PathBuf;

const NAMES: [&str; 4] = ["mooncake-hit", "mooncake-preempt", "mooncake-abort", "mooncake-load-fail"];

fn fixture(dir: &str, name: &str) -> PathBuf {
    root().join(format!("tests/conformance/fixtures/{dir}{name}.jsonl"))
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture("", name)).unwrap()
}

#[test]
fn mooncake_on_real_vllm_loads_pins_and_puts() {
    let has = |text: &str, want: &[&str]| {
        for w in want {
            assert!(text.contains(w), "{w}");
        }
    };
    has(
        &read("mooncake-hit"),
        &[
            r#""connector":"mooncake""#,
            // The preloaded prefix: A's lookup hits two blocks, loaded asynchronously.
            r#"{"ev":"lookup","step":1,"req":"A","local":0,"external":8,"async":true}"#,
            r#"{"ev":"load","step":1,"job":0,"req":"A","keys":["pool1.0","pool1.1"],"blocks":[1,2],"slots":[],"sync":false}"#,
            // The first prefill chunk's save pins A's whole table until the worker reports it.
            r#""pinned":{"0":[1,2,3,4]}"#,
            // B finds no G1 hit (C evicted A's blocks) and loads the preloaded blocks and A's
            // puts from the pool.
            r#""req":"B","keys":["pool1.0","pool1.1","A.2","A.3"]"#,
        ],
    );
    let pre = read("mooncake-preempt");
    has(
        &pre,
        &[
            r#""preempted":["B"]"#,
            // B's slow save (job 4) still pins B's old blocks after the preemption...
            r#"{"ev":"mooncake","step":7,"pool":["A.0","A.1","A.2","B.0","B.1"],"pinned":{"4":[4,6,7]}}"#,
            // ... and, its ledger retired, puts nothing when it runs.
            r#"{"ev":"mooncake","step":9,"pool":["A.0","A.1","A.2","B.0","B.1"],"pinned":{}}"#,
            // B's next generation saves from block 0 again; only B.2 is new.
            r#"{"ev":"store","step":14,"job":5,"req":"B","keys":["B.0","B.1","B.2"]"#,
        ],
    );
    has(
        &read("mooncake-abort"),
        &[
            r#"{"ev":"abort","step":2,"req":"A"}"#,
            // The aborted A keeps its blocks until its load is reported.
            r#""finished":["A"],"tables":{"A":[1,2],"#,
            r#"{"ev":"mooncake","step":3,"pool":["B.0","B.1","pool1.0","pool1.1"],"pinned":{"1":[3,4,5,6]}}"#,
        ],
    );
    has(&read("mooncake-load-fail"), &[r#"{"ev":"transfer_failed","step":2,"job":0,"invalid_blocks":[2,3]}"#]);
    for dir in ["", "vllm-0.32/", "vllm-0.34/"] {
        let profile = match dir {
            "" => "vllm-0.33",
            d => d.trim_end_matches('/'),
        };
        for n in NAMES {
            let r = conform::check(&fixture(dir, n), profile, None, 8).unwrap();
            assert!(r.divergence.is_none(), "{dir}{n}: {:?}", r.divergence);
            assert!(r.decisions > 20, "{dir}{n}: {}", r.decisions);
        }
    }
}

#[test]
fn mooncake_save_pins_and_completions_drive_the_model() {
    // Without the save pins (mutation mut-mc-no-save-pin) the first snapshot differs.
    let f = fixture("", "mooncake-preempt");
    let d = conform::check(&f, "vllm-0.33", Some("mut-mc-no-save-pin"), 8).unwrap().divergence.expect("pins matter");
    assert_eq!((d.step, d.what.as_str()), (1, "mooncake"), "{d:?}");
    // A save the worker does not report keeps its pin: the step's snapshot differs.
    let text = read("mooncake-preempt");
    let moved = text.replace("{\"ev\":\"transfer_done\",\"step\":6,\"job\":3,\"kind\":\"store\"}\n", "");
    assert_ne!(moved, text);
    let d = conform::check_text(&f, &moved, "vllm-0.33", None, 8).unwrap().divergence.expect("diverges");
    assert_eq!(d.step, 6, "{d:?}");
    // A load reported as a store: that job does not exist.
    let bad = read("mooncake-hit").replace(
        r#"{"ev":"transfer_done","step":2,"job":0,"kind":"load"}"#,
        r#"{"ev":"transfer_done","step":2,"job":9,"kind":"load"}"#,
    );
    let e = conform::check_text(&fixture("", "mooncake-hit"), &bad, "vllm-0.33", None, 8).unwrap_err();
    assert!(e.to_string().contains("load event 9 was never created"), "{e}");
    // vLLM 0.24's store is not modelled: no verdict under its profile.
    let o = kvmc(&["conform", "--profile", "vllm-0.24", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn bad_mooncake_lines_exit_2_naming_file_and_line() {
    let d = tempdir("mooncake-bad");
    let text = read("mooncake-hit");
    let header = text.lines().next().unwrap();
    let cases: Vec<(String, &str, &str)> = vec![
        (text.replacen(r#","kind":"load"}"#, "}", 1), ":9:", "a Mooncake transfer_done names its stream"),
        (text.replacen(r#""pinned":{}"#, r#""pinned":{"x":[1]}"#, 1), ":7:", "pinned key \"x\" is not a save job id"),
        (
            text.replacen(r#""preload":[[45,520,995,473,139,614,92,567]]"#, r#""preload":[[45,520]]"#, 1),
            ":1:",
            "mooncake.preload[0] has no full block",
        ),
        (text.replacen(r#""preload":"#, r#""preloads":"#, 1), ":1:", "unknown field"),
        (
            format!("{header}\n{}\n", r#"{"ev":"host","step":1,"entries":[],"order":[]}"#),
            ":2:",
            "OffloadingConnector's (this log is mooncake)",
        ),
        (
            read_main().replacen(
                r#""connector":"offloading""#,
                r#""connector":"offloading","mooncake":{"preload":[]}"#,
                1,
            ),
            ":1:",
            "goes with \\\"connector\\\": \\\"mooncake\\\"",
        ),
        (
            format!(
                "{}\n{}\n",
                read_main().lines().next().unwrap(),
                r#"{"ev":"mooncake","step":1,"pool":[],"pinned":{}}"#
            ),
            ":2:",
            "mooncake lines go with the mooncake connector",
        ),
    ];
    for (i, (body, at, want)) in cases.iter().enumerate() {
        let p = d.join(format!("b{i}.jsonl"));
        std::fs::write(&p, body).unwrap();
        let o = kvmc(&["conform", "--profile", "vllm-0.33", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "case {i}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(&format!("b{i}.jsonl{at}")), "case {i}: {at} in {err}");
        assert!(err.contains(want.replace("\\\"", "\"").as_str()), "case {i}: {want} in {err}");
    }
}

fn read_main() -> String {
    read("main")
}

#[test]
fn the_mooncake_recorder_parts_pass_their_own_tests() {
    // The [mooncake] table and the fake worker's rules, without vLLM.
    python_unittest("tests/conformance/vllm/test_mcstore.py", 5);
}

/// Finding 20 with the MooncakeStoreConnector on real vLLM
/// (tests/conformance/findings/mooncake-load-retry.toml, the recorder scenario of
/// models/mooncake-load-retry.toml): A's async load from the pool fails from its first block
/// under `recompute`; every later step A's lookup finds the block again and A is never
/// admitted (its admission reserves its own blocks, `_inflight_prefills`), so the engine steps
/// until the recorder's 40-step bound, on 0.32.0, 0.33.0 and 0.34.0 alike. Every recorded step
/// conforms; under `fix-self-reservation` the model admits A with a new load at step 3.
#[test]
fn finding_20_a_failed_pool_load_never_admits_its_request_again_on_real_vllm() {
    let dir = root().join("tests/conformance/findings");
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/mooncake-load-retry.jsonl.partial"));
        let r = conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{release}: {:?}", r.divergence);
        assert_eq!(r.steps, 40, "{release}: every step up to the recorder's bound conforms");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("did not finish in 40 steps"), "{release}");
        assert!(text.contains(r#"{"ev":"transfer_failed","step":2,"job":0,"invalid_blocks":[1]}"#), "{release}");
        for step in 3..=40 {
            let lookup = format!(r#"{{"ev":"lookup","step":{step},"req":"A","local":0,"external":2,"async":true}}"#);
            assert!(text.contains(&lookup), "{release} step {step}: A's lookup finds the block again");
            let sched = format!(
                r#"{{"ev":"schedule","step":{step},"scheduled":[],"new":[],"resumed":[],"preempted":[],"finished":[],"tables":{{}}}}"#
            );
            assert!(text.contains(&sched), "{release} step {step}: nothing is scheduled, A holds no block");
        }
        let d = conform::check(&log, release, Some("fix-self-reservation"), 8).unwrap().divergence.expect("fixed");
        assert_eq!((d.step, d.what.as_str()), (3, "load"), "{release}: {d:?}");
    }
}

/// The MooncakeStoreConnector under async scheduling (AsyncScheduler +
/// step_with_batch_queue; tests/conformance/scenarios/async-mooncake-preempt.toml, recorded on
/// 0.32.0, 0.33.0 and 0.34.0): the batch queue delays every worker output by a step; A's decode
/// growth preempts B in step 8 while B's slow save job 4 still pins B's blocks; B comes back as
/// a new request in step 16 whose G1 hit covers the pool's B.0 and B.1, and its new save starts
/// at block 0. Every line conforms; without the save pins the log diverges at step 1.
#[test]
fn mooncake_under_async_scheduling_conforms_on_real_vllm() {
    for (dir, release) in [("vllm-0.32/", "vllm-0.32"), ("", "vllm-0.33"), ("vllm-0.34/", "vllm-0.34")] {
        let f = fixture(dir, "async-mooncake-preempt");
        let text = std::fs::read_to_string(&f).unwrap();
        for w in [
            r#""connector":"mooncake","async_scheduling":true"#,
            r#""preempted":["B"]"#,
            r#"{"ev":"mooncake","step":8,"pool":["A.0","A.1","A.2","B.0","B.1"],"pinned":{"4":[4,6,7]}}"#,
            r#"{"ev":"transfer_done","step":9,"job":4,"kind":"store"}"#,
            r#"{"ev":"lookup","step":16,"req":"B","local":8,"external":0,"async":false}"#,
            r#"{"ev":"store","step":16,"job":5,"req":"B","keys":["B.0","B.1","B.2"]"#,
        ] {
            assert!(text.contains(w), "{release}: {w}");
        }
        assert!(
            text.contains(r#"{"ev":"schedule","step":8,"scheduled":[["A",1]],"new":[],"resumed":[],"preempted":["B"]"#)
        );
        let r = conform::check(&f, release, None, 8).unwrap();
        assert!(r.divergence.is_none() && r.partial.is_none(), "{release}: {:?}", r.divergence);
        assert_eq!(r.steps, 21, "{release}");
        let d = conform::check(&f, release, Some("mut-mc-no-save-pin"), 8).unwrap().divergence.expect("diverges");
        assert_eq!((d.step, d.what.as_str()), (1, "mooncake"), "{release}");
    }
}

/// `save_decode_cache = true` (mooncake-decode-save, and async-mooncake-decode-save under async
/// scheduling; 0.32.0, 0.33.0, 0.34.0): decode steps save the blocks they complete. Under
/// async scheduling the tracker grows by the tokens vLLM knows
/// (`all_token_ids[token_len:token_len + scheduled]`), a decode step's token being a
/// placeholder then: every decode save comes a step later and A's last block is never saved.
/// kvmc once grew it by the scheduled count and diverged at step 3 of the async log.
#[test]
fn decode_saves_lag_a_step_under_async_scheduling() {
    let saves = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains(r#""ev":"store""#))
            .map(|l| {
                let step = l.split(r#""step":"#).nth(1).unwrap().split(',').next().unwrap();
                let keys = l.split(r#""keys":"#).nth(1).unwrap().split(']').next().unwrap();
                format!("{step} {keys}]")
            })
            .collect()
    };
    for (dir, release) in [("vllm-0.32/", "vllm-0.32"), ("", "vllm-0.33"), ("vllm-0.34/", "vllm-0.34")] {
        let sync = std::fs::read_to_string(fixture(dir, "mooncake-decode-save")).unwrap();
        let asy = std::fs::read_to_string(fixture(dir, "async-mooncake-decode-save")).unwrap();
        assert!(sync.contains(r#""mooncake":{"preload":[],"save_decode_cache":true}"#), "{release}");
        assert_eq!(
            saves(&sync),
            ["1 [\"A.0\"]", "2 [\"B.0\",\"B.1\"]", "3 [\"A.1\"]", "5 [\"B.2\"]", "7 [\"A.2\"]", "11 [\"A.3\"]"],
            "{release}"
        );
        assert_eq!(
            saves(&asy),
            ["1 [\"A.0\"]", "2 [\"B.0\",\"B.1\"]", "4 [\"A.1\"]", "6 [\"B.2\"]", "8 [\"A.2\"]"],
            "{release}"
        );
        for name in ["mooncake-decode-save", "async-mooncake-decode-save"] {
            let r = conform::check(&fixture(dir, name), release, None, 8).unwrap();
            assert!(r.divergence.is_none() && r.partial.is_none(), "{release} {name}: {:?}", r.divergence);
        }
    }
}
