//! The level-synchronous parallel BFS: parallel expansion of chunks of a level (on a pool of
//! threads started once per run) and, on the calling thread at the same time, a sequential
//! merge in chunk order that replays exactly what a FIFO search would decide
//! ([`merge`](super::merge)).

use super::expand::Scratch;
use super::fingerprint::{collision_probability, Fingerprint};
use super::frontier::{Chunk, Level};
use super::liveness::{self, Graph};
use super::merge::Run;
use super::pool::{self, Fixed, Gate, Job, Pool};
use super::stats::{self, Clock, Report, Times};
use super::trace::Walker;
use super::visited::{NodeId, Nodes, Table, Visited, ROOT};
use super::{Discovery, End, Hooks, Options, Outcome, Progress, PropertyOutcome, Trace};
use stateright::{Expectation, Model};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

/// A candidate successor: an edge to a state visited before, or to a state the expanding
/// thread did not find in the visited set (a candidate; the merge decides).
pub(super) struct Succ {
    /// The target's node, or `NEW` (the next candidate), or `DUP` (a candidate of this chunk
    /// an earlier successor reached: the next entry of `dups` says which).
    pub known: NodeId,
    /// Its index in the source's action list.
    pub action: u32,
    /// Its fairness class (`liveness::NO_CLASS` if none).
    pub class: u8,
}

pub(super) const NEW: NodeId = NodeId::MAX;
/// Not a node number: [`MAX_NODES`](super::visited::MAX_NODES) stops the run before it.
pub(super) const DUP: NodeId = NodeId::MAX - 1;

/// What a thread produced for one chunk.
pub(super) struct ChunkOut<S> {
    /// Sources examined (fewer than the chunk's length if the stop hook fired).
    pub done: usize,
    /// Per source: property bits (`words` words each).
    pub hits: Vec<u64>,
    /// Per source: the end of its successors in `succs`, and how many it generated.
    pub ends: Vec<(u32, u32)>,
    pub succs: Vec<Succ>,
    /// The candidates (successors the expanding thread did not find in the visited set, each
    /// fingerprint once), in order: whole states, or encoded and cut into pieces
    /// ([`frontier::cut`]).
    pub states: Vec<S>,
    pub pieces: Vec<Chunk<S>>,
    /// The candidates' fingerprints.
    pub fps: Vec<Fingerprint>,
    /// Per `DUP` successor, in order: the candidate it reached again.
    pub dups: Vec<u32>,
}

impl<S> ChunkOut<S> {
    pub(super) fn empty() -> Self {
        ChunkOut {
            done: 0,
            hits: Vec::new(),
            ends: Vec::new(),
            succs: Vec::new(),
            states: Vec::new(),
            pieces: Vec::new(),
            fps: Vec::new(),
            dups: Vec::new(),
        }
    }
}

pub(super) fn run<M, H>(model: &M, hooks: &H, opts: &Options) -> Outcome<M::Action>
where
    M: Model + Sync,
    M::State: Hash + Eq + Clone + Send + Sync,
    M::Action: Send + Sync,
    H: Hooks<M>,
{
    run_in(model, hooks, opts, pool::WINDOW)
}

