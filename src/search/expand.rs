//! A thread's expansion of one chunk of a level, in two passes.
//!
//! 1. **Generate.** Decode each source, evaluate the properties on it, and generate its
//!    successors. Each successor is encoded once, straight into the chunk's arena, and
//!    fingerprinted; the CPU is asked to fetch the visited-set slot that fingerprint will probe
//!    ([`Table::prefetch`]).
//! 2. **Look up.** In generation order, look each successor up in the visited set and among the
//!    chunk's earlier candidates. A successor found in neither is a candidate (the merge decides
//!    whether it is new): its bytes are copied from the arena into the chunk's pieces
//!    ([`frontier::cut`]).
//!
//! On a large run the visited set is far bigger than the caches, and a look-up done right after
//! its successor waited for memory each time (8% of the flagship's time). Split like this, the
//! slots arrive while the thread steps the chunk's other states. The outcome is the one a
//! look-up per successor gives: the same candidates, edges and counts in the same order.

use super::bfs::{ChunkOut, Succ, DUP, NEW};
use super::fingerprint::{fingerprint, fingerprint_bytes, Fingerprint};
use super::frontier::{self, Chunk};
use super::liveness;
use super::visited::Table;
use super::{Hooks, Options, Progress, Stop};
use stateright::{Expectation, Model, Property};
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

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

/// A successor generated in the first pass, waiting for its look-up.
struct Pending {
    fp: Fingerprint,
    /// Its index in the source's action list.
    action: u32,
    /// Its fairness class.
    class: u8,
    /// The end of its encoding in the arena (encoded frontiers).
    end: u32,
}

impl<M, H> Shared<'_, M, H>
where
    M: Model,
    M::State: Hash,
    H: Hooks<M>,
{
    pub(super) fn expand_chunk(&self, mut chunk: Chunk<M::State>, scratch: &mut Scratch<M>) -> ChunkOut<M::State> {
        let n = chunk.len();
        let mut out =
            ChunkOut { done: 0, hits: vec![0; n * self.words], ends: Vec::with_capacity(n), ..ChunkOut::empty() };
        scratch.pending.clear();
        scratch.sources.clear();
        scratch.held.clear();
        scratch.arena.clear();
        self.generate(&mut chunk, n, scratch, &mut out);
        self.look_up(scratch, &mut out);
        out
    }

    /// The first pass: properties, successors, fingerprints, prefetches (module docs).
    fn generate(&self, chunk: &mut Chunk<M::State>, n: usize, scratch: &mut Scratch<M>, out: &mut ChunkOut<M::State>) {
        let Scratch { acts, next: reuse, cur, arena, pending, sources, held, .. } = scratch;
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
                    // state, which is not read again (encoded frontiers only: the successor's
                    // bytes are in the arena before the next state is decoded).
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
                    let keyed = rep.as_ref().unwrap_or(next);
                    let fp = if self.encoded {
                        let start = arena.len();
                        self.hooks.encode(self.model, keyed, arena);
                        fingerprint_bytes(&arena[start..], self.seed)
                    } else {
                        fingerprint(keyed, self.seed)
                    };
                    self.visited.prefetch(fp);
                    if !self.encoded {
                        held.push(rep.unwrap_or_else(|| reuse.take().expect("a successor")));
                    }
                    pending.push(Pending { fp, action: i as u32, class, end: arena.len() as u32 });
                }
            }
            sources.push((pending.len() as u32, generated));
        }
    }

    /// The second pass: each successor looked up, in order; the candidates kept (module docs).
    fn look_up(&self, scratch: &mut Scratch<M>, out: &mut ChunkOut<M::State>) {
        let Scratch { seen, arena, spans, pending, sources, held, .. } = scratch;
        seen.clear();
        spans.clear();
        let mut held = held.drain(..);
        // Where the next successor's bytes begin in the arena.
        let mut start = 0u32;
        let mut first = 0;
        for &(end, generated) in sources.iter() {
            for p in &pending[first..end as usize] {
                let state = if self.encoded { None } else { held.next() };
                let bytes = (start, p.end);
                start = p.end;
                let known = match self.visited.get(p.fp) {
                    Some(_) if !self.live => continue,
                    Some(id) => id,
                    None => match seen.insert(p.fp, &out.fps) {
                        // A candidate already: without a graph, nothing to record.
                        Err(_) if !self.live => continue,
                        Err(c) => {
                            out.dups.push(c);
                            DUP
                        }
                        Ok(()) => {
                            if self.encoded {
                                spans.push(bytes);
                            } else {
                                out.states.push(state.expect("a held successor"));
                            }
                            out.fps.push(p.fp);
                            NEW
                        }
                    },
                };
                out.succs.push(Succ { known, action: p.action, class: p.class });
            }
            first = end as usize;
            out.ends.push((out.succs.len() as u32, generated));
            out.done += 1;
        }
        if !spans.is_empty() {
            // Copied while in this thread's cache, so the merge moves the pieces and copies nothing.
            frontier::cut(arena, spans, &mut out.pieces);
        }
    }
}

/// The candidates of the chunk being expanded, by fingerprint: a successor that two of its
/// sources reach is kept once. Open addressing over indices into the chunk's `fps`.
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
/// frontier state last decoded (encoded frontiers), the chunk's candidates by fingerprint, the
/// arena its successors are encoded into, and the first pass's successors and sources.
pub(super) struct Scratch<M: Model> {
    acts: Vec<M::Action>,
    next: Option<M::State>,
    cur: Option<M::State>,
    seen: Seen,
    /// Every successor's encoding, in generation order.
    arena: Vec<u8>,
    /// The start and end of each candidate's encoding in the arena.
    spans: Vec<(u32, u32)>,
    pending: Vec<Pending>,
    /// Per source: the end of its successors in `pending`, and how many it generated.
    sources: Vec<(u32, u32)>,
    /// Whole frontiers: each pending successor, in order.
    held: Vec<M::State>,
}

impl<M: Model> Scratch<M> {
    pub(super) fn new() -> Self {
        Scratch {
            acts: Vec::new(),
            next: None,
            cur: None,
            seen: Seen::default(),
            arena: Vec::new(),
            spans: Vec::new(),
            pending: Vec::new(),
            sources: Vec::new(),
            held: Vec::new(),
        }
    }
}
