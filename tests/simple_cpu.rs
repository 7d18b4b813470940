//! SimpleCPUOffloadConnector against vLLM's rules (OC §4): the CPU pool's victim order, and
//! the connector driven through fixed engine runs.

use kvmc::model::{Action, KvModel};
use kvmc::scope::Scope;
use kvmc::system::events::Events;
use kvmc::system::ghost::Ghost;
use kvmc::system::gpu_pool::GpuPool;
use kvmc::system::types::BlockHash;
use kvmc::system::{Direction, Engine};
use std::path::Path;
use std::sync::Arc;

fn h(x: u64) -> BlockHash {
    BlockHash(x)
}

/// The CPU pool is vLLM's BlockPool: FIFO by release, a transfer's blocks released head
/// first, fresh (unhashed) blocks handed out before cached ones, and a lookup pin that is
/// dropped re-appends its block at the tail.
#[test]
fn cpu_pool_victims_are_fifo_by_release_head_first() {
    let mut g = Ghost::default();
    let mut ev = Events::off();
    let mut p = GpuPool::new_cpu(6);
    assert_eq!(p.free_queue(), vec![1, 2, 3, 4, 5], "block 0 is the CPU pool's null block");
    // store 1 (prefix P0, P1): allocated, registered at completion, released head first
    let s1 = p.get_new_blocks(2, &mut g, &mut ev);
    assert_eq!(s1, vec![1, 2]);
    p.insert_hash(1, h(10));
    p.insert_hash(2, h(11));
    p.free_blocks(s1.iter().copied(), &mut g);
    // store 2 (U): fresh blocks still come first
    let s2 = p.get_new_blocks(1, &mut g, &mut ev);
    assert_eq!(s2, vec![3], "unhashed free blocks are handed out before cached ones");
    p.insert_hash(3, h(20));
    p.free_blocks(s2.iter().copied(), &mut g);
    assert_eq!(p.free_queue(), vec![4, 5, 1, 2, 3]);
    // a lookup pins P0 (it leaves the queue) and the request fails admission: the pin is
    // dropped at its next lookup and P0 re-joins at the tail
    p.touch(&[1], true);
    assert_eq!(p.free_queue(), vec![4, 5, 2, 3]);
    p.free_blocks([1].into_iter(), &mut g);
    assert_eq!(p.free_queue(), vec![4, 5, 2, 3, 1]);
    // a load pins P1 and U; completion releases them head first
    p.touch(&[2, 3], true);
    p.free_blocks([2, 3].into_iter(), &mut g);
    assert_eq!(p.free_queue(), vec![4, 5, 1, 2, 3]);
    // victims of the next stores: the fresh blocks, then P0, P1, U in release order
    let v = p.get_new_blocks(4, &mut g, &mut ev);
    assert_eq!(v, vec![4, 5, 1, 2]);
    assert_eq!(p.get_one_block(h(10)), None, "P0 evicted");
    assert_eq!(p.get_one_block(h(11)), None, "P1 evicted");
    assert_eq!(p.get_one_block(h(20)), Some(3), "U, released last, survives");
    // #62444's refresh moves a free block to the tail without touching its count
    p.free_blocks([4].into_iter(), &mut g); // unhashed: back to the head
    assert_eq!(p.free_queue(), vec![4, 3]);
    p.move_to_tail(4);
    assert_eq!(p.free_queue(), vec![3, 4]);
    assert_eq!(g.violations, 0);
}

fn scope(text: &str) -> Arc<Scope> {
    Arc::new(Scope::parse("t", Path::new("t.toml"), text).expect("scope parses"))
}

/// Run `arrivals` one after the other, each followed by steps in which every copy finishes,
/// until nothing more happens.
fn run_to_quiet(m: &KvModel, mut e: Engine, arrivals: &[u16]) -> Engine {
    let mut ev = Events::off();
    for &r in arrivals {
        e = m.apply(&e, Action::Arrive(r), &mut ev, false).expect("arrives");
        for _ in 0..40 {
            let next = m
                .apply(&e, Action::StepDrain, &mut ev, false)
                .or_else(|| m.apply(&e, Action::Step, &mut ev, false))
                .or_else(|| m.apply(&e, Action::TransferDone(Direction::Store), &mut ev, false));
            match next {
                Some(n) => e = n,
                None => break,
            }
        }
    }
    e
}

const HOT_PREFIX: &str = r#"
[engine]
connector = "simple-cpu"
block_size = 2
gpu_blocks = 12
max_num_batched_tokens = 8
[simple_cpu]
cpu_blocks = 3
[[request]]
name = "P"
prompt = "pp|a"
output = "x"
[[request]]
name = "U"
prompt = "uu|b"
output = "y"
[[request]]
name = "H"
prompt = "pp|c"
output = "z"
[[request]]
name = "V"
prompt = "vv|d"
output = "w"
"#;

