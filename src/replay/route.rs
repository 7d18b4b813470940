//! The replay router's rule, shared by the colocated driver (engines) and the P/D driver
//! (pairs): a session's later turns go where its first turn went; other rows follow the
//! model's `router` (round-robin, least-loaded by unfinished requests, or the longest prefix of
//! block ids already routed), ties to the lowest index, so a run is deterministic.

use super::trace::Trace;
use crate::scope::replay::Router;
use std::collections::HashMap;

/// What the router remembers between rows.
#[derive(Default)]
pub(crate) struct Routing {
    session: HashMap<u32, u16>,
    prefix: HashMap<u32, u16>,
    rr_next: u32,
}

impl Routing {
    /// The target (engine or pair) of trace row `r`; `unfinished[k]` is target k's load.
    pub(crate) fn route(&mut self, router: Router, trace: &Trace, r: u32, unfinished: &[u32]) -> usize {
        let row = &trace.rows[r as usize];
        let n = unfinished.len();
        if n == 1 {
            return 0;
        }
        if let Some(s) = row.session {
            if let Some(&k) = self.session.get(&s) {
                return k as usize;
            }
        }
        let least = || (0..n).min_by_key(|&k| (unfinished[k], k)).unwrap_or(0);
        let k = match router {
            Router::RoundRobin => {
                let k = self.rr_next as usize % n;
                self.rr_next += 1;
                k
            }
            Router::LeastLoaded => least(),
            Router::Prefix => {
                let mut best = None;
                for id in trace.row_ids(r) {
                    match self.prefix.get(id) {
                        Some(&k) => best = Some(k as usize),
                        None => break,
                    }
                }
                best.unwrap_or_else(least)
            }
        };
        if router == Router::Prefix {
            for id in trace.row_ids(r) {
                self.prefix.insert(*id, k as u16);
            }
        }
        if let Some(s) = row.session {
            self.session.insert(s, k as u16);
        }
        k
    }
}
