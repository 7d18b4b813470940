//! Router replay: the PR's GPU checks A, B and C as scripted runs (arrivals in order, every
//! copy finishing within its step), their outcomes under the fix and its ablations, and the
//! row store's reference semantics.

use crate::common::*;
use kvmc::model::{Action, KvModel};
use kvmc::system::expert_rows::{RowStore, StoreFull};
use kvmc::system::types::BlockHash;
use kvmc::system::{Direction, Engine, Event, Events};

/// Run `m` along the eager path: arrive as soon as allowed, steps with copies finishing
/// within them. Returns the events and the final engine.
pub fn scripted(m: &KvModel) -> (Vec<Event>, Engine) {
    let mut e = m.init().engine;
    let mut all = Vec::new();
    for _ in 0..200 {
        let mut acts = Vec::new();
        m.sys.inputs(&e, &mut acts);
        let pick = acts
            .iter()
            .find(|a| matches!(a, Action::Arrive(_)))
            .or_else(|| acts.iter().find(|a| **a == Action::StepDrain))
            .or_else(|| acts.iter().find(|a| **a == Action::Step))
            .or_else(|| acts.iter().find(|a| **a == Action::TransferDone(Direction::Store)))
            .or_else(|| acts.iter().find(|a| **a == Action::TransferDone(Direction::Load)))
            .copied();
        let Some(a) = pick else { break };
        let mut ev = Events::on();
        match m.apply(&e, a, &mut ev, false) {
            Some(next) => {
                e = next;
                all.extend(ev.list);
            }
            None if a == Action::StepDrain => {
                let mut ev = Events::on();
                match m.apply(&e, Action::Step, &mut ev, false) {
                    Some(next) => {
                        e = next;
                        all.extend(ev.list);
                    }
                    None => break,
                }
            }
            None => break,
        }
    }
    (all, e)
}

pub fn req(m: &KvModel, name: &str) -> u16 {
    m.scope.workload.requests.iter().position(|r| r.name == name).unwrap() as u16
}

/// (local, external) of the request's last lookup.
pub fn lookup(ev: &[Event], r: u16) -> (u32, Option<u32>) {
    ev.iter()
        .filter_map(|e| match e {
            Event::Lookup { req, local, external, .. } if *req == r => Some((*local, *external)),
            _ => None,
        })
        .next_back()
        .expect("the request was looked up")
}

pub fn died(ev: &[Event]) -> bool {
    ev.iter().any(|e| matches!(e, Event::Violation { property: "rows-present", .. }))
}

#[test]
fn check_a_the_clamp_stops_the_load_at_block_floor_of_start() {
    // X = P + more, start 3 (mid-block 1), block size 2: floor(3) = 2 = its G1 hit.
    let m = model("rows-a", None, None);
    let (ev, e) = scripted(&m);
    let x = req(&m, "X");
    assert_eq!(lookup(&ev, x), (2, Some(0)), "the clamp leaves no external hit past block_floor(start)");
    assert!(ev.iter().any(|e| matches!(e, Event::RowsCut { req, from: 4, to: 2 } if *req == x)), "P.1 was loadable");
    assert!(!died(&ev));
    // Rows exactly [3, 6): T = 7.
    let r = e.aux.as_ref().unwrap().record(x);
    assert_eq!((r.first, r.end, r.count, r.gap), (Some(3), 6, 3, false));
    // Without the clamp X loads P.1 and needs its rows back: the engine dies.
    let (ev, _) = scripted(&model("rows-a", None, Some("no-load-clamp")));
    assert_eq!(lookup(&ev, x), (2, Some(2)));
    assert!(died(&ev));
}

