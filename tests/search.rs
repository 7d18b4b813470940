//! The search engine (`kvmc::search`) on toy models with known state counts: pinned counts,
//! the same results on 1, 2 and 4 threads, shortest discoveries equal to a plain sequential
//! FIFO search's, bounds that make a run incomplete, and symmetry reduction.

use kvmc::search::{search, Discovery, End, Hooks, Options, Outcome, Plain, Stop, Trace};
use stateright::{Model, Property};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `n` counters, each 0..=k; `Inc(i)` adds one to counter `i`, wrapping to 0 after k. Every
/// one of the (k+1)^n states is reachable; a state's depth is the sum of its counters.
pub struct Counters {
    pub n: usize,
    pub k: u8,
    /// `sum-below` is violated where the counters add up to this.
    pub t: u32,
}

fn sum(s: &[u8]) -> u32 {
    s.iter().map(|&c| u32::from(c)).sum()
}

impl Model for Counters {
    type State = Vec<u8>;
    type Action = usize;
    fn init_states(&self) -> Vec<Vec<u8>> {
        vec![vec![0; self.n]]
    }
    fn actions(&self, _s: &Vec<u8>, out: &mut Vec<usize>) {
        out.extend(0..self.n);
    }
    fn next_state(&self, s: &Vec<u8>, i: usize) -> Option<Vec<u8>> {
        let mut s = s.clone();
        s[i] = if s[i] == self.k { 0 } else { s[i] + 1 };
        Some(s)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("sum-below", |m: &Counters, s: &Vec<u8>| sum(s) < m.t),
            Property::sometimes("all-max", |m: &Counters, s: &Vec<u8>| s.iter().all(|&c| c == m.k)),
            Property::always("in-range", |m: &Counters, s: &Vec<u8>| s.iter().all(|&c| c <= m.k)),
            Property::sometimes("first-two-apart", |_: &Counters, s: &Vec<u8>| s[0] >= s[1] + 2),
        ]
    }
}

/// The counters are interchangeable: the sorted vector represents every permutation.
pub struct SortCounters;
impl Hooks<Counters> for SortCounters {
    fn representative(&self, _m: &Counters, s: &Vec<u8>) -> Option<Vec<u8>> {
        let mut r = s.clone();
        r.sort_unstable();
        (r != *s).then_some(r)
    }
}

/// Counters without the property that is not symmetric (`first-two-apart`).
pub struct SymCounters(pub Counters);
impl Model for SymCounters {
    type State = Vec<u8>;
    type Action = usize;
    fn init_states(&self) -> Vec<Vec<u8>> {
        self.0.init_states()
    }
    fn actions(&self, s: &Vec<u8>, out: &mut Vec<usize>) {
        self.0.actions(s, out)
    }
    fn next_state(&self, s: &Vec<u8>, i: usize) -> Option<Vec<u8>> {
        self.0.next_state(s, i)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("sum-below", |m: &SymCounters, s: &Vec<u8>| sum(s) < m.0.t),
            Property::sometimes("all-max", |m: &SymCounters, s: &Vec<u8>| s.iter().all(|&c| c == m.0.k)),
            Property::always("in-range", |m: &SymCounters, s: &Vec<u8>| s.iter().all(|&c| c <= m.0.k)),
        ]
    }
}
impl Hooks<SymCounters> for SortCounters {
    fn representative(&self, m: &SymCounters, s: &Vec<u8>) -> Option<Vec<u8>> {
        Hooks::<Counters>::representative(self, &m.0, s)
    }
}

/// What a plain sequential FIFO search finds (the explorer kvmc had before `search`): counts,
/// the stop decision, and the first discovery's actions per `Always`/`Sometimes` property.
pub struct Reference<A> {
    pub unique: usize,
    pub generated: usize,
    pub max_depth: usize,
    pub stop: Option<Stop>,
    pub all_found: bool,
    pub paths: Vec<Option<Vec<A>>>,
}

