//! The replay's arrival queue, shared by the colocated driver (engines) and the P/D driver
//! (pairs): which trace rows arrive when. First turns are timed at their timestamps (divided by
//! `speedup`) or all at 0 (closed loop, sessions); a session's later turn is timed when its
//! previous turn finished (or was refused), after its `delay`. Timed rows that are due become
//! eligible, in trace order; under `load = "sessions"` a first turn waits among the fresh
//! sessions until fewer than N sessions are in flight; under `load = "closed-loop"` no more
//! rows are admitted while N are unfinished. Rows refused up front (a prompt of
//! `max_model_len` tokens or more, or a later turn of a refused session) are listed here too.

use super::trace::Trace;
use crate::scope::replay::{Load, ReplayModel, SameTime};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The rows waiting to arrive, and the sessions in flight.
pub(crate) struct ArrivalQueue<'a> {
    trace: &'a Trace,
    load: Load,
    same_time: SameTime,
    speedup: f64,
    /// (model time, row) of rows not due yet.
    timed: BinaryHeap<Reverse<(u64, u32)>>,
    /// Due rows, in trace order.
    eligible: BinaryHeap<Reverse<u32>>,
    /// `load = "sessions"`: first turns not started yet, and the sessions in flight.
    fresh: BinaryHeap<Reverse<u32>>,
    active_sessions: u32,
    /// Rows that never reach an engine.
    refuse: Vec<bool>,
}

impl<'a> ArrivalQueue<'a> {
    /// Every first turn timed; also the output tokens each row generates: its
    /// `output_length`, capped so that prompt and output fit `max_model_len` (the engine stops
    /// a request there, `check_stop`).
    pub(crate) fn new(trace: &'a Trace, model: &ReplayModel) -> (ArrivalQueue<'a>, Vec<u32>) {
        let cfg = &model.cfg;
        // vLLM's input processor refuses a prompt of max_model_len tokens or more (there is no
        // room for one output token); the engine stops any other request at max_model_len. A
        // session whose turn is refused has no later turns (their prompts build on it).
        let mut refuse = vec![false; trace.rows.len()];
        let mut out_len = Vec::with_capacity(trace.rows.len());
        for (i, r) in trace.rows.iter().enumerate() {
            refuse[i] = r.prompt_len >= cfg.max_model_len || r.prev.is_some_and(|p| refuse[p as usize]);
            out_len.push(r.output_len.min(cfg.max_model_len.saturating_sub(r.prompt_len)));
        }
        let mut q = ArrivalQueue {
            trace,
            load: model.replay.load,
            same_time: model.replay.same_time,
            speedup: model.replay.speedup,
            timed: BinaryHeap::new(),
            eligible: BinaryHeap::new(),
            fresh: BinaryHeap::new(),
            active_sessions: 0,
            refuse,
        };
        let speed = q.speedup;
        let t0 = trace.rows.iter().filter(|r| r.prev.is_none()).filter_map(|r| r.timestamp_us).min().unwrap_or(0);
        for (i, r) in trace.rows.iter().enumerate() {
            if r.prev.is_some() {
                continue;
            }
            let at = match q.load {
                Load::Timestamps => ((r.timestamp_us.unwrap_or(t0) - t0) as f64 / speed).round() as u64,
                Load::ClosedLoop(_) | Load::Sessions(_) => 0,
            };
            q.timed.push(Reverse((at, i as u32)));
        }
        (q, out_len)
    }

    /// Row `r` never reaches an engine.
    pub(crate) fn refused(&self, r: u32) -> bool {
        self.refuse[r as usize]
    }

    /// `load = "sessions"`: a session not started yet has a place.
    fn session_waits(&self) -> bool {
        matches!(self.load, Load::Sessions(n) if self.active_sessions < n) && !self.fresh.is_empty()
    }

    /// The model time the replay moves to from `now`: the clock of the busy instance furthest
    /// behind (`busy_min`), else `now` while rows wait for admission, else the next timed
    /// row's time. None: nothing is busy and nothing is left to arrive.
    pub(crate) fn next_time(&self, busy_min: Option<u64>, now: u64) -> Option<u64> {
        match busy_min {
            Some(t) => Some(t),
            // A refused session's place may go to a session waiting for one.
            None if !self.eligible.is_empty() || self.session_waits() => Some(now),
            None => self.timed.peek().map(|Reverse((t, _))| (*t).max(now)),
        }
    }

    /// Rows due by `now` become eligible (fresh sessions wait for a place). Under
    /// same_time = "step-first" an arrival at the time a busy instance's step starts
    /// (`busy_min == now`) waits for the step after.
    pub(crate) fn release(&mut self, now: u64, busy_min: Option<u64>) {
        let hold = self.same_time == SameTime::StepFirst && busy_min == Some(now);
        let sessions = match self.load {
            Load::Sessions(n) => n,
            _ => 0,
        };
        while let Some(&Reverse((t, r))) = self.timed.peek() {
            if t > now || (hold && t == now) {
                break;
            }
            self.timed.pop();
            match sessions > 0 && self.trace.rows[r as usize].prev.is_none() {
                true => self.fresh.push(Reverse(r)),
                false => self.eligible.push(Reverse(r)),
            }
        }
        while self.active_sessions < sessions {
            let Some(r) = self.fresh.pop() else { break };
            self.active_sessions += 1;
            self.eligible.push(r);
        }
    }

    /// The next eligible row to admit while `unfinished` rows are in the engines (the closed
    /// loop's cap holds it back).
    pub(crate) fn admit(&mut self, unfinished: u32) -> Option<u32> {
        let cap = match self.load {
            Load::ClosedLoop(n) => n,
            Load::Timestamps | Load::Sessions(_) => u32::MAX,
        };
        if unfinished >= cap {
            return None;
        }
        self.eligible.pop().map(|Reverse(r)| r)
    }

    /// Refused row `r` is done at `now`: its session's next turn comes at once (to be refused
    /// in turn), or the session ends.
    pub(crate) fn reject(&mut self, r: u32, now: u64) {
        match self.trace.rows[r as usize].next {
            Some(nx) => self.timed.push(Reverse((now, nx))),
            None => self.active_sessions = self.active_sessions.saturating_sub(1),
        }
    }

    /// Row `r` finished at model time `at`: its session's next turn comes after its delay (or
    /// the difference of the two turns' timestamps), or the session ends.
    pub(crate) fn finished(&mut self, r: u32, at: u64) {
        let row = &self.trace.rows[r as usize];
        if row.next.is_none() {
            self.active_sessions = self.active_sessions.saturating_sub(1);
        }
        if let Some(nx) = row.next {
            let n = &self.trace.rows[nx as usize];
            let wait = match (n.delay_us, n.timestamp_us, row.timestamp_us) {
                (Some(d), _, _) => d,
                (None, Some(b), Some(a)) => b.saturating_sub(a),
                _ => 0,
            };
            let wait = (wait as f64 / self.speedup).round() as u64;
            self.timed.push(Reverse((at + wait, nx)));
        }
    }

    /// Nothing waits to arrive.
    pub(crate) fn is_empty(&self) -> bool {
        self.timed.is_empty() && self.eligible.is_empty() && self.fresh.is_empty()
    }
}
