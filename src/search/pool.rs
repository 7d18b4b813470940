//! The search's worker threads and the order of work within a level. `threads - 1` helpers are
//! started once per run; each level is handed to them whole. Every thread (the calling one
//! too) claims the level's chunks one at a time, in order, and expands them; the calling
//! thread merges the outputs in chunk order as they come in, and, when the next one in order
//! is not ready, expands a chunk itself instead of waiting. So the merge runs while the
//! helpers expand: the only barrier is the end of a level. A thread expands chunk `i` only
//! once `i < merged + window` ([`WINDOW`]), which bounds the outputs waiting for the merge.
//!
//! The visited set's table takes one writer and concurrent readers: the helpers look states
//! up (under a read lock held for one chunk) while the merge inserts; the merge takes the
//! write lock only to grow the table. Each thread keeps its scratch buffers (the action list,
//! the reused successor) for the whole run.

use super::bfs::ChunkOut;
use super::expand::{Scratch, Shared};
use super::frontier::Chunk;
use super::stats::{Clock, Report, Times};
use super::visited::Table;
use super::{Hooks, Options, Progress, Stop};
use stateright::{Model, Property};
use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

/// How far (in chunks) expansion may run ahead of the merge.
pub(super) const WINDOW: usize = 32;

/// One level: its chunks (each claimed once, by index, in order).
pub(super) struct Job<S> {
    inputs: Vec<Mutex<Option<Chunk<S>>>>,
    claim: AtomicUsize,
    /// Chunks merged so far.
    merged: AtomicUsize,
    expand: bool,
}

impl<S> Job<S> {
    pub fn new(chunks: Vec<Chunk<S>>, expand: bool) -> Self {
        Job {
            inputs: chunks.into_iter().map(|c| Mutex::new(Some(c))).collect(),
            claim: AtomicUsize::new(0),
            merged: AtomicUsize::new(0),
            expand,
        }
    }
}

/// Where a helper waits when it is a window's length ahead of the merge.
#[derive(Default)]
pub(super) struct Gate {
    lock: Mutex<()>,
    cv: Condvar,
    waiting: AtomicBool,
}

impl Gate {
    /// Wait until chunk `i` of `job` may be expanded; false if the run halts meanwhile.
    fn admit<S>(
        &self,
        job: &Job<S>,
        i: usize,
        window: usize,
        halt: &AtomicBool,
        clock: Clock,
        times: &mut Times,
    ) -> bool {
        if i < job.merged.load(Ordering::Acquire) + window {
            return true;
        }
        let t = clock.start();
        times.waits += 1;
        let mut g = self.lock.lock().unwrap();
        loop {
            self.waiting.store(true, Ordering::SeqCst);
            if halt.load(Ordering::Relaxed) {
                clock.add(t, &mut times.wait);
                return false;
            }
            if i < job.merged.load(Ordering::SeqCst) + window {
                clock.add(t, &mut times.wait);
                return true;
            }
            // The timeout only guards against a halt that set no one waking.
            g = self.cv.wait_timeout(g, Duration::from_millis(20)).unwrap().0;
        }
    }

    /// The merge moved on (or the run halts): wake a waiting helper, if any.
    fn open(&self) {
        if self.waiting.load(Ordering::SeqCst) {
            let _g = self.lock.lock().unwrap();
            self.waiting.store(false, Ordering::SeqCst);
            self.cv.notify_all();
        }
    }
}

/// What stays the same for the whole run.
pub(super) struct Fixed<'a, M: Model, H> {
    pub model: &'a M,
    pub hooks: &'a H,
    pub props: &'a [Property<M>],
    pub table: &'a RwLock<Table>,
    /// Per property: evaluate it (not yet discovered, or `Eventually`); the merge clears it.
    pub eval: &'a [AtomicBool],
    /// What the stop hook sees: the merge updates it, a thread copies it for each chunk.
    pub progress: &'a Mutex<Progress>,
    pub seed: u64,
    pub words: usize,
    pub live: bool,
    pub opts: &'a Options<'a>,
    pub halt: &'a AtomicBool,
    pub reason: &'a Mutex<Option<Stop>>,
    pub encoded: bool,
    pub gate: &'a Gate,
    /// How far (in chunks) expansion may run ahead of the merge ([`WINDOW`]; at least 1).
    pub window: usize,
    pub clock: Clock,
    pub report: &'a Report,
}

impl<M, H> Fixed<'_, M, H>
where
    M: Model,
    M::State: Hash,
    H: Hooks<M>,
{
    /// Expand chunk `i` of `job` (claimed by the caller).
    fn expand(&self, job: &Job<M::State>, i: usize, scratch: &mut Scratch<M>, times: &mut Times) -> ChunkOut<M::State> {
        let chunk = job.inputs[i].lock().unwrap().take().expect("each chunk is claimed once");
        let progress = *self.progress.lock().unwrap();
        let t = self.clock.start();
        let table = self.table.read().unwrap();
        let sh = Shared {
            model: self.model,
            hooks: self.hooks,
            props: self.props,
            eval: self.eval,
            visited: &table,
            seed: self.seed,
            words: self.words,
            expand: job.expand,
            live: self.live,
            opts: self.opts,
            progress,
            halt: self.halt,
            reason: self.reason,
            encoded: self.encoded,
        };
        let out = sh.expand_chunk(chunk, scratch);
        drop(table);
        self.clock.add(t, &mut times.expand);
        times.chunks += 1;
        out
    }
}

