//! The host tier's ARC policy (`eviction_policy = "arc"`, vLLM `cpu/policies/arc.py`):
//! scripted sequences with hand-derived lists, targets and victims.

use crate::common::{kvmc, root, stderr, tempdir};
use kvmc::system::events::Events;
use kvmc::system::ghost::Ghost;
use kvmc::system::host_arc::ArcLists;
use kvmc::system::host_tier::{HostTier, KeySet, ReqAccess};
use kvmc::system::rules::HostLru;
use kvmc::system::types::BlockHash;

fn h(x: u64) -> BlockHash {
    BlockHash(x)
}

fn set(keys: &[BlockHash]) -> KeySet {
    keys.iter().copied().collect()
}

/// (T1, T2, B1, B2, target).
#[allow(clippy::type_complexity)]
fn lists(a: &ArcLists) -> (Vec<BlockHash>, Vec<BlockHash>, Vec<BlockHash>, Vec<BlockHash>, f64) {
    (a.t1.clone(), a.t2.clone(), a.b1.clone(), a.b2.clone(), a.target.get())
}

/// The policy alone (0.32+ rules): promotion, ghost hits moving the target both ways, the
/// target choosing T2 over T1, and the ghost-list trim.
#[test]
fn arc_victims_targets_and_ghosts() {
    let [a, b, c, d, e] = [h(1), h(2), h(3), h(4), h(5)];
    let all = |_: &BlockHash| true;
    let mut p = ArcLists::new(2, true, true);
    p.insert(a);
    p.insert(b);
    // a reused by a finishing request: T1 -> T2.
    p.on_request_finished(&[a], &set(&[]), &set(&[a]));
    assert_eq!(lists(&p), (vec![b], vec![a], vec![], vec![], 0.0));
    // target 0: |T1| = 1 >= 0, T1's LRU goes (to B1).
    assert_eq!(p.evict(1, all), Some(vec![b]));
    p.insert(c);
    // b's store miss: a B1 hit, target += max(1, |B2|/|B1| = 0) = 1.
    p.on_store_miss(&[b]);
    assert_eq!(p.target.get(), 1.0);
    assert_eq!(p.evict(1, all), Some(vec![c]), "|T1| = 1 >= int(1): T1");
    p.insert(b);
    assert_eq!(lists(&p), (vec![b], vec![a], vec![c], vec![], 1.0));
    p.on_store_miss(&[c]);
    assert_eq!(p.target.get(), 2.0);
    // |T1| = 1 < int(2): T2's LRU goes, to B2.
    assert_eq!(p.evict(1, all), Some(vec![a]));
    p.insert(c);
    assert_eq!(lists(&p), (vec![b, c], vec![], vec![], vec![a], 2.0));
    // a B2 hit: target -= max(1, |B1|/|B2| = 0) = 1.
    p.on_store_miss(&[a]);
    assert_eq!(p.target.get(), 1.0);
    // Two victims: |T1| = 2 >= 1 takes b, then the virtual |T1| = 1 >= 1 takes c.
    assert_eq!(p.evict(2, all), Some(vec![b, c]));
    p.insert(d);
    p.insert(e);
    assert_eq!(p.evict(2, all), Some(vec![d, e]));
    // B1 was [b, c, d, e]: trimmed to the capacity from its LRU end.
    assert_eq!(lists(&p), (vec![], vec![], vec![d, e], vec![a], 1.0));
    // Without the trim (mut-arc-no-ghost-trim) B1 keeps every victim.
    let mut m = ArcLists::new(1, true, false);
    for k in [a, b, c] {
        m.insert(k);
        m.evict(1, all).unwrap();
    }
    assert_eq!(m.b1, vec![a, b, c]);
}

/// A fractional step: |B2|/|B1| = 3/2 moves the target by 1.5; eviction compares with
/// int(target).
#[test]
fn arc_target_is_a_float() {
    let all = |_: &BlockHash| true;
    let mut p = ArcLists::new(4, true, true);
    let k: Vec<BlockHash> = (0..8).map(h).collect();
    // B2 = [k0, k1, k2] (T2 victims), B1 = [k3, k4] (T1 victims).
    for &x in &k[..3] {
        p.insert(x);
    }
    // Reused, tail first: T2 = [k2, k1, k0].
    p.on_request_finished(&k[..3], &set(&[]), &set(&k[..3]));
    for &x in &k[3..5] {
        p.insert(x);
    }
    // target 0: T1 first (k3, k4), then T2 (k2).
    assert_eq!(p.evict(3, all), Some(vec![k[3], k[4], k[2]]));
    assert_eq!(p.evict(2, all), Some(vec![k[1], k[0]]));
    assert_eq!((p.b1.len(), p.b2.len()), (2, 3));
    p.on_store_miss(&[k[3]]);
    assert_eq!(p.target.get(), 1.5);
    p.insert(k[5]);
    p.insert(k[6]);
    // |T1| = 2 >= int(1.5) = 1: T1.
    assert_eq!(p.evict(1, all), Some(vec![k[5]]));
    assert_eq!(p.target.get(), 1.5);
}

