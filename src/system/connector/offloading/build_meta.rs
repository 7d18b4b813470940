//! OffloadingConnector, scheduler side: `build_connector_meta` (vLLM
//! `offloading/scheduler.py: OffloadingConnectorScheduler.build_connector_meta` and
//! `_build_store_jobs`), plus the store-coverage ghost it feeds.
//!
//! Store jobs pair offload keys and GPU blocks by index into the mirror table, from the store
//! cursor up to the last complete chunk the request has computed (or will have computed once
//! this step's forward pass runs).

use super::{key_of, Job, JobKind, OffloadingReq, OffloadingState, Phase};
use crate::system::collections::inline_vec::InlineVec;
use crate::system::connector::{ConnCtx, HookCtx, RequestRef, SchedOut, StepScratch};
use crate::system::events::{Event, Events};
use crate::system::ghost::{Breach, Ghost, Mark};
use crate::system::request::ReqState;
use crate::system::rules::{FinishWatermark, HostLru};
use crate::system::types::{FinishReason, ReqId, Status, NULL_BLOCK};
use crate::system::workload::RequestSpec;

impl OffloadingState {
    /// `build_connector_meta`: mirror updates, flushes, store jobs, finish signals.
    pub(super) fn build_connector_meta(
        &mut self,
        out: &SchedOut,
        reqs: &[ReqState],
        scratch: &mut StepScratch,
        cx: &mut HookCtx,
    ) {
        let (c, pool, ghost, ev) = (&cx.c, &mut *cx.pool, &mut *cx.ghost, &mut *cx.ev);
        let wl = c.wl;
        // Coverage ghost: a chunk is owed while the request still holds its KV. A preemption
        // (0 computed) or a failed load (computed cut back to the first invalid block, or to 0)
        // drops it: nothing can offer it any more, and a restart owes again what it recomputes.
        // Without this, a chunk the host refused for room (final-store-kept's business) and then
        // dropped was reported never offered when the request finished before recomputing it.
        let tokens_per_chunk = c.tokens_per_chunk();
        for (r, st) in self.reqs.iter_mut().enumerate() {
            if let Some(st) = st.as_mut().filter(|st| st.owed.any()) {
                let held = reqs[r].num_computed / tokens_per_chunk;
                st.owed.retain_below(held);
            }
        }
        // _update_req_states
        for s in &out.scheduled {
            let st = self.reqs[s.req as usize].as_mut().expect("scheduled request is tracked");
            Self::update_offload_keys(st, &reqs[s.req as usize], wl.spec(s.req, reqs[s.req as usize].turn), c);
            if s.full_table && (s.resumed || s.start > 0) {
                ghost.mark(Mark::ReadmitFullTable);
            }
            if s.full_table && c.rules.full_table_resets_mirror {
                st.mirror.clear();
                st.mirror_ok.0 .0 = 0;
            }
            st.mirror.extend_from_slice(&s.blocks);
            let table = &reqs[s.req as usize].table;
            // Replay: tables only grow until taken whole and the mirror only grows until
            // cleared, so a prefix found equal before, with no table taken since, still is.
            let same = match pool.log.get() {
                Some(l) => {
                    let (n, takes) = st.mirror_ok.0;
                    let n = if takes == l.table_takes && n as usize <= table.len() { n as usize } else { 0 };
                    let same = st.mirror.len() == table.len() && st.mirror.get(n..) == table.get(n..);
                    st.mirror_ok.0 = if same { (table.len() as u32, l.table_takes) } else { (0, 0) };
                    debug_assert_eq!(same, st.mirror == *table, "incremental mirror-table check");
                    same
                }
                None => st.mirror == *table,
            };
            if !same {
                ghost.breach(Breach::MirrorMismatch);
                let (mirror, table) = (st.mirror.clone(), table.clone());
                let name = &wl.spec(s.req, 0).name;
                ev.emit(|| Event::Violation {
                    property: "mirror-table",
                    detail: format!("{name}: the connector's block table {mirror:?} is not the scheduler's {table:?}"),
                });
            }
            scratch.allocated.extend(s.blocks.iter().copied().filter(|&b| b != NULL_BLOCK));
        }
        // Flush the stores of preempted requests (#29870).
        if c.rules.flush_preempted_stores {
            for &p in &out.preempted {
                if let Some(st) = &self.reqs[p as usize] {
                    for &j in &st.transfer_jobs {
                        if !scratch.load_jobs.contains(&j) {
                            scratch.flush.insert(j);
                        }
                    }
                }
            }
        }
        // Flush stores that still read a re-allocated block.
        for (b, js) in &self.fences {
            if scratch.allocated.contains(*b) {
                scratch.flush.extend(js.iter().copied());
            }
        }
        // Coverage ghost: chunks whose last token this step computes are owed a store offer.
        for s in &out.scheduled {
            let spec = wl.spec(s.req, reqs[s.req as usize].turn);
            let mut end = s.start + s.tokens;
            if c.offload_prompt_only {
                end = end.min(spec.num_prompt_tokens());
            }
            // Only chunks the host tier lacks create a duty to store them.
            for ci in s.start / tokens_per_chunk..end / tokens_per_chunk {
                if !self.host.contains(&key_of(spec, ci, c)) {
                    self.chunks_computed(s.req, ci, ci + 1);
                }
            }
        }
        // _build_store_jobs: scheduled requests, then requests finished since last step (and,
        // under fix-final-store, finished requests whose last store waits for room).
        // (Collected only when some held request waits: nothing is allocated otherwise.)
        let retries: Vec<ReqId> =
            self.held.iter().filter(|h| h.waiting && !out.finished.contains(&h.req)).map(|h| h.req).collect();
        let visits = out
            .scheduled
            .iter()
            .map(|s| (s.req, Some(s.tokens)))
            .chain(out.finished.iter().filter(|_| c.rules.visit_finished).map(|&f| (f, None)))
            .chain(retries.iter().map(|&f| (f, None)));
        for (r, scheduled) in visits {
            let q = RequestRef { id: r, state: &reqs[r as usize], spec: wl.spec(r, reqs[r as usize].turn) };
            self.build_store_job(
                q,
                scheduled,
                scratch,
                &mut HookCtx { c: *c, pool: &mut *pool, ghost: &mut *ghost, ev: &mut *ev },
            );
        }
        if !scratch.flush.is_empty() {
            ev.emit(|| Event::JobsToFlush { jobs: scratch.flush.iter().copied().collect() });
        }
        for &f in out.finished.iter().chain(&retries) {
            if self.keep_waiting(f) {
                continue; // the finish is signalled once its last store is settled
            }
            self.check_finished(f, wl.spec(f, reqs[f as usize].turn), c, ghost, ev);
            if let Some(st) = self.reqs[f as usize].as_mut() {
                st.finished_signaled = true;
                self.host.on_request_finished(&mut st.access);
                if st.transfer_jobs.is_empty() {
                    self.reqs[f as usize] = None;
                }
            }
        }
    }

