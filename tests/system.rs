//! The reference system's components against vLLM's rules (GP §1, OC §3).

use kvmc::system::events::Events;
use kvmc::system::ghost::Ghost;
use kvmc::system::gpu_pool::GpuPool;
use kvmc::system::host_tier::{HostTier, Lookup, ReqAccess};
use kvmc::system::kv_manager::{self, Alloc, KvCtx};
use kvmc::system::request::ReqState;
use kvmc::system::rules;
use kvmc::system::types::{BlockHash, Status};
use kvmc::system::workload::{EndKind, RequestSpec};

fn h(x: u64) -> BlockHash {
    BlockHash(x)
}

#[test]
fn free_queue_order_follows_block_pool() {
    let mut g = Ghost::default();
    let mut ev = Events::off();
    let mut p = GpuPool::new(6);
    assert_eq!(p.free_queue(), vec![1, 2, 3, 4, 5], "block 0 is the null block");
    let got = p.get_new_blocks(3, &mut g, &mut ev);
    assert_eq!(got, vec![1, 2, 3], "pop at the head");
    // blocks 1, 2 hashed, 3 not: freeing [1,2,3] tail-first puts 3 at the head, then 2, 1 at the tail.
    p.cache_full_blocks(&[1, 2], &[h(10), h(20)], 0, 2, &mut ev);
    p.free_blocks([3, 2, 1].into_iter(), &mut g);
    assert_eq!(p.free_queue(), vec![3, 4, 5, 2, 1]);
    // a touched ref-0 hit leaves the queue
    p.touch(&[2], true);
    assert_eq!(p.free_queue(), vec![3, 4, 5, 1]);
    assert_eq!(p.ref_cnt(2), 1);
    // handing out a cached block evicts its hash lazily
    let _ = p.get_new_blocks(4, &mut g, &mut ev);
    assert_eq!(p.get_one_block(h(10)), None, "block 1 was handed out: its hash is gone");
    assert_eq!(p.get_one_block(h(20)), Some(2), "block 2 is held: still cached");
}

#[test]
fn cached_map_keeps_duplicates_in_insertion_order() {
    let mut ev = Events::off();
    let mut g = Ghost::default();
    let mut p = GpuPool::new(4);
    let _ = p.get_new_blocks(3, &mut g, &mut ev);
    p.cache_full_blocks(&[2], &[h(7)], 0, 1, &mut ev);
    p.cache_full_blocks(&[1], &[h(7)], 0, 1, &mut ev);
    assert_eq!(p.get_one_block(h(7)), Some(2), "first inserted wins");
    assert_eq!(p.find_longest_cache_hit(&[h(7), h(8)], 10, 2), vec![2], "stops at the first miss");
    assert_eq!(p.find_longest_cache_hit(&[h(7)], 1, 2), Vec::<u32>::new(), "capped at max_len / B blocks");
}

#[test]
fn allocate_slots_checks_capacity_before_any_mutation() {
    let r = rules::resolve("vllm-0.33", None).unwrap();
    let spec = RequestSpec::new("A", vec![1, 2, 3], vec![9], EndKind::Length, 2);
    let k = KvCtx { spec: &spec, rules: &r, block_size: 2, max_model_len: 16, caching: true };
    let mut ev = Events::off();
    let mut g = Ghost::default();
    let mut p = GpuPool::new(3); // two usable blocks
    let mut other = p.get_new_blocks(1, &mut g, &mut ev); // block 1 held
    p.cache_full_blocks(&other, &[spec.hashes[0]], 0, 1, &mut ev);
    p.free_blocks(other.drain(..), &mut g); // block 1 cached and free: queue [2, 1]
    let mut q = ReqState::new();
    q.status = Status::Waiting;
    // a hit on block 1 (ref 0) plus one fresh block = 2 blocks from a queue of 2: fits
    let hits = [1u32];
    let a = Alloc {
        num_new_tokens: 1,
        num_new_computed: 2,
        hits: &hits,
        num_external: 0,
        delay_cache: false,
        reserved_blocks: 1,
        full_sequence: false,
    };
    let before = p.clone();
    assert!(
        kv_manager::allocate_slots(&mut p, &mut q, a, &k, &mut g, &mut ev).is_none(),
        "a reservation of 1 leaves no room"
    );
    assert_eq!(p, before, "a refused allocation changes nothing");
    assert!(q.table.is_empty());
    let a = Alloc {
        num_new_tokens: 1,
        num_new_computed: 2,
        hits: &hits,
        num_external: 0,
        delay_cache: false,
        reserved_blocks: 0,
        full_sequence: false,
    };
    let new = kv_manager::allocate_slots(&mut p, &mut q, a, &k, &mut g, &mut ev).unwrap();
    assert_eq!(q.table[new], [2], "the new blocks are the table's last");
    assert_eq!(q.table, vec![1, 2], "hits first, then fresh blocks");
    assert_eq!(p.num_free(), 0);
}

