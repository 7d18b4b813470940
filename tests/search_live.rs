//! Liveness in the search engine: lassos under no fairness, none when the starving action is
//! weakly fair, terminal states, symmetry's cycles closed on concrete states, bounded runs
//! incomplete; and a proptest over random graphs against a naive reference (reachability
//! closure instead of Tarjan) and the sequential FIFO search.

use crate::search::{assert_matches_reference, reference};
use kvmc::search::{search, Discovery, End, Hooks, Options, Outcome, Plain, Trace};
use proptest::prelude::*;
use stateright::{Model, Property};

/// Process A spins forever (`Spin`, c counts mod 3); process B finishes once (`Finish`), if
/// `only_at_zero` only when c is 0; with `crash`, B may crash instead (a dead end).
struct Starve {
    only_at_zero: bool,
    crash: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Act {
    Spin,
    Finish,
    Crash,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct St {
    c: u8,
    done: bool,
    dead: bool,
}

impl Model for Starve {
    type State = St;
    type Action = Act;
    fn init_states(&self) -> Vec<St> {
        vec![St { c: 0, done: false, dead: false }]
    }
    fn actions(&self, s: &St, out: &mut Vec<Act>) {
        if s.dead {
            return;
        }
        out.push(Act::Spin);
        if !s.done && (!self.only_at_zero || s.c == 0) {
            out.push(Act::Finish);
        }
        if self.crash && !s.done {
            out.push(Act::Crash);
        }
    }
    fn next_state(&self, s: &St, a: Act) -> Option<St> {
        let mut s = s.clone();
        match a {
            Act::Spin => s.c = (s.c + 1) % 3,
            Act::Finish => s.done = true,
            Act::Crash => s.dead = true,
        }
        Some(s)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::eventually("finishes", |_: &Starve, s: &St| s.done),
            Property::always("no-crash", |_: &Starve, s: &St| !s.dead),
        ]
    }
}

/// Weak fairness for the classes in `mask`: Spin is class 0, Finish 1, Crash 2.
struct Fair(u8);
impl Hooks<Starve> for Fair {
    fn fairness_class(&self, _: &Starve, a: &Act) -> Option<u8> {
        let c = match a {
            Act::Spin => 0,
            Act::Finish => 1,
            Act::Crash => 2,
        };
        (self.0 >> c & 1 == 1).then_some(c)
    }
}

fn live<A: Clone>(o: &Outcome<A>, name: &str) -> Discovery<A> {
    o.property(name).unwrap().discovery.clone()
}

fn run<M, H>(m: &M, h: &H, threads: usize) -> Outcome<M::Action>
where
    M: Model + Sync,
    M::State: std::hash::Hash + Eq + Clone + Send + Sync,
    M::Action: Send + Sync,
    H: Hooks<M>,
{
    search(m, h, &Options { threads, ..Options::default() })
}

/// Replay a lasso: every state fails `cond`, the cycle (if any) returns to its start, and
/// the states of the path in order.
fn replay<M: Model>(m: &M, t: &Trace<M::Action>, cond: impl Fn(&M::State) -> bool) -> (Vec<M::State>, Vec<M::State>)
where
    M::State: Clone + PartialEq + std::fmt::Debug,
    M::Action: Clone + PartialEq + std::fmt::Debug,
{
    let mut s = m.init_states().remove(t.init);
    let mut prefix = vec![s.clone()];
    let step = |s: &M::State, a: &M::Action| {
        let mut acts = Vec::new();
        m.actions(s, &mut acts);
        assert!(acts.contains(a), "{a:?} is not enabled at {s:?}");
        m.next_state(s, a.clone()).expect("the step changes the state")
    };
    for a in &t.actions {
        s = step(&s, a);
        prefix.push(s.clone());
    }
    let mut cyc = vec![s.clone()];
    if let Some(c) = &t.cycle {
        assert!(!c.is_empty(), "a cycle has at least one step");
        for a in c {
            s = step(&s, a);
            cyc.push(s.clone());
        }
        assert_eq!(cyc.first(), cyc.last(), "the cycle returns to its start");
    } else {
        let mut acts = Vec::new();
        m.actions(&s, &mut acts);
        assert!(acts.into_iter().all(|a| m.next_state(&s, a).is_none()), "a terminal state: {s:?}");
    }
    for x in prefix.iter().chain(&cyc) {
        assert!(!cond(x), "the condition holds at {x:?} on the counterexample");
    }
    (prefix, cyc)
}

#[test]
fn a_starving_process_is_a_lasso_without_fairness_and_none_with_it() {
    let m = Starve { only_at_zero: false, crash: false };
    for threads in [1, 2, 4] {
        let o = run(&m, &Plain, threads);
        assert_eq!((o.unique, o.end), (6, End::Exhausted));
        assert!(o.graph_bytes > 0);
        let Discovery::Found(t) = live(&o, "finishes") else { panic!("a lasso") };
        assert_eq!((t.actions.clone(), t.cycle.clone()), (vec![], Some(vec![Act::Spin; 3])));
        replay(&m, &t, |s| s.done);
        // Finish weakly fair: B is enabled in every state of A's cycle and never taken there.
        assert_eq!(live(&run(&m, &Fair(0b010), threads), "finishes"), Discovery::Absent);
        assert_eq!(live(&run(&m, &Fair(0b011), threads), "finishes"), Discovery::Absent);
        // Only Spin fair: A's cycle takes Spin, so it is fair and B starves.
        let Discovery::Found(t2) = live(&run(&m, &Fair(0b001), threads), "finishes") else { panic!() };
        assert_eq!(t2, t);
        assert_eq!(live(&o, "no-crash"), Discovery::Absent);
    }
}

#[test]
fn weak_fairness_allows_starving_an_action_that_is_not_always_enabled() {
    // Finish only when c == 0: it is disabled at c = 1 and 2 on A's cycle, so weak fairness
    // (unlike strong fairness) does not force it.
    let m = Starve { only_at_zero: true, crash: false };
    let Discovery::Found(t) = live(&run(&m, &Fair(0b011), 2), "finishes") else { panic!("a lasso") };
    let (_, cyc) = replay(&m, &t, |s| s.done);
    assert!(cyc.iter().any(|s| s.c != 0), "the cycle passes a state where Finish is disabled");
}

#[test]
fn a_terminal_state_is_a_counterexample_whatever_the_fairness() {
    let m = Starve { only_at_zero: false, crash: true };
    for h in [Fair(0), Fair(0b111), Fair(0b010)] {
        let o = run(&m, &h, 2);
        let Discovery::Found(t) = live(&o, "finishes") else { panic!("a counterexample") };
        if h.0 != 0 {
            assert_eq!((t.actions.clone(), t.cycle.clone()), (vec![Act::Crash], None), "the dead end is nearest");
        }
        replay(&m, &t, |s| s.done);
    }
    // Without fairness the spin cycle at the initial state is as near as the dead end: the
    // initial state's cycle wins (it is the entry reached first).
    let Discovery::Found(t) = live(&run(&m, &Fair(0), 1), "finishes") else { panic!() };
    assert_eq!(t.cycle, Some(vec![Act::Spin; 3]));
}

#[test]
fn bounded_runs_leave_liveness_unknown() {
    let m = Starve { only_at_zero: false, crash: false };
    for o in [
        search(&m, &Plain, &Options { max_states: Some(3), ..Options::default() }),
        search(&m, &Plain, &Options { max_depth: Some(2), ..Options::default() }),
    ] {
        assert!(!o.exhaustive());
        assert_eq!(live(&o, "finishes"), Discovery::Unknown);
    }
}

/// A token passed around a ring of `n` identical processes, until one of them halts.
struct Ring(u8);
impl Model for Ring {
    type State = (u8, bool);
    type Action = char;
    fn init_states(&self) -> Vec<(u8, bool)> {
        vec![(0, false)]
    }
    fn actions(&self, s: &(u8, bool), out: &mut Vec<char>) {
        if !s.1 {
            out.extend(['p', 'h']);
        }
    }
    fn next_state(&self, s: &(u8, bool), a: char) -> Option<(u8, bool)> {
        Some(if a == 'p' { ((s.0 + 1) % self.0, false) } else { (s.0, true) })
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::eventually("halts", |_: &Ring, s: &(u8, bool)| s.1)]
    }
}

