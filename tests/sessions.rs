//! Replay's sessions-in-flight load (issue 25): N sessions active, a session's next turn
//! arriving its think time after the previous turn finished; the same-time tie rule; the
//! host tier given as vLLM's `cpu_bytes_to_use`; per-session and total restored/recomputed
//! figures (docs/replay.md, "Sessions in flight").

use crate::common::*;
use serde_json::Value;

/// 8 sessions of 4 turns: a first turn of 800 tokens (the first two 16-token blocks shared
/// by every session), later turns of 64 new tokens, 40 generated tokens a turn, `think_ms`
/// between turns.
fn trace(think_ms: u32) -> String {
    let mut out = String::new();
    let mut id = 1000;
    for s in 0..8 {
        let ids: Vec<String> = [0, 1].into_iter().chain(id..id + 48).map(|x: u32| x.to_string()).collect();
        id += 48;
        out.push_str(&format!(
            "{{\"session_id\": \"s{s}\", \"input_length\": 800, \"output_length\": 40, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
        for _ in 1..4 {
            let ids: Vec<String> = (id..id + 4).map(|x| x.to_string()).collect();
            id += 4;
            out.push_str(&format!(
                "{{\"session_id\": \"s{s}\", \"delay\": {think_ms}, \"input_length\": 64, \"output_length\": 40, \"hash_ids\": [{}]}}\n",
                ids.join(", ")
            ));
        }
    }
    out
}

/// 256 usable G1 blocks (4 sessions' prompts do not fit with their answers), a host tier of
/// 512 MiB at 128 KiB per block (4,096 chunks), 4 sessions in flight.
fn model(same_time: &str) -> String {
    format!(
        r#"description = "4 sessions in flight"
[engine]
profile = "vllm-0.33"
connector = "offloading"
block_size = 16
gpu_blocks = 257
max_num_batched_tokens = 2048
[offload]
cpu_bytes_to_use = 536870912
kv_bytes_per_block = 131072
[replay]
load = "sessions"
sessions = 4
trace_block_size = 16
same_time = "{same_time}"
"#
    )
}

fn run(tag: &str, think_ms: u32, same_time: &str, args: &[&str]) -> std::process::Output {
    let d = tempdir(tag);
    std::fs::write(d.join("t.jsonl"), trace(think_ms)).unwrap();
    std::fs::write(d.join("m.toml"), model(same_time)).unwrap();
    let mut a = vec!["replay", "t.jsonl", "--model", "m.toml"];
    a.extend_from_slice(args);
    let o = kvmc_in(&d, &a);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    o
}

fn json(tag: &str, think_ms: u32, same_time: &str) -> Value {
    let o = run(tag, think_ms, same_time, &["--per-request", "--per-session", "--format", "json"]);
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn four_sessions_in_flight_with_per_session_and_total_figures() {
    let text = run("sessions-text", 3000, "arrivals-first", &["--per-session"]);
    // The figures a published session table gives, per session and in total.
    println!("{}", stdout(&text));
    let j = json("sessions-json", 3000, "arrivals-first");
    let m = &j["metrics"];
    assert_eq!(j["pools"]["host_chunks"], 4096, "536870912 bytes / 131072-byte chunks");
    let sessions = j["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 8);
    for k in ["prompt_tokens", "g1_hit_tokens", "host_hit_tokens", "prefill_tokens", "recomputed_tokens"] {
        let sum: u64 = sessions.iter().map(|s| s[k].as_u64().unwrap()).sum();
        assert_eq!(sum, m[k].as_u64().unwrap(), "{k}: the sessions add up to the total");
    }
    assert!(sessions.iter().all(|s| s["turns"] == 4));
    // Think time lets G1 evict a waiting session's blocks: later turns restore from host.
    assert!(m["host_hit_tokens"].as_u64().unwrap() > 0, "{m}");
    let total_line = stdout(&text).lines().last().unwrap().to_string();
    assert!(total_line.trim_start().starts_with("total"), "{total_line}");
    assert!(total_line.contains(&m["host_hit_tokens"].to_string()), "{total_line}");
    // Scheduled tokens, admissions and max running.
    let u = |k: &str| m[k].as_u64().unwrap();
    assert_eq!(u("scheduled_tokens"), u("prefill_tokens") + u("recomputed_tokens") + u("decode_tokens"));
    assert_eq!(u("admissions"), u("finished") + u("preemptions"));
    assert!((1..=4).contains(&u("max_running")), "{m}");
    // Exactly 4 sessions in flight: a session is active from its first arrival to its last
    // finish; at most 4 overlap, and 4 do.
    let mut span: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for r in j["requests"].as_array().unwrap() {
        let e = span.entry(r["session"].as_str().unwrap().to_string()).or_insert((f64::MAX, 0.0));
        e.0 = e.0.min(r["arrival_ms"].as_f64().unwrap());
        e.1 = e.1.max(r["finish_ms"].as_f64().unwrap());
    }
    let most = span.values().map(|&(a, _)| span.values().filter(|&&(b, f)| b <= a && a < f).count()).max().unwrap();
    assert_eq!(most, 4, "{span:?}");
    // A later turn arrives its think time after the previous turn finished.
    let rows = j["requests"].as_array().unwrap();
    for r in rows.iter().filter(|r| r["turn"].as_u64().unwrap() > 0) {
        let prev = rows.iter().find(|p| p["session"] == r["session"] && p["turn"] == r["turn"].as_u64().unwrap() - 1);
        let gap = r["arrival_ms"].as_f64().unwrap() - prev.unwrap()["finish_ms"].as_f64().unwrap();
        assert!(gap >= 3000.0, "{r}");
    }
}

/// same_time: with no think time, arrivals-first admits a session's next turn into the step
/// that starts when its previous turn finished; step-first makes it wait for the step after
/// whenever another session keeps the engine busy.
#[test]
fn the_same_time_rule_is_configurable() {
    let gaps = |same: &str| -> Vec<f64> {
        let j = json(&format!("same-{same}"), 0, same);
        let rows = j["requests"].as_array().unwrap().clone();
        rows.iter()
            .filter(|r| r["turn"].as_u64().unwrap() > 0)
            .map(|r| {
                let prev = rows
                    .iter()
                    .find(|p| p["session"] == r["session"] && p["turn"] == r["turn"].as_u64().unwrap() - 1)
                    .unwrap();
                r["arrival_ms"].as_f64().unwrap() - prev["finish_ms"].as_f64().unwrap()
            })
            .collect()
    };
    let first = gaps("arrivals-first");
    assert!(first.iter().all(|&g| g == 0.0), "{first:?}");
    let step = gaps("step-first");
    assert!(step.iter().any(|&g| g > 0.0), "{step:?}");
}

#[test]
fn cpu_bytes_to_use_converts_as_vllm_and_bad_combinations_are_refused() {
    let d = tempdir("cpu-bytes");
    let base = "[engine]\nconnector = \"offloading\"\nblock_size = 16\ngpu_blocks = 64\nmax_num_batched_tokens = 256\n[offload]\n";
    let chunks = |offload: &str| -> Result<Option<u32>, String> {
        let text = format!("{base}{offload}");
        kvmc::scope::replay::ReplayModel::parse("m", &d.join("m.toml"), &text)
            .map(|m| kvmc::scope::replay::Pools::of(&m.cfg).host_chunks)
            .map_err(|e| e.to_string())
    };
    // 2 blocks of 1000 bytes on 3 workers: 6000 bytes, 8192 with the page; 81920 / 8192.
    assert_eq!(
        chunks("cpu_bytes_to_use = 81920\nkv_bytes_per_block = 1000\nworld_size = 3\nblocks_per_chunk = 2\n"),
        Ok(Some(10))
    );
    assert_eq!(
        chunks("cpu_bytes_to_use = 81919\nkv_bytes_per_block = 1000\nworld_size = 3\nblocks_per_chunk = 2\n"),
        Ok(Some(9))
    );
    assert_eq!(chunks("host_chunks = 7\n"), Ok(Some(7)));
    let err = |o: &str| chunks(o).unwrap_err();
    assert!(err("cpu_bytes_to_use = 81920\n").contains("needs kv_bytes_per_block"));
    assert!(err("host_chunks = 7\ncpu_bytes_to_use = 81920\nkv_bytes_per_block = 1\n").contains("not both"));
    assert!(err("cpu_bytes_to_use = 100\nkv_bytes_per_block = 1000\n").contains("holds no chunk"));
    assert!(err("blocks_per_chunk = 1\n").contains("host_chunks or cpu_bytes_to_use"));
}
