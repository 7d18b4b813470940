//! Symmetry: renaming interchangeable requests. A pure function over system types; the checker
//! visits one state per class (its search hooks, src/check/hooks.rs).
//!
//! # Roles
//! Two requests have the same *role* when the scope cannot tell them apart: the same
//! [`RequestSpec`] apart from the name (prompt and output tokens, `max_tokens`, EOS, block
//! hashes, routed-experts start), neither is a streaming session, neither waits for another
//! request's finish (`after`) and no request waits for either, and arrivals are `any` (under
//! `in-order` the arrival rule reads the request's index). Faults are global to a scope, so they
//! do not distinguish requests. Requests of one role are interchangeable: renaming them maps
//! every behaviour to a behaviour (`tests/symmetry.rs` checks that the renaming commutes with
//! every action on every reachable state of the symmetric scopes).
//!
//! # What is renamed, and what is not
//! - Request ids, everywhere the engine holds them: the request table, the scheduler's queues
//!   (their order is kept: only the names change), the finished lists, the batches in flight,
//!   and the OffloadingConnector's per-request state, jobs and held requests. Symmetry applies
//!   to engines without a connector or with the OffloadingConnector, without router replay;
//!   for SimpleCPU, Mooncake and NIXL (whose states hold request ids this file does not
//!   rename) it is off ([`Roles::of`] says so with `None`).
//! - Physical block ids (G1 blocks, SimpleCPU's CPU blocks, host slots) are **not** renamed:
//!   their numeric order reaches decisions. Failed-load blocks are evicted from a
//!   `BTreeSet<BlockId>` in id order (their order in the free queue follows), the loading
//!   set and the store fences are ordered by block id, and the initial free queue is in id
//!   order. A renaming that kept all of these relations would be the identity on every state
//!   the scopes reach, so it would reduce nothing.
//!
//! # The representative
//! Within each role, the members are sorted by a fingerprint of what the state holds about
//! each (its request state, its places in the queues, its connector state and jobs) and
//! renamed in that order. Members with equal fingerprints keep their order (the representative
//! is then not unique: a smaller reduction, never a wrong one).

use crate::system::connector::Connector;
use crate::system::engine::Engine;
use crate::system::types::ReqId;
use crate::system::workload::Workload;
use std::hash::{Hash, Hasher};

/// The interchangeable requests of a scope: classes of two or more requests with one role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roles {
    pub classes: Vec<Vec<ReqId>>,
}

impl Roles {
    /// The roles of a workload: `after[r]` is the request `r` waits for, `in_order` whether
    /// arrivals follow request order, `connector_ok` whether this file renames everything the
    /// engine's connector holds. `None` when no two requests are interchangeable.
    pub fn new(wl: &Workload, after: &[Option<u16>], in_order: bool, connector_ok: bool) -> Option<Roles> {
        if in_order || !connector_ok {
            return None;
        }
        let n = wl.requests.len();
        let free = |r: usize| after[r].is_none() && !after.contains(&Some(r as u16)) && wl.turns[r].is_empty();
        let same = |a: usize, b: usize| {
            let (x, y) = (&wl.requests[a], &wl.requests[b]);
            x.tokens == y.tokens
                && x.prompt_len == y.prompt_len
                && x.lost == y.lost
                && x.max_tokens == y.max_tokens
                && x.eos_at == y.eos_at
                && x.hashes == y.hashes
                && x.turn == y.turn
                && x.rows_start == y.rows_start
        };
        let mut classes: Vec<Vec<ReqId>> = Vec::new();
        let mut taken = vec![false; n];
        for a in 0..n {
            if taken[a] || !free(a) {
                continue;
            }
            let class: Vec<ReqId> =
                (a..n).filter(|&b| !taken[b] && free(b) && same(a, b)).map(|b| b as ReqId).collect();
            for &b in &class {
                taken[b as usize] = true;
            }
            if class.len() > 1 {
                classes.push(class);
            }
        }
        (!classes.is_empty()).then_some(Roles { classes })
    }
}

/// A fixed-key hasher (FNV-1a over the words written), for ordering requests.
struct Fnv(u64);
impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

/// What `e` holds about request `r`, as a number (equal views, equal numbers).
fn view(e: &Engine, r: ReqId) -> u64 {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let pos = |q: &[ReqId]| q.iter().position(|&x| x == r);
    e.reqs[r as usize].hash(&mut h);
    for q in [&e.running, &e.waiting, &e.kv_holding, &e.finished_since, &e.finished_recving, &e.failed_recving] {
        pos(q).hash(&mut h);
    }
    for b in &e.batches {
        b.out.scheduled.iter().position(|s| s.req == r).hash(&mut h);
        pos(&b.out.preempted).hash(&mut h);
        pos(&b.out.finished).hash(&mut h);
        pos(&b.wout.finished_recving).hash(&mut h);
        pos(&b.wout.failed_recving).hash(&mut h);
        pos(&b.wout.finished_sending).hash(&mut h);
    }
    if let Some(oc) = e.conn.offloading() {
        oc.reqs[r as usize].hash(&mut h);
        for (i, j) in oc.jobs.iter().enumerate() {
            if j.req == r {
                i.hash(&mut h);
            }
        }
        oc.held.iter().position(|x| x.req == r).hash(&mut h);
    }
    h.finish()
}

/// `e` with request `r` renamed `map[r]` everywhere.
pub fn rename(e: &Engine, map: &[ReqId]) -> Engine {
    let mut out = e.clone();
    let m = |r: &mut ReqId| *r = map[*r as usize];
    for (r, q) in e.reqs.iter().enumerate() {
        out.reqs[map[r] as usize] = q.clone();
    }
    for q in [
        &mut out.running,
        &mut out.waiting,
        &mut out.kv_holding,
        &mut out.finished_since,
        &mut out.finished_recving,
        &mut out.failed_recving,
    ] {
        q.iter_mut().for_each(m);
    }
    for b in &mut out.batches {
        b.out.scheduled.iter_mut().for_each(|s| m(&mut s.req));
        b.out.preempted.iter_mut().for_each(m);
        b.out.finished.iter_mut().for_each(m);
        b.wout.finished_recving.iter_mut().for_each(m);
        b.wout.failed_recving.iter_mut().for_each(m);
        b.wout.finished_sending.iter_mut().for_each(m);
        b.wout.rows.iter_mut().for_each(|x| m(&mut x.req));
    }
    if let (Connector::Offloading(oc), Some(old)) = (&mut out.conn, e.conn.offloading()) {
        for (r, s) in old.reqs.iter().enumerate() {
            oc.reqs[map[r] as usize] = s.clone();
        }
        oc.jobs.iter_mut().for_each(|j| m(&mut j.req));
        oc.held.iter_mut().for_each(|h| m(&mut h.req));
    }
    out
}

/// The representative of `e`'s class: each role's members renamed in the order of what the
/// state holds about them. `None` when `e` is its own representative.
pub fn representative(e: &Engine, roles: &Roles) -> Option<Engine> {
    let mut map: Vec<ReqId> = (0..e.reqs.len() as ReqId).collect();
    let mut moved = false;
    for class in &roles.classes {
        let mut keyed: Vec<(u64, ReqId)> = class.iter().map(|&r| (view(e, r), r)).collect();
        keyed.sort(); // stable on equal views: ties keep their order
        for (&slot, &(_, r)) in class.iter().zip(&keyed) {
            map[r as usize] = slot;
            moved |= slot != r;
        }
    }
    moved.then(|| rename(e, &map))
}