/// [`run`] with expansion at most `window` chunks ahead of the merge.
pub(super) fn run_in<M, H>(model: &M, hooks: &H, opts: &Options, window: usize) -> Outcome<M::Action>
where
    M: Model + Sync,
    M::State: Hash + Eq + Clone + Send + Sync,
    M::Action: Send + Sync,
    H: Hooks<M>,
{
    let threads = opts.threads.max(1);
    let props = model.properties();
    let live = props.iter().any(|p| p.expectation == Expectation::Eventually);
    let words = props.len().div_ceil(64);
    let encoded = hooks.encodes();
    let table = RwLock::new(Table::new());
    let mut run: Run<M> = Run {
        props: &props,
        table: &table,
        nodes: Nodes::default(),
        graph: live.then(|| Graph::new(&props)),
        found: vec![None; props.len()],
        generated: 0,
        max_depth: 0,
        stopped: None,
        end: None,
        max_states: opts.max_states,
        src: 0,
        decided: false,
        repeats: 0,
        ids: Vec::new(),
    };
    // Level 0: the initial states within the boundary, deduplicated in order.
    let mut level: Level<M::State> = Level::new();
    let mut buf = Vec::new();
    for (i, s) in model.init_states().into_iter().enumerate() {
        if !model.within_boundary(&s) {
            continue;
        }
        run.generated += 1;
        let s = hooks.representative(model, &s).unwrap_or(s);
        let mut t = table.write().unwrap();
        t.grow(1);
        if t.insert(super::key(hooks, model, &s, opts.seed, &mut buf), run.nodes.next_id()).is_ok() {
            run.nodes.push(ROOT, i as u32);
            if encoded {
                level.push_encoded(&buf);
            } else {
                level.push_state(s);
            }
        }
    }
    let roots = run.nodes.len();
    let halt = AtomicBool::new(false);
    let reason = Mutex::new(None);
    let mut frontier = FrontierPeak::default();
    let clock = Clock::new(stats::enabled());
    let report = Report::default();
    let began = std::time::Instant::now();
    let eval: Vec<AtomicBool> = props.iter().map(|_| AtomicBool::new(true)).collect();
    let progress = Mutex::new(Progress::default());
    let gate = Gate::default();
    let fixed = Fixed {
        model,
        hooks,
        props: &props,
        table: &table,
        eval: &eval,
        progress: &progress,
        seed: opts.seed,
        words,
        live,
        opts,
        halt: &halt,
        reason: &reason,
        encoded,
        gate: &gate,
        window: window.max(1),
        clock,
        report: &report,
    };
    std::thread::scope(|scope| {
        let pool = Pool::start(scope, &fixed, threads);
        let mut scratch = Scratch::new();
        let mut times = Times::default();
        let mut depth = 0usize;
        while level.len > 0 {
            let expand = opts.max_depth.is_none_or(|d| depth < d);
            let mut left = level.len;
            let mut level_bytes = level.bytes;
            let mut next: Level<M::State> = Level::new();
            // Per chunk: its length and its bytes (freed when it is expanded).
            let sizes: Vec<(usize, usize)> = level.chunks.iter().map(|c| (c.len(), c.bytes())).collect();
            let publish = |run: &Run<M>, left: usize, next: &Level<M::State>| {
                *progress.lock().unwrap() = Progress {
                    unique: run.nodes.len(),
                    generated: run.generated,
                    depth,
                    frontier: left + next.len,
                    visited_bytes: table.read().unwrap().bytes() + run.nodes.bytes(),
                    graph_bytes: run.graph.as_ref().map_or(0, Graph::bytes),
                };
            };
            publish(&run, left, &next);
            frontier.see(left, level_bytes);
            let job = Job::new(level.chunks, expand);
            let go_on = pool.level(&fixed, &mut scratch, &mut times, job, |i, out| {
                let (len, bytes) = sizes[i];
                let found_before = run.found.iter().filter(|f| f.is_some()).count();
                if !run.merge(out, len, depth, expand, &mut left, &mut next) {
                    return false;
                }
                level_bytes -= bytes;
                frontier.see(left + next.len, level_bytes + next.bytes);
                if run.found.iter().filter(|f| f.is_some()).count() > found_before {
                    for ((p, f), e) in props.iter().zip(&run.found).zip(&eval) {
                        if f.is_some() && p.expectation != Expectation::Eventually {
                            e.store(false, Ordering::Relaxed);
                        }
                    }
                }
                publish(&run, left, &next);
                true
            });
            if !go_on {
                if run.end.is_none() {
                    let r = reason.lock().unwrap().expect("a chunk stops short only for the stop hook");
                    run.end = Some(End::Stopped(r));
                }
                break;
            }
            next.close();
            frontier.see(next.len, next.bytes);
            level = next;
            depth += 1;
        }
        report.push("thread 0 (merges)".to_string(), times);
    });
    if stats::enabled() {
        report.print(began.elapsed(), run.repeats);
    }
    let visited =
        Visited { table: std::mem::take(&mut *table.write().unwrap()), nodes: std::mem::take(&mut run.nodes) };
    let end = run.end.unwrap_or(match run.stopped {
        Some(s) => End::Stopped(s),
        None => End::Exhausted,
    });
    let mut o = finish(model, hooks, opts, &run, &visited, end, roots, threads);
    if encoded {
        (o.frontier_bytes, o.frontier_states) = (frontier.bytes, frontier.states);
    }
    o
}

/// The frontier's largest size in bytes (encoded states), and its state count then.
#[derive(Default)]
struct FrontierPeak {
    bytes: usize,
    states: usize,
}

impl FrontierPeak {
    fn see(&mut self, states: usize, bytes: usize) {
        if bytes > self.bytes {
            (self.bytes, self.states) = (bytes, states);
        }
    }
}

// The run's parts, each borrowed where it lives; a struct for them would only be built here.
#[allow(clippy::too_many_arguments)]
fn finish<M, H>(
    model: &M,
    hooks: &H,
    opts: &Options,
    run: &Run<M>,
    visited: &Visited,
    end: End,
    roots: usize,
    threads: usize,
) -> Outcome<M::Action>
where
    M: Model,
    M::State: Hash + Eq + Clone,
    H: Hooks<M>,
{
    let walker = Walker { model, hooks, visited, seed: opts.seed };
    let roots: Vec<NodeId> = (0..roots as NodeId).collect();
    let properties = run
        .props
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let twin_found = run.props.iter().zip(&run.found).any(|(q, f)| q.name == p.name && f.is_some());
            let discovery = if p.expectation == Expectation::Eventually {
                match (&run.graph, end) {
                    // A property of the same name decided it already (one property, two checks).
                    _ if twin_found => Discovery::Unknown,
                    (Some(g), End::Exhausted) => match liveness::find(g, g.index_of(k), &roots) {
                        Some(l) => Discovery::Found(walker.lasso(&l)),
                        None => Discovery::Absent,
                    },
                    _ => Discovery::Unknown,
                }
            } else {
                match run.found[k] {
                    Some(id) => {
                        let (init, actions) = walker.tree_path(id);
                        Discovery::Found(Trace { init, actions, cycle: None })
                    }
                    None if end == End::Exhausted => Discovery::Absent,
                    None => Discovery::Unknown,
                }
            };
            PropertyOutcome { name: p.name, expectation: p.expectation.clone(), discovery }
        })
        .collect();
    Outcome {
        end,
        unique: visited.len(),
        generated: run.generated,
        max_depth: run.max_depth,
        threads,
        visited_bytes: visited.bytes(),
        graph_bytes: run.graph.as_ref().map_or(0, Graph::bytes),
        collision_probability: collision_probability(visited.len() as u64),
        frontier_bytes: 0,
        frontier_states: 0,
        properties,
    }
}
