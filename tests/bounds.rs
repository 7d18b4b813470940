//! Runs that must stop, and say so: --threads out of range, simulation (paths that replay, a
//! default bound), the memory budget, Ctrl-C (check and replay), --timeout in every strategy
//! and in long steps, the watchdog, and exact state bounds.
//!
//! No test asserts a speed: where a run must end, it gets a generous deadline (many times
//! what it needs) after which the test fails instead of hanging.

use crate::common::*;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn spawn(args: &[&str], env: &[(&str, &str)]) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kvmc"));
    c.args(args).current_dir(root()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("kvmc starts")
}

/// Wait for `child` at most `secs`; None (after killing it) if it is still running then.
fn finish(mut child: Child, secs: u64) -> Option<Output> {
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let e = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let end = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (o.join().unwrap(), e.join().unwrap());
    status.map(|status| Output { status, stdout, stderr })
}

/// Run kvmc; fail the test if it has not ended within `secs`.
fn kvmc_within(secs: u64, args: &[&str], env: &[(&str, &str)]) -> Output {
    finish(spawn(args, env), secs).unwrap_or_else(|| panic!("kvmc {args:?} still running after {secs} s"))
}

/// The flagship scope with a pool of 65,536 GPU blocks: every state copies and hashes the
/// whole pool (milliseconds per successor, megabytes per state).
fn huge_pool_model(tag: &str) -> PathBuf {
    let d = tempdir(tag);
    let text = std::fs::read_to_string(root().join("bench/flagship.toml")).unwrap();
    let text: String = text
        .lines()
        .map(|l| if l.starts_with("gpu_blocks") { "gpu_blocks = 65536".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    let p = d.join("huge-pool.toml");
    std::fs::write(&p, text + "\n").unwrap();
    p
}

/// Does process `pid` catch SIGINT yet (Linux: bit 1 of SigCgt)?
fn catches_sigint(pid: u32) -> bool {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    s.lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .is_some_and(|m| m & 2 != 0)
}

/// Start kvmc, press Ctrl-C once it catches it (or after 5 s), and wait for it.
fn interrupt(args: &[&str]) -> Output {
    let child = spawn(args, &[]);
    let pid = child.id();
    let t = Instant::now();
    while !catches_sigint(pid) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGINT);
    }
    finish(child, 120).expect("kvmc ends after Ctrl-C")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("JSON on stdout ({e}): {}", stdout(o)))
}