#[test]
fn check_b_the_cut_stops_the_local_hit_on_loaded_blocks() {
    let m = model("rows-b", None, None);
    let (ev, e) = scripted(&m);
    let (a, b) = (req(&m, "A"), req(&m, "B"));
    assert_eq!(lookup(&ev, a), (0, Some(4)), "A (start 4) loads the shared prefix from the host tier");
    assert!(ev.iter().any(|e| matches!(e, Event::RowsCut { req, from: 4, to: 0 } if *req == b)), "B's hit is cut to 0");
    assert_eq!(lookup(&ev, b), (0, Some(0)), "and the clamp (start 0) loads nothing: B recomputes");
    assert!(!died(&ev));
    let r = e.aux.as_ref().unwrap().record(b);
    assert_eq!((r.first, r.end, r.gap), (Some(0), 5, false), "B's rows [0, 5) as without offload");
    // The PR's negative control: the clamp without the cut dies at the first B.
    let (ev, _) = scripted(&model("rows-b", None, Some("clamp-only")));
    assert_eq!(lookup(&ev, b), (4, Some(0)));
    assert!(died(&ev));
}

#[test]
fn check_c_start_zero_gets_no_external_hit() {
    let m = model("rows-c", None, None);
    let (ev, e) = scripted(&m);
    let x = req(&m, "X");
    assert_eq!(lookup(&ev, x).1, Some(0), "no external hits at start 0");
    let r = e.aux.as_ref().unwrap().record(x);
    assert_eq!((r.first, r.end, r.count), (Some(0), 6, 6), "rows [0, T-1) as a run without offload");
}

#[test]
fn vllm_033_retains_rows_beyond_g1_and_loads_only_what_it_retains() {
    // 0.33 retained P's rows when P finished (they outlive its G1 blocks): X may load P.1.
    let m = model("rows-a", Some("vllm-0.33"), None);
    let (ev, _) = scripted(&m);
    let x = req(&m, "X");
    assert_eq!(lookup(&ev, x), (2, Some(2)), "P.1's rows are retained: the load is allowed");
    assert!(!died(&ev));
    // With a row store smaller than G1, prime-rl dies on a plain local hit; 0.33 does not.
    let (ev, _) = scripted(&model("rows-small-store", None, None));
    assert!(died(&ev));
    let (ev, _) = scripted(&model("rows-small-store", Some("vllm-0.33"), None));
    assert!(!died(&ev));
}

fn h(i: u64) -> BlockHash {
    BlockHash(i)
}

#[test]
fn row_store_keeps_referenced_rows_and_evicts_released_ones_oldest_first() {
    let mut s = RowStore::new(2, false, true);
    // A request's keys are retained when sent, then its blocks are published.
    s.put(&[], &[h(1), h(2)], &[]).unwrap();
    assert_eq!(s.put(&[h(1), h(2)], &[], &[]), Ok(vec![]));
    // A third referenced object: nothing is unreferenced, the store grows (0.33).
    s.put(&[h(3)], &[h(3)], &[]).unwrap();
    assert_eq!((s.len(), s.capacity), (3, 4));
    // Released keys (tail first, as the worker releases them) become evictable, head last.
    s.put(&[], &[], &[h(2), h(1)]).unwrap();
    assert_eq!(s.get(&[h(1), h(2)]), Ok(()));
    let mut small = RowStore::new(2, false, true);
    small.put(&[h(1), h(2)], &[], &[]).unwrap();
    assert_eq!(small.put(&[h(5)], &[], &[]), Ok(vec![h(1)]), "the least recently used goes first");
    assert_eq!(small.get(&[h(1)]), Err(h(1)), "BlockObjectStoreError");
    // The variant evicts referenced rows too.
    let mut live = RowStore::new(1, true, true);
    live.put(&[h(1)], &[h(1)], &[]).unwrap();
    assert_eq!(live.put(&[h(2)], &[h(2)], &[]), Ok(vec![h(1)]));
}

/// 0.31/0.32's store (rule `aux_store_grows` false) fails the put that would leave more live
/// objects than slots ("cannot retain the requested batch"), and still evicts an unreferenced
/// one to make room.
#[test]
fn a_bounded_row_store_fails_rather_than_grow() {
    let mut s = RowStore::new(2, false, false);
    s.put(&[], &[h(1), h(2), h(3)], &[]).unwrap();
    s.put(&[h(1), h(2)], &[], &[]).unwrap();
    assert_eq!(s.put(&[h(3)], &[], &[]), Err(StoreFull { objects: 3, limit: 2 }));
    let mut s = RowStore::new(1, false, false);
    s.put(&[h(1)], &[h(1)], &[]).unwrap();
    s.put(&[], &[], &[h(1)]).unwrap();
    assert_eq!(s.put(&[h(2)], &[h(2)], &[]), Ok(vec![h(1)]));
}

