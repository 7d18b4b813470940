//! Liveness: the recorded state graph and the search, per `Eventually` property, for a
//! reachable behaviour that never satisfies its condition: a terminal state, or a fair
//! nontrivial strongly connected component (iterative Tarjan) of the states where the
//! condition is false, reachable from an initial state through such states.

use super::visited::NodeId;
use super::Hooks;
use stateright::{Expectation, Model, Property};
use std::collections::{HashMap, VecDeque};

/// The class of an action that is not weakly fair.
pub const NO_CLASS: u8 = u8::MAX;

const UNSEEN: u32 = u32::MAX;

pub fn class_of<M: Model, H: Hooks<M>>(hooks: &H, model: &M, a: &M::Action) -> u8 {
    match hooks.fairness_class(model, a) {
        Some(c) => {
            assert!(c < 64, "a fairness class is 0 to 63 (got {c})");
            c
        }
        None => NO_CLASS,
    }
}

/// The state graph in node order: node `i`'s edges are `targets[offsets[i]..offsets[i + 1]]`.
pub struct Graph {
    offsets: Vec<u64>,
    targets: Vec<NodeId>,
    classes: Vec<u8>,
    /// Property index to `holds` index, for `Eventually` properties.
    slots: Vec<Option<usize>>,
    /// Per `Eventually` property: one bit per node, set where its condition is true.
    holds: Vec<Vec<u64>>,
    nodes: usize,
    /// Every class some edge has.
    all_classes: u64,
}

impl Graph {
    pub fn new<M: Model>(props: &[Property<M>]) -> Self {
        let mut n = 0;
        let slots = props
            .iter()
            .map(|p| {
                (p.expectation == Expectation::Eventually).then(|| {
                    n += 1;
                    n - 1
                })
            })
            .collect();
        Graph {
            offsets: vec![0],
            targets: Vec::new(),
            classes: Vec::new(),
            slots,
            holds: vec![Vec::new(); n],
            nodes: 0,
            all_classes: 0,
        }
    }

    pub fn index_of(&self, prop: usize) -> usize {
        self.slots[prop].expect("an Eventually property")
    }

    /// The next node's property bits (the search's hit words, where an `Eventually` bit says
    /// the condition holds).
    pub fn push_bits(&mut self, hits: &[u64]) {
        let i = self.nodes;
        for (k, slot) in self.slots.iter().enumerate() {
            if let Some(e) = *slot {
                let h = &mut self.holds[e];
                if i.is_multiple_of(64) {
                    h.push(0);
                }
                h[i / 64] |= (hits[k / 64] >> (k % 64) & 1) << (i % 64);
            }
        }
    }

    pub fn push_edge(&mut self, to: NodeId, class: u8) {
        self.targets.push(to);
        self.classes.push(class);
        if class != NO_CLASS {
            self.all_classes |= 1 << class;
        }
    }

    pub fn close_node(&mut self) {
        self.offsets.push(self.targets.len() as u64);
        self.nodes += 1;
    }

    pub fn bytes(&self) -> usize {
        self.offsets.capacity() * 8
            + self.targets.capacity() * 4
            + self.classes.capacity()
            + self.holds.iter().map(|h| h.capacity() * 8).sum::<usize>()
    }

    fn edges(&self, v: NodeId) -> std::ops::Range<usize> {
        self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize
    }

    fn holds(&self, e: usize, v: NodeId) -> bool {
        self.holds[e][v as usize / 64] >> (v % 64) & 1 == 1
    }

    /// The fair classes not enabled at `v` (no edge of that class leaves it).
    fn disabled(&self, v: NodeId) -> u64 {
        let mut en = 0u64;
        for i in self.edges(v) {
            if self.classes[i] != NO_CLASS {
                en |= 1 << self.classes[i];
            }
        }
        self.all_classes & !en
    }
}

/// One step of a liveness path: the node reached and, where the step must take an edge of a
/// given fairness class (a fairness witness), that class.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub to: NodeId,
    pub class: Option<u8>,
}

