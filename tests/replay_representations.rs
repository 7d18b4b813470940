//! The replay-only representations (hash maps, the rank queue, the indexed eviction-order
//! reference, memoised prefix lookups) behave exactly like the checker's.

use kvmc::system::collections::rank_queue::RankQueue;
use kvmc::system::events::Events;
use kvmc::system::ghost::Ghost;
use kvmc::system::gpu_pool::GpuPool;
use kvmc::system::host_tier::{HostTier, ReqAccess};
use kvmc::system::rules::HostLru;
use kvmc::system::types::BlockHash;
use proptest::prelude::*;
use std::collections::BTreeSet;

#[derive(Clone, Debug)]
enum QOp {
    Insert((u64, i64), u8),
    Remove(usize),
    Fresh(u8),
    /// A request rank drawn after the fresh ranks so far: (next + 1, -position).
    Late(i64, u8),
}

fn qop() -> impl Strategy<Value = QOp> {
    prop_oneof![
        ((0u64..12, -6i64..2), 0u8..6).prop_map(|(r, k)| QOp::Insert(r, k)),
        (0usize..64).prop_map(QOp::Remove),
        (0u8..6).prop_map(QOp::Fresh),
        (1i64..6, 0u8..6).prop_map(|(p, k)| QOp::Late(p, k)),
    ]
}

#[derive(Clone, Debug)]
enum HOp {
    Store(u8, Vec<u8>),
    Complete,
    Load(u8, Vec<u8>),
    Unload,
    Finish(u8),
    Touch(Vec<u8>),
}

fn hop() -> impl Strategy<Value = HOp> {
    let keys = proptest::collection::vec(0u8..24, 1..5);
    prop_oneof![
        (0u8..4, keys.clone()).prop_map(|(r, k)| HOp::Store(r, k)),
        Just(HOp::Complete),
        (0u8..4, keys.clone()).prop_map(|(r, k)| HOp::Load(r, k)),
        Just(HOp::Unload),
        (0u8..4).prop_map(HOp::Finish),
        keys.prop_map(HOp::Touch),
    ]
}

