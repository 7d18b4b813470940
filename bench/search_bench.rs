//! Measures `kvmc::search` (one configuration per process, so that peak RSS is its own):
//!
//! ```text
//! cargo run --profile dev-fast --example search_bench -- toy N K SPIN THREADS
//! cargo run --profile dev-fast --example search_bench -- kv MODEL.toml ENGINE THREADS
//! ```
//! `toy`: N counters (at most 8) each 0..=K, (K+1)^N states; every `next_state` spins SPIN
//! rounds of integer mixing (about 1 ns each) to stand in for kvmc's model step (about 10 µs
//! per state). `kv`: a kvmc model file with every applicable always-property (as `kvmc bench`); ENGINE is `search` or
//! `check` (`kvmc::check::run` with default options: the checker, on this same engine since
//! issue 21, one thread, with requests-finish's liveness graph). One line: unique states, generated,
//! depth, wall and CPU seconds, visited-set bytes per state, peak RSS.

/// The binary's allocator (src/alloc.rs belongs to the binaries, not the library).
#[path = "../src/alloc.rs"]
mod alloc;

use kvmc::search::{search, Options, Plain};
use stateright::{Model, Property};
use std::hash::Hash;
use std::time::Instant;

/// kvmc's allocator, as the `kvmc` binary has it.
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;

struct Toy {
    n: usize,
    k: u8,
    spin: u64,
}

impl Model for Toy {
    type State = [u8; 8];
    type Action = u8;
    fn init_states(&self) -> Vec<[u8; 8]> {
        vec![[0; 8]]
    }
    fn actions(&self, _: &[u8; 8], out: &mut Vec<u8>) {
        out.extend(0..self.n as u8);
    }
    fn next_state(&self, s: &[u8; 8], i: u8) -> Option<[u8; 8]> {
        let mut x = u64::from(i) + 1;
        for _ in 0..self.spin {
            x = std::hint::black_box(x.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(7));
        }
        let mut s = *s;
        let c = &mut s[i as usize];
        *c = if *c == self.k { 0 } else { *c + 1 };
        std::hint::black_box(x);
        Some(s)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always("in-range", |m: &Toy, s: &[u8; 8]| s.iter().all(|&c| c <= m.k))]
    }
}

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let Some(i) = s.rfind(')') else { return f64::NAN };
    let f: Vec<&str> = s[i + 2..].split_whitespace().collect();
    let t = |k: usize| f.get(k).and_then(|x| x.parse::<f64>().ok()).unwrap_or(f64::NAN);
    (t(11) + t(12)) / 100.0
}

fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = s
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|x| x.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    kb / 1024.0
}

fn measure<M>(label: &str, m: &M, threads: usize)
where
    M: Model + Sync,
    M::State: Hash + Eq + Clone + Send + Sync,
    M::Action: Send + Sync,
{
    let (c0, t0) = (cpu_seconds(), Instant::now());
    let o = search(m, &Plain, &Options { threads, ..Options::default() });
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    println!(
        "{label} engine=search threads={threads} unique={} generated={} depth={} end={:?} wall_s={wall:.2} cpu_s={cpu:.2} \
         visited_bytes_per_state={:.1} peak_rss_mib={:.0} collision_p={:.1e}",
        o.unique,
        o.generated,
        o.max_depth,
        o.end,
        o.visited_bytes as f64 / o.unique as f64,
        peak_rss_mib(),
        o.collision_probability
    );
}

fn main() {
    alloc::init().expect("KVMC_HUGE_PAGES is all, tables or none");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).unwrap_or_else(|| panic!("usage: see the file's doc comment"));
    match arg(0).as_str() {
        "toy" => {
            let (n, k, spin, threads) =
                (arg(1).parse().unwrap(), arg(2).parse().unwrap(), arg(3).parse().unwrap(), arg(4).parse().unwrap());
            assert!(n <= 8, "at most 8 counters");
            measure(&format!("toy n={n} k={k} spin={spin}"), &Toy { n, k, spin }, threads);
        }
        "kv" => {
            use kvmc::model::KvModel;
            use kvmc::scope::Scope;
            let path = std::path::PathBuf::from(arg(1));
            let scope = std::sync::Arc::new(Scope::load(&path).expect("the model loads"));
            let props = kvmc::props::REGISTRY
                .iter()
                .filter(|p| p.kind == kvmc::props::Kind::Always && kvmc::props::applies(p, &scope.cfg))
                .collect();
            let m = KvModel::new(scope, None, None, props).expect("the rules resolve");
            let threads: usize = arg(3).parse().unwrap();
            let label = format!("kv {}", path.display());
            if arg(2) == "check" {
                let (c0, t0) = (cpu_seconds(), Instant::now());
                let r = kvmc::check::run(m, &kvmc::check::RunOpts::default());
                let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
                println!(
                    "{label} engine=check threads=1 unique={} generated={} depth={} wall_s={wall:.2} cpu_s={cpu:.2} peak_rss_mib={:.0}",
                    r.unique_states,
                    r.states,
                    r.max_depth,
                    peak_rss_mib()
                );
            } else {
                measure(&label, &m, threads);
            }
        }
        other => panic!("unknown mode {other}"),
    }
}
