//! Where the search's threads spend their time, for profiling the parallel search: with
//! `KVMC_SEARCH_STATS=1` in the environment, each thread adds up the time it expands states,
//! merges them (the calling thread) and waits (for work, for another thread's output, for the
//! table to grow), and the run prints one line per thread to stderr at its end: wall time, and
//! for expanding and merging the thread's own CPU time too (which a loaded machine does not
//! inflate by descheduling the thread). Off (the default), a thread only tests a flag and reads
//! no clock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// True when `KVMC_SEARCH_STATS` is set to something other than `0` or nothing.
pub fn enabled() -> bool {
    std::env::var("KVMC_SEARCH_STATS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Time spent on one kind of work: wall, and the thread's CPU.
#[derive(Default, Clone, Copy)]
pub struct Spent {
    pub wall: Duration,
    pub cpu: Duration,
}

/// What a thread measures (all zero when off).
#[derive(Default, Clone, Copy)]
pub struct Times {
    pub expand: Spent,
    pub merge: Spent,
    pub wait: Spent,
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

    pub fn start(self) -> Option<(Instant, Duration)> {
        self.on.then(|| (Instant::now(), thread_cpu()))
    }

    /// Adds the time since `t` (if measuring) to `to`.
    pub fn add(self, t: Option<(Instant, Duration)>, to: &mut Spent) {
        if let Some((t, c)) = t {
            to.wall += t.elapsed();
            to.cpu += thread_cpu().saturating_sub(c);
        }
    }
}

/// The calling thread's CPU time so far (zero where unknown).
fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid out-pointer; the call only writes it.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    Duration::ZERO
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
                "search stats: {who}: expand {:.1} ms, {:.1} ms CPU ({} chunks), merge {:.1} ms, {:.1} ms CPU, \
                 wait {:.1} ms ({} waits), wall {:.1} ms",
                ms(t.expand.wall),
                ms(t.expand.cpu),
                t.chunks,
                ms(t.merge.wall),
                ms(t.merge.cpu),
                ms(t.wait.wall),
                t.waits,
                ms(wall)
            );
        }
        eprintln!("search stats: {repeats} successors taken for new and found visited by the merge");
    }
}