/// A behaviour that never satisfies the condition: from `root` along `prefix` to the cycle's
/// entry, then `cycle` back to the entry (`None`: the entry is a terminal state).
#[derive(Debug)]
pub struct Lasso {
    pub root: NodeId,
    pub prefix: Vec<Step>,
    pub cycle: Option<Vec<Step>>,
}

/// Find a lasso for `Eventually` property `e` (its `holds` index): the candidate (terminal
/// state or fair component) reached first by a BFS from `roots` through states where the
/// condition is false, so the prefix is as short as it can be.
pub fn find(g: &Graph, e: usize, roots: &[NodeId]) -> Option<Lasso> {
    let n = g.nodes;
    // BFS through the states where the condition is false.
    let mut rank = vec![UNSEEN; n];
    let mut parent = vec![UNSEEN; n];
    let mut order: Vec<NodeId> = Vec::new();
    let mut queue = VecDeque::new();
    for &r in roots {
        if !g.holds(e, r) && rank[r as usize] == UNSEEN {
            rank[r as usize] = order.len() as u32;
            order.push(r);
            queue.push_back(r);
        }
    }
    while let Some(v) = queue.pop_front() {
        for i in g.edges(v) {
            let w = g.targets[i];
            if !g.holds(e, w) && rank[w as usize] == UNSEEN {
                rank[w as usize] = order.len() as u32;
                parent[w as usize] = v;
                order.push(w);
                queue.push_back(w);
            }
        }
    }
    // The best candidate: (rank of its entry, its component's members or none if terminal).
    let mut best: Option<(u32, Option<Vec<NodeId>>)> =
        order.iter().find(|&&v| g.edges(v).is_empty()).map(|&v| (rank[v as usize], None));
    tarjan(g, &rank, &order, |members| {
        let entry = members.iter().map(|&v| rank[v as usize]).min().unwrap();
        if best.as_ref().is_some_and(|(r, _)| *r <= entry) {
            return;
        }
        let single = members.len() == 1;
        if single && !g.edges(members[0]).any(|i| g.targets[i] == members[0]) {
            return; // trivial: no cycle
        }
        if fair(g, members) {
            best = Some((entry, Some(members.to_vec())));
        }
    });
    let (entry_rank, members) = best?;
    let entry = order[entry_rank as usize];
    let mut prefix = Vec::new();
    let mut v = entry;
    while parent[v as usize] != UNSEEN {
        prefix.push(Step { to: v, class: None });
        v = parent[v as usize];
    }
    prefix.reverse();
    let cycle = members.map(|m| cycle(g, entry, &m));
    Some(Lasso { root: v, prefix, cycle })
}

/// Every fair class has an edge inside the component or is disabled at one of its states.
fn fair(g: &Graph, members: &[NodeId]) -> bool {
    if g.all_classes == 0 {
        return true;
    }
    let inside: std::collections::HashSet<NodeId> = members.iter().copied().collect();
    let mut covered = 0u64;
    for &v in members {
        covered |= g.disabled(v);
        for i in g.edges(v) {
            if g.classes[i] != NO_CLASS && inside.contains(&g.targets[i]) {
                covered |= 1 << g.classes[i];
            }
        }
    }
    covered & g.all_classes == g.all_classes
}