pub fn reference<M>(m: &M, max_states: Option<usize>, max_depth: Option<usize>) -> Reference<M::Action>
where
    M: Model,
    M::State: Hash + Eq + Clone,
    M::Action: Clone,
{
    use stateright::Expectation::*;
    let props = m.properties();
    let mut found: Vec<Option<M::State>> = vec![None; props.len()];
    type Parents<S, A> = HashMap<S, Option<(S, A)>>;
    let mut seen: Parents<M::State, M::Action> = HashMap::new();
    let mut queue = VecDeque::new();
    let mut generated = 0;
    for s in m.init_states() {
        if !m.within_boundary(&s) {
            continue;
        }
        generated += 1;
        if !seen.contains_key(&s) {
            seen.insert(s.clone(), None);
            queue.push_back((s, 0));
        }
    }
    let (mut depth_max, mut stop, mut all_found) = (0, None, false);
    'states: while let Some((s, d)) = queue.pop_front() {
        depth_max = d;
        for (k, p) in props.iter().enumerate() {
            let c = (p.condition)(m, &s);
            let hit = match p.expectation {
                Always => !c,
                Sometimes => c,
                Eventually => false,
            };
            if hit && found[k].is_none() {
                found[k] = Some(s.clone());
            }
        }
        if !props.is_empty() && found.iter().all(Option::is_some) {
            all_found = true;
            break;
        }
        if max_depth.is_some_and(|b| d >= b) {
            stop.get_or_insert(Stop::MaxDepth);
            continue;
        }
        let mut acts = Vec::new();
        m.actions(&s, &mut acts);
        // Every successor of the source counts as generated, even if a new one past the
        // state bound stops the run (as the search counts a source's successors at once).
        let succs: Vec<_> = acts
            .into_iter()
            .filter_map(|a| m.next_state(&s, a.clone()).map(|n| (a, n)))
            .filter(|(_, n)| m.within_boundary(n))
            .collect();
        generated += succs.len();
        for (a, n) in succs {
            if !seen.contains_key(&n) {
                if max_states.is_some_and(|b| seen.len() >= b) {
                    stop = Some(Stop::MaxStates); // a new state past the bound
                    break 'states;
                }
                seen.insert(n.clone(), Some((s.clone(), a)));
                queue.push_back((n, d + 1));
            }
        }
    }
    let path = |s: &M::State| {
        let mut out = Vec::new();
        let mut cur = s.clone();
        while let Some(Some((p, a))) = seen.get(&cur) {
            out.push(a.clone());
            cur = p.clone();
        }
        out.reverse();
        out
    };
    let paths = found.iter().map(|f| f.as_ref().map(path)).collect();
    Reference { unique: seen.len(), generated, max_depth: depth_max, stop, all_found, paths }
}

/// `outcome` equals the reference: counts, end, and every discovery path.
pub fn assert_matches_reference<A: PartialEq + std::fmt::Debug>(o: &Outcome<A>, r: &Reference<A>, what: &str) {
    assert_eq!((o.unique, o.generated, o.max_depth), (r.unique, r.generated, r.max_depth), "{what}: counts");
    let end = match (r.all_found, r.stop) {
        (true, _) => End::AllDiscovered,
        (false, Some(s)) => End::Stopped(s),
        (false, None) => End::Exhausted,
    };
    assert_eq!(o.end, end, "{what}: end");
    for (p, want) in o.properties.iter().zip(&r.paths) {
        if p.expectation == stateright::Expectation::Eventually {
            continue; // the reference knows no liveness
        }
        match (&p.discovery, want) {
            (Discovery::Found(t), Some(w)) => assert_eq!(&t.actions, w, "{what}: {}", p.name),
            (Discovery::Absent, None) => assert_eq!(end, End::Exhausted, "{what}: {}", p.name),
            (Discovery::Unknown, None) => assert_ne!(end, End::Exhausted, "{what}: {}", p.name),
            (d, w) => panic!("{what}: {}: {d:?} against {w:?}", p.name),
        }
    }
}

fn opts(threads: usize) -> Options<'static> {
    Options { threads, ..Options::default() }
}

fn found<A: Clone>(o: &Outcome<A>, name: &str) -> Option<Trace<A>> {
    match &o.property(name).unwrap().discovery {
        Discovery::Found(t) => Some(t.clone()),
        _ => None,
    }
}

#[test]
fn counters_counts_are_pinned_and_match_a_sequential_search() {
    // 4 counters 0..=3: 4^4 = 256 states, depth 12; sum-below 100 holds, all-max is reached.
    let m = Counters { n: 4, k: 3, t: 100 };
    let o = search(&m, &Plain, &opts(1));
    assert_eq!((o.unique, o.max_depth, o.end), (256, 12, End::Exhausted));
    assert_eq!(o.generated, 1 + 256 * 4);
    assert_eq!(o.property("sum-below").unwrap().discovery, Discovery::Absent);
    assert_eq!(found(&o, "all-max").unwrap().actions.len(), 12);
    assert!(o.visited_bytes > 0 && o.graph_bytes == 0 && o.collision_probability < 1e-20);
    assert_matches_reference(&o, &reference(&m, None, None), "counters 4x3");
}

