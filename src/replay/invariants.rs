//! Every always-property of the catalogue (src/props), evaluated after every replay action
//! at the cost of what the action changed.
//!
//! The ghost flags (kv-read-integrity, source-freshness, load-safety, mirror-table,
//! store-coverage, eviction-order, final-store-kept, and the breaches inside g1-accounting and
//! host-accounting) are raised inside transitions and cost nothing to read; which breaches
//! make which property is read from the property's catalogue entry (`props::Source`). The state
//! predicates are restricted to what changed, from the change logs the engine keeps in replay
//! (`system::side`):
//! - g1-accounting: blocks whose reference count, queue membership, hash or content changed,
//!   blocks that entered or left a block table (logged where tables change) and blocks the
//!   connector pinned or unpinned (SimpleCPU, Mooncake: diffed per action) are checked for
//!   `ref_cnt == holders` and `free iff ref_cnt == 0`; the free-queue length is compared with
//!   a running count of queued blocks ([`PoolCounts`]). The queue's link structure (no cycles,
//!   no duplicates) is walked only by the full check.
//! - g1-cache-sound: cached-map entries whose block or hash changed, plus the entries that
//!   passed only by the recompute exemption (re-checked every time, since it depends on the
//!   holders' progress).
//! - host-integrity and host-accounting: keys whose entry changed and keys of load jobs that
//!   appeared or completed; running counts of write-pending and evictable keys. SimpleCPU's
//!   CPU pool has a change log of its own and is counted as G1 is
//!   ([`pool_checks`](super::pool_checks)). The Mooncake pool's entries never change once put,
//!   so only the keys put in the action are checked.
//! - arc-bounds: the whole ARC state after every action (vacuous under LRU; ARC replays run
//!   without an index, correct but O(resident keys) per action).
//! - requests-finish: the idle-step counter (a deadlock or livelock shows up as steps without
//!   progress).
//! - any other state predicate: its registry entry's single-run form over the whole state
//!   (correct, O(state) per action; an incremental form here is only for speed).
//!
//! [`full`] evaluates the catalogue's own predicates over the whole state; replay runs it
//! every `full_check_every` steps and at the end, and with `full_check_every = 1` compares it
//! with the incremental verdict after every action (a disagreement is a kvmc bug).

use super::pool_checks::{self, PoolCounts};
pub use super::predicates::{flag_of, full, handles, properties, reports};
use super::predicates::{flag_props, flag_violation};
use super::reached::Reached;
use crate::props::{g1, host, PropId, Scope};
use crate::system::collections::side::FastMap;
use crate::system::config::{ConnectorKind, EngineConfig};
use crate::system::ghost::Breach;
use crate::system::host_tier::Key;
use crate::system::types::{BlockHash, BlockId, ContentTag, JobId, NULL_BLOCK};
use crate::system::{Engine, Rules, Workload};
use std::collections::{BTreeMap, BTreeSet};

/// A violated property and what broke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
}

pub(super) fn v(property: &'static str, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { property, detail: detail.into() })
}

/// The engine's change logs for one action.
#[derive(Default)]
struct Logs {
    blocks: Vec<BlockId>,
    content: Vec<BlockId>,
    cached: Vec<(BlockHash, BlockId)>,
    added: Vec<BlockId>,
    removed: Vec<BlockId>,
    moves: Vec<(Key, Option<i32>, Option<i32>)>,
    written: Vec<Key>,
    /// SimpleCPU's CPU pool: its `blocks`, `content` and `cached` logs.
    cpu_blocks: Vec<BlockId>,
    cpu_content: Vec<BlockId>,
    cpu_cached: Vec<(BlockHash, BlockId)>,
    /// Keys put into the Mooncake pool.
    pool_put: Vec<BlockHash>,
}

impl Logs {
    /// Exchange with the engine's logs (theirs become ours, our empty vectors theirs).
    fn swap(&mut self, e: &mut Engine) {
        if let Some(l) = e.pool.log.get_mut() {
            std::mem::swap(&mut self.blocks, &mut l.blocks);
            std::mem::swap(&mut self.content, &mut l.content);
            std::mem::swap(&mut self.cached, &mut l.cached);
            std::mem::swap(&mut self.added, &mut l.table_added);
            std::mem::swap(&mut self.removed, &mut l.table_removed);
        }
        if let Some(l) = e.conn.offloading_mut().and_then(|oc| oc.host.log.get_mut()) {
            std::mem::swap(&mut self.moves, &mut l.moves);
            std::mem::swap(&mut self.written, &mut l.written);
        }
        if let Some(l) = e.conn.simple_cpu_mut().and_then(|sc| sc.cpu.log.get_mut()) {
            std::mem::swap(&mut self.cpu_blocks, &mut l.blocks);
            std::mem::swap(&mut self.cpu_content, &mut l.content);
            std::mem::swap(&mut self.cpu_cached, &mut l.cached);
        }
        if let Some(l) = e.conn.mooncake_mut().and_then(|mc| mc.log.get_mut()) {
            std::mem::swap(&mut self.pool_put, l);
        }
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.content.clear();
        self.cached.clear();
        self.added.clear();
        self.removed.clear();
        self.moves.clear();
        self.written.clear();
        self.cpu_blocks.clear();
        self.cpu_content.clear();
        self.cpu_cached.clear();
        self.pool_put.clear();
    }
}