/// Reuse on the eager path: (forward positions needed without any reuse, positions served
/// from G1 prefix hits, positions loaded from the host tier, positions computed, engine died).
fn reuse(name: &str, profile: Option<&str>, variant: Option<&str>) -> (u32, u32, u32, u32, bool) {
    let m = model(name, profile, variant);
    let (ev, e) = scripted(&m);
    let b = m.scope.cfg.block_size;
    let mut computed = 0;
    let mut loaded = 0;
    for x in &ev {
        match x {
            Event::Scheduled { tokens, .. } => computed += tokens,
            Event::LoadJob { keys, .. } => loaded += keys.len() as u32 * b,
            _ => {}
        }
    }
    let died = died(&ev);
    let needed: u32 = if died {
        0
    } else {
        m.scope.workload.requests.iter().enumerate().map(|(i, s)| s.prompt_len + e.reqs[i].num_output - 1).sum()
    };
    (needed, needed.saturating_sub(computed + loaded), loaded, computed, died)
}

/// The numbers docs/router-replay.md quotes (what the clamp and the cut give up).
#[test]
fn reuse_under_each_rule_set_is_pinned() {
    let table = [
        ("rows-a", None, None, (16, 2, 0, 14, false)),
        ("rows-a", Some("vllm-0.33"), None, (16, 2, 2, 12, false)),
        ("rows-a", None, Some("no-load-clamp"), (0, 0, 2, 12, true)),
        ("rows-b", None, None, (23, 0, 4, 19, false)),
        ("rows-b", Some("vllm-0.33"), None, (23, 4, 4, 15, false)),
        ("rows-b", None, Some("clamp-only"), (0, 0, 4, 15, true)),
        ("rows-c", None, None, (18, 0, 0, 18, false)),
        ("rows-c", Some("vllm-0.33"), None, (18, 0, 4, 14, false)),
        ("rows-c", None, Some("no-load-clamp"), (0, 0, 4, 14, true)),
    ];
    let mut got = Vec::new();
    for (m, p, v, want) in table {
        let r = reuse(m, p, v);
        if r != want {
            got.push(format!("{m} {p:?} {v:?}: {r:?} (pinned {want:?})"));
        }
    }
    assert!(got.is_empty(), "reuse numbers changed (update docs/router-replay.md):\n{}", got.join("\n"));
}

/// Router replay over a trace: `sessions` sessions of three turns (a first turn of 200 new
/// tokens, then 64 new tokens a turn, 30 generated tokens each), so later turns find earlier
/// turns' prompts and answers in G1 or the host tier, and their rows (every request needs
/// rows from position 0) come back from the row store.
fn rows_session_trace(sessions: usize) -> String {
    let mut out = String::new();
    let mut id = 0u32;
    for s in 0..sessions {
        let ids: Vec<String> = (id..id + 4).map(|x| x.to_string()).collect();
        id += 4;
        out.push_str(&format!(
            "{{\"session_id\": \"s{s}\", \"input_length\": 200, \"output_length\": 30, \"hash_ids\": [{}]}}\n",
            ids.join(", ")
        ));
        for _ in 1..3 {
            out.push_str(&format!(
                "{{\"session_id\": \"s{s}\", \"delay\": 0, \"input_length\": 64, \"output_length\": 30, \"hash_ids\": [{id}]}}\n"
            ));
            id += 1;
        }
    }
    out
}

/// A router-replay replay model: OffloadingConnector, a G1 pool small enough to evict and
/// preempt, three requests at a time (so request slots are reused).
fn rows_replay_model(profile: &str) -> String {
    format!(
        r#"description = "router replay over a trace"
[engine]
profile = "{profile}"
connector = "offloading"
block_size = 16
gpu_blocks = 48
max_num_batched_tokens = 512
[offload]
host_chunks = 4096
[router_replay]
[replay]
load = "closed-loop"
concurrency = 3
trace_block_size = 64
"#
    )
}

