//! NixlConnector, producer side in host-buffer mode (#59102): the save sets per step, the
//! delayed free until the consumer's read, and the shortest counterexample on vLLM 0.33.

use crate::common::*;
use crate::rows::{req, scripted};
use kvmc::check::{replay, Verdict};
use kvmc::model::Action;
use kvmc::system::Event;
use stateright::Model;

/// (request, blocks) of every host-buffer copy, in order.
fn saves(ev: &[Event]) -> Vec<(u16, Vec<u32>)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::PdSaved { req, blocks, .. } => Some((*req, blocks.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn vllm_033_sends_the_block_straddling_the_chunk_boundary_stale() {
    // pd-chunked: block size 2, budget 3, A = "ab|cd" (max_tokens 1). Step 1 computes [0,3)
    // and copies blocks 1 and 2 (block 2 holds "c" only); step 2 computes [3,4) into block 2,
    // allocates nothing and copies nothing; A finishes, keeps its blocks; the consumer reads.
    let r = check("pd-chunked", None, None);
    assert_eq!(r.verdict("handoff-integrity"), Verdict::Violated);
    let path = r.outcome("handoff-integrity").unwrap().path.clone().unwrap();
    let m = model("pd-chunked", None, None);
    let labels: Vec<String> = path.iter().map(|a| m.format_action(a)).collect();
    assert_eq!(labels, ["arrive A", "step", "step", "consumer reads A"]);
    let states = replay(&m, &path).expect("counterexample replays");
    let last = &states[states.len() - 2].engine;
    let story = m.format_step(&states[states.len() - 2], path[path.len() - 1]).unwrap();
    assert!(story.contains("VIOLATION handoff-integrity"), "{story}");
    assert!(story.contains("block 2 (its block 1, 2 positions) holds A.1[:1]"), "{story}");
    // Before the read A is finished and still holds both blocks (delay_free_blocks).
    assert!(last.reqs[0].status.is_finished());
    assert_eq!(last.reqs[0].table, vec![1, 2]);
    assert_eq!(r.reached("reach-pd-partial-save"), Some(true));
}

#[test]
fn the_fix_resaves_the_straddling_block_and_the_read_frees_the_blocks() {
    for (profile, variant, resaved) in [
        (None, None, false),
        (None, Some("fix-59102"), true),
        (Some("vllm-main"), None, false),
        (Some("vllm-main"), Some("fix-59102"), true),
    ] {
        let m = model("pd-chunked", profile, variant);
        let (ev, e) = scripted(&m);
        let mut want = vec![(0, vec![1, 2])];
        if resaved {
            want.push((0, vec![2]));
        }
        assert_eq!(saves(&ev), want, "{profile:?} {variant:?}");
        // scripted() never reads: A is finished and holds its blocks for the consumer.
        assert!(e.reqs[0].status.is_finished());
        assert_eq!(e.reqs[0].table, vec![1, 2]);
        assert_eq!(e.consumer_readable(), vec![0]);
        assert!(!m.sys.is_stuck(&e), "the consumer's read is still to come");
        // The read, then a step: finished_sending frees the blocks.
        let mut read_ev = kvmc::system::Events::on();
        let e = m.apply(&e, Action::ConsumerRead(0), &mut read_ev, false).unwrap();
        let stale = read_ev.list.iter().any(|x| matches!(x, Event::Violation { property: "handoff-integrity", .. }));
        assert_eq!(stale, !resaved, "{profile:?} {variant:?}");
        let e = m.apply(&e, Action::Step, &mut kvmc::system::Events::off(), false).unwrap();
        assert!(e.reqs[0].table.is_empty());
        assert!(!e.has_work());
    }
}

/// Apply `acts` in order (each must change the state); the events of the last one.
fn run(m: &kvmc::model::KvModel, acts: &[Action]) -> (kvmc::system::Engine, Vec<Event>) {
    let mut e = m.init().engine;
    let mut ev = kvmc::system::Events::on();
    for &act in acts {
        ev = kvmc::system::Events::on();
        e = m.apply(&e, act, &mut ev, false).unwrap_or_else(|| panic!("{act:?} changes the state"));
    }
    (e, ev.list)
}

#[test]
fn a_shared_prefix_hit_is_copied_again_with_the_new_request_s_full_table() {
    // pd-shared: B hits A's first block, which A (finished) still holds for the consumer, or
    // which A's finished_sending has freed (cached). Either way B's whole table is saved, the
    // hit block included.
    let m = model("pd-shared", None, Some("fix-59102"));
    let (a, b) = (req(&m, "A"), req(&m, "B"));
    let (arrive_a, step) = (Action::Arrive(a), Action::Step);
    let held = [arrive_a, step, step, Action::Arrive(b), step];
    let freed = [arrive_a, step, step, Action::ConsumerRead(a), step, Action::Arrive(b), step];
    for (acts, holders) in [(&held[..], 2), (&freed[..], 1)] {
        let (e, ev) = run(&m, acts);
        assert_eq!(crate::rows::lookup(&ev, b), (2, Some(0)), "B hits A's first block in G1");
        assert_eq!(saves(&ev), vec![(b, e.reqs[b as usize].table.clone())]);
        assert_eq!(e.reqs[b as usize].table[0], 1, "A's first block");
        assert_eq!(e.pool.ref_cnt(1), holders, "A's held table and B, or B alone");
    }
    // A's read after B's hit: A's blocks go back, B keeps the shared one.
    let (e, _) = run(&m, &[arrive_a, step, step, Action::Arrive(b), step, Action::ConsumerRead(a), step]);
    assert!(e.reqs[a as usize].table.is_empty());
    assert_eq!(e.pool.ref_cnt(1), 1);
    let r = check("pd-shared", None, Some("fix-59102"));
    for p in ["g1-accounting", "g1-cache-sound", "kv-read-integrity", "handoff-integrity", "requests-finish"] {
        assert_eq!(r.verdict(p), Verdict::Holds, "{p}");
    }
    for g in [
        "reach-g1-hit",
        "reach-g1-eviction",
        "reach-preemption",
        "reach-abort",
        "reach-pd-handoff",
        "reach-pd-partial-save",
        "reach-all-finished",
    ] {
        assert_eq!(r.reached(g), Some(true), "{g}");
    }
}
