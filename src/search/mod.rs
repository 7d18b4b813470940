//! kvmc's exhaustive search engine: a parallel, level-synchronous breadth-first search over any
//! stateright [`Model`], with a compact visited set, symmetry reduction and liveness checking
//! under weak fairness. It knows nothing of kvmc's model; the checker drives it through
//! [`search`] and two small hooks ([`Hooks`]).
//!
//! # Guarantees
//! - **Shortest discoveries.** An `Always` property's first counterexample and a `Sometimes`
//!   property's first example are the first in BFS order (node order), so no shorter one exists.
//! - **Determinism.** The same model and options give the same unique-state count, the same
//!   maximum depth and the same discovery paths for any thread count and any timing (except
//!   where a caller's stop hook fires, which is timing by nature).
//! - **Honest bounds.** [`Outcome::end`] says whether the run exhausted the state space; a run
//!   stopped by a bound or the stop hook is never exhaustive, and a property it did not find is
//!   [`Discovery::Unknown`], never [`Discovery::Absent`].
//!
//! # Memory per visited state
//! A visited state is a 16-byte slot in an open-addressing table kept between 3/8 and 3/4 full
//! (96 bits of its fingerprint and its node number) plus an 8-byte node (the parent's node
//! number and the index of the action that first reached it) in chunks of 2^16 nodes: 29 to 51
//! bytes per state with every slack counted ([`Outcome::visited_bytes`]). A look-up reads one
//! slot line and no node. States live only in the frontier (the level being expanded and the
//! next one), whole or, when the hooks encode ([`Hooks::encodes`]), as bytes in per-chunk
//! arenas, decoded on expansion ([`Outcome::frontier_bytes`]). A counterexample is rebuilt by
//! re-executing the model from the initial state along the chain of parent links.
//!
//! # Fingerprints
//! XXH3-128 over the state's encoding when the hooks encode the frontier, else MurmurHash3
//! x64_128 over the words the state's `Hash` writes ([`key`]), with a fixed seed (no
//! `RandomState`); the visited set keys states by 96 of the 128 bits. A collision (two distinct
//! states taken for one, which would silently prune the second) has probability below the
//! birthday bound n²/2^97: 6e-12 at 10^9 states, more than this machine's memory holds. It is
//! reported as [`Outcome::collision_probability`]. 64 bits (TLC, stateright) would reach 2.7e-4
//! at 10^8 states; 128 bits would need a second memory access per look-up (or 20-byte slots)
//! for a bound nobody needs.
//!
//! # Parallelism and determinism
//! Each level is cut into chunks of 8 to 31 states (16 where the merge fills them), handed
//! whole to threads started once per run (the caller's and `threads - 1` helpers, each keeping
//! its scratch buffers). Threads claim chunks in order and expand them in two passes
//! (`expand`): the model step, the properties, the representative and the fingerprint of
//! every successor of the chunk, its visited-set slot prefetched; then, in order, a look-up in
//! the visited set (read while the merge writes it) that drops successors seen before (a
//! successor two sources of the chunk reach is one candidate). The calling thread merges the
//! chunks' candidate successors in chunk order as they come in (expanding a chunk itself while
//! the next one in order is not ready): the first candidate of each new fingerprint gets the
//! next node number and goes to the next level. Encoded candidates go there in the pieces the
//! expanding thread cut them into, without a copy (`frontier::cut`). The merge visits sources
//! in the order a sequential FIFO search pops them and applies every decision (first
//! discovery, early stop, state bound) at that source, so every count and path is the
//! sequential search's, whatever the threads did. Only the stop hook depends on timing: a run
//! it stops keeps what was merged before the first unexamined state.
//!
//! # Liveness
//! When a property is `Eventually`, the search records the state graph (edges as node indices,
//! each with its action's fairness class) and, after an exhaustive run, looks for a behaviour
//! that never satisfies the condition: a reachable terminal state, or a nontrivial strongly
//! connected component (iterative Tarjan) that is *fair*, both within the states where the
//! condition is false and reachable from an initial state through such states. Fairness is weak
//! fairness of the action classes given by [`Hooks::fairness_class`]: a component is fair if,
//! for every class, it holds an edge of that class or a state where no action of that class is
//! enabled. The counterexample is a lasso: the actions to the cycle's entry and the cycle's
//! actions. A run that is not exhaustive leaves `Eventually` properties `Unknown`.
//!
//! stateright 0.31's `eventually` follows each path with a bit set and can miss a
//! counterexample on a cycle or a join, and has no fairness. This one is exact on the explored
//! graph. Shared with stateright: the condition is evaluated on states; a path ends (counts as
//! terminal) where the model offers no action whose successor is within `within_boundary`, and
//! an action whose `next_state` is `None` is not a transition (not a stutter step: no
//! behaviour stutters forever unless the model says so with a self-loop).