fn key(i: u8) -> BlockHash {
    BlockHash(0x1000 + u64::from(i) * 0x9e37_79b9)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Replay hashes several requests' chains together; every chain is what
    /// `chain_hashes` gives it alone (lanes that finish early take the next sequence).
    #[test]
    fn chain_hashes_many_is_chain_hashes(
        seqs in proptest::collection::vec(proptest::collection::vec(0u32..50, 0..140), 0..9),
        block in 1u32..20,
    ) {
        let refs: Vec<&[u32]> = seqs.iter().map(|s| s.as_slice()).collect();
        let many = kvmc::system::workload::chain_hashes_many(&refs, block);
        prop_assert_eq!(many.len(), seqs.len());
        for (s, h) in seqs.iter().zip(&many) {
            prop_assert_eq!(h, &kvmc::system::workload::chain_hashes(s, block));
        }
    }

    /// The block hash is a chain of bijections: under one parent, two different token
    /// runs of one length never share a hash (a shared one would be a false prefix hit).
    /// Small token ids and few of them are where a weak mix would collide first.
    #[test]
    fn same_length_runs_never_collide(
        a in proptest::collection::vec(0u32..4, 1..20),
        flips in proptest::collection::vec((0usize..20, 0u32..4), 1..4),
        parent in proptest::prop_oneof![Just(kvmc::system::types::NONE_HASH.0), proptest::num::u64::ANY],
    ) {
        use kvmc::system::types::{fold_tokens, BlockHash};
        let mut b = a.clone();
        for (i, t) in flips {
            let n = b.len();
            b[i % n] = t;
        }
        prop_assume!(a != b);
        prop_assert_ne!(fold_tokens(BlockHash(parent), &a), fold_tokens(BlockHash(parent), &b));
    }

    #[test]
    fn rank_queue_orders_like_a_btreeset(ops in proptest::collection::vec(qop(), 0..120)) {
        let mut q: RankQueue<u8> = RankQueue::default();
        let mut s: BTreeSet<((u64, i64), u8)> = BTreeSet::new();
        let mut next = 20u64;
        for op in ops {
            match op {
                QOp::Insert(r, k) => prop_assert_eq!(q.insert(r, k), s.insert((r, k))),
                QOp::Fresh(k) => {
                    next += 1 + u64::from(k % 3);
                    prop_assert_eq!(q.insert((next, 0), k), s.insert(((next, 0), k)));
                }
                QOp::Late(p, k) => prop_assert_eq!(q.insert((next + 1, -p), k), s.insert(((next + 1, -p), k))),
                QOp::Remove(i) => {
                    if let Some(&x) = s.iter().nth(i % (s.len().max(1))) {
                        prop_assert!(q.remove(x.0, x.1));
                        s.remove(&x);
                    }
                    prop_assert!(!q.remove((999, 0), 0));
                }
            }
            prop_assert_eq!(q.len(), s.len());
            prop_assert_eq!(q.iter().collect::<Vec<_>>(), s.iter().copied().collect::<Vec<_>>());
            // Victim picks: the fresh-run fast path agrees with the ordered set.
            for n in [1, 3, 64] {
                for keep in [|_: &((u64, i64), u8)| true, |e: &((u64, i64), u8)| !e.1.is_multiple_of(3)] {
                    let want: Vec<_> = s.iter().copied().filter(keep).take(n).collect();
                    prop_assert_eq!(q.first(n, keep), want);
                }
            }
        }
    }

    /// A host tier with replay aids (hash map, rank queue, indexed reference order) does
    /// what the checker's does, step by step, under every LRU policy.
    #[test]
    fn host_tier_with_replay_aids_is_the_same(
        policy in prop_oneof![Just(HostLru::ReleaseOrder), Just(HostLru::InsertRank), Just(HostLru::RequestRank)],
        cap in 2u32..8,
        ops in proptest::collection::vec(hop(), 0..60),
    ) {
        let mut a = HostTier::with_policy(cap, policy, false);
        let mut b = HostTier::with_policy(cap, policy, false);
        b.enable_log();
        let (mut ga, mut gb) = (Ghost::default(), Ghost::default());
        let (mut ea, mut eb) = (Events::on(), Events::on());
        let mut ra: Vec<ReqAccess> = vec![ReqAccess::default(); 4];
        let mut rb = ra.clone();
        let mut pending: Vec<BlockHash> = Vec::new();
        let mut pinned: Vec<BlockHash> = Vec::new();
        for op in ops {
            match op {
                HOp::Store(r, mut ks) => {
                    // One store names distinct keys (chained hashes of distinct chunks).
                    let mut seen = BTreeSet::new();
                    ks.retain(|k| seen.insert(*k));
                    let keys: Vec<(BlockHash, u32)> =
                        ks.iter().enumerate().map(|(i, k)| (key(*k), 16 * (i as u32 + 1))).collect();
                    let x = a.prepare_store(&keys, &mut ra[r as usize], &mut ga, &mut ea).map(|o| (o.keys_to_store, o.slots, o.evicted));
                    let y = b.prepare_store(&keys, &mut rb[r as usize], &mut gb, &mut eb).map(|o| (o.keys_to_store, o.slots, o.evicted));
                    prop_assert_eq!(&x, &y);
                    if let Some((k, _, _)) = x {
                        pending.extend(k);
                    }
                }
                HOp::Complete => {
                    a.complete_store(&pending, &mut ga, &mut ea);
                    b.complete_store(&pending, &mut gb, &mut eb);
                    pending.clear();
                }
                HOp::Load(r, ks) => {
                    let mut seen = BTreeSet::new();
                    let keys: Vec<(BlockHash, u32)> = ks
                        .iter()
                        .filter(|k| seen.insert(**k))
                        .map(|k| key(*k))
                        .filter(|k| a.get(k).is_some_and(|e| e.ref_cnt >= 0))
                        .enumerate()
                        .map(|(i, k)| (k, 16 * (i as u32 + 1)))
                        .collect();
                    let x = a.prepare_load(&keys, &mut ra[r as usize], &mut ga, &mut ea);
                    let y = b.prepare_load(&keys, &mut rb[r as usize], &mut gb, &mut eb);
                    prop_assert_eq!(x, y);
                    pinned.extend(keys.iter().map(|(k, _)| *k));
                }
                HOp::Unload => {
                    a.complete_load(&pinned, &mut ga, &mut ea);
                    b.complete_load(&pinned, &mut gb, &mut eb);
                    pinned.clear();
                }
                HOp::Finish(r) => {
                    a.on_request_finished(&mut ra[r as usize]);
                    b.on_request_finished(&mut rb[r as usize]);
                    ra[r as usize] = ReqAccess::default();
                    rb[r as usize] = ReqAccess::default();
                }
                HOp::Touch(ks) => {
                    let keys: Vec<BlockHash> = ks.iter().map(|k| key(*k)).collect();
                    a.touch(&keys);
                    b.touch(&keys);
                }
            }
            prop_assert_eq!(a.eviction_order(), b.eviction_order());
            prop_assert_eq!(a.reference_order(), b.reference_order());
            prop_assert_eq!(ga.violations, gb.violations);
            prop_assert_eq!(&ea.list, &eb.list);
            prop_assert!(a == b, "equal as states");
        }
    }

    /// Memoised prefix lookups (replay) answer like fresh walks while blocks are cached,
    /// evicted and re-cached.
    #[test]
    fn memoised_prefix_lookups_are_fresh(ops in proptest::collection::vec((0u8..4, 0u8..12, 1usize..8), 0..80)) {
        let mut a = GpuPool::new(10);
        let mut b = GpuPool::new(10);
        b.enable_log();
        let (mut g, mut ev) = (Ghost::default(), Events::off());
        let chain: Vec<BlockHash> = (0..12u64).map(|i| BlockHash(0xabc0 + i)).collect();
        let mut held: Vec<Vec<u32>> = Vec::new();
        for (op, x, n) in ops {
            match op {
                0 if a.num_free() as usize >= n => {
                    let from = (x as usize) % chain.len();
                    let to = (from + n).min(chain.len());
                    let ba = a.get_new_blocks((to - from) as u32, &mut g, &mut ev);
                    let bb = b.get_new_blocks((to - from) as u32, &mut g, &mut ev);
                    prop_assert_eq!(&ba, &bb);
                    let mut hashes = vec![BlockHash(0); from];
                    hashes.extend_from_slice(&chain[from..to]);
                    let mut table = vec![0; from];
                    table.extend_from_slice(&ba);
                    a.cache_full_blocks(&table, &hashes, from, to, &mut ev);
                    b.cache_full_blocks(&table, &hashes, from, to, &mut ev);
                    held.push(ba);
                }
                1 if !held.is_empty() => {
                    let t = held.remove(x as usize % held.len());
                    a.free_blocks(t.iter().rev().copied(), &mut g);
                    b.free_blocks(t.iter().rev().copied(), &mut g);
                }
                _ => {}
            }
            let q = &chain[(x as usize % 3)..];
            let max = (n as u32 + 8) * 16;
            prop_assert_eq!(a.find_longest_cache_hit(q, max, 16), b.find_longest_cache_hit(q, max, 16));
            prop_assert_eq!(a.find_longest_cache_hit(q, max, 16), b.find_longest_cache_hit(q, max, 16));
        }
    }
}