/// What a helper sends back: a chunk's output.
enum Back<S> {
    Out(usize, ChunkOut<S>),
    /// The helper panicked (the model's code did): the run panics too, never waits forever.
    Panicked,
}

/// Sends `Back::Panicked` when its helper unwinds.
struct Alarm<S>(mpsc::Sender<Back<S>>);

impl<S> Drop for Alarm<S> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.send(Back::Panicked);
        }
    }
}

pub(super) struct Pool<'a, S> {
    jobs: Vec<mpsc::Sender<Arc<Job<S>>>>,
    back: mpsc::Receiver<Back<S>>,
    halt: &'a AtomicBool,
    gate: &'a Gate,
}

impl<S> Drop for Pool<'_, S> {
    /// The helpers leave: a helper waiting at the gate sees the halt, one waiting for a level
    /// sees its channel close.
    fn drop(&mut self) {
        self.halt.store(true, Ordering::SeqCst);
        self.gate.open();
        self.gate.cv.notify_all();
    }
}

impl<'a, S: Send + Sync> Pool<'a, S> {
    /// Start `threads - 1` helpers in `scope`; they end when the pool is dropped.
    pub fn start<'scope, M, H>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        fixed: &'scope Fixed<'scope, M, H>,
        threads: usize,
    ) -> Pool<'scope, S>
    where
        M: Model<State = S> + Sync,
        M::State: Hash,
        M::Action: Send + Sync,
        H: Hooks<M>,
        S: 'scope,
    {
        let (tx, back) = mpsc::channel();
        let mut jobs = Vec::new();
        for h in 1..threads {
            let (jtx, jrx) = mpsc::channel::<Arc<Job<S>>>();
            let tx = tx.clone();
            jobs.push(jtx);
            scope.spawn(move || {
                let _alarm = Alarm(tx.clone());
                let mut scratch = Scratch::new();
                let mut times = Times::default();
                loop {
                    let t = fixed.clock.start();
                    let Ok(job) = jrx.recv() else { break };
                    fixed.clock.add(t, &mut times.wait);
                    times.waits += 1;
                    while !fixed.halt.load(Ordering::Relaxed) {
                        let i = job.claim.fetch_add(1, Ordering::Relaxed);
                        if i >= job.inputs.len() {
                            break;
                        }
                        // A claimed chunk always gets an output: an empty one (no source
                        // examined) when the run halted meanwhile, which the merge stops at.
                        let out = match fixed.gate.admit(&job, i, fixed.window, fixed.halt, fixed.clock, &mut times) {
                            true => fixed.expand(&job, i, &mut scratch, &mut times),
                            false => ChunkOut::empty(),
                        };
                        let _ = tx.send(Back::Out(i, out));
                    }
                }
                fixed.report.push(format!("thread {h}"), times);
            });
        }
        Pool { jobs, back, halt: fixed.halt, gate: fixed.gate }
    }

    /// Expand `job` on the helpers and the calling thread, calling `merge(i, output)` for each
    /// chunk in order on the calling thread. False when `merge` says the run ends.
    pub fn level<M, H>(
        &self,
        fixed: &Fixed<M, H>,
        scratch: &mut Scratch<M>,
        times: &mut Times,
        job: Job<S>,
        mut merge: impl FnMut(usize, ChunkOut<S>) -> bool,
    ) -> bool
    where
        M: Model<State = S>,
        M::State: Hash,
        H: Hooks<M>,
    {
        let n = job.inputs.len();
        let job = Arc::new(job);
        if n > 1 {
            for j in &self.jobs {
                j.send(job.clone()).expect("a search thread ended early");
            }
        }
        // Outputs waiting for the merge: entry `k` is chunk `m + k`.
        let mut ready: VecDeque<Option<ChunkOut<S>>> = VecDeque::new();
        let mut m = 0;
        let place = |ready: &mut VecDeque<Option<ChunkOut<S>>>, m: usize, i: usize, o: ChunkOut<S>| {
            let k = i - m;
            while ready.len() <= k {
                ready.push_back(None);
            }
            ready[k] = Some(o);
        };
        let take = |b: Back<S>| match b {
            Back::Out(i, o) => (i, o),
            Back::Panicked => panic!("a search thread panicked"),
        };
        while m < n {
            while let Ok(b) = self.back.try_recv() {
                let (i, o) = take(b);
                place(&mut ready, m, i, o);
            }
            if let Some(Some(_)) = ready.front() {
                let out = ready.pop_front().flatten().expect("the next output");
                let t = fixed.clock.start();
                let go_on = merge(m, out);
                fixed.clock.add(t, &mut times.merge);
                if !go_on {
                    fixed.halt.store(true, Ordering::SeqCst);
                    fixed.gate.open();
                    return false;
                }
                m += 1;
                job.merged.store(m, Ordering::SeqCst);
                fixed.gate.open();
                continue;
            }
            // The next output in order is not ready: expand a chunk rather than wait.
            if job.claim.load(Ordering::Relaxed) < n.min(m + fixed.window) {
                let i = job.claim.fetch_add(1, Ordering::Relaxed);
                if i < n {
                    let o = fixed.expand(&job, i, scratch, times);
                    place(&mut ready, m, i, o);
                    continue;
                }
            }
            let t = fixed.clock.start();
            times.waits += 1;
            let b = self.back.recv().expect("a search thread panicked");
            fixed.clock.add(t, &mut times.wait);
            let (i, o) = take(b);
            place(&mut ready, m, i, o);
        }
        true
    }
}