/// 0.24's evict has no final T1 fallback: with int(target) above |T1| and no T2 candidate the
/// store is refused (None, nothing changed); 0.32+ take T1's candidate.
#[test]
fn arc_t1_fallback_is_0_32() {
    let [a, b, c] = [h(1), h(2), h(3)];
    let all = |_: &BlockHash| true;
    for fallback in [true, false] {
        let mut p = ArcLists::new(2, fallback, true);
        p.insert(a);
        p.insert(b);
        assert_eq!(p.evict(2, all), Some(vec![a, b]));
        p.insert(c);
        p.on_store_miss(&[b, a]); // tail first: a, then b: two B1 hits
        assert_eq!(lists(&p), (vec![c], vec![], vec![a, b], vec![], 2.0));
        let before = p.clone();
        if fallback {
            assert_eq!(p.evict(1, all), Some(vec![c]));
        } else {
            assert_eq!(p.evict(1, all), None);
            assert_eq!(p, before, "a refused eviction changes nothing");
        }
    }
}

/// 0.24's connector touch: ready T1 keys go to T2, write-pending ones to T1's MRU end, T2 keys
/// to T2's MRU end, ghost keys adapt the target (every touch).
#[test]
fn arc_touch_0_24() {
    let [a, b, c, d] = [h(1), h(2), h(3), h(4)];
    let mut p = ArcLists::new(3, false, true);
    p.insert(a);
    p.insert(b);
    p.insert(c);
    assert_eq!(p.evict(1, |_| true), Some(vec![a]));
    p.insert(d);
    // d write-pending, b and c ready; tail first.
    p.touch(&[a, b, c, d], |k| *k != d);
    assert_eq!(lists(&p), (vec![d], vec![c, b], vec![a], vec![], 1.0));
    p.touch(&[a, c], |_| true);
    assert_eq!(lists(&p), (vec![d], vec![b, c], vec![a], vec![], 2.0));
}

/// The manager's calls (0.33, `CPUOffloadingManager`): a store miss is reported once per
/// request, ready keys a request offers or loads count as reuse (not the ones it inserted), and
/// finish walks its keys tail first.
#[test]
fn arc_through_the_cpu_manager() {
    let [a, b, c] = [h(1), h(2), h(3)];
    let mut g = Ghost::default();
    let mut ev = Events::off();
    let mut t = HostTier::with_policy(2, HostLru::RequestRank, false);
    t.use_arc(true, true);
    let arc = |t: &HostTier| lists(t.arc.as_deref().unwrap());
    let (mut r1, mut r2, mut r3) = (ReqAccess::default(), ReqAccess::default(), ReqAccess::default());
    t.prepare_store(&[(a, 1), (b, 2)], &mut r1, &mut g, &mut ev).unwrap();
    t.complete_store(&[a, b], &mut g, &mut ev);
    let out = t.prepare_store(&[(c, 1)], &mut r2, &mut g, &mut ev).unwrap();
    assert_eq!(out.evicted, vec![a]);
    t.complete_store(&[c], &mut g, &mut ev);
    assert_eq!(arc(&t), (vec![b, c], vec![], vec![a], vec![], 0.0));
    // r3 offers a (a B1 miss: target 1) and b (ready: reused); b is protected, c goes.
    let out = t.prepare_store(&[(a, 1), (b, 2)], &mut r3, &mut g, &mut ev).unwrap();
    assert_eq!(out.evicted, vec![c]);
    assert_eq!(arc(&t), (vec![b, a], vec![], vec![c], vec![], 1.0));
    // Offered again: a is write-pending (skipped), b reused again; no second adaptation.
    t.prepare_store(&[(a, 1), (b, 2)], &mut r3, &mut g, &mut ev).unwrap();
    assert_eq!(t.arc.as_deref().unwrap().target.get(), 1.0);
    assert_eq!((r3.inserted.clone(), r3.reused.clone()), (set(&[a]), set(&[b])));
    // Finish, tail first: b (reused) T1 -> T2; a (insertion only) to T1's MRU end.
    t.on_request_finished(&mut r3);
    assert_eq!(arc(&t), (vec![a], vec![b], vec![c], vec![], 1.0));
    // r1 finishes: a and b were inserted by r1 and not reused by it: no promotion.
    t.on_request_finished(&mut r1);
    assert_eq!(arc(&t), (vec![a], vec![b], vec![c], vec![], 1.0));
    assert_eq!(g.violations, 0);
}