#[test]
fn results_are_the_same_on_1_2_and_4_threads() {
    for m in [Counters { n: 5, k: 4, t: 9 }, Counters { n: 6, k: 3, t: 100 }, Counters { n: 3, k: 40, t: 90 }] {
        let r = reference(&m, None, None);
        let one = search(&m, &Plain, &opts(1));
        assert_matches_reference(&one, &r, "1 thread");
        for t in [2, 4] {
            let o = search(&m, &Plain, &opts(t));
            assert_matches_reference(&o, &r, &format!("{t} threads"));
            assert_eq!(o.properties.len(), one.properties.len());
            for (a, b) in o.properties.iter().zip(&one.properties) {
                assert_eq!(a.discovery, b.discovery, "{t} threads: {}", a.name);
            }
        }
    }
}

#[test]
fn the_counterexample_is_the_shortest_and_replays() {
    let m = Counters { n: 5, k: 4, t: 7 };
    let o = search(&m, &Plain, &opts(2));
    let t = found(&o, "sum-below").expect("a counterexample");
    assert_eq!(t.actions.len(), 7, "no state at depth < 7 sums to 7");
    let mut s = m.init_states().remove(t.init);
    for a in &t.actions {
        s = m.next_state(&s, *a).unwrap();
    }
    assert_eq!(sum(&s), 7);
    // 4 properties: sum-below and first-two-apart found, all-max found, in-range never: the
    // run is exhaustive.
    assert_eq!(o.end, End::Exhausted);
    assert_eq!(found(&o, "first-two-apart").unwrap().actions, vec![0, 0]);
}

#[test]
fn the_search_stops_once_every_property_is_discovered() {
    let m = SymCounters(Counters { n: 4, k: 5, t: 3 });
    // in-range is never violated: no early stop.
    assert_eq!(search(&m, &Plain, &opts(1)).end, End::Exhausted);
    struct TwoProps(Counters);
    impl Model for TwoProps {
        type State = Vec<u8>;
        type Action = usize;
        fn init_states(&self) -> Vec<Vec<u8>> {
            self.0.init_states()
        }
        fn actions(&self, s: &Vec<u8>, out: &mut Vec<usize>) {
            self.0.actions(s, out)
        }
        fn next_state(&self, s: &Vec<u8>, i: usize) -> Option<Vec<u8>> {
            self.0.next_state(s, i)
        }
        fn properties(&self) -> Vec<Property<Self>> {
            vec![Property::always("sum-below", |m: &TwoProps, s: &Vec<u8>| sum(s) < m.0.t)]
        }
    }
    let m = TwoProps(Counters { n: 4, k: 5, t: 3 });
    let r = reference(&m, None, None);
    assert!(r.all_found && r.unique < 1296);
    for t in [1, 2, 4] {
        let o = search(&m, &Plain, &opts(t));
        assert_eq!(o.end, End::AllDiscovered);
        assert_matches_reference(&o, &r, &format!("early stop, {t} threads"));
    }
}

#[test]
fn bounded_runs_are_incomplete_and_stop_where_a_sequential_search_stops() {
    let m = Counters { n: 4, k: 6, t: 100 };
    for (states, depth) in [(Some(100), None), (Some(1), None), (None, Some(5)), (Some(300), Some(9)), (None, Some(0))]
    {
        let r = reference(&m, states, depth);
        for t in [1, 2, 4] {
            let o =
                search(&m, &Plain, &Options { threads: t, max_states: states, max_depth: depth, ..Options::default() });
            assert!(!o.exhaustive(), "{states:?} {depth:?}");
            assert_eq!(o.property("sum-below").unwrap().discovery, Discovery::Unknown);
            assert_matches_reference(&o, &r, &format!("bounds {states:?} {depth:?}, {t} threads"));
        }
    }
    // A bound the state space fits in cuts nothing. States at the depth bound are not
    // expanded, so a bound at the deepest level (24) counts as a cut even though their
    // successors happen to be known: the search does not look.
    let o = search(&m, &Plain, &Options { max_states: Some(2402), max_depth: Some(25), ..Options::default() });
    assert_eq!((o.end, o.unique), (End::Exhausted, 2401));
    let o = search(&m, &Plain, &Options { max_depth: Some(24), ..Options::default() });
    assert_eq!((o.end, o.unique), (End::Stopped(Stop::MaxDepth), 2401));
}