/// Rotation symmetry: the token's position does not matter.
struct Rotate;
impl Hooks<Ring> for Rotate {
    fn representative(&self, _: &Ring, s: &(u8, bool)) -> Option<(u8, bool)> {
        (s.0 != 0).then_some((0, s.1))
    }
}

#[test]
fn under_symmetry_a_lasso_turns_until_its_concrete_state_repeats() {
    for n in [1, 3, 5] {
        let m = Ring(n);
        let plain = run(&m, &Plain, 1);
        let sym = run(&m, &Rotate, 2);
        assert_eq!((plain.unique, sym.unique), (2 * n as usize, 2));
        for o in [&plain, &sym] {
            let Discovery::Found(t) = live(o, "halts") else { panic!("a lasso") };
            // The quotient's cycle is one pass (a self-loop); the real cycle is n passes.
            assert_eq!((t.actions.len(), t.cycle.clone()), (0, Some(vec!['p'; n as usize])));
            replay(&m, &t, |s| s.1);
        }
    }
}

// ---- random graphs against a naive reference ----

#[derive(Clone, Debug)]
struct Graph {
    edges: Vec<Vec<(u8, Option<u8>)>>,
    bad: Vec<bool>,
    goal: Vec<bool>,
}

impl Model for Graph {
    type State = u8;
    type Action = (u8, u8);
    fn init_states(&self) -> Vec<u8> {
        vec![0]
    }
    fn actions(&self, s: &u8, out: &mut Vec<(u8, u8)>) {
        out.extend((0..self.edges[*s as usize].len() as u8).map(|i| (*s, i)));
    }
    fn next_state(&self, s: &u8, a: (u8, u8)) -> Option<u8> {
        Some(self.edges[*s as usize][a.1 as usize].0)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("ok", |m: &Graph, s: &u8| !m.bad[*s as usize]),
            Property::eventually("goal", |m: &Graph, s: &u8| m.goal[*s as usize]),
        ]
    }
}