/// Incremental evaluation state (shadows of what the predicates count).
pub struct Checker {
    /// False: the state predicates are evaluated over the whole state instead (connectors
    /// whose state replay does not log: NIXL).
    incremental: bool,
    /// Does the connector pin GPU blocks (SimpleCPU, Mooncake)?
    pins_gpu: bool,
    /// G1's holders, counted.
    g1: PoolCounts,
    /// SimpleCPU's CPU pool's holders, counted.
    cpu: Option<PoolCounts>,
    cfg: EngineConfig,
    rules: Rules,
    b: u32,
    bpc: u32,
    progress_steps: u32,
    props: Vec<PropId>,
    /// Their names (for reports).
    names: Vec<&'static str>,
    /// Per property: a ghost flag (not a state predicate), told apart once instead of by
    /// matching its name after every action.
    flag_prop: Vec<bool>,
    /// The epoch of the action being checked (from `g1`).
    epoch: u32,
    /// Cached entries that hold bad KV under the recompute exemption.
    watch: BTreeSet<(BlockHash, BlockId)>,
    /// Per block: the last action (epoch) that listed a cached pair of it, and the first two
    /// hashes it was listed under in that action.
    pair_mark: Vec<PairMark>,
    /// Scratch sets for deduplicating one action's logged pairs (those of a block listed
    /// under a third hash) and keys.
    seen_pairs: FastMap<(BlockHash, BlockId), ()>,
    seen_keys: FastMap<Key, ()>,
    /// Per host slot: the last action (epoch) that checked the key in it.
    slot_mark: Vec<u32>,
    pending: u32,
    evictable: u32,
    loads: BTreeMap<JobId, Vec<Key>>,
    /// The change logs of the action being checked, swapped out of the engine (the emptied
    /// vectors go back, so the logs keep their capacity from step to step).
    logs: Logs,
    /// Property evaluations so far (properties × actions checked).
    pub checks: u64,
    /// Blocks, cached entries and host keys examined.
    pub examined: u64,
    /// Actions after which the full-state predicates ran instead (connectors without change
    /// logs: NIXL).
    pub full_runs: u64,
    /// Properties not evaluated (`kvmc replay --skip-property`).
    skip: Vec<PropId>,
    /// Reachability guards reached so far.
    pub reached: Reached,
}

/// A block's mark in one action's cached pairs (see `Checker::pair_mark`).
#[derive(Clone, Copy, Default)]
struct PairMark {
    epoch: u32,
    /// How many of `hashes` are set (1 or 2).
    n: u32,
    hashes: [BlockHash; 2],
}

impl Checker {
    /// Start from `e` (a fresh engine with replay aids on).
    pub fn new(e: &Engine, cfg: &EngineConfig, rules: &Rules, progress_steps: u32) -> Self {
        let n = e.pool.num_blocks() as usize;
        let kind = cfg.connector_kind();
        let incremental = matches!(
            kind,
            ConnectorKind::None | ConnectorKind::Offloading | ConnectorKind::SimpleCpu | ConnectorKind::Mooncake
        );
        let props = properties(cfg);
        Checker {
            incremental,
            pins_gpu: matches!(kind, ConnectorKind::SimpleCpu | ConnectorKind::Mooncake),
            g1: PoolCounts::new(&e.pool),
            cpu: e.conn.simple_cpu().map(|sc| PoolCounts::new(&sc.cpu)),
            cfg: cfg.clone(),
            rules: rules.clone(),
            b: cfg.block_size,
            bpc: cfg.offload().map_or(1, |o| o.blocks_per_chunk),
            progress_steps,
            flag_prop: flag_props(&props),
            names: props.iter().map(|p| p.name()).collect(),
            props,
            epoch: 0,
            watch: BTreeSet::new(),
            pair_mark: vec![PairMark::default(); n],
            seen_pairs: FastMap::default(),
            seen_keys: FastMap::default(),
            slot_mark: Vec::new(),
            pending: 0,
            evictable: 0,
            loads: BTreeMap::new(),
            logs: Logs::default(),
            checks: 0,
            examined: 0,
            full_runs: 0,
            skip: Vec::new(),
            reached: Reached::new(cfg),
        }
    }

