//! The level-synchronous parallel BFS: parallel expansion of chunks of a level (on a pool of
//! threads started once per run) and, on the calling thread at the same time, a sequential
//! merge in chunk order that replays exactly what a FIFO search would decide.

use super::fingerprint::{collision_probability, fingerprint, Fingerprint};
use super::frontier::{Chunk, Level};
use super::liveness::{self, Graph};
use super::pool::{self, Fixed, Gate, Job, Pool};
use super::stats::{self, Clock, Report, Times};
use super::trace::Walker;
use super::visited::{NodeId, Nodes, Table, Visited, MAX_NODES, ROOT};
use super::{Discovery, End, Hooks, Options, Outcome, Progress, PropertyOutcome, Stop, Trace};
use stateright::{Expectation, Model, Property};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

/// A candidate successor: an edge to a state visited before, or to a state the expanding
/// thread did not find in the visited set (the next of the chunk's `news`; the merge decides).
struct Succ {
    /// The target's node (`NEW`: the next entry of `news`).
    known: NodeId,
    /// Its index in the source's action list.
    action: u32,
    /// Its fairness class (`liveness::NO_CLASS` if none).
    class: u8,
}

const NEW: NodeId = NodeId::MAX;

/// What a thread produced for one chunk.
pub(super) struct ChunkOut<S> {
    /// Sources examined (fewer than the chunk's length if the stop hook fired).
    done: usize,
    /// Per source: property bits (`words` words each).
    hits: Vec<u64>,
    /// Per source: the end of its successors in `succs`, and how many it generated.
    ends: Vec<(u32, u32)>,
    succs: Vec<Succ>,
    /// The successors the expanding thread did not find in the visited set (whole or encoded,
    /// as the frontier keeps them), and their fingerprints, in order.
    news: Chunk<S>,
    fps: Vec<Fingerprint>,
}

impl<S> ChunkOut<S> {
    pub(super) fn empty() -> Self {
        ChunkOut {
            done: 0,
            hits: Vec::new(),
            ends: Vec::new(),
            succs: Vec::new(),
            news: Chunk::default(),
            fps: Vec::new(),
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
        let Scratch { acts, next: reuse, cur } = scratch;
        let n = chunk.len();
        let mut out = ChunkOut {
            done: 0,
            hits: vec![0; n * self.words],
            ends: Vec::with_capacity(n),
            succs: Vec::new(),
            news: Chunk::default(),
            fps: Vec::new(),
        };
        let mut whole = std::mem::take(&mut chunk.states).into_iter();
        // Each state is decoded right before its expansion and dropped right after it, while
        // its memory is in cache.
        for j in 0..n {
            let owned;
            let s = match whole.next() {
                Some(s) => {
                    owned = s;
                    &owned
                }
                None => {
                    // Into the thread's decoded state, reused from one state to the next.
                    self.hooks.decode_into(self.model, chunk.encoded(j), cur);
                    cur.as_ref().expect("decode_into gave a state")
                }
            };
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
                for (i, a) in acts.drain(..).enumerate() {
                    let class =
                        if self.live { liveness::class_of(self.hooks, self.model, &a) } else { liveness::NO_CLASS };
                    // The successor is written into `reuse`; it is moved out only when kept.
                    if !self.hooks.next_state_into(self.model, s, a, reuse) {
                        continue;
                    }
                    let next = reuse.as_ref().expect("next_state_into gave a successor");
                    if !self.model.within_boundary(next) {
                        continue;
                    }
                    generated += 1;
                    let rep = self.hooks.representative(self.model, next);
                    let fp = fingerprint(rep.as_ref().unwrap_or(next), self.seed);
                    let known = match self.visited.get(fp) {
                        Some(_) if !self.live => continue,
                        Some(id) => id,
                        None => {
                            if self.encoded {
                                // Encoded from the reused successor, which stays for the next.
                                self.hooks.encode(self.model, rep.as_ref().unwrap_or(next), &mut out.news.bytes);
                                out.news.ends.push(out.news.bytes.len() as u32);
                            } else {
                                let kept = match rep {
                                    Some(r) => r,
                                    None => reuse.take().expect("a successor"),
                                };
                                out.news.states.push(kept);
                            }
                            out.fps.push(fp);
                            NEW
                        }
                    };
                    out.succs.push(Succ { known, action: i as u32, class });
                }
            }
            out.ends.push((out.succs.len() as u32, generated));
            out.done += 1;
        }
        out
    }
}

/// A thread's reused buffers: the action list, the last successor the search dropped and the
/// frontier state last decoded (encoded frontiers).
pub(super) struct Scratch<M: Model> {
    acts: Vec<M::Action>,
    next: Option<M::State>,
    cur: Option<M::State>,
}