/// `kvmc replay` of a model with `[router_replay]` once panicked (an index out of bounds in
/// the rows scheduler: request slots added or reused by replay had no rows state). Now the
/// rows are checked after every action (and the full-state predicates agree after each),
/// under both router-replay rule sets, and a rows mutation is found over the trace.
#[test]
fn router_replay_runs_over_a_session_trace_with_rows_checked_every_step() {
    use kvmc::replay::trace::Trace;
    use kvmc::replay::{run_trace, Options};
    use kvmc::scope::replay::ReplayModel;
    let d = tempdir("rows-replay");
    let trace = Trace::parse(&d.join("t.jsonl"), &rows_session_trace(6), 64, None).expect("trace parses");
    for profile in ["prime-rl", "vllm-0.33"] {
        let m = ReplayModel::parse("m", &d.join("m.toml"), &rows_replay_model(profile)).expect("model parses");
        let run = |variant: Option<&str>| {
            let opts = Options {
                variant: variant.map(String::from),
                full_check_every: Some(1),
                out_dir: Some(d.clone()),
                ..Default::default()
            };
            run_trace(&trace, &m, &opts).expect("replay runs")
        };
        let o = run(None);
        assert!(o.finding.is_none(), "{profile}: {:?}", o.finding);
        for p in ["rows-present", "rows-exact", "start-anchored"] {
            assert!(o.checks.properties.contains(&p), "{profile}: {p} is checked");
        }
        let m = &o.metrics;
        assert_eq!(o.checks.evaluations, o.checks.properties.len() as u64 * m.actions, "{profile}");
        assert_eq!(o.checks.full, m.actions + 1, "{profile}: the full predicates ran after every action");
        // Every position of every request is accounted for once.
        for r in &o.requests {
            let reached = r.g1_hit_tokens + r.host_hit_tokens + r.prefill_tokens + r.decode_tokens;
            assert_eq!(reached, u64::from(r.prompt_tokens + r.output_tokens) - 1, "{profile}: line {}", r.line);
        }
        let figures = (
            m.finished,
            m.g1_hit_tokens,
            m.host_hit_tokens,
            m.prefill_tokens,
            m.recomputed_tokens,
            m.preemptions,
            m.load_jobs,
            m.store_jobs,
            m.steps,
            m.actions,
        );
        // prime-rl clamps every external load to block_floor(0) = 0 (each request needs its
        // rows from position 0, which a load cannot bring); 0.33 retains rows and admits the
        // host hits whose rows it kept. Both read rows of G1 hits back from the row store.
        let (want, reached): (_, &[&str]) = match profile {
            "prime-rl" => (
                (18, 1264, 0, 4029, 32, 1, 0, 20, 302, 320),
                &["reach-preemption", "reach-readmit-full-table", "reach-rows-read-from-store", "reach-rows-cut"],
            ),
            _ => (
                (18, 2080, 976, 2237, 18, 1, 7, 19, 299, 324),
                &["reach-preemption", "reach-host-hit", "reach-readmit-full-table", "reach-rows-read-from-store"],
            ),
        };
        assert_eq!(figures, want, "{profile}: {m:?}");
        for g in reached.iter().chain(&["reach-g1-hit", "reach-store-done", "reach-all-finished"]) {
            assert!(o.checks.reached.contains(g), "{profile}: {g} in {:?}", o.checks.reached);
        }
        // A rows mutation is found over the trace, and its history re-runs through the
        // checker's model (the exported model keeps [router_replay]).
        let bad = run(Some("mut-emit-last-token"));
        let f = bad.finding.as_ref().expect("the rows mutation is found over the trace");
        assert_eq!(f.property, "rows-exact", "{profile}");
        assert!(f.scenario_file.is_some(), "{profile}: {f:?}");
        assert!(!f.note.as_deref().unwrap_or("").contains("kvmc bug"), "{profile}: {:?}", f.note);
    }
}
