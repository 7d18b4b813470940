//! What the engine did, step by step: the story of a counterexample, the decisions that
//! conformance compares, and the raw material of replay metrics. The model runs with events
//! off (`Events::off()`), so recording costs nothing there.

use super::types::{BlockHash, BlockId, FinishReason, JobId, ReqId};

/// Things that crossed the scheduler/connector API, in the order vLLM does them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Arrived {
        req: ReqId,
    },
    /// A prefix lookup: local G1 hit, and the connector's answer (`None` = retry later).
    Lookup {
        req: ReqId,
        local: u32,
        external: Option<u32>,
        load_async: bool,
    },
    /// A waiting request was admitted (`resumed` = it had been preempted).
    Admitted {
        req: ReqId,
        resumed: bool,
        table: Vec<BlockId>,
        num_computed: u32,
    },
    /// Admitted into WAITING_FOR_REMOTE_KVS: an async load will fill its blocks.
    AsyncLoadWait {
        req: ReqId,
        table: Vec<BlockId>,
        num_computed: u32,
    },
    Scheduled {
        req: ReqId,
        start: u32,
        tokens: u32,
        new_blocks: Vec<BlockId>,
    },
    /// What `schedule()` returned: tokens per request in `num_scheduled_tokens` order, new and
    /// resumed admissions, `preempted_req_ids`, `finished_req_ids`, and every block table.
    StepScheduled {
        /// Negative for a request vLLM scheduled past `max_model_len` ([`super::Scheduled`]).
        scheduled: Vec<(ReqId, i64)>,
        new: Vec<ReqId>,
        resumed: Vec<ReqId>,
        preempted: Vec<ReqId>,
        finished: Vec<ReqId>,
        tables: Vec<(ReqId, Vec<BlockId>)>,
    },
    /// The step's `jobs_to_flush`.
    JobsToFlush {
        jobs: Vec<JobId>,
    },
    /// An async load landed (or failed) and the request left WAITING_FOR_REMOTE_KVS.
    Promoted {
        req: ReqId,
        num_computed: u32,
        failed: bool,
    },
    /// A waiting request does not fit in G1 this step (admission stops here).
    NoRoom {
        req: ReqId,
        free: u32,
    },
    Preempted {
        req: ReqId,
    },
    /// A cached G1 block lost its hash because its slot was handed out again.
    G1Evicted {
        block: BlockId,
        hash: BlockHash,
    },
    G1Cached {
        block: BlockId,
        hash: BlockHash,
    },
    HostEvicted {
        key: BlockHash,
    },
    /// NIXL host-buffer mode: `save_kv_to_host` copied these blocks of the request; `filled`:
    /// how many leading positions of each copy hold the request's KV.
    PdSaved {
        req: ReqId,
        blocks: Vec<BlockId>,
        filled: Vec<u32>,
    },
    /// NIXL P/D: the consumer read the request's blocks (`remote_block_ids`) over `tokens`
    /// positions (`remote_num_tokens`) from the host buffer; `stale`: the blocks it used whose
    /// copy did not hold the request's KV (handoff-integrity).
    PdRead {
        req: ReqId,
        blocks: Vec<BlockId>,
        tokens: u32,
        stale: Vec<BlockId>,
    },
    /// NIXL producer, `get_finished`: the request is in `finished_sending` (the consumer's
    /// notification arrived).
    PdSent {
        req: ReqId,
    },
    /// `complete_store`: these write-pending keys became ready (vLLM's CPU BlockStored).
    HostStored {
        keys: Vec<BlockHash>,
    },
    /// `prepare_store` returned None: no room (nothing changed).
    StoreRefused {
        req: ReqId,
        keys: Vec<BlockHash>,
    },
    StoreJob {
        job: JobId,
        req: ReqId,
        keys: Vec<BlockHash>,
        blocks: Vec<BlockId>,
        slots: Vec<u32>,
    },
    LoadJob {
        job: JobId,
        req: ReqId,
        keys: Vec<BlockHash>,
        blocks: Vec<BlockId>,
        slots: Vec<u32>,
        sync: bool,
    },
    Flush {
        job: JobId,
    },
    TransferDone {
        job: JobId,
    },
    TransferFailed {
        job: JobId,
        invalid: Vec<BlockId>,
    },
    /// The scheduler processed a job's completion (`complete_store` / `complete_load`).
    JobCompleted {
        job: JobId,
    },
    /// SimpleCPU: `_cleanup_load_request` for a request in `finished_recving`: its load
    /// event `job` landed and its CPU and GPU pins are released.
    HostLoadDone {
        req: ReqId,
        job: JobId,
    },
    Sampled {
        req: ReqId,
        position: u32,
    },
    /// eviction-order: the host tier evicted `got`, its policy's reference order names `want`.
    WrongVictims {
        got: Vec<BlockHash>,
        want: Vec<BlockHash>,
        policy: crate::system::rules::HostLru,
    },
    /// Router replay: a hit was cut (prime-rl's loaded-block cut, or 0.33's hit gating).
    RowsCut {
        req: ReqId,
        from: u32,
        to: u32,
    },
    /// Router replay: the worker emitted rows `[start, end)` for `req`.
    RowsEmitted {
        req: ReqId,
        start: u32,
        end: u32,
        from_store: bool,
    },
    /// A streaming session's input chunk `turn` stopped (the session continues).
    TurnEnded {
        req: ReqId,
        turn: u8,
        reason: FinishReason,
    },
    /// The client sent a session's next input (or ended the session) and it was queued.
    StreamQueued {
        req: ReqId,
    },
    /// A session took its input `turn` and waits to be re-admitted.
    SessionResumed {
        req: ReqId,
        turn: u8,
        num_computed: u32,
    },
    Finished {
        req: ReqId,
        reason: FinishReason,
    },
    Freed {
        req: ReqId,
        blocks: Vec<BlockId>,
    },
    /// P/D: something the decode instance did (its own events, rendered as "D: ...").
    Decode {
        ev: Box<Event>,
    },
    /// P/D: what the router did.
    Router {
        text: String,
    },
    /// A property's predicate failed inside a transition (read integrity, source freshness,
    /// load safety, coverage).
    Violation {
        property: &'static str,
        detail: String,
    },
}

