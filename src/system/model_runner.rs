//! The worker's step (vLLM `GPUModelRunner.execute_model` with the KV-connector mixin): the
//! connector's worker hooks around the forward pass, and the forward pass itself on the
//! content oracle.
//!
//! The forward pass over request R's tokens `[s, e)` reads the KV of positions `[0, s)` from
//! R's blocks and writes positions `[s, e)`. Within one forward, every write lands before any
//! read (per layer), so a request may read a block another request writes in the same pass.
//! A request that reads wrong KV writes wrong KV (taint), and so does anyone who reads that.

use super::collections::side::FastMap;
use super::connector::{BitSet, SchedOut, StepScratch, WorkerCtx, WorkerStep};
use super::engine::{Ctx, Engine, StepInput};
use super::events::{Event, Events};
use super::expert_rows::{self, scheduler as rows_sched, Crash, Forwarded, RowsOutput};
use super::ghost::Breach;
use super::types::{cdiv, fold_token_iter, fold_tokens, BadKind, BlockId, ContentTag, JobId, ReqId};
use super::workload::RequestSpec;
use crate::system::collections::pack::pack_fields;
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};

/// What the worker reports in `ModelRunnerOutput.kv_connector_output`.
#[derive(Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct WorkerOut {
    pub(crate) completed: Vec<JobId>,
    pub(crate) finished_recving: Vec<ReqId>,
    pub(crate) invalid_blocks: BTreeSet<BlockId>,
    /// `failed_recving` (0.34, rule `failed_load_request_level`): requests whose async load
    /// failed as a whole (also in `finished_recving`; their jobs are in `completed`, failed).
    pub(crate) failed_recving: Vec<ReqId>,
    /// `finished_sending`: requests whose delayed blocks the consumer is done with (NIXL).
    pub(crate) finished_sending: Vec<ReqId>,
    /// Router replay: the rows each request emitted (`aux_output_connector_output`).
    pub(crate) rows: Vec<RowsOutput>,
}

pack_fields!(clone WorkerOut {
    completed,
    finished_recving,
    invalid_blocks,
    failed_recving,
    finished_sending,
    rows
});

impl WorkerOut {
    /// Empty, as `default()`, but keeping the lists' buffers (the thread's reused report,
    /// `Engine::step`).
    pub(crate) fn clear(&mut self) {
        let WorkerOut { completed, finished_recving, invalid_blocks, failed_recving, finished_sending, rows } = self;
        completed.clear();
        finished_recving.clear();
        invalid_blocks.clear();
        failed_recving.clear();
        finished_sending.clear();
        rows.clear();
    }

    /// Empty `self` becomes `x`: `x`'s non-empty lists move in, and `self`'s buffers stay for
    /// the empty ones.
    fn set(&mut self, x: WorkerOut) {
        fn put<T>(to: &mut Vec<T>, x: Vec<T>) {
            if !x.is_empty() {
                *to = x;
            }
        }
        let WorkerOut { completed, finished_recving, invalid_blocks, failed_recving, finished_sending, rows } = x;
        put(&mut self.completed, completed);
        put(&mut self.finished_recving, finished_recving);
        self.invalid_blocks = invalid_blocks;
        put(&mut self.failed_recving, failed_recving);
        put(&mut self.finished_sending, finished_sending);
        put(&mut self.rows, rows);
    }
}

