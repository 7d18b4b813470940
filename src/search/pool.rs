//! The search's worker threads: `threads - 1` helpers started once per run and fed one batch
//! of chunks after another; the calling thread works on each batch too, then merges it alone
//! while the helpers wait. Each thread keeps its scratch buffers (the action list, the reused
//! successor) for the whole run. A helper holds the visited set's read lock while it expands
//! and releases it before it reports the batch done, so the merge's write lock never waits.

use super::bfs::{ChunkOut, Scratch, Shared};
use super::frontier::Chunk;
use super::visited::Visited;
use super::{Hooks, Options, Progress, Stop};
use stateright::{Model, Property};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};

/// One batch: its chunks (each claimed once, by index) and what the threads read for it.
pub(super) struct Batch<S> {
    pub inputs: Vec<Mutex<Option<Chunk<S>>>>,
    pub claim: AtomicUsize,
    /// Per property: evaluate it (not yet discovered when the batch began, or `Eventually`).
    pub eval: Vec<bool>,
    pub progress: Progress,
    pub expand: bool,
}

/// What stays the same for the whole run.
pub(super) struct Fixed<'a, M: Model, H> {
    pub model: &'a M,
    pub hooks: &'a H,
    pub props: &'a [Property<M>],
    pub visited: &'a RwLock<Visited>,
    pub seed: u64,
    pub words: usize,
    pub live: bool,
    pub opts: &'a Options<'a>,
    pub halt: &'a AtomicBool,
    pub reason: &'a Mutex<Option<Stop>>,
    pub encoded: bool,
}

impl<M, H> Fixed<'_, M, H>
where
    M: Model,
    M::State: Hash,
    H: Hooks<M>,
{
    /// Claim and expand chunks of `b` until none is left; `put` receives each output.
    fn work(&self, b: &Batch<M::State>, scratch: &mut Scratch<M>, mut put: impl FnMut(usize, ChunkOut<M::State>)) {
        let visited = self.visited.read().unwrap();
        let sh = Shared {
            model: self.model,
            hooks: self.hooks,
            props: self.props,
            eval: &b.eval,
            visited: &visited,
            seed: self.seed,
            words: self.words,
            expand: b.expand,
            live: self.live,
            opts: self.opts,
            progress: b.progress,
            halt: self.halt,
            reason: self.reason,
            encoded: self.encoded,
        };
        loop {
            let i = b.claim.fetch_add(1, Ordering::Relaxed);
            if i >= b.inputs.len() {
                return;
            }
            let chunk = b.inputs[i].lock().unwrap().take().expect("each chunk is claimed once");
            put(i, sh.expand_chunk(chunk, scratch));
        }
    }
}

/// What a helper sends back: a chunk's output, or the end of its part of a batch.
enum Back<S> {
    Out(usize, ChunkOut<S>),
    Done,
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

pub(super) struct Pool<S> {
    jobs: Vec<mpsc::Sender<Arc<Batch<S>>>>,
    back: mpsc::Receiver<Back<S>>,
}

impl<S: Send + Sync> Pool<S> {
    /// Start `threads - 1` helpers in `scope`; they end when the pool is dropped.
    pub fn start<'scope, M, H>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        fixed: &'scope Fixed<'scope, M, H>,
        threads: usize,
    ) -> Self
    where
        M: Model<State = S> + Sync,
        M::State: Hash,
        M::Action: Send + Sync,
        H: Hooks<M>,
        S: 'scope,
    {
        let (tx, back) = mpsc::channel();
        let mut jobs = Vec::new();
        for _ in 1..threads {
            let (jtx, jrx) = mpsc::channel::<Arc<Batch<S>>>();
            let tx = tx.clone();
            jobs.push(jtx);
            scope.spawn(move || {
                let _alarm = Alarm(tx.clone());
                let mut scratch = Scratch::new();
                for b in jrx {
                    fixed.work(&b, &mut scratch, |i, o| {
                        let _ = tx.send(Back::Out(i, o));
                    });
                    drop(b);
                    let _ = tx.send(Back::Done);
                }
            });
        }
        Pool { jobs, back }
    }

    /// Expand `b` on the helpers and the calling thread: the outputs in chunk order (`None`:
    /// never claimed, after the stop hook fired).
    pub fn expand<M, H>(&self, fixed: &Fixed<M, H>, scratch: &mut Scratch<M>, b: Batch<S>) -> Vec<Option<ChunkOut<S>>>
    where
        M: Model<State = S>,
        M::State: Hash,
        H: Hooks<M>,
    {
        let n = b.inputs.len();
        let mut outs: Vec<Option<ChunkOut<S>>> = (0..n).map(|_| None).collect();
        let helpers = if n > 1 { self.jobs.len().min(n - 1) } else { 0 };
        let b = Arc::new(b);
        for j in &self.jobs[..helpers] {
            j.send(b.clone()).expect("a search thread ended early");
        }
        fixed.work(&b, scratch, |i, o| outs[i] = Some(o));
        let mut done = 0;
        while done < helpers {
            match self.back.recv().expect("a search thread panicked") {
                Back::Out(i, o) => outs[i] = Some(o),
                Back::Done => done += 1,
                Back::Panicked => panic!("a search thread panicked"),
            }
        }
        outs
    }
}