struct GraphFair;
impl Hooks<Graph> for GraphFair {
    fn fairness_class(&self, m: &Graph, a: &(u8, u8)) -> Option<u8> {
        m.edges[a.0 as usize][a.1 as usize].1
    }
}

fn classes_out(g: &Graph, v: usize) -> u64 {
    g.edges[v].iter().filter_map(|e| e.1).fold(0, |m, c| m | 1 << c)
}

/// Is `goal` violated? By the definition, over a reachability closure: a terminal state, or a
/// state on a cycle whose component (within the states where goal is false, reachable from
/// the initial state through them) is fair.
fn naive_violated(g: &Graph) -> bool {
    let n = g.edges.len();
    let mut reach_all = vec![false; n];
    let mut stack = vec![0usize];
    reach_all[0] = true;
    while let Some(v) = stack.pop() {
        for &(w, _) in &g.edges[v] {
            if !reach_all[w as usize] {
                reach_all[w as usize] = true;
                stack.push(w as usize);
            }
        }
    }
    let all = (0..n).filter(|&v| reach_all[v]).fold(0u64, |m, v| m | classes_out(g, v));
    let mut in_r = vec![false; n];
    if !g.goal[0] {
        in_r[0] = true;
        let mut stack = vec![0usize];
        while let Some(v) = stack.pop() {
            for &(w, _) in &g.edges[v] {
                if !g.goal[w as usize] && !in_r[w as usize] {
                    in_r[w as usize] = true;
                    stack.push(w as usize);
                }
            }
        }
    }
    // r[v][u]: a path of one edge or more from v to u inside R.
    let mut r = vec![vec![false; n]; n];
    for v in (0..n).filter(|&v| in_r[v]) {
        for &(w, _) in &g.edges[v] {
            if in_r[w as usize] {
                r[v][w as usize] = true;
            }
        }
    }
    for k in 0..n {
        for i in 0..n {
            for j in 0..n {
                if r[i][k] && r[k][j] {
                    r[i][j] = true;
                }
            }
        }
    }
    (0..n).filter(|&v| in_r[v]).any(|v| {
        if g.edges[v].is_empty() {
            return true;
        }
        if !r[v][v] {
            return false;
        }
        let scc: Vec<usize> = (0..n).filter(|&u| u == v || (r[v][u] && r[u][v])).collect();
        let mut covered = 0u64;
        for &u in &scc {
            covered |= all & !classes_out(g, u);
            for &(w, c) in &g.edges[u] {
                if let (Some(c), true) = (c, scc.contains(&(w as usize))) {
                    covered |= 1 << c;
                }
            }
        }
        covered & all == all
    })
}