/// Tarjan's algorithm, iterative, over the nodes with a rank (reachable through states where
/// the condition is false), started from them in rank order; `found` gets each component.
fn tarjan(g: &Graph, rank: &[u32], order: &[NodeId], mut found: impl FnMut(&[NodeId])) {
    struct T<'g> {
        g: &'g Graph,
        index: Vec<u32>,
        low: Vec<u32>,
        on_stack: Vec<bool>,
        stack: Vec<NodeId>,
        calls: Vec<(NodeId, usize)>,
        counter: u32,
    }
    impl T<'_> {
        fn visit(&mut self, v: NodeId) {
            self.index[v as usize] = self.counter;
            self.low[v as usize] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v as usize] = true;
            self.calls.push((v, self.g.edges(v).start));
        }
    }
    let n = rank.len();
    let mut t = T {
        g,
        index: vec![UNSEEN; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        calls: Vec::new(),
        counter: 0,
    };
    for &r in order {
        if t.index[r as usize] != UNSEEN {
            continue;
        }
        t.visit(r);
        while let Some(&(v, pos)) = t.calls.last() {
            if pos < g.edges(v).end {
                t.calls.last_mut().unwrap().1 += 1;
                let w = g.targets[pos];
                if rank[w as usize] == UNSEEN {
                    continue; // the condition holds there
                }
                if t.index[w as usize] == UNSEEN {
                    t.visit(w);
                } else if t.on_stack[w as usize] {
                    t.low[v as usize] = t.low[v as usize].min(t.index[w as usize]);
                }
            } else {
                t.calls.pop();
                if let Some(&(u, _)) = t.calls.last() {
                    t.low[u as usize] = t.low[u as usize].min(t.low[v as usize]);
                }
                if t.low[v as usize] == t.index[v as usize] {
                    let at = t.stack.iter().rposition(|&x| x == v).unwrap();
                    for &x in &t.stack[at..] {
                        t.on_stack[x as usize] = false;
                    }
                    found(&t.stack[at..]);
                    t.stack.truncate(at);
                }
            }
        }
    }
}

/// A fair cycle through `entry` inside the component `members`: it visits, for every fair
/// class, a state where the class is disabled or takes an edge of that class.
fn cycle(g: &Graph, entry: NodeId, members: &[NodeId]) -> Vec<Step> {
    let mut sorted = members.to_vec();
    sorted.sort_unstable();
    let inside = |v: NodeId| sorted.binary_search(&v).is_ok();
    let mut steps: Vec<Step> = Vec::new();
    let mut at = entry;
    let mut covered = g.disabled(entry);
    let walk = |steps: &mut Vec<Step>, covered: &mut u64, path: Vec<NodeId>| {
        for w in path {
            *covered |= g.disabled(w);
            steps.push(Step { to: w, class: None });
        }
    };
    for c in 0..64u8 {
        let bit = 1u64 << c;
        if g.all_classes & bit == 0 || covered & bit != 0 {
            continue;
        }
        if let Some(&w) = sorted.iter().find(|&&v| g.disabled(v) & bit != 0) {
            walk(&mut steps, &mut covered, route(g, at, w, false, &inside));
            at = w;
        } else {
            let (u, v) = sorted
                .iter()
                .find_map(|&u| {
                    g.edges(u).find(|&i| g.classes[i] == c && inside(g.targets[i])).map(|i| (u, g.targets[i]))
                })
                .expect("a fair component covers every class");
            walk(&mut steps, &mut covered, route(g, at, u, false, &inside));
            covered |= bit | g.disabled(v);
            steps.push(Step { to: v, class: Some(c) });
            at = v;
        }
    }
    let back = route(g, at, entry, steps.is_empty(), &inside);
    walk(&mut steps, &mut covered, back);
    steps
}

/// A shortest path from `from` to `to` inside the component (the nodes after `from`); with
/// `nonempty`, at least one edge even when `from == to`.
fn route(g: &Graph, from: NodeId, to: NodeId, nonempty: bool, inside: &impl Fn(NodeId) -> bool) -> Vec<NodeId> {
    if from == to && !nonempty {
        return Vec::new();
    }
    let mut parent: HashMap<NodeId, NodeId> = HashMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for i in g.edges(v) {
            let w = g.targets[i];
            if !inside(w) || parent.contains_key(&w) {
                continue;
            }
            parent.insert(w, v);
            if w == to {
                let mut path = vec![to];
                let mut x = v;
                while x != from {
                    path.push(x);
                    x = parent[&x];
                }
                path.reverse();
                return path;
            }
            queue.push_back(w);
        }
    }
    unreachable!("a strongly connected component connects its states")
}