    /// Leave `skip` out of every evaluation.
    pub fn skipping(mut self, skip: &[PropId]) -> Self {
        self.props.retain(|p| !skip.contains(p));
        self.flag_prop = flag_props(&self.props);
        self.names = self.props.iter().map(|p| p.name()).collect();
        self.skip = skip.to_vec();
        self
    }

    /// The properties evaluated after every action.
    pub fn properties(&self) -> &[&'static str] {
        &self.names
    }

    pub fn num_properties(&self) -> usize {
        self.props.len()
    }

    /// Evaluate every property after one action; drains the engine's change logs.
    pub fn check(&mut self, e: &mut Engine, wl: &Workload) -> Option<Violation> {
        self.reached.observe(e);
        let mut logs = std::mem::take(&mut self.logs);
        logs.swap(e);
        let found = self.check_logs(e, wl, &logs);
        logs.clear();
        self.logs = logs;
        found
    }

    /// [`check`](Self::check) over the logs taken from the engine.
    fn check_logs(&mut self, e: &Engine, wl: &Workload, logs: &Logs) -> Option<Violation> {
        self.checks += self.props.len() as u64;
        let (epoch, wrapped) = self.g1.begin();
        self.epoch = epoch;
        if wrapped {
            self.pair_mark.iter_mut().for_each(|m| m.epoch = 0);
            self.slot_mark.iter_mut().for_each(|m| *m = 0);
        }
        let Logs {
            blocks,
            content,
            cached: cached_pairs,
            added,
            removed,
            moves,
            written,
            cpu_blocks,
            cpu_content,
            cpu_cached,
            pool_put,
        } = logs;
        if !self.incremental {
            self.full_runs += 1;
            return full(e, wl, &self.cfg, &self.rules, self.progress_steps, &self.skip);
        }
        let mut found: Vec<Violation> = Vec::new();
        let mut first = |x: Option<Violation>| found.extend(x);
        // Tables: what entered and left them (logged where tables change).
        let mut null_in_table = false;
        for &blk in added {
            self.g1.hold(blk);
            null_in_table |= blk == NULL_BLOCK;
        }
        for &blk in removed {
            self.g1.release(blk);
        }
        // The connector's GPU pins (SimpleCPU's stores and loads, Mooncake's saves) are holders
        // too.
        let bad_pin = if self.pins_gpu { self.g1.set_refs(e.conn.gpu_pins(&self.rules)) } else { None };
        for &blk in blocks {
            self.g1.touch(blk);
        }
        self.examined += self.g1.touched() as u64;
        for pi in 0..self.props.len() {
            if self.flag_prop[pi] {
                continue; // ghost flags: below
            }
            let id = self.props[pi];
            let name = id.name();
            match id {
                PropId::G1Accounting => {
                    if e.ghost.has(Breach::HandedOutInUse) {
                        first(v(name, "a referenced block was handed out as a new block"));
                    }
                    if null_in_table {
                        first(v(name, "the null block is in a request's block table"));
                    }
                    if let Some(b) = bad_pin {
                        first(v(name, format!("the connector pins block {b}, the null block or past the pool")));
                    }
                    first(self.g1.check(&e.pool, "block").and_then(|d| v(name, d)));
                }
                PropId::G1CacheSound => {
                    // Soundness of a cached entry changes only with the entry itself, the
                    // block's content, or (for exempt entries, watched) its holders.
                    // Distinct pairs in the order the logs give them (deterministic; cheaper
                    // than sorting the step's thousands of pairs).
                    // A pair is new unless its block was marked with the same hash in this
                    // action. A block is often listed under two hashes in one action (its
                    // cached entry evicted, the block reused and cached anew); a block seen
                    // under a third hash (rare) goes to the set.
                    let mut seen = std::mem::take(&mut self.seen_pairs);
                    seen.clear();
                    let mut cands: Vec<(BlockHash, BlockId)> = Vec::with_capacity(cached_pairs.len() + content.len());
                    let current = content.iter().filter_map(|&blk| e.pool.block_hash(blk).map(|h| (h, blk)));
                    for p in cached_pairs.iter().copied().chain(current).chain(self.watch.iter().copied()) {
                        let m = &mut self.pair_mark[p.1 as usize];
                        let new = if m.epoch != self.epoch {
                            *m = PairMark { epoch: self.epoch, n: 1, hashes: [p.0, p.0] };
                            true
                        } else if m.hashes[0] == p.0 || (m.n == 2 && m.hashes[1] == p.0) {
                            false
                        } else if m.n == 1 {
                            (m.n, m.hashes[1]) = (2, p.0);
                            true
                        } else {
                            seen.insert(p, ()).is_none()
                        };
                        if new {
                            cands.push(p);
                        }
                    }
                    self.seen_pairs = seen;
                    self.examined += cands.len() as u64;
                    // Looked up in a tight loop first, so that their cache misses overlap.
                    let listed: Vec<bool> = cands.iter().map(|(h, blk)| e.pool.cached_under(h, *blk)).collect();
                    for ((h, blk), listed) in cands.into_iter().zip(listed) {
                        if !listed {
                            self.watch.remove(&(h, blk));
                            continue;
                        }
                        if !g1::cached_block_sound(e, self.b, h, blk) {
                            first(v(name, format!("cached block {blk} ({h:?}) does not hold that prefix's KV")));
                        } else if e.pool.content(blk) != ContentTag::full(h, self.b) {
                            self.watch.insert((h, blk));
                        } else {
                            self.watch.remove(&(h, blk));
                        }
                    }
                }
                PropId::HostIntegrity | PropId::HostAccounting if self.cpu.is_some() => {
                    let sc = e.conn.simple_cpu().expect("a SimpleCPU engine");
                    let bad = if id == PropId::HostIntegrity {
                        let (bad, n) = pool_checks::cpu_integrity(sc, self.b, cpu_cached, cpu_content);
                        self.examined += n;
                        bad
                    } else if e.ghost.has(Breach::BadCompletion) {
                        Some("a job completion was processed twice or for an unknown job".to_string())
                    } else {
                        // SimpleCPU's references (lookup and load pins, stores not yet
                        // processed) are the CPU pool's holders.
                        let cpu = self.cpu.as_mut().expect("counts");
                        cpu.begin();
                        let bad_ref = cpu.set_refs(sc.cpu_refs(&self.rules));
                        cpu_blocks.iter().for_each(|&b| cpu.touch(b));
                        self.examined += cpu.touched() as u64;
                        let found = cpu.check(&sc.cpu, "CPU block");
                        bad_ref
                            .map(|b| format!("SimpleCPU references CPU block {b}, the null block or past the pool"))
                            .or(found)
                    };
                    first(bad.and_then(|d| v(name, d)));
                }
                PropId::HostIntegrity | PropId::HostAccounting if e.conn.mooncake().is_some() => {
                    // Pool entries are put once and never change: only new ones are checked.
                    // Mooncake's host-accounting is the completion flag alone.
                    let mc = e.conn.mooncake().expect("a Mooncake engine");
                    if id == PropId::HostIntegrity {
                        self.examined += pool_put.len() as u64;
                        let wrong = |k: &&BlockHash| mc.pool.get(k) != Some(&ContentTag::full(**k, self.b));
                        if let Some(k) = pool_put.iter().find(wrong) {
                            first(v(name, format!("Mooncake pool key {k:?} does not hold the KV it names")));
                        }
                    } else if e.ghost.has(Breach::BadCompletion) {
                        first(v(name, "a job completion was processed twice or for an unknown job"));
                    }
                }
                PropId::HostIntegrity | PropId::HostAccounting => {
                    if id == PropId::HostIntegrity {
                        self.host_check(e, wl, moves, written, &mut first);
                    }
                }
                PropId::ArcBounds => {
                    // Over the whole ARC state (vacuous under LRU): O(resident keys) per action.
                    if !host::engine_arc_bounds(e) {
                        first(v(name, "the ARC lists disagree with the host entries or exceed their bounds"));
                    }
                }
                PropId::RequestsFinish => {
                    if u32::from(e.ghost.idle_steps) > self.progress_steps {
                        first(v(
                            name,
                            format!(
                                "{} engine steps without a sampled token, a finish or an arrival (bound {})",
                                e.ghost.idle_steps, self.progress_steps
                            ),
                        ));
                    }
                }
                other => {
                    // No incremental form: the entry's single-run form over the whole state.
                    let f = other.def().run_form().expect("a state predicate");
                    let scope = Scope { cfg: &self.cfg, rules: &self.rules, wl, progress_steps: self.progress_steps };
                    if !f(&scope, e) {
                        first(v(name, "the full-state predicate fails"));
                    }
                }
            }
        }
        // Ghost flags: nothing to evaluate unless a transition raised a breach.
        if e.ghost.violations != 0 {
            for (pi, &id) in self.props.iter().enumerate() {
                if self.flag_prop[pi] {
                    first(flag_violation(e, id));
                }
            }
        }
        // The first violated property in catalogue order.
        let rank = |p: &str| self.names.iter().position(|x| *x == p).unwrap_or(usize::MAX);
        found.into_iter().min_by_key(|x| rank(x.property))
    }

