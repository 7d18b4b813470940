//! Progress: every request finishes and releases everything (bounded liveness).

use crate::system::Engine;
use crate::system::System;

/// `requests-finish`: no reachable state where work remains and nothing but a fault can move
/// (deadlock), and no run of more than `progress_steps` engine steps without progress
/// (livelock, e.g. preempt/resume ping-pong).
pub fn requests_finish(m: &System, e: &Engine) -> bool {
    u32::from(e.ghost.idle_steps) <= m.env.progress_steps && !m.is_stuck(e)
}

/// Guard: every request arrived and finished, and nothing is held.
pub fn all_finished(e: &Engine) -> bool {
    !e.has_work() && e.reqs.iter().all(|q| q.status.is_finished())
}
