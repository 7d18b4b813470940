//! Conformance of the SimpleCPUOffloadConnector against real vLLM 0.33 (the `scpu-*` fixtures
//! recorded by tests/conformance/vllm/record.py): what they record, that the model follows
//! them step by step, and that changed lines are caught or refused, never a crash.

use crate::common::*;
use kvmc::conform;

#[test]
fn simple_cpu_on_real_vllm_pins_stores_partially_and_loads() {
    // What the SimpleCPU fixtures record (and the model reproduces, step by step).
    let read = |n: &str| std::fs::read_to_string(root().join(format!("tests/conformance/fixtures/{n}.jsonl"))).unwrap();
    let has = |text: &str, want: &[&str]| {
        for w in want {
            assert!(text.contains(w), "{w}");
        }
    };
    has(
        &read("scpu-main"),
        &[
            r#""connector":"simple-cpu""#,
            // B, new and scanned first, stores the prefix it shares with A.
            r#"{"ev":"store","step":2,"job":0,"req":"B","keys":["A.0","A.1"],"blocks":[1,2],"slots":[1,2]}"#,
            // The preemption flushes store event 0 a step early (store delay 2).
            r#""preempted":["B"]"#,
            r#"{"ev":"transfer_done","step":3,"job":0,"kind":"store"}"#,
            // A decode block is stored.
            r#"{"ev":"store","step":6,"job":1,"req":"A","keys":["A.4"]"#,
            // C pins A.0-A.4 while it does not fit, then loads them.
            r#"{"ev":"lookup","step":13,"req":"C","local":0,"external":20,"async":true,"pins":[1,2,3,4,5]}"#,
            r#"{"ev":"load","step":14,"job":0,"req":"C","keys":["A.0","A.1","A.2","A.3","A.4"]"#,
            r#"{"ev":"load_completed","step":16,"req":"C","job":0}"#,
            // FIFO by release: the oldest released CPU block goes first.
            r#"{"ev":"evict","step":18,"medium":"CPU","keys":["B.2"]}"#,
            // A G1 hit plus a CPU load.
            r#"{"ev":"lookup","step":22,"req":"G","local":12,"external":12,"async":true,"pins":[4,5,6]}"#,
        ],
    );
    has(
        &read("scpu-pressure"),
        &[
            // A partial store: 3 free CPU blocks for 4 ready blocks; the retry evicts A.0.
            r#"{"ev":"store","step":2,"job":0,"req":"A","keys":["A.0","A.1","A.2"]"#,
            r#"{"ev":"evict","step":4,"medium":"CPU","keys":["A.0"]}"#,
            // B's pins survive its failed admissions and shrink R's store to one block.
            r#""pins":{"B":[2,3]}"#,
            r#"{"ev":"store","step":9,"job":3,"req":"R","keys":["R.0"],"blocks":[7],"slots":[1]}"#,
            r#"{"ev":"load","step":11,"job":0,"req":"B","keys":["X.0","X.1"]"#,
        ],
    );
    has(
        &read("scpu-stream-resume"),
        &[
            r#"{"ev":"turn_start","step":4,"req":"S","turn":2,"num_computed":14,"num_prompt_tokens":20}"#,
            r#"{"ev":"store","step":5,"job":2,"req":"S","keys":["S@2.3","S@2.4"]"#,
            r#"{"ev":"store","step":8,"job":4,"req":"S","keys":["S@3.5"]"#,
            r#""req":"C","keys":["S.1","S.2","S@2.3","S@2.4","S@3.5"]"#,
        ],
    );
    let check = |n: &str| {
        conform::check(&root().join(format!("tests/conformance/fixtures/{n}.jsonl")), "vllm-0.33", None, 8).unwrap()
    };
    for n in ["scpu-main", "scpu-stream-resume"] {
        let r = check(n);
        assert!(r.divergence.is_none() && r.findings.is_empty(), "{n}: {:?} {:?}", r.divergence, r.findings);
    }
    // R finishes while B's pins and R's own in-flight store fill the CPU pool: R.1-R.6 are never
    // stored, on vLLM and in the model.
    let r = check("scpu-pressure");
    assert!(r.divergence.is_none(), "{:?}", r.divergence);
    assert_eq!(r.findings, vec![("final-store-kept".to_string(), 10)]);
}