/// Run the worker side of one step, reporting into `w` (empty: the thread's reused report).
pub fn execute(
    e: &mut Engine,
    ctx: Ctx,
    out: &SchedOut,
    scratch: &StepScratch,
    input: &StepInput,
    w: &mut WorkerOut,
    ev: &mut Events,
) {
    let invalid = {
        let s = WorkerStep { out, scratch, input, reqs: &e.reqs };
        let mut cx = WorkerCtx { ctx, pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev };
        e.conn.worker_before_forward(s, &mut cx)
    };
    if let (Some(a), Some(meta)) = (e.aux.as_mut(), scratch.aux.as_ref()) {
        if let Err(full) = rows_sched::begin_step(a, meta, ctx.cfg.block_size) {
            a.dead = true;
            e.ghost.breach(Breach::RowsMissing);
            let detail = store_full(full, "retaining the step's keys");
            ev.emit(|| Event::Violation { property: "rows-present", detail });
        }
    }
    forward(e, ctx, out, &invalid, ev);
    {
        let s = WorkerStep { out, scratch, input, reqs: &e.reqs };
        let mut cx = WorkerCtx { ctx, pool: &mut e.pool, ghost: &mut e.ghost, ev: &mut *ev };
        debug_assert!(*w == WorkerOut::default(), "the worker reports into an empty report");
        w.set(e.conn.worker_after_forward(s, &mut cx));
    }
    if let Some(a) = e.aux.as_mut() {
        let steps: Vec<Forwarded> = out
            .scheduled
            .iter()
            .filter(|s| s.tokens > 0)
            .map(|s| Forwarded { req: s.req, token_start: s.start, n: s.tokens, samples: s.samples })
            .collect();
        match expert_rows::worker::commit_output(
            &mut a.workers,
            &mut a.row_store,
            &steps,
            ctx.cfg.block_size,
            ctx.rules.aux_partial_skip,
        ) {
            Ok(rows) => {
                for o in &rows {
                    if o.from_store {
                        e.ghost.mark(super::ghost::Mark::RowsFromStore);
                        // The rows of [start, stored_end) came from the row store.
                        let b = ctx.cfg.block_size;
                        let keys = a.workers[o.req as usize].as_ref().map_or(0, |w| w.keys.len() as u32);
                        let stored_end = (o.end / b).min(keys) * b;
                        ev.stat(|s| s.rows_from_store += u64::from(stored_end.saturating_sub(o.start)));
                    }
                    ev.emit(|| Event::RowsEmitted { req: o.req, start: o.start, end: o.end, from_store: o.from_store });
                }
                w.rows = rows;
            }
            Err((r, crash)) => {
                a.dead = true;
                e.ghost.breach(Breach::RowsMissing);
                let name = &ctx.wl.requests[r as usize].name;
                let detail = match crash {
                    Crash::MissingRows { block, key } => format!(
                        "{name}'s rows need block {block} ({}) from the row store, which does not hold it: BlockObjectStoreError, the engine dies",
                        ctx.wl.label(key)
                    ),
                    Crash::Buffer(why) => format!("{name}: routed-experts buffer assertion ({why}): the engine dies"),
                    Crash::StoreFull(full) => store_full(full, &format!("publishing {name}'s rows")),
                };
                ev.emit(|| Event::Violation { property: "rows-present", detail });
            }
        }
    }
    let s = WorkerStep { out, scratch, input, reqs: &e.reqs };
    let mut cx = WorkerCtx { ctx, pool: &mut e.pool, ghost: &mut e.ghost, ev };
    e.conn.worker_end_step(s, w, &mut cx);
}

/// rows-present's detail when the 0.31/0.32 row store cannot make room.
fn store_full(full: expert_rows::StoreFull, doing: &str) -> String {
    format!(
        "the row store cannot retain the requested batch while {doing}: {} objects, every one over its {} slots \
         referenced by a live request: BlockObjectStoreError, the engine dies (0.33's store grows instead)",
        full.objects, full.limit
    )
}

/// The tag a block holds after request `spec` wrote its positions `[i*B, i*B+len)`.
/// Positions past the script (an async step scheduled after the last sampled token) hold
/// KV of tokens nobody will read; they get a tag no reader expects.
pub(crate) fn written_tag(spec: &RequestSpec, i: usize, len: u32, b: u32) -> ContentTag {
    let from = i * b as usize;
    let to = from + len as usize;
    // What the block holds: the content hashes (0.24's unrehashed session keys name others).
    let hashes = spec.content_hashes();
    if len == b && i < hashes.len() {
        ContentTag::full(hashes[i], b)
    } else if to <= spec.tokens.len() {
        ContentTag::Kv { hash: fold_tokens(spec.content_parent(i), &spec.tokens[from..to]), len: len as u16 }
    } else {
        let known = &spec.tokens[from.min(spec.tokens.len())..];
        let tokens = known.iter().copied().chain(std::iter::repeat(u32::MAX)).take(len as usize);
        ContentTag::Kv { hash: fold_token_iter(spec.content_parent(i), tokens), len: len as u16 }
    }
}

/// Does `tag` hold the KV of the first `need` positions of block `i` of `spec`?
pub fn tag_serves(tag: ContentTag, spec: &RequestSpec, i: usize, need: u32, b: u32) -> bool {
    match tag {
        ContentTag::Kv { hash, len } if u32::from(len) >= need => {
            let from = i * b as usize;
            let to = from + len as usize;
            if u32::from(len) == b {
                spec.content_hashes().get(i).is_some_and(|h| h.0 == hash)
            } else {
                to <= spec.tokens.len() && fold_tokens(spec.content_parent(i), &spec.tokens[from..to]) == hash
            }
        }
        _ => false,
    }
}