/// #62444: P's prefix block is stored first, then U's; H hits P's block on the GPU; V's store
/// needs a victim. 0.33 evicts the hot prefix (its CPU copy was never re-released); with the
/// refresh (variant fix-62444) the eager scan's ALREADY_CACHED hit moves it to the MRU end and
/// U's block goes instead; so does 0.34's refresh at admission (`scpu_refresh_local_hit`).
#[test]
fn gpu_hit_refresh_decides_the_victim_62444() {
    let s = scope(HOT_PREFIX);
    let p0 = s.workload.requests[0].hashes[0];
    let u0 = s.workload.requests[1].hashes[0];
    for (profile, variant, kept, evicted) in
        [("vllm-0.33", None, u0, p0), ("vllm-0.33", Some("fix-62444"), p0, u0), ("vllm-0.34", None, p0, u0)]
    {
        let m = KvModel::new(s.clone(), Some(profile), variant, vec![]).unwrap();
        let e = run_to_quiet(&m, m.init().engine, &[0, 1, 2, 3]);
        let sc = e.conn.simple_cpu().expect("SimpleCPU");
        assert!(sc.cpu.get_one_block(kept).is_some(), "{profile}: {} kept", s.workload.label(kept));
        assert!(sc.cpu.get_one_block(evicted).is_none(), "{profile}: {} evicted", s.workload.label(evicted));
        assert_eq!(e.ghost.violations, 0, "{profile}");
    }
}

/// A finishing request's last confirmed blocks are stored by the finish-time store (0.32+);
/// without it (0.24) a request computed in one step stores nothing.
#[test]
fn finish_time_store_keeps_the_last_blocks() {
    let s = scope(HOT_PREFIX);
    let p = &s.workload.requests[0].hashes[0];
    for (variant, stored) in [(None, true), (Some("pre-finish-flush"), false)] {
        let m = KvModel::new(s.clone(), None, variant, vec![]).unwrap();
        let e = run_to_quiet(&m, m.init().engine, &[0]);
        let sc = e.conn.simple_cpu().unwrap();
        assert_eq!(sc.cpu.get_one_block(*p).is_some(), stored, "{variant:?}");
    }
}

/// Finding 26 on real vLLM (tests/conformance/findings/scpu-lazy-thrash.toml): SimpleCPU lazy
/// mode never lets an engine with no request go idle on 0.32.0 to 0.34.0 (the recorder stops
/// at its 80-step bound), while 0.24.0, with no `has_pending_push_work` hook, idles after step
/// 4. Every recorded step conforms to the model, and the gate's scpu-lazy rows find the cycle
/// (requests-finish violated; holds under fix-scpu-lazy-idle).
#[test]
fn finding_26_lazy_stores_keep_an_idle_engine_stepping_on_real_vllm() {
    let dir = crate::common::root().join("tests/conformance/findings");
    let r = kvmc::conform::check(&dir.join("vllm-0.24/scpu-lazy-thrash.jsonl"), "vllm-0.24", None, 8).unwrap();
    assert!(r.divergence.is_none() && r.partial.is_none(), "0.24.0 idles: {:?}", r.divergence);
    assert_eq!(r.steps, 4);
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let log = dir.join(format!("{release}/scpu-lazy-thrash.jsonl.partial"));
        let r = kvmc::conform::check(&log, release, None, 8).unwrap();
        assert!(r.divergence.is_none(), "{release}: {:?}", r.divergence);
        assert_eq!(r.steps, 80, "{release}: every step up to the recorder's bound conforms");
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("did not finish in 80 steps"), "{release}");
        // From step 6 on no request is scheduled, yet every step stores one block ("-": a
        // lazy store belongs to no request) that the 2-block CPU pool evicted a step before.
        for step in 6..=80 {
            let at = |ev: &str| {
                text.lines()
                    .filter(|l| l.contains(&format!("\"ev\":\"{ev}\",\"step\":{step},")))
                    .map(String::from)
                    .collect::<Vec<_>>()
            };
            let sched = at("schedule");
            assert!(sched.iter().all(|l| l.contains("\"scheduled\":[]")), "{release} step {step}: {sched:?}");
            let stores = at("store");
            assert_eq!(stores.len(), 1, "{release} step {step}");
            assert!(stores[0].contains("\"req\":\"-\""), "{release} step {step}: {}", stores[0]);
            assert_eq!(at("evict").len(), 1, "{release} step {step}");
        }
    }
}