impl<M: Model> Scratch<M> {
    pub(super) fn new() -> Self {
        Scratch { acts: Vec::new(), next: None, cur: None }
    }
}

/// The search's sequential state: the visited set, the graph, the counts, the decisions.
struct Run<'a, M: Model> {
    props: &'a [Property<M>],
    /// The visited set: the table (shared with the expanding threads) and the nodes.
    table: &'a RwLock<Table>,
    nodes: Nodes,
    graph: Option<Graph>,
    found: Vec<Option<NodeId>>,
    generated: usize,
    max_depth: usize,
    stopped: Option<Stop>,
    end: Option<End>,
    max_states: Option<usize>,
    /// The next source's node index.
    src: NodeId,
    /// `all_found()`, updated at each discovery.
    decided: bool,
    /// Candidates a thread took for new that the merge found visited (a look-up that ran
    /// before the merge inserted the state; `KVMC_SEARCH_STATS`).
    repeats: usize,
}

impl<M: Model> Run<'_, M> {
    /// Every property is decided: it has its discovery, or a property of the same name has
    /// (properties sharing a name are one property, e.g. a deadlock check and a cycle check).
    fn all_found(&self) -> bool {
        !self.props.is_empty()
            && self
                .props
                .iter()
                .all(|p| self.props.iter().zip(&self.found).any(|(q, f)| q.name == p.name && f.is_some()))
    }

    /// Merge one chunk's output; `left` counts this level's sources not yet merged. Returns
    /// false when the run ends here.
    fn merge(
        &mut self,
        mut out: ChunkOut<M::State>,
        len: usize,
        depth: usize,
        expand: bool,
        left: &mut usize,
        next: &mut Level<M::State>,
    ) -> bool {
        let words = self.props.len().div_ceil(64);
        let lock = self.table;
        let mut table = lock.read().unwrap();
        let mut succs = out.succs.into_iter();
        let mut whole = std::mem::take(&mut out.news.states).into_iter();
        let mut k = 0; // the next entry of `out.fps`
        let mut start = 0u32;
        for j in 0..out.done {
            let src = self.src;
            self.src += 1;
            *left -= 1;
            self.max_depth = depth;
            let hits = &out.hits[j * words..(j + 1) * words];
            for (k, p) in self.props.iter().enumerate() {
                let bit = hits[k / 64] >> (k % 64) & 1 == 1;
                if bit && p.expectation != Expectation::Eventually && self.found[k].is_none() {
                    self.found[k] = Some(src);
                    self.decided = self.all_found();
                }
            }
            if let Some(g) = &mut self.graph {
                g.push_bits(hits);
            }
            if self.decided {
                self.end = Some(End::AllDiscovered);
                return false;
            }
            let (end, generated) = out.ends[j];
            if !expand {
                self.stopped.get_or_insert(Stop::MaxDepth);
                if let Some(g) = &mut self.graph {
                    g.close_node();
                }
                continue;
            }
            self.generated += generated as usize;
            for s in succs.by_ref().take((end - start) as usize) {
                let target = match s.known {
                    NEW => {
                        let fp = out.fps[k];
                        k += 1;
                        if self.nodes.len() >= MAX_NODES {
                            self.end = Some(End::Stopped(Stop::Capacity));
                            return false;
                        }
                        // The state bound: never more than `max_states` visited states; a new
                        // one past it stops the run (it may be a repeat within this batch:
                        // conservative, the run is cut all the same).
                        if self.max_states.is_some_and(|n| self.nodes.len() >= n) && table.get(fp).is_none() {
                            self.end = Some(End::Stopped(Stop::MaxStates));
                            return false;
                        }
                        let state = whole.next();
                        if table.needs_room(1) {
                            // Growing moves every slot: wait for the readers' chunks.
                            drop(table);
                            lock.write().unwrap().grow(1);
                            table = lock.read().unwrap();
                        }
                        match table.insert(fp, self.nodes.next_id()) {
                            Ok(()) => {
                                let id = self.nodes.push(src, s.action);
                                match state {
                                    Some(state) => next.push_state(state),
                                    None => next.push_encoded(out.news.encoded(k - 1)),
                                }
                                id
                            }
                            Err(id) => {
                                self.repeats += 1;
                                id
                            }
                        }
                    }
                    id => id,
                };
                if let Some(g) = &mut self.graph {
                    g.push_edge(target, s.class);
                }
            }
            start = end;
            if let Some(g) = &mut self.graph {
                g.close_node();
            }
        }
        out.done == len
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
        if t.insert(fingerprint(&s, opts.seed), run.nodes.next_id()).is_ok() {
            run.nodes.push(ROOT, i as u32);
            if encoded {
                buf.clear();
                hooks.encode(model, &s, &mut buf);
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