mod bfs;
mod expand;
pub mod fingerprint;
mod frontier;
mod liveness;
mod merge;
mod pool;
mod stats;
#[cfg(test)]
mod tests;
mod trace;
mod visited;

pub use fingerprint::{collision_probability, fingerprint, fingerprint_bytes, Fingerprint, DEFAULT_SEED};
use stateright::{Expectation, Model};
use std::hash::Hash;

/// What the search needs from a model beyond stateright's `Model` (all optional).
pub trait Hooks<M: Model>: Sync {
    /// Symmetry reduction: the representative of `s`'s symmetry class (a canonical member),
    /// or `None` when `s` is its own representative. It must be a symmetry of the model: states
    /// it identifies have equivalent successors and the same property values, and their actions
    /// map to actions of the same fairness class. The default reduces nothing.
    fn representative(&self, _model: &M, _s: &M::State) -> Option<M::State> {
        None
    }

    /// The successor of `s` under `a` (what `model.next_state(s, a)` gives), written into
    /// `out`: `out` may hold an earlier successor whose memory the hook reuses, and is `None`
    /// after the search kept the last one. False (and `out` unspecified) when there is none.
    /// The default calls `next_state`.
    fn next_state_into(&self, model: &M, s: &M::State, a: M::Action, out: &mut Option<M::State>) -> bool {
        match model.next_state(s, a) {
            Some(n) => {
                *out = Some(n);
                true
            }
            None => false,
        }
    }

    /// The successor of `s` by `a` written into `s` itself, when the search does not read `s`
    /// again (the last action of a decoded frontier state): `Some(changed)` as
    /// [`Hooks::next_state_into`] would say, with `s` the successor when changed (unspecified
    /// when not); `None`, with `s` untouched, when the hooks cannot (the search then copies).
    /// The default: never.
    fn next_state_in_place(&self, _model: &M, _s: &mut M::State, _a: &M::Action) -> Option<bool> {
        None
    }

    /// Weak fairness: the class (0 to 63) of action `a`, or `None` when `a` is not weakly fair.
    /// Only `Eventually` properties read it. The default: no action is fair.
    fn fairness_class(&self, _model: &M, _a: &M::Action) -> Option<u8> {
        None
    }

    /// Frontier compaction: true when the search keeps frontier states as bytes
    /// ([`Hooks::encode`] when a state joins the frontier, [`Hooks::decode`] when it is
    /// expanded) instead of whole. The default: false (neither is called).
    fn encodes(&self) -> bool {
        false
    }

    /// Append `s`'s encoding to `out` (called only when [`Hooks::encodes`]). The state it
    /// decodes to must equal `s` and hash as `s` does, and equal states must have equal
    /// encodings: the search then keys a state by the fingerprint of its encoding
    /// ([`key`]).
    fn encode(&self, _model: &M, _s: &M::State, _out: &mut Vec<u8>) {
        unreachable!("Hooks::encode is called only when Hooks::encodes() is true")
    }

    /// The state `bytes` encode (called only when [`Hooks::encodes`]).
    fn decode(&self, _model: &M, _bytes: &[u8]) -> M::State {
        unreachable!("Hooks::decode is called only when Hooks::encodes() is true")
    }

    /// `decode` into `out`, reusing the state there (its heap) when there is one: the search
    /// decodes each frontier state into the one its thread keeps (called only when
    /// [`Hooks::encodes`]). The result must equal `decode`'s.
    fn decode_into(&self, model: &M, bytes: &[u8], out: &mut Option<M::State>) {
        *out = Some(self.decode(model, bytes));
    }
}

/// The fingerprint the search keys `s` by. When the hooks encode the frontier, XXH3-128
/// over `s`'s encoding, which is left in `buf` (cleared first) for the frontier: a
/// successor is encoded once, whether it is new or not, and never hashed field by field. Else
/// over the words `s`'s `Hash` writes ([`fingerprint`]).
#[inline]
pub fn key<M: Model, H: Hooks<M>>(hooks: &H, model: &M, s: &M::State, seed: u64, buf: &mut Vec<u8>) -> Fingerprint
where
    M::State: Hash,
{
    if hooks.encodes() {
        buf.clear();
        hooks.encode(model, s, buf);
        fingerprint_bytes(buf, seed)
    } else {
        fingerprint(s, seed)
    }
}

/// No symmetry, no fairness.
pub struct Plain;
impl<M: Model> Hooks<M> for Plain {}

