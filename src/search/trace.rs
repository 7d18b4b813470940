//! Counterexamples rebuilt by re-execution: walk the model from a concrete initial state along a
//! chain of nodes, at each step taking the first action (in the model's action order) whose
//! successor's representative has the next node's fingerprint. The actions are the model's
//! real ones even under symmetry, where the concrete states differ from the stored
//! representatives.

use super::liveness::{self, Lasso, Step};
use super::visited::{NodeId, Visited};
use super::{Hooks, Trace};
use stateright::Model;
use std::hash::Hash;

pub struct Walker<'a, M, H> {
    pub model: &'a M,
    pub hooks: &'a H,
    pub visited: &'a Visited,
    pub seed: u64,
}

/// Where a walk stands: the concrete state, and whether it is the stored node's state itself
/// (no representative was taken on the way), in which case the recorded action index applies.
struct At<S> {
    state: S,
    exact: bool,
}

impl<M, H> Walker<'_, M, H>
where
    M: Model,
    M::State: Hash + Eq + Clone,
    H: Hooks<M>,
{
    fn root(&self, root: NodeId) -> (usize, At<M::State>) {
        let i = self.visited.node(root).action as usize;
        let state = self.model.init_states().into_iter().nth(i).expect("a root node is an initial state");
        let exact = self.hooks.representative(self.model, &state).is_none();
        (i, At { state, exact })
    }

    fn nth_action(&self, s: &M::State, i: usize) -> M::Action {
        let mut acts = Vec::new();
        self.model.actions(s, &mut acts);
        acts.swap_remove(i)
    }

    /// One step from `at` to a successor represented by node `to`: with `hint` (the recorded
    /// action index) when `at` is exact, else the first matching action; with `class`, only
    /// actions of that fairness class.
    fn step(&self, at: &At<M::State>, to: NodeId, hint: Option<u32>, class: Option<u8>) -> (M::Action, At<M::State>) {
        let hint = hint.filter(|_| at.exact).map(|h| h as usize);
        let mut acts = Vec::new();
        let mut buf = Vec::new();
        self.model.actions(&at.state, &mut acts);
        for (i, a) in acts.into_iter().enumerate() {
            if hint.is_some_and(|h| h != i) {
                continue;
            }
            if class.is_some_and(|c| liveness::class_of(self.hooks, self.model, &a) != c) {
                continue;
            }
            let Some(next) = self.model.next_state(&at.state, a) else {
                continue;
            };
            if !self.model.within_boundary(&next) {
                continue;
            }
            let rep = self.hooks.representative(self.model, &next);
            if self.visited.get(super::key(self.hooks, self.model, rep.as_ref().unwrap_or(&next), self.seed, &mut buf))
                == Some(to)
            {
                let exact = at.exact && rep.is_none();
                return (self.nth_action(&at.state, i), At { state: next, exact });
            }
        }
        panic!(
            "search: re-executing a recorded path found no action to node {to}: the model's init_states, \
             actions or next_state are not deterministic, or the representative is not a symmetry of the model"
        );
    }

    /// The actions from the initial state to node `id` along its parent links.
    pub fn tree_path(&self, id: NodeId) -> (usize, Vec<M::Action>) {
        let chain = self.visited.chain(id);
        let (init, mut at) = self.root(chain[0]);
        let mut actions = Vec::with_capacity(chain.len() - 1);
        for &n in &chain[1..] {
            let (a, next) = self.step(&at, n, Some(self.visited.node(n).action), None);
            actions.push(a);
            at = next;
        }
        (init, actions)
    }

    fn walk(&self, mut at: At<M::State>, steps: &[Step], out: &mut Vec<M::Action>) -> At<M::State> {
        for s in steps {
            let (a, next) = self.step(&at, s.to, None, s.class);
            out.push(a);
            at = next;
        }
        at
    }

    /// The lasso's real actions. Under symmetry one turn of the recorded cycle may end in a
    /// state equivalent to, not equal to, where it started; turns are repeated until a
    /// concrete state repeats (the states met are in one finite symmetry class), and the turns
    /// before it join the prefix.
    pub fn lasso(&self, l: &Lasso) -> Trace<M::Action> {
        let (init, at) = self.root(l.root);
        let mut actions = Vec::new();
        let at = self.walk(at, &l.prefix, &mut actions);
        let Some(cycle) = &l.cycle else {
            return Trace { init, actions, cycle: None };
        };
        let mut starts: Vec<M::State> = Vec::new();
        let mut turns: Vec<Vec<M::Action>> = Vec::new();
        let mut at = at;
        loop {
            let mut turn = Vec::new();
            let next = self.walk(At { state: at.state.clone(), exact: at.exact }, cycle, &mut turn);
            starts.push(std::mem::replace(&mut at, next).state);
            turns.push(turn);
            if let Some(i) = starts.iter().position(|s| *s == at.state) {
                for t in turns.drain(..i) {
                    actions.extend(t);
                }
                let cycle = turns.into_iter().flatten().collect();
                return Trace { init, actions, cycle: Some(cycle) };
            }
            assert!(turns.len() < 100_000, "search: a lasso's cycle did not close after 100,000 turns");
        }
    }
}