#[test]
fn last_token_rule_caps_prefix_hits() {
    let r = rules::resolve("vllm-0.33", None).unwrap();
    let spec = RequestSpec::new("A", vec![1, 2, 3, 4], vec![9], EndKind::Length, 2);
    let k = KvCtx { spec: &spec, rules: &r, block_size: 2, max_model_len: 16, caching: true };
    let mut ev = Events::off();
    let mut g = Ghost::default();
    let mut p = GpuPool::new(4);
    let b = p.get_new_blocks(2, &mut g, &mut ev);
    p.cache_full_blocks(&b, &spec.hashes, 0, 2, &mut ev);
    let q = ReqState::new();
    let (hits, n) = kv_manager::get_computed_blocks(&mut p, &q, &k, None);
    assert_eq!((hits.len(), n), (1, 2), "a fully cached 4-token prompt recomputes its whole last block");
}

fn acc() -> ReqAccess {
    ReqAccess::default()
}

#[test]
fn host_lru_033_evicts_tails_of_older_requests_first() {
    let mut g = Ghost::default();
    let mut ev = Events::off();
    let mut t = HostTier::new(3);
    let (mut r1, mut r2) = (acc(), acc());
    let s = t.prepare_store(&[(h(1), 2), (h(2), 4)], &mut r1, &mut g, &mut ev).unwrap();
    assert_eq!(s.slots, vec![0, 1], "fresh slots in increasing order");
    assert_eq!(t.lookup(&h(1)), Lookup::HitPending);
    t.complete_store(&[h(1), h(2)], &mut g, &mut ev);
    assert_eq!(t.lookup(&h(1)), Lookup::Hit);
    t.prepare_store(&[(h(3), 2)], &mut r2, &mut g, &mut ev).unwrap();
    t.complete_store(&[h(3)], &mut g, &mut ev);
    // request ranks: r1 before r2; within r1 the tail (position 4) goes first
    assert_eq!(t.eviction_order(), vec![h(2), h(1), h(3)]);
    // r1 finishes: its keys are re-ranked tail first with fresh ranks, head most recent
    t.on_request_finished(&mut r1);
    assert_eq!(t.eviction_order(), vec![h(3), h(2), h(1)]);
    // a pinned key is never a victim; a store that cannot make room changes nothing
    let mut r3 = acc();
    t.prepare_load(&[(h(3), 2)], &mut r3, &mut g, &mut ev);
    let out = t.prepare_store(&[(h(4), 2)], &mut r3, &mut g, &mut ev).unwrap();
    assert_eq!(out.evicted, vec![h(2)]);
    assert_eq!(out.slots, vec![1], "the victim's slot is reused");
    let before = (t.len(), t.num_free_slots());
    let mut r4 = acc();
    assert!(t.prepare_store(&[(h(5), 2), (h(6), 4), (h(7), 6)], &mut r4, &mut g, &mut ev).is_none(), "all or nothing");
    assert_eq!((t.len(), t.num_free_slots()), before);
    assert_eq!(g.violations, 0);
}

#[test]
fn host_complete_load_twice_is_a_breach() {
    let mut g = Ghost::default();
    let mut ev = Events::off();
    let mut t = HostTier::new(1);
    let mut r = acc();
    t.prepare_store(&[(h(1), 2)], &mut r, &mut g, &mut ev).unwrap();
    t.complete_store(&[h(1)], &mut g, &mut ev);
    t.prepare_load(&[(h(1), 2)], &mut r, &mut g, &mut ev);
    t.complete_load(&[h(1)], &mut g, &mut ev);
    assert_eq!(g.violations, 0);
    t.complete_load(&[h(1)], &mut g, &mut ev);
    assert_ne!(g.violations, 0);
}

