//! Progress: every request finishes and releases everything. The checker (`bfs`) decides it
//! over the state graph: a deadlock (`requests_finish`, with the step counter at 0 in the
//! checker's states) or a fair cycle that never reaches `finished_or_dead`. A single run
//! (scenario replay, trace replay) bounds the steps without progress instead.

use super::Scope;
use crate::system::Engine;
use crate::system::System;

/// `requests-finish`: no reachable state where work remains and nothing but a fault can move
/// (deadlock), and no run of more than `progress_steps` engine steps without progress
/// (livelock, e.g. preempt/resume ping-pong).
pub fn requests_finish(m: &System, e: &Engine) -> bool {
    u32::from(e.ghost.idle_steps) <= m.env.progress_steps && !m.is_stuck(e)
}

/// `requests-finish` in a single run (replay): the livelock bound alone; a run bounds the
/// steps without progress instead of searching a state graph for a deadlock.
pub fn idle_bounded(s: &Scope, e: &Engine) -> bool {
    u32::from(e.ghost.idle_steps) <= s.progress_steps
}

/// The liveness half of `requests-finish`: every request arrived and finished and nothing is
/// held, or the engine died (a crash is another property's violation, not a livelock).
pub fn finished_or_dead(_: &System, e: &Engine) -> bool {
    all_finished(e) || e.is_dead()
}

/// Guard: every request arrived and finished, and nothing is held.
pub fn all_finished(e: &Engine) -> bool {
    !e.has_work() && e.reqs.iter().all(|q| q.status.is_finished())
}