#[test]
fn bad_simple_cpu_lines_exit_2_naming_file_and_line() {
    let d = tempdir("conform-bad-scpu");
    let scpu = std::fs::read_to_string(root().join("tests/conformance/fixtures/scpu-pressure.jsonl")).unwrap();
    let head = scpu.lines().next().unwrap().to_string();
    let arrive = scpu.lines().nth(1).unwrap().to_string();
    assert!(arrive.contains(r#""ev":"arrive""#) && arrive.contains(r#""req":"A""#), "{arrive}");
    let oc_head = std::fs::read_to_string(root().join("tests/conformance/fixtures/main.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let lookup = r#"{"ev":"lookup","step":1,"req":"A","local":0,"external":0,"async":false,"pins":[]}"#;
    let cpu = r#"{"ev":"cpu","step":1,"free":[1,2,3],"cached":{},"refs":{},"pins":{}}"#;
    for (body, want) in [
        (vec![head.replace(r#""cpu_blocks":4"#, r#""cpu_blocks":1"#)], "log.jsonl:1: cpu_blocks must be at least 2"),
        (
            vec![head.replace(r#""cpu_blocks":4"#, r#""cpu_blocks":4,"enable_prefix_caching":false"#)],
            "log.jsonl:1: the simple-cpu connector needs GPU prefix caching",
        ),
        (vec![head.replace("simple-cpu", "lmcache")], "log.jsonl:1: connector \"lmcache\" is not modelled"),
        (
            vec![head.clone(), arrive.clone(), r#"{"ev":"transfer_done","step":2,"job":0}"#.into()],
            "log.jsonl:3: a SimpleCPU transfer_done names its stream",
        ),
        (
            vec![head.clone(), arrive.clone(), r#"{"ev":"transfer_done","step":2,"job":0,"kind":"both"}"#.into()],
            "log.jsonl:3: transfer_done kind \"both\"",
        ),
        (
            vec![oc_head.clone(), r#"{"ev":"transfer_done","step":2,"job":0,"kind":"store"}"#.into()],
            "log.jsonl:2: transfer_done kind \"store\": only SimpleCPU and Mooncake logs",
        ),
        (
            vec![
                head.clone(),
                arrive.clone(),
                r#"{"ev":"transfer_failed","step":2,"job":0,"invalid_blocks":[1]}"#.into(),
            ],
            "log.jsonl:3: SimpleCPU never reports a failed load",
        ),
        (
            vec![head.clone(), arrive.clone(), lookup.replace(r#","pins":[]"#, "")],
            "log.jsonl:3: a SimpleCPU lookup lists",
        ),
        (
            vec![oc_head.clone(), arrive.clone(), lookup.into()],
            "log.jsonl:3: \"pins\" goes with the simple-cpu connector",
        ),
        (vec![head.clone(), arrive.clone(), lookup.replace("[]", "[\"x\"]")], "log.jsonl:3: not a valid event"),
        (vec![oc_head.clone(), cpu.into()], "log.jsonl:2: store_completed, load_completed and cpu lines go with"),
        (vec![head.clone(), cpu.replace(r#""refs":{}"#, r#""refs":{"one":1}"#)], "log.jsonl:2: refs key \"one\""),
        (vec![head.clone(), cpu.replace(r#","pins":{}"#, "")], "log.jsonl:2: not a valid event"),
        (vec![head.clone(), cpu.replace(r#""pins":{}"#, r#""pins":{"A":[-1]}"#)], "log.jsonl:2: not a valid event"),
        (
            vec![head.clone(), r#"{"ev":"load_completed","step":1,"req":"Z","job":0}"#.into()],
            "log.jsonl:2: request Z is used before it arrives",
        ),
        (
            vec![head.clone(), r#"{"ev":"store_completed","step":1,"job":0,"keys":"A.0","slots":[1]}"#.into()],
            "log.jsonl:2: not a valid event",
        ),
        (
            vec![head.clone(), r#"{"ev":"host","step":1,"entries":[],"order":[]}"#.into()],
            "log.jsonl:2: host, store_refused and flush lines are the OffloadingConnector's",
        ),
        (
            vec![head.clone(), r#"{"ev":"flush","step":1,"jobs":[0]}"#.into()],
            "log.jsonl:2: host, store_refused and flush lines are the OffloadingConnector's",
        ),
    ] {
        let p = d.join("log.jsonl");
        std::fs::write(&p, body.join("\n") + "\n").unwrap();
        let o = kvmc(&["conform", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{body:?}");
        assert!(stderr(&o).contains(want), "{want} in {}", stderr(&o));
    }
}

/// SimpleCPU's completions are inputs: deleting a `transfer_done` of a SimpleCPU log makes the
/// model miss that completion, which shows as a divergence, unless the step preempted a request
/// and the event was launched earlier: then the worker's `handle_preemptions` flushes it anyway
/// (the model's too), and the line only repeats what the flush implies. Moving a completion a
/// step earlier or later never crashes the driver.
#[test]
fn simple_cpu_completions_drive_the_model() {
    let mut deleted = 0;
    for f in
        crate::conform::fixtures().into_iter().filter(|f| f.file_name().unwrap().to_str().unwrap().starts_with("scpu-"))
    {
        let text = std::fs::read_to_string(&f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["ev"] != "transfer_done" {
                continue;
            }
            let step = v["step"].as_u64().unwrap();
            let preempting = lines.iter().any(|x| {
                let x: serde_json::Value = serde_json::from_str(x).unwrap();
                x["ev"] == "schedule" && x["step"] == step && !x["preempted"].as_array().unwrap().is_empty()
            });
            let kind = if v["kind"] == "store" { "store" } else { "load" };
            let launched_before = lines.iter().any(|x| {
                let x: serde_json::Value = serde_json::from_str(x).unwrap();
                x["ev"] == kind && x["job"] == v["job"] && x["step"].as_u64().unwrap() < step
            });
            let flushed = preempting && launched_before;
            let mut d = lines.clone();
            d.remove(i);
            let r = conform::check_text(&f, &(d.join("\n") + "\n"), "vllm-0.33", None, 2).unwrap();
            assert_eq!(
                r.divergence.is_some(),
                !flushed,
                "{}: deleting line {} ({l}; flushed: {flushed}): {:?}",
                f.display(),
                i + 1,
                r.divergence
            );
            deleted += usize::from(!flushed);
            for delta in [-1i64, 1] {
                let mut v2 = v.clone();
                let s = v2["step"].as_i64().unwrap() + delta;
                if s < 1 {
                    continue;
                }
                v2["step"] = serde_json::json!(s);
                let moved = v2.to_string();
                let mut a = lines.clone();
                a[i] = &moved;
                // Steps never decrease: a line moved across its neighbours may be an input error.
                let t = a.join("\n") + "\n";
                let r = std::panic::catch_unwind(|| conform::check_text(&f, &t, "vllm-0.33", None, 2));
                assert!(r.is_ok(), "{}: line {} moved by {delta}: the driver panics", f.display(), i + 1);
            }
        }
    }
    assert!(deleted > 20, "every SimpleCPU completion ({deleted})");
}

#[test]
fn simple_cpu_kv_events_carry_the_stored_blocks_and_match_the_log() {
    // SimpleCPU publishes CPU BlockStored events with the block's tokens and block size (not the
    // OffloadingConnector's placeholders), one per key its store completion registered, and CPU
    // BlockRemoved events for the blocks its CPU pool evicted: per step, as many as the log's
    // store_completed keys and CPU evict keys.
    use kvmc::conform::kv_events::{self, KvEvent};
    for n in ["scpu-main", "scpu-pressure", "scpu-stream-resume"] {
        let base = root().join(format!("tests/conformance/fixtures/{n}"));
        let ev = base.with_extension("kvevents");
        let batches = kv_events::parse(&ev, &std::fs::read(&ev).unwrap()).unwrap();
        let steps: Vec<u32> =
            serde_json::from_str(&std::fs::read_to_string(format!("{}.steps.json", ev.display())).unwrap()).unwrap();
        let log = std::fs::read_to_string(base.with_extension("jsonl")).unwrap();
        let mut from_log: std::collections::BTreeMap<u32, (usize, usize)> = Default::default();
        for l in log.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let step = v["step"].as_u64().unwrap_or(0) as u32;
            match v["ev"].as_str().unwrap() {
                "store_completed" => from_log.entry(step).or_default().0 += v["keys"].as_array().unwrap().len(),
                "evict" => from_log.entry(step).or_default().1 += v["keys"].as_array().unwrap().len(),
                _ => {}
            }
        }
        let mut from_stream: std::collections::BTreeMap<u32, (usize, usize)> = Default::default();
        let mut stored = 0;
        for (b, step) in batches.iter().zip(&steps) {
            for e in &b.events {
                match e {
                    KvEvent::Stored { hashes, tokens, block_size, medium, .. } if medium == "CPU" => {
                        assert_eq!((*block_size, *tokens), (4, 4 * hashes.len()), "{n} step {step}: a full CPU block");
                        from_stream.entry(*step).or_default().0 += hashes.len();
                        stored += hashes.len();
                    }
                    KvEvent::Removed { hashes, medium } if medium == "CPU" => {
                        from_stream.entry(*step).or_default().1 += hashes.len()
                    }
                    _ => {}
                }
            }
        }
        assert!(stored > 5, "{n}: CPU blocks stored");
        assert_eq!(from_stream, from_log, "{n}: CPU events per step vs the log");
    }
    // A CPU BlockStored with a block size whose token count does not match is inconsistent.
    let bad = vec![kv_events::Batch {
        index: 1,
        offset: 0,
        events: vec![KvEvent::Stored {
            hashes: vec![kv_events::Hash::U64(1)],
            parent: None,
            tokens: 3,
            block_size: 4,
            medium: "CPU".into(),
        }],
    }];
    assert!(
        kv_events::consistency(&bad, false).is_some_and(|(_, why)| why.contains("CPU BlockStored carries 3 tokens"))
    );
}