struct Write {
    req: ReqId,
    block: BlockId,
    tag: ContentTag,
}

thread_local! {
    /// A forward pass's write list and its entries' offsets in it, kept for the thread's next
    /// pass (taken for a pass, emptied and put back after it): a pass allocates nothing for
    /// them once they have grown.
    static FORWARD_BUFS: Cell<(Vec<Write>, Vec<usize>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

fn forward(e: &mut Engine, ctx: Ctx, out: &SchedOut, invalid: &BTreeSet<BlockId>, ev: &mut Events) {
    let b = ctx.cfg.block_size;
    let n: u32 = out.scheduled.iter().map(|s| s.tokens / b + 2).sum();
    let (mut writes, mut own_first) = FORWARD_BUFS.take();
    writes.reserve(n as usize);
    // Where each scheduled entry's writes start in `writes`.
    own_first.reserve(out.scheduled.len());
    for s in &out.scheduled {
        own_first.push(writes.len());
        let spec = ctx.wl.spec(s.req, e.reqs[s.req as usize].turn);
        let q = &e.reqs[s.req as usize];
        let end = s.start + s.tokens;
        for i in (s.start / b)..cdiv(end, b) {
            let Some(&blk) = q.table.get(i as usize) else {
                continue;
            };
            let len = ((i + 1) * b).min(end) - i * b;
            writes.push(Write { req: s.req, block: blk, tag: written_tag(spec, i as usize, len, b) });
        }
    }
    // The pass's writes by block; the last write of each block wins (a block written twice in
    // one pass is a bug the reads below see). Built at the first read of a block that another
    // request wrote or that was written twice: `once` and `twice` answer every other read
    // (nearly all of them; a decode step reads the block it writes).
    let mut written: Option<FastMap<BlockId, (ReqId, ContentTag)>> = None;
    let room = e.pool.num_blocks() as usize;
    let (mut once, mut twice) = (BitSet::with_room(room), BitSet::with_room(room));
    for w in &writes {
        if once.contains(w.block) {
            twice.insert(w.block);
        } else {
            once.insert(w.block);
        }
    }
    let loading: BTreeSet<BlockId> = e.conn.loading_blocks();
    // Where each request's reads start: 0, or past the prefix the read cache vouches for.
    let skip = read_cache_prepare(e, out, &writes, &loading, b);
    // Reads, with taint propagated to a fixpoint over same-pass writers.
    let mut bad: BTreeMap<ReqId, String> = BTreeMap::new();
    loop {
        let mut changed = false;
        for (si, s) in out.scheduled.iter().enumerate() {
            if bad.contains_key(&s.req) || s.start == 0 {
                continue;
            }
            let spec = ctx.wl.spec(s.req, e.reqs[s.req as usize].turn);
            let q = &e.reqs[s.req as usize];
            for i in skip.get(si).copied().unwrap_or(0)..cdiv(s.start, b) {
                let need = (s.start - i * b).min(b);
                let Some(&blk) = q.table.get(i as usize) else {
                    bad.insert(s.req, format!("block {i} of {} is not allocated", spec.name));
                    changed = true;
                    break;
                };
                let own_only = || {
                    !twice.contains(blk) && writes.get(own_first[si]).is_some_and(|w| w.block == blk && w.req == s.req)
                };
                let view = if !once.contains(blk) || own_only() {
                    e.pool.content(blk)
                } else {
                    let written =
                        written.get_or_insert_with(|| writes.iter().map(|w| (w.block, (w.req, w.tag))).collect());
                    match written.get(&blk) {
                        Some(&(w, tag)) if w != s.req => {
                            if bad.contains_key(&w) {
                                ContentTag::Bad(BadKind::Tainted)
                            } else {
                                tag
                            }
                        }
                        _ => e.pool.content(blk),
                    }
                };
                if loading.contains(&blk) {
                    e.ghost.breach(Breach::UnsafeLoad);
                    ev.emit(|| Event::Violation {
                        property: "load-safety",
                        detail: format!("{} reads block {blk} while a load is still writing it", spec.name),
                    });
                }
                if !tag_serves(view, spec, i as usize, need, b) {
                    let want = ctx.wl.label(spec.content_hashes().get(i as usize).copied().unwrap_or_default());
                    let view = ctx.wl.describe(view);
                    bad.insert(
                        s.req,
                        format!("{} reads block {blk} (its block {i}, expects {want}) but it holds {view}", spec.name),
                    );
                    changed = true;
                    break;
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Blocks that submitted store copies still read (a write to one tears that copy).
    let watched = e.conn.forward_watch(room);
    for w in &writes {
        let tag = if bad.contains_key(&w.req) { ContentTag::Bad(BadKind::Tainted) } else { w.tag };
        e.pool.set_content(w.block, tag);
        if loading.contains(&w.block) {
            e.ghost.breach(Breach::UnsafeLoad);
            let (blk, name) = (w.block, &ctx.wl.spec(w.req, e.reqs[w.req as usize].turn).name);
            ev.emit(|| Event::Violation {
                property: "load-safety",
                detail: format!("{name} writes block {blk} while a load is still writing it"),
            });
        }
        if watched.as_ref().is_none_or(|set| set.contains(w.block)) {
            e.conn.forward_write(w.block, &mut e.ghost, ev);
        }
    }
    read_cache_record(e, out, &bad, b);
    writes.clear();
    own_first.clear();
    FORWARD_BUFS.set((writes, own_first));
    for (r, why) in bad {
        let s = out.scheduled.iter().find(|s| s.req == r).expect("scheduled");
        let q = &e.reqs[r as usize];
        // A request whose computed prefix holds a block that failed to load in this step is
        // rewound by the scheduler and its output dropped: its read is expected.
        let excused = q.table.iter().take(cdiv(s.start, b) as usize).any(|blk| invalid.contains(blk));
        if !excused {
            e.ghost.breach(Breach::BadRead);
            ev.emit(|| Event::Violation { property: "kv-read-integrity", detail: why });
        }
    }
}

/// Trace replay's read cache (off in the checker: every read is done). A request's verified
/// prefix is the leading blocks of its table that an earlier pass read and found holding its
/// own prefix. It stays valid while those blocks stay in its table, in place, with no new
/// content: a table that lost them drops its prefix; new content on any verified block
/// (`PoolLog::stale`), or a write or an in-flight load about to touch one in this pass, drops
/// every prefix. What is left is exactly what the full read would find right, so reads start
/// past it. Returns, per scheduled entry, the first block to read.
fn read_cache_prepare(
    e: &mut Engine,
    out: &SchedOut,
    writes: &[Write],
    loading: &BTreeSet<BlockId>,
    b: u32,
) -> Vec<u32> {
    let Engine { reads, pool, reqs, .. } = e;
    let (Some(rc), Some(log)) = (reads.get_mut(), pool.log.get_mut()) else {
        return Vec::new();
    };
    if rc.verified.len() < reqs.len() {
        rc.verified.resize(reqs.len(), Vec::new());
    }
    if log.recheck {
        log.recheck = false;
        for (r, v) in rc.verified.iter_mut().enumerate() {
            if v.is_empty() {
                continue;
            }
            let t = &reqs[r].table;
            if t.len() < v.len() || t[..v.len()] != v[..] {
                for &blk in v.iter() {
                    log.verified_by[blk as usize] -= 1;
                }
                v.clear();
            }
        }
    }
    let touched = |blk: &BlockId| log.verified_by[*blk as usize] > 0;
    if log.stale || writes.iter().any(|w| touched(&w.block)) || loading.iter().any(touched) {
        for v in rc.verified.iter_mut() {
            v.clear();
        }
        log.verified_by.iter_mut().for_each(|c| *c = 0);
        log.stale = false;
    }
    out.scheduled
        .iter()
        .map(|s| {
            let v = &mut rc.verified[s.req as usize];
            let full = (s.start / b) as usize;
            if v.len() > full {
                for &blk in &v[full..] {
                    log.verified_by[blk as usize] -= 1;
                }
                v.truncate(full);
            }
            v.len() as u32
        })
        .collect()
}

/// After the pass: every request that read right has its full read blocks verified.
fn read_cache_record(e: &mut Engine, out: &SchedOut, bad: &BTreeMap<ReqId, String>, b: u32) {
    let Engine { reads, pool, reqs, .. } = e;
    let (Some(rc), Some(log)) = (reads.get_mut(), pool.log.get_mut()) else {
        return;
    };
    for s in &out.scheduled {
        if bad.contains_key(&s.req) {
            continue;
        }
        let v = &mut rc.verified[s.req as usize];
        let t = &reqs[s.req as usize].table;
        let full = ((s.start / b) as usize).min(t.len());
        for &blk in &t[v.len().min(full)..full] {
            log.verified_by[blk as usize] += 1;
        }
        if v.len() < full {
            v.extend_from_slice(&t[v.len()..full]);
        }
    }
}
