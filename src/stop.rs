//! Stopping a run early, and saying why.
//!
//! Every exploration owns a [`Watch`]: one stop flag that each strategy reads once per state
//! and once per successor (a relaxed atomic load), and the counts it reached so far. A
//! process-wide watchdog thread raises the flag: for the exploration's deadline (`--timeout`),
//! for the memory budget (`--max-memory`, compared with the process's resident memory), and
//! for Ctrl-C (a SIGINT handler that only sets a flag). An exploration that sees its flag
//! stops and reports `incomplete` with the counts it reached.
//!
//! One step of a huge scope can outlast a deadline on its own. If a flagged exploration has
//! not returned within a grace (default [`DEFAULT_GRACE`], `KVMC_STOP_GRACE` seconds), the
//! watchdog calls the overrun handler the command installed ([`on_overrun`]), which prints
//! the partial report from the counts every exploration published and ends the process.
//!
//! The parallel BFS to come reads the same flag from each of its threads.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Why an exploration stopped before exhausting its state space.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum StopReason {
    /// `--max-states` (or simulate's default bound).
    States,
    /// `--max-depth`.
    Depth,
    /// `--timeout`.
    Timeout,
    /// The process's resident memory reached `--max-memory`.
    Memory,
    /// Ctrl-C (SIGINT).
    Interrupted,
    /// Random walks sample paths; they never exhaust the state space.
    Sampling,
}

impl StopReason {
    fn code(self) -> u8 {
        match self {
            StopReason::States => 1,
            StopReason::Depth => 2,
            StopReason::Timeout => 3,
            StopReason::Memory => 4,
            StopReason::Interrupted => 5,
            StopReason::Sampling => 6,
        }
    }

    fn from_code(c: u8) -> Option<StopReason> {
        Some(match c {
            1 => StopReason::States,
            2 => StopReason::Depth,
            3 => StopReason::Timeout,
            4 => StopReason::Memory,
            5 => StopReason::Interrupted,
            6 => StopReason::Sampling,
            _ => return None,
        })
    }
}

/// How often the watchdog looks at clocks, memory and Ctrl-C.
const TICK: Duration = Duration::from_millis(20);

/// How long a flagged exploration may take to return before the watchdog ends the process.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static GRACE_NANOS: AtomicU64 = AtomicU64::new(2_000_000_000);

type Overrun = Box<dyn Fn(StopReason) + Send + Sync>;
static OVERRUN: Mutex<Option<Overrun>> = Mutex::new(None);

/// Has Ctrl-C been pressed (since [`catch_interrupt`])?
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Catch Ctrl-C: the first SIGINT raises the interrupt flag (runs stop and report what they
/// reached); a second one ends the process at once with exit 130.
pub fn catch_interrupt() {
    #[cfg(unix)]
    {
        extern "C" fn on_sigint(_: libc::c_int) {
            // Only async-signal-safe work here: an atomic swap, and _exit on the second press.
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                unsafe { libc::_exit(crate::error::exit::INTERRUPTED) };
            }
        }
        let handler: extern "C" fn(libc::c_int) = on_sigint;
        // SAFETY: installs a handler that only touches an atomic and calls _exit.
        unsafe {
            libc::signal(libc::SIGINT, handler as libc::sighandler_t);
        }
    }
}

/// Set the grace a flagged exploration has before the watchdog ends the process.
pub fn set_grace(d: Duration) {
    GRACE_NANOS.store(d.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
}

pub fn grace() -> Duration {
    Duration::from_nanos(GRACE_NANOS.load(Ordering::Relaxed))
}

/// The grace from `KVMC_STOP_GRACE` (seconds), if set; an error names the bad value.
pub fn grace_from_env() -> Result<Option<Duration>, String> {
    match std::env::var("KVMC_STOP_GRACE") {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=86400.0).contains(&s) => Ok(Some(Duration::from_secs_f64(s))),
            _ => Err(format!("KVMC_STOP_GRACE={v}: expected seconds between 0 and 86400")),
        },
    }
}

/// Install the handler the watchdog calls when a flagged exploration outlives the grace
/// (it should print the partial report and end the process). Replaces any earlier one.
pub fn on_overrun(f: impl Fn(StopReason) + Send + Sync + 'static) {
    *OVERRUN.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(f));
}

/// One exploration's stop signal and progress.
#[derive(Debug)]
pub struct Watch {
    flag: AtomicU8,
    started: Instant,
    deadline: Option<Instant>,
    max_memory: Option<u64>,
    unique: AtomicUsize,
    generated: AtomicUsize,
    depth: AtomicUsize,
    done: AtomicBool,
    /// When the watchdog raised the flag (for the grace).
    flagged_at: Mutex<Option<Instant>>,
    overrun: AtomicBool,
}

impl Watch {
    /// A watch whose clock starts now, registered with the watchdog.
    pub fn start(timeout: Option<Duration>, max_memory: Option<u64>) -> Arc<Watch> {
        let started = Instant::now();
        let w = Arc::new(Watch {
            flag: AtomicU8::new(0),
            started,
            deadline: timeout.map(|t| started + t),
            max_memory,
            unique: AtomicUsize::new(0),
            generated: AtomicUsize::new(0),
            depth: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            flagged_at: Mutex::new(None),
            overrun: AtomicBool::new(false),
        });
        watchdog().register(&w);
        w
    }