    /// host-integrity and host-accounting over the keys that changed.
    fn host_check(
        &mut self,
        e: &Engine,
        wl: &Workload,
        moves: &[(Key, Option<i32>, Option<i32>)],
        written: &[Key],
        first: &mut impl FnMut(Option<Violation>),
    ) {
        let Some(oc) = e.conn.offloading() else { return };
        let h = &oc.host;
        // Running counts of write-pending and evictable keys, from every transition.
        let mut pinned: Vec<Key> = Vec::new();
        for &(k, before, after) in moves {
            match before {
                Some(x) if x < 0 => self.pending -= 1,
                Some(0) => self.evictable -= 1,
                _ => {}
            }
            match after {
                Some(x) if x < 0 => self.pending += 1,
                Some(0) => self.evictable += 1,
                Some(_) => pinned.push(k),
                None => {}
            }
        }
        // Load jobs that appeared or went away change pin counts.
        let same = oc.jobs.iter().filter(|j| !j.is_store()).map(|j| j.id).eq(self.loads.keys().copied());
        if !same {
            let now: BTreeMap<JobId, &[Key]> =
                oc.jobs.iter().filter(|j| !j.is_store()).map(|j| (j.id, &j.keys[..])).collect();
            for (id, ks) in &self.loads {
                if !now.contains_key(id) {
                    pinned.extend(ks.iter().copied());
                }
            }
            for (id, ks) in &now {
                if !self.loads.contains_key(id) {
                    pinned.extend(ks.iter().copied());
                }
            }
            self.loads = now.iter().map(|(id, ks)| (*id, ks.to_vec())).collect();
        }
        // Integrity of what was written or became ready, each distinct key once, in log order.
        // A resident key is told apart by its slot (marked with this action's epoch); a key
        // no longer resident (written, then evicted in the same action) only counts.
        let mut seen = std::mem::take(&mut self.seen_keys);
        seen.clear();
        if self.slot_mark.len() < h.capacity as usize {
            self.slot_mark.resize(h.capacity as usize, 0);
        }
        let mut distinct = 0u64;
        for k in written {
            let Some(en) = h.get(k) else {
                distinct += u64::from(seen.insert(*k, ()).is_none());
                continue;
            };
            let mark = &mut self.slot_mark[en.slot as usize];
            if *mark == self.epoch {
                continue;
            }
            *mark = self.epoch;
            distinct += 1;
            if !host::entry_intact(k, en, self.b, self.bpc, wl) {
                first(v(PropId::HostIntegrity.name(), format!("host key {k:?} does not hold the KV its key names")));
            }
        }
        self.seen_keys = seen;
        self.examined += distinct + pinned.len() as u64;
        if !pinned.is_empty() {
            pinned.sort_unstable();
            pinned.dedup();
            let mut count: FastMap<Key, i32> = FastMap::default();
            for j in oc.jobs.iter().filter(|j| !j.is_store()) {
                for k in &j.keys {
                    *count.entry(*k).or_default() += 1;
                }
            }
            for k in &pinned {
                let Some(en) = h.get(k) else { continue };
                let loads = count.get(k).copied().unwrap_or(0);
                if en.ref_cnt > 0 && loads != en.ref_cnt {
                    first(v(
                        PropId::HostAccounting.name(),
                        format!("host key {k:?} is pinned {} times by {loads} in-flight loads", en.ref_cnt),
                    ));
                }
            }
        }
        if e.ghost.has(Breach::BadCompletion) {
            first(v(PropId::HostAccounting.name(), "a job completion was processed twice or for an unknown job"));
        }
        if self.pending != h.num_write_pending || self.evictable != h.num_evictable {
            first(v(
                PropId::HostAccounting.name(),
                format!(
                    "counters say {} write-pending and {} evictable keys; the entries {} and {}",
                    h.num_write_pending, h.num_evictable, self.pending, self.evictable
                ),
            ));
        }
        if h.len() as u32 + h.num_free_slots() != h.capacity || h.eviction_order_len() as u32 != self.evictable {
            first(v(PropId::HostAccounting.name(), "host slots or eviction order do not add up"));
        }
    }
}