/// Finding 22, through the CPU manager and 0.24's connector touches (model host-arc-024): a
/// two-chunk store into a tier holding two evictable chunks is refused because int(target) > |T1|
/// after the first victim and T2 is empty; with the 0.32 fallback it evicts both.
#[test]
fn arc_0_24_refuses_a_store_that_fits() {
    let [a, ab, p, pq] = [h(1), h(2), h(3), h(4)];
    for fallback in [false, true] {
        let mut g = Ghost::default();
        let mut ev = Events::off();
        let mut t = HostTier::with_policy(2, HostLru::ReleaseOrder, false);
        t.use_arc(fallback, true);
        let (mut r, mut pr, mut q) = (ReqAccess::default(), ReqAccess::default(), ReqAccess::default());
        t.prepare_store(&[(a, 1), (ab, 2)], &mut r, &mut g, &mut ev).unwrap();
        t.touch(&[a, ab]); // after the store: both write-pending, T1 = [ab, a]
        t.complete_store(&[a, ab], &mut g, &mut ev);
        let out = t.prepare_store(&[(p, 1), (pq, 2)], &mut pr, &mut g, &mut ev).unwrap();
        assert_eq!(out.evicted, vec![ab, a]);
        t.touch(&[p, pq]);
        t.complete_store(&[p, pq], &mut g, &mut ev);
        t.touch(&[a, ab]); // Q's lookup: two B1 hits
        assert_eq!(lists(t.arc.as_deref().unwrap()), (vec![pq, p], vec![], vec![ab, a], vec![], 2.0));
        let out = t.prepare_store(&[(a, 1), (ab, 2)], &mut q, &mut g, &mut ev);
        if fallback {
            assert_eq!(out.unwrap().evicted, vec![pq, p]);
        } else {
            assert!(out.is_none(), "0.24: refused with two evictable chunks");
            assert_eq!(t.len(), 2);
        }
        assert_eq!(g.violations, 0);
    }
}

/// The same at the model level: the fallback adds reachable states to host-arc-024.
#[test]
fn arc_0_24_fallback_changes_the_model() {
    let base = crate::common::check("host-arc-024", None, None);
    let fix = crate::common::check("host-arc-024", None, Some("fix-arc-t1-fallback"));
    assert_eq!((base.unique_states, fix.unique_states), (144, 152));
}

#[test]
fn eviction_policy_must_be_lru_or_arc() {
    let d = tempdir("arcpolicy");
    let text = std::fs::read_to_string(root().join("models/host-arc.toml")).unwrap();
    let p = d.join("m.toml");
    std::fs::write(&p, text.replace("eviction_policy = \"arc\"", "eviction_policy = \"lfu\"")).unwrap();
    let o = kvmc(&["check", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let line = text.lines().position(|l| l.starts_with("eviction_policy")).unwrap() + 1;
    let want = format!("m.toml:{line}: eviction_policy must be \"lru\" or \"arc\", got \"lfu\"");
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
}

#[test]
fn finding_22_on_real_vllm_0_24_and_the_fallback_on_0_32_up() {
    // tests/conformance/scenarios/arc-024-refuse.toml recorded on every release: on 0.24.0
    // Q's two-chunk store is refused (target 2.0, T1 = [P.1, P.0] both evictable, T2 empty)
    // and the lost store shows as final-store-kept; 0.32.0 to 0.34.0 evict P's chunks (the
    // final T1 fallback). Each recording conforms to its own release, with the ARC lists of
    // every step, and the T1 order after the first store already tells 0.24 (touch: tail
    // first) from 0.32+ (insert order).
    let fx = |release: &str| {
        let dir = if release == "vllm-0.33" { String::new() } else { format!("{release}/") };
        root().join(format!("tests/conformance/fixtures/{dir}arc-024-refuse.jsonl"))
    };
    let log024 = std::fs::read_to_string(fx("vllm-0.24")).unwrap();
    assert_eq!(log024.matches("\"ev\":\"store_refused\"").count(), 2);
    assert!(log024.contains("\"t1\":[\"P.1\",\"P.0\"],\"t2\":[],\"b1\":[\"R.1\",\"R.0\"],\"b2\":[],\"target\":2.0"));
    let o = kvmc(&["conform", "--strict", "--profile", "vllm-0.24", fx("vllm-0.24").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10));
    assert!(crate::common::stdout(&o).contains("final-store-kept is violated"), "{}", crate::common::stdout(&o));
    for release in ["vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let text = std::fs::read_to_string(fx(release)).unwrap();
        assert!(!text.contains("store_refused"), "{release} evicts instead");
        assert!(
            text.contains("\"ev\":\"evict\",\"step\":7,\"medium\":\"CPU\",\"keys\":[\"P.1\",\"P.0\"]"),
            "{release}"
        );
        let o = kvmc(&["conform", "--strict", "--profile", release, fx(release).to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{release}: {}", crate::common::stdout(&o));
    }
    let r = kvmc::conform::check(&fx("vllm-0.24"), "vllm-0.32", None, 8).unwrap();
    assert!(r.divergence.expect("0.24's log under 0.32's rules").what.starts_with("host"));
}
