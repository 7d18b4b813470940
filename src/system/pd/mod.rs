//! Disaggregated prefill/decode with router replay: a prefill instance P, a decode instance D
//! and the router between them, as one system (PrimeIntellect-ai/router `vllm_pd_router.rs`,
//! prime-rl's patched vLLM on both instances; design notes §6, scenarios (C) and (D)).
//!
//! P is the system's own engine (NixlConnector's producer side, `connector/nixl`): every
//! request reaches it with `max_tokens = 1` and `do_remote_decode`, forwards the prompt,
//! samples one discarded token and keeps its blocks in the host buffer for D. D is a second
//! engine with its own G1, scheduler, row store and connector (NixlConnector's consumer side,
//! `connector/nixl/consumer.rs`), built from the same `[engine]` table; the router sends it
//! the same request (same sampling parameters, so the same `routed_experts_prompt_start`,
//! and the scripted output) with P's `kv_transfer_params` once P answered. D loads the prompt
//! KV from P's host buffer (the read notifies P, which frees its blocks), recomputes the last
//! prompt token and decodes. When D answers, the router merges both answers' rows
//! (`router.rs`); an error in either stage (P or D finishing with an error or aborted, the
//! merge refusing) is HTTP 500.
//!
//! The checker explores both instances' interleavings: D's inputs are [`PdInput`]s (the router
//! sends a request, D steps, D's NIXL read lands or fails from a block on), beside P's own.
//! D's ghost flags and marks are P's too (the properties read one ghost); its load failures
//! count against the one fault budget. Not modelled: faults injected on D other than load
//! failures (client aborts, errors), several decode instances, streaming sessions.

mod pack;
pub mod router;
pub mod store;

use super::config::{ConnectorConfig, EngineConfig, KvRole, MooncakeConfig};
use super::engine::{Ctx, Engine};
use super::events::{Event, Events};
use super::ghost::{Breach, Mark};
use super::input::System;
use super::rules::{EmitStart, Rules};
use super::types::{ContentTag, FinishReason, ReqId, Status};
use super::workload::{RequestSpec, Workload};
use super::Direction;
use router::{merge, Resp};

/// What the decode side adds to a system: D's configuration and workload.
#[derive(Clone, Debug)]
pub struct PdSys {
    pub cfg: EngineConfig,
    pub wl: Workload,
}

impl PdSys {
    /// D for a P/D scope: P's engine table with the consumer connector; `full` holds every
    /// request with its whole scripted output (P's workload keeps the first token only).
    pub fn new(p_cfg: &EngineConfig, full: Workload) -> Self {
        let connector = match &p_cfg.connector {
            // Decode-saved KV: D's Mooncake store is a kv_consumer (it puts decode-phase blocks
            // only with save_decode_cache).
            ConnectorConfig::NixlStore(m) => {
                ConnectorConfig::NixlDecodeStore(MooncakeConfig { kv_role: KvRole::Consumer, ..m.clone() })
            }
            _ => ConnectorConfig::NixlDecode,
        };
        PdSys { cfg: EngineConfig { connector, ..p_cfg.clone() }, wl: full }
    }

    pub fn ctx<'a>(&'a self, rules: &'a Rules) -> Ctx<'a> {
        Ctx { cfg: &self.cfg, rules, wl: &self.wl }
    }
}

/// Where the router is with one request.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum Route {
    /// P has not answered.
    Prefill,
    /// P answered; the router may send D the request.
    Prefilled(Resp),
    /// D has the request.
    Decoding(Resp),
    /// Both answered and the merge succeeded.
    Merged,
    /// HTTP 500: a stage failed (`stage` true) or the merge refused.
    Http500 { stage: bool },
}

/// The decode instance and the router.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct PdState {
    pub d: Engine,
    pub route: Vec<Route>,
}

/// An input of the decode side.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub enum PdInput {
    /// The router sends request `r` to D with P's `kv_transfer_params`.
    Send(u16),
    /// One step of D.
    Step,
    /// D's oldest NIXL read lands.
    ReadDone,
    /// D's oldest NIXL read fails (the checker offers `k = 0` only: vLLM invalidates the whole
    /// read); kept as "from its `k`-th block on" for recorded traces.
    ReadFails(u32),
}

impl PdState {
    pub fn new(pd: &PdSys, rules: &Rules) -> Self {
        let n = pd.wl.requests.len();
        PdState { d: Engine::new(&pd.cfg, &pd.wl, rules), route: vec![Route::Prefill; n] }
    }

    /// The router answered request `r` (merged rows or HTTP 500).
    pub fn answered(&self, r: u16) -> bool {
        matches!(self.route[r as usize], Route::Merged | Route::Http500 { .. })
    }

    /// D has work, or the router still has a request to send or to merge.
    pub fn has_work(&self) -> bool {
        self.d.has_work() || self.route.iter().any(|r| matches!(r, Route::Prefilled(_) | Route::Decoding(_)))
    }
}