#[test]
fn the_stop_hook_ends_the_run_with_its_reason() {
    let m = Counters { n: 4, k: 6, t: 100 };
    for t in [1, 2] {
        let polls = AtomicUsize::new(0);
        let hook = |_: &kvmc::search::Progress| (polls.fetch_add(1, Ordering::Relaxed) >= 500).then_some(Stop::Timeout);
        let o = search(&m, &Plain, &Options { threads: t, stop: Some(&hook), ..Options::default() });
        assert_eq!(o.end, End::Stopped(Stop::Timeout));
        assert!(o.unique < 2401 && o.unique > 500, "{}", o.unique);
        assert_eq!(o.property("in-range").unwrap().discovery, Discovery::Unknown);
        // What was found before the stop is still a shortest discovery.
        assert_eq!(found(&o, "first-two-apart").unwrap().actions, vec![0, 0]);
    }
    let never = |_: &kvmc::search::Progress| None;
    assert_eq!(search(&m, &Plain, &Options { stop: Some(&never), ..Options::default() }).end, End::Exhausted);
}

fn binomial(n: u64, k: u64) -> u64 {
    (1..=k).fold(1, |acc, i| acc * (n + 1 - i) / i)
}

#[test]
fn symmetry_cuts_states_and_keeps_verdicts_and_depths() {
    for (n, k, t) in [(4, 3, 7), (5, 2, 100), (3, 6, 12)] {
        let m = SymCounters(Counters { n, k, t });
        for threads in [1, 2] {
            let plain = search(&m, &Plain, &opts(threads));
            let sym = search(&m, &SortCounters, &opts(threads));
            assert_eq!(plain.unique as u64, u64::from(k + 1).pow(n as u32));
            assert_eq!(sym.unique as u64, binomial(n as u64 + u64::from(k), n as u64), "multisets");
            assert_eq!((plain.max_depth, plain.end), (sym.max_depth, sym.end));
            for (a, b) in plain.properties.iter().zip(&sym.properties) {
                match (&a.discovery, &b.discovery) {
                    (Discovery::Found(x), Discovery::Found(y)) => {
                        assert_eq!(x.actions.len(), y.actions.len(), "{}: depth", a.name);
                        // The symmetric path is a real path of the model, to a state where
                        // the property is discovered too.
                        let mut s = m.init_states().remove(y.init);
                        for act in &y.actions {
                            s = m.next_state(&s, *act).unwrap();
                        }
                        let prop = m.properties().into_iter().find(|p| p.name == a.name).unwrap();
                        let c = (prop.condition)(&m, &s);
                        assert_eq!(c, prop.expectation == stateright::Expectation::Sometimes, "{}", a.name);
                    }
                    (x, y) => assert_eq!(x, y, "{}", a.name),
                }
            }
        }
    }
}

#[test]
fn duplicate_initial_states_and_the_boundary() {
    struct Bounded;
    impl Model for Bounded {
        type State = u32;
        type Action = u32;
        fn init_states(&self) -> Vec<u32> {
            vec![5, 0, 5, 99]
        }
        fn actions(&self, _: &u32, out: &mut Vec<u32>) {
            out.extend([1, 2]);
        }
        fn next_state(&self, s: &u32, a: u32) -> Option<u32> {
            Some(s + a)
        }
        fn within_boundary(&self, s: &u32) -> bool {
            *s <= 20
        }
        fn properties(&self) -> Vec<Property<Self>> {
            vec![Property::sometimes("twenty", |_: &Bounded, s: &u32| *s == 20)]
        }
    }
    let r = reference(&Bounded, None, None);
    assert!(r.all_found);
    for t in [1, 2] {
        let o = search(&Bounded, &Plain, &opts(t));
        assert_matches_reference(&o, &r, "boundary");
        let tr = found(&o, "twenty").unwrap();
        // From 5 (init 0) by steps of 1 or 2: 20 is 8 steps away; from 0 it is 10.
        assert_eq!((tr.init, tr.actions.len()), (0, 8));
    }
}