    /// fix-final-store: after the visit of held request `r`, does its refused last store wait
    /// for room? Only while some transfer is in flight: its completion can unpin or make
    /// evictable the entries that refused it. With none, the refusal is for good (the offer
    /// does not fit) and the store is given up, as vLLM does at once.
    fn keep_waiting(&mut self, r: ReqId) -> bool {
        let refused = self.reqs[r as usize].as_ref().is_some_and(|st| st.refused.any());
        let in_flight = !self.jobs.is_empty();
        let Some(h) = self.held.iter_mut().find(|h| h.req == r) else {
            return false;
        };
        h.waiting = refused && in_flight;
        h.waiting
    }

    /// The chunks a store visit of `r` offers, by chunk index (`_build_store_jobs`: from the
    /// cursor up to the watermark's last complete chunk, skipping chunks with a null block),
    /// and the chunk count up to the watermark.
    #[inline(always)]
    pub(super) fn store_candidates<'a>(
        st: &'a OffloadingReq,
        req: &ReqState,
        spec: &RequestSpec,
        scheduled: Option<u32>,
        c: &ConnCtx,
    ) -> (impl Iterator<Item = u32> + 'a, u32) {
        let (blocks_per_chunk, tokens_per_chunk) = (c.blocks_per_chunk, c.tokens_per_chunk());
        let num_tokens = req.num_tokens(spec);
        let watermark = match (req.status, scheduled) {
            (Status::Finished(FinishReason::Aborted), _) => req.num_computed,
            // 0.34 (`_build_store_jobs`): a finished request's watermark is clamped to the GPU
            // prefix cache's commit point, min(num_computed_tokens, max(num_prompt_tokens,
            // num_tokens - 1)): an error mid-prefill stores what was computed (#63937), and
            // under async scheduling the position of the last sampled token, still in flight,
            // is not stored.
            (Status::Finished(FinishReason::Error), _) if c.rules.error_watermark_computed => {
                req.num_computed.min(spec.num_prompt_tokens().max(num_tokens.saturating_sub(1)))
            }
            (Status::Finished(_), _) => match c.rules.finish_watermark {
                FinishWatermark::NumTokens => num_tokens,
                FinishWatermark::PromptOrTokensMinusOne => spec.num_prompt_tokens().max(num_tokens.saturating_sub(1)),
            },
            (_, Some(n)) => req.num_computed + n,
            (_, None) => req.num_computed,
        };
        let mut offloadable = watermark.min(num_tokens);
        if c.offload_prompt_only {
            offloadable = offloadable.min(spec.num_prompt_tokens());
        }
        let storable = (offloadable / tokens_per_chunk).min(st.mirror.len() as u32 / blocks_per_chunk).min(st.num_keys);
        let chunks = (st.cursor..storable).filter(move |&ci| {
            !st.mirror[(ci * blocks_per_chunk) as usize..((ci + 1) * blocks_per_chunk) as usize].contains(&NULL_BLOCK)
        });
        (chunks, storable)
    }

    fn build_store_job(&mut self, q: RequestRef, scheduled: Option<u32>, scratch: &mut StepScratch, cx: &mut HookCtx) {
        let (r, req, spec) = (q.id, q.state, q.spec);
        let (pool, c, ghost, ev) = (&*cx.pool, &cx.c, &mut *cx.ghost, &mut *cx.ev);
        let Some(st) = self.reqs[r as usize].as_ref() else {
            return;
        };
        let (blocks_per_chunk, tokens_per_chunk) = (c.blocks_per_chunk, c.tokens_per_chunk());
        let finished = req.status.is_finished();
        // The offer, `(key, end position)`, and its chunk indices, in the step's reused lists.
        let (cands, cand_chunks) = (&mut scratch.offer, &mut scratch.offer_chunks);
        cands.clear();
        cand_chunks.clear();
        let (chunks, storable) = Self::store_candidates(st, req, spec, scheduled, c);
        for ci in chunks {
            cands.push((key_of(spec, ci, c), (ci + 1) * tokens_per_chunk));
            cand_chunks.push(ci);
        }
        let (cands, cand_chunks) = (&*cands, &*cand_chunks);
        let st = self.reqs[r as usize].as_mut().unwrap();
        // Ghost: only this visit's refusals count as the request's latest offer.
        st.refused.clear();
        // advance_stored_idx: 0.32+ take the max; 0.24 assigns.
        let advanced = |cur: u32| if c.rules.cursor_monotonic { cur.max(storable) } else { storable };
        if cands.is_empty() {
            st.cursor = advanced(st.cursor);
            return;
        }
        let stored = self.host.prepare_store(cands, &mut st.access, ghost, ev);
        let st = self.reqs[r as usize].as_mut().unwrap();
        let Some(out) = stored else {
            ev.stat(|s| s.store_refusals += 1);
            ghost.mark(Mark::StoreRefused);
            ev.emit(|| Event::StoreRefused { req: r, keys: cands.iter().map(|(k, _)| *k).collect() });
            // No room. A running request offers these chunks again at its next step; for a
            // finished request this was the last chance (final-store-kept's business).
            for &ci in cand_chunks {
                st.refused.insert(ci);
            }
            if c.rules.cursor_advance_on_store_failure {
                st.cursor = st.cursor.max(storable);
            }
            return;
        };
        for &ci in cand_chunks {
            st.owed.remove(ci);
        }
        if out.keys_to_store.is_empty() {
            st.cursor = advanced(st.cursor);
            return;
        }
        // The stored keys are the offered ones the host tier lacked, in offer order: walk both.
        let mut src = Vec::with_capacity(out.keys_to_store.len() * blocks_per_chunk as usize);
        let mut next = out.keys_to_store.iter().peekable();
        for (&ci, (k, _)) in cand_chunks.iter().zip(cands) {
            if next.peek() == Some(&k) {
                next.next();
                match &st.mirror[(ci * blocks_per_chunk) as usize..((ci + 1) * blocks_per_chunk) as usize] {
                    // One block per chunk (the common case): a push, not a slice copy.
                    [only] => src.push(*only),
                    blocks => src.extend_from_slice(blocks),
                }
            }
        }
        assert!(next.peek().is_none(), "prepare_store stores a subsequence of the offer, in order");
        st.cursor = advanced(st.cursor);
        if c.rules.host_lru == HostLru::ReleaseOrder {
            // 0.24: `_touch(req)` after a store that inserted keys.
            let keys = Self::keys_of(st, spec, c);
            self.host.touch(&keys);
        }
        let has_async_load = st.transfer_jobs.iter().any(|&j| self.jobs.iter().any(|x| x.id == j && x.is_async_load()));
        let id = self.new_job_id();
        let st = self.reqs[r as usize].as_mut().unwrap();
        if has_async_load {
            // vLLM asserts every other job of the request is a store or a sync load.
            ghost.breach(Breach::UnsafeLoad);
            ev.emit(|| Event::Violation {
                property: "load-safety",
                detail: format!("store job {id} created while {}'s async load is in flight", spec.name),
            });
        }
        st.transfer_jobs.push(id);
        if finished {
            ghost.mark(Mark::FinishStore);
            for &b in &src {
                let v = super::recycle::fence_list(&mut self.fences, b);
                if !v.contains(&id) {
                    v.push(id);
                }
                if scratch.allocated.contains(b) {
                    scratch.flush.insert(id);
                }
            }
        }
        let _ = pool;
        let n = out.keys_to_store.len() as u64;
        ev.stat(|s| {
            s.store_jobs += 1;
            s.stored_chunks += n;
        });
        ev.emit(|| Event::StoreJob {
            job: id,
            req: r,
            keys: out.keys_to_store.clone(),
            blocks: src.clone(),
            slots: out.slots.clone(),
        });
        self.jobs.push(Job {
            id,
            req: r,
            kind: JobKind::Store,
            keys: InlineVec::from_slice(&out.keys_to_store),
            blocks: InlineVec::from_slice(&src),
            slots: InlineVec::from_slice(&out.slots),
            phase: Phase::Built,
            snapshot: InlineVec::new(),
            torn: false,
            invalid_from: None,
            block_offset: 0,
        });
        scratch.store_jobs.push(id);
    }

    /// At the finish signal (after the finished request's last stores were built, or, in 0.24,
    /// after its last scheduled step): store-coverage wants every chunk it computed in its
    /// last run offered (refused offers are final-store-kept's business), final-store-kept
    /// wants every refused chunk in the host tier anyway.
    fn check_finished(&mut self, r: ReqId, spec: &RequestSpec, c: &ConnCtx, ghost: &mut Ghost, ev: &mut Events) {
        let Some(st) = self.reqs[r as usize].as_ref() else {
            return;
        };
        let absent = |ci: &u32| !self.host.contains(&key_of(spec, *ci, c));
        let unoffered: Vec<u32> = st.owed.iter().filter(|ci| !st.refused.contains(*ci)).filter(absent).collect();
        if !unoffered.is_empty() {
            ghost.breach(Breach::CoverageLoss);
            ev.emit(|| Event::Violation {
                property: "store-coverage",
                detail: format!(
                    "{}: computed chunks {unoffered:?} were never offered for storing and are not in the host tier",
                    spec.name
                ),
            });
        }
        let lost: Vec<u32> = st.refused.iter().filter(absent).collect();
        if !lost.is_empty() {
            ghost.breach(Breach::FinalStoreLost);
            ev.emit(|| Event::Violation {
                property: "final-store-kept",
                detail: format!(
                    "{} finished; the host tier refused its last offer of chunks {lost:?} and never got them",
                    spec.name
                ),
            });
        }
        let st = self.reqs[r as usize].as_mut().unwrap();
        st.owed.clear();
        st.refused.clear();
    }

    /// A forward pass completed chunks `[from, to)` of request `r` (coverage ghost).
    pub fn chunks_computed(&mut self, r: ReqId, from: u32, to: u32) {
        if let Some(st) = self.reqs[r as usize].as_mut() {
            for ci in from..to {
                st.owed.insert(ci);
            }
        }
    }
}