/// A request's `/generate` answer on one instance (R6): its rows as the frontend concatenated
/// them, and the start it names — end-anchored (`len(prompt) + len(completion) - 1 - len(rows)`,
/// prime-rl's packed `/generate`) or `routed_experts_prompt_start` (prime-rl HEAD).
pub fn response(e: &Engine, rules: &Rules, spec: &RequestSpec, r: ReqId) -> Resp {
    let t1 = e.reqs[r as usize].num_tokens(spec) - 1;
    let rec = e.aux.as_ref().map(|a| a.record(r).clone()).unwrap_or_default();
    let start = if rules.pd_start_end_anchored { t1.saturating_sub(rec.count) } else { spec.rows_start };
    Resp { start, rows: rec.first.map(|f| (f, rec.end)), len: rec.count, gap: rec.gap }
}

/// The start the colocated engine would answer with.
pub fn colocated_start(rules: &Rules, spec: &RequestSpec) -> u32 {
    match rules.aux_emit {
        EmitStart::V031 => spec.rows_start,
        EmitStart::V033 => spec.rows_start.min(spec.prompt_len),
    }
}

/// The router's side after any input: P's answers become sendable (or HTTP 500), D's answers
/// are merged with P's.
pub fn sync(sys: &System, pd: &PdSys, e: &mut Engine, ev: &mut Events) {
    let Some(mut st) = e.pd.take() else { return };
    // Decode-saved KV: one Mooncake pool behind one master.
    if let (crate::system::connector::Connector::NixlStore(p), Some(d)) = (&mut e.conn, st.d.conn.mooncake_mut()) {
        store::share_pool(p, d);
    }
    for r in 0..st.route.len() {
        let rid = r as ReqId;
        match st.route[r] {
            Route::Prefill => match e.reqs[r].status {
                Status::Finished(FinishReason::Stopped | FinishReason::LengthCapped) => {
                    let spec = sys.workload.spec(rid, 0);
                    st.route[r] = Route::Prefilled(response(e, &sys.rules, spec, rid));
                }
                Status::Finished(_) => {
                    st.route[r] = Route::Http500 { stage: true };
                    let name = sys.workload.requests[r].name.clone();
                    ev.emit(|| Event::Router { text: format!("router: HTTP 500 for {name} (the prefill failed)") });
                }
                _ => {}
            },
            Route::Decoding(p) => match st.d.reqs[r].status {
                Status::Finished(FinishReason::Stopped | FinishReason::LengthCapped) => {
                    let spec = pd.wl.spec(rid, 0);
                    let d = response(&st.d, &sys.rules, spec, rid);
                    let (start, t1) = (colocated_start(&sys.rules, spec), spec.prompt_len + spec.max_tokens - 1);
                    let t1 = t1.min(st.d.reqs[r].num_tokens(spec) - 1);
                    e.ghost.mark(Mark::PdMerged);
                    let name = spec.name.clone();
                    match merge(sys.rules.pd_router_merge, &p, &d) {
                        Ok(m) if m.equals_colocated(start, t1) => {
                            st.route[r] = Route::Merged;
                            ev.emit(|| Event::Router { text: format!("router merges {name}: {}", m.describe()) });
                        }
                        Ok(m) => {
                            st.route[r] = Route::Merged;
                            e.ghost.breach(Breach::PdNotColocated);
                            ev.emit(|| Event::Violation {
                                property: "pd-equals-colocated",
                                detail: format!(
                                    "the router answers {name} with {} (P answered {}; D answered {}); a colocated engine answers start {start}, {} rows at [{start},{t1})",
                                    m.describe(),
                                    p.describe(),
                                    d.describe(),
                                    t1.saturating_sub(start)
                                ),
                            });
                        }
                        Err(why) => {
                            st.route[r] = Route::Http500 { stage: false };
                            e.ghost.breach(Breach::PdNotColocated);
                            ev.emit(|| Event::Violation {
                                property: "pd-equals-colocated",
                                detail: format!(
                                    "the router answers {name} with HTTP 500 \"Request processing failed: {why}\"; a colocated engine answers {} rows from {start}",
                                    t1.saturating_sub(start)
                                ),
                            });
                        }
                    }
                }
                Status::Finished(_) => {
                    st.route[r] = Route::Http500 { stage: true };
                    let name = sys.workload.requests[r].name.clone();
                    ev.emit(|| Event::Router { text: format!("router: HTTP 500 for {name} (the decode failed)") });
                }
                _ => {}
            },
            _ => {}
        }
    }
    e.pd = Some(st);
}

/// Every decode-side input enabled in `e`, in a fixed order.
pub fn inputs(sys: &System, e: &Engine, out: &mut Vec<PdInput>) {
    let Some(st) = e.pd.as_ref() else { return };
    for (r, route) in st.route.iter().enumerate() {
        if matches!(route, Route::Prefilled(_)) {
            out.push(PdInput::Send(r as u16));
        }
    }
    out.push(PdInput::Step);
    if let Some(x) = st.d.conn.nixl_decode().and_then(|c| c.next_read()) {
        out.push(PdInput::ReadDone);
        let f = &sys.env.faults;
        // A NIXL READ fails as a whole: the worker reports every block of it invalid
        // (`get_transfer_results`: `meta.local_block_ids`, 0.24 to 0.34), so no block of a
        // failed read is kept. A notify-only read (no blocks) cannot fail the request.
        if f.load_failure && e.ghost.faults < f.max_load_failures && !x.blocks.is_empty() {
            out.push(PdInput::ReadFails(0));
        }
    }
}