/// Item 3: `--threads 100000` aborted (thread spawn failed); now exit 2 naming the range.
/// `--threads 4` runs the BFS on 4 threads; dfs says plainly that it runs on one (item 8).
#[test]
fn threads_out_of_range_exit_2_and_more_threads_say_they_have_no_effect() {
    for strategy in ["bfs", "dfs", "simulate"] {
        let o = kvmc_within(
            120,
            &["check", "models/shared-prefix.toml", "--strategy", strategy, "--threads", "100000"],
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{strategy}: {}", stderr(&o));
        assert!(stderr(&o).contains("--threads") && stderr(&o).contains("1024"), "names the range: {}", stderr(&o));
    }
    // The BFS honours --threads (issue 21); dfs says plainly that it runs on one thread.
    let o = kvmc(&["check", "models/restart-recompute.toml", "--threads", "4"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("each on 4 threads"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("no effect"), "{}", stderr(&o));
    let o = kvmc(&[
        "check",
        "models/restart-recompute.toml",
        "--threads",
        "4",
        "--strategy",
        "dfs",
        "--property",
        "g1-accounting",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--threads 4 has no effect with --strategy dfs") && stderr(&o).contains("one thread"),
        "{}",
        stderr(&o)
    );
}

/// Item 4: stateright's simulation recorded indices of actions that changed nothing, and
/// its counterexamples did not replay (exit 1 in 7 of 8 seeds). kvmc's walks record actions.
#[test]
fn simulated_counterexamples_replay_for_every_seed_and_are_deterministic() {
    let args = |seed: &'static str| {
        [
            "check",
            "models/error-mid-prefill.toml",
            "--property",
            "host-integrity",
            "--jobs",
            "1",
            "--strategy",
            "simulate",
            "--max-states",
            "50",
            "--seed",
            seed,
            "--format",
            "json",
        ]
    };
    for seed in ["0", "1", "2", "3", "4", "5", "6", "7"] {
        let o = kvmc(&args(seed));
        assert_eq!(o.status.code(), Some(10), "seed {seed}: {}{}", stdout(&o), stderr(&o));
        let v = json(&o);
        let r = &v["results"][0];
        assert_eq!(r["verdict"], "violated", "seed {seed}");
        assert!(!r["counterexample"]["steps"].as_array().unwrap().is_empty());
        let again = json(&kvmc(&args(seed)));
        assert_eq!(again["results"][0]["counterexample"], r["counterexample"], "seed {seed}: same walk");
    }
}

/// Item 4: the whole gate under simulation ended with exit 1 (a counterexample that did not
/// replay); now every row is as expected or incomplete, and the run says it is incomplete.
#[test]
fn the_simulated_gate_is_incomplete_never_an_internal_error() {
    let o = kvmc_within(300, &["check", "--strategy", "simulate", "--max-states", "2000"], &[]);
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(" 0 not as expected"), "{}", stdout(&o));
}

/// Item 4: `--strategy simulate` with no bound never ended; now it stops at its default bound,
/// which the header and every row name, and claims nothing holds.
#[test]
fn simulation_without_bounds_stops_at_its_default_bound_and_says_so() {
    let o = kvmc_within(120, &["check", "models/shared-prefix.toml", "--strategy", "simulate"], &[]);
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let header = out.lines().next().unwrap();
    assert!(
        header.contains("strategy simulate") && header.contains("--max-states 100000 (simulate's default"),
        "{header}"
    );
    assert!(out.contains("stopped by --max-states 100000 (simulate's default bound)"), "{out}");
    assert!(!out.contains(" holds "), "{out}");
}

/// Item 5: a run that outgrows memory was killed with no report; now it stops at the budget,
/// incomplete (exit 13) with the counts reached and the reason. The default budget is in the
/// header; a bad size is exit 2.
#[test]
fn a_memory_budget_stops_the_exploration_with_a_report() {
    let m = huge_pool_model("membudget");
    let o = kvmc_within(
        120,
        &["check", m.to_str().unwrap(), "--max-memory", "150M", "--jobs", "1", "--format", "json"],
        &[],
    );
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["verdict"], "incomplete");
        assert!(r["stopped_by"].as_str().unwrap().contains("memory budget (--max-memory 150.0 MiB)"), "{r}");
        assert!(r["unique_states"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(v["run"]["max_memory_bytes"], 150 * 1024 * 1024);
    let o = kvmc(&["check", "models/shared-prefix.toml", "--max-memory", "lots"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--max-memory lots"), "{}", stderr(&o));
    let o = kvmc(&["check", "models/restart-recompute.toml"]);
    assert!(stdout(&o).lines().next().unwrap().contains("memory budget"), "{}", stdout(&o));
}

/// Item 6: Ctrl-C on a long check printed nothing; now the partial report, then exit 130.
#[test]
fn ctrl_c_on_check_prints_the_partial_report_and_exits_130() {
    let o = interrupt(&["check", "bench/flagship.toml", "--jobs", "1"]);
    assert_eq!(o.status.code(), Some(130), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("interrupt (Ctrl-C)") && out.contains("incomplete"), "{out}");
    assert!(out.contains("15 results:"), "every row is reported: {out}");
}

/// Item 6: the same for a trace replay: the figures reached, marked incomplete, exit 130.
#[test]
fn ctrl_c_on_replay_prints_the_partial_report_and_exits_130() {
    let d = tempdir("replay-sigint");
    let trace = d.join("long.jsonl");
    let mut text = String::new();
    for i in 0..40_000 {
        text.push_str(&format!(
            "{{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 200, \"hash_ids\": [{}, {}]}}\n",
            i % 7,
            1000 + i
        ));
    }
    std::fs::write(&trace, text).unwrap();
    let o = interrupt(&["replay", trace.to_str().unwrap(), "--model", "models/replay-mooncake.toml"]);
    assert_eq!(o.status.code(), Some(130), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("INCOMPLETE") && out.contains("interrupted (Ctrl-C) after"), "{out}");
    assert!(out.contains("of 40,000 requests"), "{out}");
}

/// Item 7: single-threaded DFS ignored --timeout: it ran on to the end of the state space
/// (here, with a huge pool, for an hour) and only then called the run incomplete.
#[test]
fn dfs_obeys_the_timeout() {
    let m = huge_pool_model("dfs-timeout");
    let o = kvmc_within(
        60,
        &["check", m.to_str().unwrap(), "--strategy", "dfs", "--timeout", "0.5", "--property", "host-integrity"],
        &[],
    );
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("incomplete  [") && stdout(&o).contains("stopped by timeout of 0.5s"),
        "{}",
        stdout(&o)
    );
}

/// Item 7: with steps of milliseconds, BFS looked at the clock every 1,024 states and
/// overshot --timeout 3 to 31 s; it now looks before every successor.
#[test]
fn bfs_obeys_the_timeout_when_steps_are_slow() {
    let m = huge_pool_model("slowsteps");
    let o = kvmc_within(
        10,
        &["check", m.to_str().unwrap(), "--timeout", "0.5", "--jobs", "1", "--property", "host-integrity"],
        &[],
    );
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("stopped by timeout of 0.5s"), "{}", stdout(&o));
}

/// Item 7: an exploration that does not stop within the grace (here none: KVMC_STOP_GRACE=0,
/// as if one step outlasted its deadline) is ended by the watchdog, which prints the partial
/// report from the counts the exploration published.
#[test]
fn the_watchdog_ends_an_exploration_that_does_not_stop() {
    let m = huge_pool_model("watchdog");
    let o = kvmc_within(
        60,
        &["check", m.to_str().unwrap(), "--timeout", "0.3", "--jobs", "1", "--format", "json"],
        &[("KVMC_STOP_GRACE", "0")],
    );
    assert_eq!(o.status.code(), Some(13), "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 15, "every property is reported");
    for r in rows {
        assert_eq!(r["verdict"], "incomplete");
        assert!(r["stopped_by"]
            .as_str()
            .unwrap()
            .contains("timeout of 0.3s (the exploration did not stop within the grace"));
        assert!(r["unique_states"].as_u64().unwrap() > 0, "the counts reached: {r}");
    }
    let o = kvmc_within(60, &["check", "models/shared-prefix.toml"], &[("KVMC_STOP_GRACE", "soon")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("KVMC_STOP_GRACE=soon"), "{}", stderr(&o));
}

/// Item 8: stateright's DFS overshot --max-states about sixfold. Both explorers now hold at
/// most the bound, and DFS counterexamples are deterministic paths that replay.
#[test]
fn state_bounds_are_exact_and_dfs_is_deterministic() {
    for strategy in ["dfs", "bfs"] {
        let o = kvmc(&[
            "check",
            "bench/flagship.toml",
            "--strategy",
            strategy,
            "--max-states",
            "1000",
            "--property",
            "host-integrity",
            "--format",
            "json",
        ]);
        assert_eq!(o.status.code(), Some(13), "{strategy}: {}", stderr(&o));
        let r = &json(&o)["results"][0];
        assert_eq!(r["unique_states"], 1000, "{strategy}: {r}");
        assert_eq!(r["stopped_by"], "--max-states 1000");
    }
    let args =
        ["check", "models/preempt-store.toml", "--variant", "pre-29870", "--strategy", "dfs", "--format", "json"];
    let a = kvmc(&args);
    assert_eq!(a.status.code(), Some(10), "{}", stderr(&a));
    let (a, b) = (json(&a), json(&kvmc(&args)));
    let cx = |v: &serde_json::Value| {
        v["results"].as_array().unwrap().iter().map(|r| r["counterexample"].clone()).collect::<Vec<_>>()
    };
    assert_eq!(cx(&a), cx(&b));
    assert!(cx(&a).iter().any(|c| !c.is_null()));
}