/// Why a run stopped before exhausting the state space.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Stop {
    /// The state bound: `max_states` visited states and work left.
    MaxStates,
    /// The depth bound: states at `max_depth` were not expanded.
    MaxDepth,
    /// The caller's deadline (from the stop hook).
    Timeout,
    /// The caller's memory budget (from the stop hook).
    Memory,
    /// The caller's interrupt (from the stop hook).
    Interrupted,
    /// 2^32 - 2 visited states: the most node indices hold.
    Capacity,
}

/// How a run ended.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum End {
    /// Every reachable state was visited.
    Exhausted,
    /// Every property had its discovery (only `Always` and `Sometimes` properties can), so the
    /// search stopped without visiting everything.
    AllDiscovered,
    /// A bound or the stop hook.
    Stopped(Stop),
}

/// What the stop hook sees (a snapshot the merge updates after each chunk; a thread reads it
/// before each chunk it expands).
#[derive(Copy, Clone, Debug, Default)]
pub struct Progress {
    pub unique: usize,
    pub generated: usize,
    /// The depth of the level being expanded.
    pub depth: usize,
    /// States in the frontier (this level's unexpanded ones and the next level's).
    pub frontier: usize,
    pub visited_bytes: usize,
    pub graph_bytes: usize,
}

/// A stop hook: polled once per state by the worker threads (keep it cheap: an atomic load, a
/// clock read); `Some(reason)` stops the run.
pub type StopHook<'a> = &'a (dyn Fn(&Progress) -> Option<Stop> + Sync);

#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Stop once this many states are visited and work is left.
    pub max_states: Option<usize>,
    /// Do not expand states at this depth.
    pub max_depth: Option<usize>,
    /// The fingerprint seed.
    pub seed: u64,
    pub stop: Option<StopHook<'a>>,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options { threads: 1, max_states: None, max_depth: None, seed: DEFAULT_SEED, stop: None }
    }
}

/// A path of the model's real actions from an initial state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace<A> {
    /// The initial state's index in `init_states()`.
    pub init: usize,
    /// The actions from that initial state (for a lasso: to the cycle's first state).
    pub actions: Vec<A>,
    /// A lasso's cycle: actions from its first state back to that same state (`Eventually`
    /// only; `None` for a path that ends in a terminal state).
    pub cycle: Option<Vec<A>>,
}

/// What the run found for one property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery<A> {
    /// `Always`: a counterexample; `Sometimes`: an example; `Eventually`: a behaviour that
    /// never satisfies the condition (a lasso, or a path to a terminal state).
    Found(Trace<A>),
    /// The run was exhaustive and found none (`Always` and `Eventually` hold, a `Sometimes`
    /// condition is unreachable).
    Absent,
    /// The run was not exhaustive and found none.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct PropertyOutcome<A> {
    pub name: &'static str,
    pub expectation: Expectation,
    pub discovery: Discovery<A>,
}

#[derive(Clone, Debug)]
pub struct Outcome<A> {
    pub end: End,
    /// Distinct states visited (distinct representatives under symmetry).
    pub unique: usize,
    /// Successors generated (every transition within the boundary, repeats included), plus the
    /// initial states.
    pub generated: usize,
    /// The deepest level whose states were examined.
    pub max_depth: usize,
    pub threads: usize,
    /// Bytes of the visited set at the end (table and nodes, by capacity).
    pub visited_bytes: usize,
    /// Bytes of the recorded state graph (0 without `Eventually` properties).
    pub graph_bytes: usize,
    /// The estimated probability that a fingerprint collision pruned a state.
    pub collision_probability: f64,
    /// Encoded frontiers ([`Hooks::encodes`]): the frontier's largest size in bytes (its
    /// chunks' arenas, by capacity), taken after each chunk's merge and at each level's end, and its
    /// state count then (0 and 0 when states stay whole).
    pub frontier_bytes: usize,
    pub frontier_states: usize,
    /// One per property, in `properties()` order.
    pub properties: Vec<PropertyOutcome<A>>,
}

impl<A> Outcome<A> {
    pub fn exhaustive(&self) -> bool {
        self.end == End::Exhausted
    }

    pub fn property(&self, name: &str) -> Option<&PropertyOutcome<A>> {
        self.properties.iter().find(|p| p.name == name)
    }
}

/// Explore `model` breadth first from its initial states.
pub fn search<M, H>(model: &M, hooks: &H, opts: &Options) -> Outcome<M::Action>
where
    M: Model + Sync,
    M::State: Hash + Eq + Clone + Send + Sync,
    M::Action: Send + Sync,
    H: Hooks<M>,
{
    bfs::run(model, hooks, opts)
}