    /// Has the exploration been told to stop, and why?
    #[inline]
    pub fn poll(&self) -> Option<StopReason> {
        match self.flag.load(Ordering::Relaxed) {
            0 => None,
            c => StopReason::from_code(c),
        }
    }

    /// Raise the flag (the first reason wins). True if this call raised it.
    pub fn raise(&self, r: StopReason) -> bool {
        let raised = self.flag.compare_exchange(0, r.code(), Ordering::SeqCst, Ordering::Relaxed).is_ok();
        if raised {
            *self.flagged_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
        raised
    }

    /// Publish the counts reached so far (read by a partial report).
    #[inline]
    pub fn publish(&self, unique: usize, generated: usize, depth: usize) {
        self.unique.store(unique, Ordering::Relaxed);
        self.generated.store(generated, Ordering::Relaxed);
        self.depth.store(depth, Ordering::Relaxed);
    }

    /// (unique states, generated states, deepest depth) last published.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.unique.load(Ordering::Relaxed),
            self.generated.load(Ordering::Relaxed),
            self.depth.load(Ordering::Relaxed),
        )
    }

    /// Seconds since the watch started.
    pub fn seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// The exploration returned: the watchdog leaves it alone.
    pub fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
    }

    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// The reason the watchdog would raise now, if any.
    fn due(&self, now: Instant, rss: Option<u64>) -> Option<StopReason> {
        if interrupted() {
            Some(StopReason::Interrupted)
        } else if matches!((self.max_memory, rss), (Some(m), Some(r)) if r >= m) {
            Some(StopReason::Memory)
        } else if self.deadline.is_some_and(|d| now >= d) {
            Some(StopReason::Timeout)
        } else {
            None
        }
    }
}

struct Watchdog {
    live: Mutex<Vec<Weak<Watch>>>,
    wake: Condvar,
}

static WATCHDOG: OnceLock<Watchdog> = OnceLock::new();

fn watchdog() -> &'static Watchdog {
    let mut fresh = false;
    let w = WATCHDOG.get_or_init(|| {
        fresh = true;
        Watchdog { live: Mutex::new(Vec::new()), wake: Condvar::new() }
    });
    if fresh {
        std::thread::Builder::new()
            .name("kvmc-watchdog".into())
            .spawn(move || w.run())
            .expect("the watchdog thread starts");
    }
    w
}

impl Watchdog {
    fn register(&self, w: &Arc<Watch>) {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(w));
        self.wake.notify_all();
    }

    fn run(&self) {
        loop {
            let watches: Vec<Arc<Watch>> = {
                let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
                live.retain(|w| w.upgrade().is_some_and(|w| !w.is_done()));
                while live.is_empty() {
                    live = self.wake.wait(live).unwrap_or_else(|e| e.into_inner());
                    live.retain(|w| w.upgrade().is_some_and(|w| !w.is_done()));
                }
                live.iter().filter_map(Weak::upgrade).collect()
            };
            let now = Instant::now();
            let rss = if watches.iter().any(|w| w.max_memory.is_some()) { current_rss_bytes() } else { None };
            for w in &watches {
                if let Some(r) = w.due(now, rss) {
                    w.raise(r);
                }
                let since = *w.flagged_at.lock().unwrap_or_else(|e| e.into_inner());
                if let (Some(t), Some(r)) = (since, w.poll()) {
                    if now.duration_since(t) >= grace() && !w.is_done() && !w.overrun.swap(true, Ordering::SeqCst) {
                        if let Some(f) = OVERRUN.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                            f(r);
                        }
                    }
                }
            }
            drop(watches);
            let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let _ = self.wake.wait_timeout(live, TICK);
        }
    }
}

/// Resident memory of this process in bytes (Linux `/proc/self/statm`), if known.
pub fn current_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

fn page_size() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            return p as u64;
        }
    }
    4096
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The memory this process may use: the machine's `MemTotal`, or the cgroup's limit if lower.
pub fn machine_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    let mut total = kb * 1024;
    for f in ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"] {
        if let Some(limit) = std::fs::read_to_string(f).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            total = total.min(limit);
        }
    }
    Some(total)
}

/// The share of [`machine_memory_bytes`] an exploration may use by default.
pub const DEFAULT_MEMORY_SHARE: f64 = 0.8;

/// The default memory budget: 80% of the machine's (or cgroup's) memory.
pub fn default_memory_budget() -> Option<u64> {
    machine_memory_bytes().map(|m| (m as f64 * DEFAULT_MEMORY_SHARE) as u64)
}

/// Parse a memory size: `512M`, `4G`, `1.5GiB`, `1000000` (bytes); binary units; `none`: no
/// budget.
pub fn parse_size(s: &str) -> Result<Option<u64>, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    let bad = || format!("{s}: expected a size such as 512M, 4G or 1.5GiB (binary units), or none");
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| bad())?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches("ib").trim_end_matches('b');
    let mult: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        "t" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let bytes = n * mult;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(Some(bytes as u64))
}

/// 1610612736 -> "1.5 GiB".
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}