/// The same store/touch/load/finish sequence under each profile's LRU: the eviction order
/// after each phase, and the victim of a store into the full tier (pinned per policy).
#[test]
fn host_lru_victim_order_per_policy() {
    use kvmc::system::rules::HostLru;
    let k: Vec<_> = (0..4).map(|i| h(10 + i)).collect();
    let run = |policy: HostLru| {
        let mut g = Ghost::default();
        let mut ev = Events::off();
        let mut t = HostTier::with_policy(4, policy, false);
        let (mut r, mut q, mut s) = (acc(), acc(), acc());
        let mut orders = Vec::new();
        t.prepare_store(&[(k[0], 1), (k[1], 2)], &mut r, &mut g, &mut ev).unwrap();
        t.complete_store(&[k[0], k[1]], &mut g, &mut ev);
        t.prepare_store(&[(k[2], 3), (k[3], 4)], &mut r, &mut g, &mut ev).unwrap();
        t.complete_store(&[k[2], k[3]], &mut g, &mut ev);
        orders.push(t.eviction_order());
        t.touch(&k); // 0.24's connector touches R's keys (a no-op for the rank policies)
        orders.push(t.eviction_order());
        t.prepare_load(&[(k[1], 2)], &mut q, &mut g, &mut ev); // Q reuses R's chunk 1
        t.complete_load(&[k[1]], &mut g, &mut ev);
        orders.push(t.eviction_order());
        t.on_request_finished(&mut r);
        orders.push(t.eviction_order());
        let out = t.prepare_store(&[(h(99), 1)], &mut s, &mut g, &mut ev).unwrap();
        assert_eq!(g.violations, 0, "{policy:?}: the reference order agrees with every eviction");
        (orders, out.evicted)
    };
    let [a, b, c, d] = [k[0], k[1], k[2], k[3]];
    // 0.24: release order (a job's keys in chunk order); touch moves R's keys to the MRU end
    // head last; a load re-appends on release; finish changes nothing.
    assert_eq!(
        run(HostLru::ReleaseOrder),
        (vec![vec![a, b, c, d], vec![d, c, b, a], vec![d, c, a, b], vec![d, c, a, b]], vec![d])
    );
    // 0.32: insert order; reuse changes nothing; finish re-ranks R's keys tail first.
    assert_eq!(
        run(HostLru::InsertRank),
        (vec![vec![a, b, c, d], vec![a, b, c, d], vec![a, b, c, d], vec![d, c, b, a]], vec![d])
    );
    // 0.33: R's request rank, tails first; Q's reuse raises chunk 1 to Q's rank; finish
    // re-ranks R's keys tail first.
    assert_eq!(
        run(HostLru::RequestRank),
        (vec![vec![d, c, b, a], vec![d, c, b, a], vec![d, c, a, b], vec![d, c, b, a]], vec![d])
    );
}

/// 0.24's `TransferJobStatus.keys` is a set: a store job's keys become evictable in its order,
/// which is the eviction order. Without a plan (the checker) the job's key order is kept; a
/// conformance plan chooses another order, and only the release-order LRU (0.24) asks.
#[test]
fn job_key_order_is_a_choice_only_under_release_order() {
    use kvmc::system::choice::Choices;
    use kvmc::system::rules::HostLru;
    let k: Vec<_> = (0..3).map(|i| h(20 + i)).collect();
    let run = |policy: HostLru, plan: Option<Vec<u32>>| {
        let mut g = Ghost::default();
        let mut ev = Events::off();
        ev.choices = plan.map(|p| Box::new(Choices::with_plan(p)));
        let mut t = HostTier::with_policy(4, policy, false);
        t.prepare_store(&[(k[0], 1), (k[1], 2), (k[2], 3)], &mut acc(), &mut g, &mut ev).unwrap();
        t.complete_store(&k, &mut g, &mut ev);
        let taken = ev.choices.map(|c| c.taken.len()).unwrap_or(0);
        (t.eviction_order(), taken)
    };
    assert_eq!(run(HostLru::ReleaseOrder, None), (k.clone(), 0));
    assert_eq!(run(HostLru::ReleaseOrder, Some(vec![0])), (k.clone(), 1));
    // Order 5 of 3! (lexicographic): k2, k1, k0.
    assert_eq!(run(HostLru::ReleaseOrder, Some(vec![5])), (vec![k[2], k[1], k[0]], 1));
    let (order33, asked) = run(HostLru::RequestRank, Some(vec![5]));
    assert_eq!(asked, 0, "0.33's ranks: no choice");
    assert_eq!(order33, run(HostLru::RequestRank, None).0);
}
