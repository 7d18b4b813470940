//! The level-synchronous parallel BFS: parallel expansion of chunks of a level (on a pool of
//! threads started once per run) and, on the calling thread at the same time, a sequential
//! merge in chunk order that replays exactly what a FIFO search would decide
//! ([`merge`](super::merge)).

use super::fingerprint::{collision_probability, Fingerprint};
use super::frontier::{self, Chunk, Level};
use super::liveness::{self, Graph};
use super::merge::Run;
use super::pool::{self, Fixed, Gate, Job, Pool};
use super::stats::{self, Clock, Report, Times};
use super::trace::Walker;
use super::visited::{NodeId, Nodes, Table, Visited, ROOT};
use super::{Discovery, End, Hooks, Options, Outcome, Progress, PropertyOutcome, Stop, Trace};
use stateright::{Expectation, Model, Property};
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

/// What every thread reads while a batch is expanded.
pub(super) struct Shared<'a, M: Model, H> {
    pub model: &'a M,
    pub hooks: &'a H,
    pub props: &'a [Property<M>],
    /// Per property: evaluate it (not yet discovered, or `Eventually`).
    pub eval: &'a [AtomicBool],
    /// Read while the merge inserts: a state it misses is reported new, and the merge decides.
    pub visited: &'a Table,
    pub seed: u64,
    pub words: usize,
    pub expand: bool,
    pub live: bool,
    pub opts: &'a Options<'a>,
    pub progress: Progress,
    pub halt: &'a AtomicBool,
    pub reason: &'a Mutex<Option<Stop>>,
    /// Frontier states are kept encoded (`Hooks::encodes`).
    pub encoded: bool,
}

impl<M, H> Shared<'_, M, H>
where
    M: Model,
    M::State: Hash,
    H: Hooks<M>,
{
    pub(super) fn expand_chunk(&self, mut chunk: Chunk<M::State>, scratch: &mut Scratch<M>) -> ChunkOut<M::State> {
        let Scratch { acts, next: reuse, cur, seen, arena, arena_ends, buf } = scratch;
        let n = chunk.len();
        let mut out =
            ChunkOut { done: 0, hits: vec![0; n * self.words], ends: Vec::with_capacity(n), ..ChunkOut::empty() };
        seen.clear();
        arena.clear();
        arena_ends.clear();
        let mut whole = std::mem::take(&mut chunk.states).into_iter();
        let mut entries = chunk.live();
        // Each state is decoded right before its expansion and dropped right after it, while
        // its memory is in cache.
        for j in 0..n {
            // A whole state, or None: the thread's decoded state, `cur`.
            let owned = whole.next();
            if owned.is_none() {
                // Into the thread's decoded state, reused from one state to the next.
                let e = entries.next().expect("a live entry");
                self.hooks.decode_into(self.model, chunk.encoded(e), cur);
            }
            let s = owned.as_ref().or(cur.as_ref()).expect("a whole or decoded state");
            if self.halt.load(Ordering::Relaxed) {
                break;
            }
            if let Some(r) = self.opts.stop.and_then(|f| f(&self.progress)) {
                self.reason.lock().unwrap().get_or_insert(r);
                self.halt.store(true, Ordering::Relaxed);
                break;
            }
            for (k, p) in self.props.iter().enumerate() {
                if !self.eval[k].load(Ordering::Relaxed) {
                    continue; // discovered already: the merge ignores it
                }
                let c = (p.condition)(self.model, s);
                let bit = match p.expectation {
                    Expectation::Always => !c,
                    Expectation::Sometimes | Expectation::Eventually => c,
                };
                if bit {
                    out.hits[j * self.words + k / 64] |= 1 << (k % 64);
                }
            }
            let mut generated = 0u32;
            if self.expand {
                acts.clear();
                self.model.actions(s, acts);
                let last = acts.len().wrapping_sub(1);
                for (i, a) in acts.drain(..).enumerate() {
                    let class =
                        if self.live { liveness::class_of(self.hooks, self.model, &a) } else { liveness::NO_CLASS };
                    // The last action of a decoded state may write its successor into that
                    // state, which is not read again (encoded frontiers only: the successor
                    // joins the next level as the bytes `key` leaves in `buf`).
                    let in_place = match (i == last && self.encoded, &owned, cur.as_mut()) {
                        (true, None, Some(c)) => self.hooks.next_state_in_place(self.model, c, &a),
                        _ => None,
                    };
                    let next = match in_place {
                        Some(false) => continue,
                        Some(true) => cur.as_ref().expect("a decoded state"),
                        None => {
                            let s = owned.as_ref().or(cur.as_ref()).expect("a whole or decoded state");
                            // The successor is written into `reuse`; it is moved out only when kept.
                            if !self.hooks.next_state_into(self.model, s, a, reuse) {
                                continue;
                            }
                            reuse.as_ref().expect("next_state_into gave a successor")
                        }
                    };
                    if !self.model.within_boundary(next) {
                        continue;
                    }
                    generated += 1;
                    let rep = self.hooks.representative(self.model, next);
                    let fp = super::key(self.hooks, self.model, rep.as_ref().unwrap_or(next), self.seed, buf);
                    let known = match self.visited.get(fp) {
                        Some(_) if !self.live => continue,
                        Some(id) => id,
                        None => match seen.insert(fp, &out.fps) {
                            // A candidate already: without a graph, nothing to record.
                            Err(_) if !self.live => continue,
                            Err(c) => {
                                out.dups.push(c);
                                DUP
                            }
                            Ok(()) => {
                                if self.encoded {
                                    // Encoded by `key`, from the reused successor, which stays
                                    // for the next.
                                    if arena.capacity() == 0 {
                                        arena.reserve(24 * buf.len());
                                    }
                                    arena.extend_from_slice(buf);
                                    arena_ends.push(arena.len() as u32);
                                } else {
                                    let kept = match rep {
                                        Some(r) => r,
                                        None => reuse.take().expect("a successor"),
                                    };
                                    out.states.push(kept);
                                }
                                out.fps.push(fp);
                                NEW
                            }
                        },
                    };
                    out.succs.push(Succ { known, action: i as u32, class });
                }
            }
            out.ends.push((out.succs.len() as u32, generated));
            out.done += 1;
        }
        if !arena_ends.is_empty() {
            // Copied while in this thread's cache, so the merge moves the pieces and copies nothing.
            frontier::cut(arena, arena_ends, &mut out.pieces);
        }
        out
    }
}