/// Apply a decode-side input; false when it has nothing to act on.
pub fn apply(sys: &System, pd: &PdSys, e: &mut Engine, a: PdInput, ev: &mut Events) -> bool {
    let mut dev = if ev.is_on() { Events::on() } else { Events::off() };
    let ok = apply_with(sys, pd, e, a, ev, &mut dev);
    for x in dev.list {
        ev.emit(|| Event::Decode { ev: Box::new(x) });
    }
    ok
}

/// [`apply`] with D's own events `dev` (trace replay counts D's statistics there); D's
/// events stay in `dev`.
pub fn apply_with(sys: &System, pd: &PdSys, e: &mut Engine, a: PdInput, ev: &mut Events, dev: &mut Events) -> bool {
    let Some(mut st) = e.pd.take() else { return false };
    let ctx = pd.ctx(&sys.rules);
    let ok = match a {
        PdInput::Send(r) => {
            if !matches!(st.route[r as usize], Route::Prefilled(_)) {
                false
            } else {
                if let Route::Prefilled(p) = st.route[r as usize] {
                    st.route[r as usize] = Route::Decoding(p);
                }
                st.d.conn.nixl_decode_mut().expect("D runs the consumer").remote_prefill(r);
                st.d.arrive(ctx, r, dev);
                let name = pd.wl.requests[r as usize].name.clone();
                dev.emit(|| Event::Router { text: format!("router sends {name} to D with P's kv_transfer_params") });
                true
            }
        }
        PdInput::Step => {
            // D's Mooncake jobs (decode-saved KV) run within the step that queues them.
            let input = super::engine::StepInput { drain: pd.cfg.mooncake().is_some(), ..Default::default() };
            st.d.step(ctx, &input, dev);
            true
        }
        PdInput::ReadDone | PdInput::ReadFails(_) => {
            let Some(x) = st.d.conn.nixl_decode().and_then(|c| c.next_read()).cloned() else {
                e.pd = Some(st);
                return false;
            };
            let fail = match a {
                PdInput::ReadFails(k) => {
                    e.ghost.faults += 1;
                    e.ghost.mark(Mark::LoadFailure);
                    Some(k)
                }
                _ => None,
            };
            // The NIXL READ of the producer's host-buffer slots for the same block indices;
            // the producer is notified and frees its blocks at its next step.
            let tags: Vec<_> = e
                .conn
                .nixl()
                .and_then(|n| n.sending.iter().find(|s| s.req == x.req && !s.read))
                .map(|s| {
                    let host = &e.conn.nixl().expect("P runs the producer").host;
                    (0..x.blocks.len())
                        .map(|j| s.blocks.get(x.first as usize + j).map_or(ContentTag::Empty, |&b| host[b as usize]))
                        .collect()
                })
                .unwrap_or_default();
            // P learns of the read (and frees its blocks at its next step). D uses P's blocks at
            // its own block indices [first, first + n): none of a failed read, none of a
            // notify-only one (a full local hit), and never those of its local prefix hit.
            let pctx = sys.ctx();
            let spec = pctx.wl.spec(x.req, e.reqs[x.req as usize].turn);
            let n = if fail.is_some() { 0 } else { x.blocks.len() as u32 };
            if let Some(p) = e.conn.nixl_mut() {
                p.consumer_read(x.req, x.first, n, spec, pctx.wl, pctx.cfg.block_size, &mut e.ghost, ev);
            }
            let mut cx =
                crate::system::connector::WorkerCtx { ctx, pool: &mut st.d.pool, ghost: &mut st.d.ghost, ev: dev };
            st.d.conn.nixl_decode_mut().expect("D runs the consumer").read_done(x.req, &tags, fail, &mut cx);
            if !x.blocks.is_empty() {
                st.d.ghost.mark(Mark::PdRemoteLoad);
            }
            let blocks = x.blocks.clone();
            // D's own record of the read (P's consumer_read judged the copies).
            dev.emit(|| Event::PdRead { req: x.req, blocks, tokens: 0, stale: Vec::new() });
            true
        }
    };
    // D's flags and marks are the system's.
    e.ghost.violations |= st.d.ghost.violations;
    e.ghost.marks |= st.d.ghost.marks;
    e.pd = Some(st);
    ok
}

/// D's next read of `Direction::Load` (for `is_stuck`).
pub fn can_move(sys: &System, e: &Engine) -> bool {
    let Some(st) = e.pd.as_ref() else { return false };
    if st.route.iter().any(|r| matches!(r, Route::Prefilled(_))) || st.d.next_transfer(Direction::Load).is_some() {
        return true;
    }
    let pd = sys.pd.as_ref().expect("a P/D system");
    let mut x = e.clone();
    apply(sys, pd, &mut x, PdInput::Step, &mut Events::off());
    !x.pd.as_ref().expect("kept").d.same_ignoring_marks(&st.d)
}