/// An event recorder that can be switched off, with optional counters (trace replay's
/// metrics; the checker leaves them off).
#[derive(Debug, Default)]
pub struct Events {
    pub on: bool,
    pub list: Vec<Event>,
    pub stats: Option<Box<Stats>>,
    /// Conformance: the orders to use where vLLM iterates a set (src/system/choice.rs); None
    /// keeps the model's canonical order everywhere.
    pub choices: Option<Box<super::choice::Choices>>,
}

impl Events {
    pub fn off() -> Self {
        Events { on: false, list: Vec::new(), stats: None, choices: None }
    }
    pub fn on() -> Self {
        Events { on: true, list: Vec::new(), stats: None, choices: None }
    }
    /// Events off, counters on.
    pub fn counting() -> Self {
        Events { on: false, list: Vec::new(), stats: Some(Box::default()), choices: None }
    }
    /// Are events recorded? (Callers skip building what only an event would carry.)
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on
    }
    #[inline]
    pub fn emit(&mut self, f: impl FnOnce() -> Event) {
        if self.on {
            self.list.push(f());
        }
    }
    /// A set iteration of vLLM whose order reaches a decision: reorder `items` as the
    /// conformance plan says (nothing without a plan, or with fewer than two ids).
    #[inline]
    pub fn order<T: Copy + Into<super::choice::Item>>(&mut self, point: super::choice::Point, items: &mut [T]) {
        if items.len() > 1 {
            if let Some(c) = self.choices.as_deref_mut() {
                c.order(point, items);
            }
        }
    }
    /// Count something (only when counters are on).
    #[inline]
    pub fn stat(&mut self, f: impl FnOnce(&mut Stats)) {
        if let Some(s) = self.stats.as_deref_mut() {
            f(s);
        }
    }
}

/// What one request slot did since its counters were last reset. Every token position is
/// counted once, by how it was first reached (a G1 hit, a host load, prefill or decode);
/// reaching it again after a preemption counts as recomputation or a re-hit. For a finished
/// request, `g1_hit + host_hit + prefill + decode` = its final length minus one (the last
/// sampled token's KV is never computed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReqStats {
    /// Positions first served from G1 prefix hits.
    pub g1_hit_tokens: u64,
    /// Positions first served by a host-tier load (what the load kept: not the last prompt
    /// token, which is always recomputed, nor blocks a failure invalidated).
    pub host_hit_tokens: u64,
    /// Positions first computed by a forward pass, other than plain decode steps.
    pub prefill_tokens: u64,
    /// Positions first computed by a decode step (one token at an output position).
    pub decode_tokens: u64,
    /// Positions computed again (after a preemption or a load failure).
    pub recomputed_tokens: u64,
    /// Positions served again by hits after a preemption.
    pub rehit_tokens: u64,
    /// Positions reached so far (the high-water mark).
    pub reached: u32,
    pub preemptions: u32,
    pub admissions: u32,
    /// Engine steps in which the request was scheduled.
    pub steps: u32,
    /// The G1 hit of the request's pending async load (its load starts there).
    pub async_local: u32,
}