/// The candidates of the chunk being expanded, by fingerprint: a successor that two of its
/// sources reach is encoded once. Open addressing over indices into the chunk's `fps`.
#[derive(Default)]
struct Seen {
    /// `index + 1` of a candidate in `fps` (0: empty); a power of two long.
    slots: Vec<u32>,
    len: usize,
}

impl Seen {
    fn clear(&mut self) {
        if self.len > 0 {
            self.slots.fill(0);
            self.len = 0;
        }
    }

    /// `Err(index)` of the candidate with fingerprint `fp`, or `Ok(())` after recording that
    /// `fp` is the next candidate (`fps.len()`; the caller pushes it).
    fn insert(&mut self, fp: Fingerprint, fps: &[Fingerprint]) -> Result<(), u32> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.slots = vec![0; (self.slots.len() * 2).max(64)];
            let mask = self.slots.len() - 1;
            for (k, f) in fps.iter().enumerate() {
                let mut i = f.0[0] as usize & mask;
                while self.slots[i] != 0 {
                    i = (i + 1) & mask;
                }
                self.slots[i] = k as u32 + 1;
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = fp.0[0] as usize & mask;
        loop {
            match self.slots[i] {
                0 => {
                    self.slots[i] = fps.len() as u32 + 1;
                    self.len += 1;
                    return Ok(());
                }
                k if fps[k as usize - 1] == fp => return Err(k - 1),
                _ => i = (i + 1) & mask,
            }
        }
    }
}

/// A thread's reused buffers: the action list, the last successor the search dropped, the
/// frontier state last decoded (encoded frontiers), the chunk's candidates by fingerprint, and
/// the arena its candidates are encoded into before [`frontier::cut`].
pub(super) struct Scratch<M: Model> {
    acts: Vec<M::Action>,
    next: Option<M::State>,
    cur: Option<M::State>,
    seen: Seen,
    arena: Vec<u8>,
    arena_ends: Vec<u32>,
    /// The last successor's encoding (`key`).
    buf: Vec<u8>,
}

impl<M: Model> Scratch<M> {
    pub(super) fn new() -> Self {
        Scratch {
            acts: Vec::new(),
            next: None,
            cur: None,
            seen: Seen::default(),
            arena: Vec::new(),
            arena_ends: Vec::new(),
            buf: Vec::new(),
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
