//! Where the search's threads spend their time, for profiling the parallel search: with
//! `KVMC_SEARCH_STATS=1` in the environment, each thread adds up the time it expands states,
//! merges them (the calling thread) and waits (for work, for another thread's output, for the
//! table to grow), and the run prints one line per thread to stderr at its end. Off (the
//! default), a thread only tests a flag and reads no clock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// True when `KVMC_SEARCH_STATS` is set to something other than `0` or nothing.
pub fn enabled() -> bool {
    std::env::var("KVMC_SEARCH_STATS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// What a thread measures (all zero when off).
#[derive(Default, Clone, Copy)]
pub struct Times {
    pub expand: Duration,
    pub merge: Duration,
    pub wait: Duration,
    /// Chunks this thread expanded.
    pub chunks: usize,
    /// Times it waited.
    pub waits: usize,
}

/// A clock that reads nothing when off.
#[derive(Clone, Copy)]
pub struct Clock {
    on: bool,
}

impl Clock {
    pub fn new(on: bool) -> Self {
        Clock { on }
    }

    pub fn start(self) -> Option<Instant> {
        self.on.then(Instant::now)
    }

    /// Adds the time since `t` (if measuring) to `to`.
    pub fn add(self, t: Option<Instant>, to: &mut Duration) {
        if let Some(t) = t {
            *to += t.elapsed();
        }
    }
}

/// Every thread's times, printed at the run's end.
#[derive(Default)]
pub struct Report {
    rows: Mutex<Vec<(String, Times)>>,
}

impl Report {
    pub fn push(&self, who: String, t: Times) {
        self.rows.lock().unwrap().push((who, t));
    }

    /// `repeats`: successors encoded as new that the merge found visited.
    pub fn print(&self, wall: Duration, repeats: usize) {
        let mut rows = self.rows.lock().unwrap();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for (who, t) in rows.iter() {
            eprintln!(
                "search stats: {who}: expand {:.1} ms ({} chunks), merge {:.1} ms, wait {:.1} ms ({} waits), wall {:.1} ms",
                ms(t.expand),
                t.chunks,
                ms(t.merge),
                ms(t.wait),
                t.waits,
                ms(wall)
            );
        }
        eprintln!("search stats: {repeats} successors taken for new and found visited by the merge");
    }
}