fn graphs() -> impl Strategy<Value = Graph> {
    (1usize..10).prop_flat_map(|n| {
        let edge = (0..n as u8, prop_oneof![Just(None), (0u8..3).prop_map(Some)]);
        (
            prop::collection::vec(prop::collection::vec(edge, 0..4), n),
            prop::collection::vec(prop::bool::weighted(0.15), n),
            prop::collection::vec(prop::bool::weighted(0.3), n),
        )
            .prop_map(|(edges, bad, goal)| Graph { edges, bad, goal })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn random_graphs_match_the_naive_reference(g in graphs()) {
        let r = reference(&g, None, None);
        let one = run(&g, &GraphFair, 1);
        assert_matches_reference(&one, &r, "graph");
        let two = run(&g, &GraphFair, 2);
        assert_eq!(format!("{:?}", one.properties), format!("{:?}", two.properties));
        let d = live(&one, "goal");
        prop_assert_eq!(matches!(d, Discovery::Found(_)), naive_violated(&g), "{:?}", d);
        if let Discovery::Found(t) = d {
            let (_, cyc) = replay(&g, &t, |s| g.goal[*s as usize]);
            if let Some(c) = &t.cycle {
                // The cycle is fair: each class is taken on it or disabled at one of its states.
                let all = (0..g.edges.len()).filter(|&v| r_reach(&g, v)).fold(0u64, |m, v| m | classes_out(&g, v));
                let mut covered = 0u64;
                for s in &cyc {
                    covered |= all & !classes_out(&g, *s as usize);
                }
                for a in c {
                    if let Some(k) = g.edges[a.0 as usize][a.1 as usize].1 {
                        covered |= 1 << k;
                    }
                }
                prop_assert_eq!(covered & all, all);
            }
        }
        // Bounded: liveness never holds.
        let b = search(&g, &GraphFair, &Options { max_depth: Some(1), ..Options::default() });
        if b.end != End::Exhausted {
            prop_assert_eq!(live(&b, "goal"), Discovery::Unknown);
        }
    }
}

/// Reachable from the initial state.
fn r_reach(g: &Graph, v: usize) -> bool {
    let mut seen = vec![false; g.edges.len()];
    let mut stack = vec![0usize];
    seen[0] = true;
    while let Some(x) = stack.pop() {
        for &(w, _) in &g.edges[x] {
            if !seen[w as usize] {
                seen[w as usize] = true;
                stack.push(w as usize);
            }
        }
    }
    seen[v]
}