/// Split positions `[a, b)` at the high-water mark: (new, seen before).
fn split(a: u32, b: u32, reached: u32) -> (u64, u64) {
    let new = b.saturating_sub(a.max(reached));
    (u64::from(new), u64::from(b.saturating_sub(a) - new))
}

/// Engine-wide counters (trace replay's metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub g1_hit_tokens: u64,
    pub host_hit_tokens: u64,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    pub recomputed_tokens: u64,
    pub rehit_tokens: u64,
    /// Tokens computed by prefill passes (first time or again): what makes a step a prefill
    /// step for replay's clock.
    pub prefill_pass_tokens: u64,
    pub preemptions: u64,
    /// Cached G1 blocks that lost their hash (slot handed out again, or evicted).
    pub g1_evictions: u64,
    pub host_evictions: u64,
    pub store_jobs: u64,
    pub stored_chunks: u64,
    /// `prepare_store` calls that found no room.
    pub store_refusals: u64,
    pub load_jobs: u64,
    pub loaded_chunks: u64,
    pub sync_loads: u64,
    pub sampled_tokens: u64,
    /// Router replay: rows the frontend received (`take_output`), rows the worker read back
    /// from the row store to emit them, local hits cut at a loaded block (prime-rl's cut)
    /// and the tokens they gave up, external loads shortened (prime-rl's clamp, 0.33's
    /// `cap_external_hit`) and the tokens they gave up.
    pub rows_emitted: u64,
    pub rows_from_store: u64,
    pub hits_cut: u64,
    pub cut_tokens: u64,
    pub loads_clamped: u64,
    pub clamped_tokens: u64,
    /// Per request slot.
    pub per_req: Vec<ReqStats>,
}

impl Stats {
    /// The counters of slot `r`.
    pub fn req(&mut self, r: u16) -> &mut ReqStats {
        let i = r as usize;
        if self.per_req.len() <= i {
            self.per_req.resize(i + 1, ReqStats::default());
        }
        &mut self.per_req[i]
    }

    /// Request `r` was admitted with positions `[0, g1_end)` from G1 hits and
    /// `[g1_end, host_end)` from a host load.
    pub fn served(&mut self, r: u16, g1_end: u32, host_end: u32) {
        let rs = self.req(r);
        let (g_new, g_re) = split(0, g1_end, rs.reached);
        let (h_new, h_re) = split(g1_end, host_end, rs.reached);
        rs.reached = rs.reached.max(host_end);
        rs.g1_hit_tokens += g_new;
        rs.host_hit_tokens += h_new;
        rs.rehit_tokens += g_re + h_re;
        rs.admissions += 1;
        self.g1_hit_tokens += g_new;
        self.host_hit_tokens += h_new;
        self.rehit_tokens += g_re + h_re;
    }

    /// An async load of request `r` landed: positions `[from, to)` are served.
    pub fn loaded(&mut self, r: u16, from: u32, to: u32) {
        let rs = self.req(r);
        let (new, re) = split(from, to, rs.reached);
        rs.reached = rs.reached.max(to);
        rs.host_hit_tokens += new;
        rs.rehit_tokens += re;
        self.host_hit_tokens += new;
        self.rehit_tokens += re;
    }

    /// The forward pass computes positions `[start, start + n)` of request `r`; `decode` if
    /// it is a one-token step at an output position.
    pub fn computed(&mut self, r: u16, start: u32, n: u32, decode: bool) {
        let rs = self.req(r);
        let (new, re) = split(start, start + n, rs.reached);
        rs.reached = rs.reached.max(start + n);
        rs.steps += 1;
        rs.recomputed_tokens += re;
        if decode {
            rs.decode_tokens += new;
            self.decode_tokens += new;
        } else {
            rs.prefill_tokens += new;
            self.prefill_tokens += new;
            self.prefill_pass_tokens += u64::from(n);
        }
        self.recomputed_tokens += re;
    }
}
