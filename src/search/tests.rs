//! The parallel search's scheduling paths that the integration tests' small models never take:
//! expansion held back at the window (a helper waiting for the merge) on every chunk, with
//! discoveries, liveness edges, bounds and the stop hook. Every run must give what one thread
//! gives.

use super::bfs::run_in;
use super::{Discovery, End, Options, Plain, Progress, Stop};
use stateright::{Model, Property};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `n` counters 0..=k, `Inc(i)` wraps counter `i` to 0 after k (every state on a cycle).
struct Wrap {
    n: usize,
    k: u8,
}

impl Model for Wrap {
    type State = Vec<u8>;
    type Action = usize;
    fn init_states(&self) -> Vec<Vec<u8>> {
        vec![vec![0; self.n]]
    }
    fn actions(&self, _s: &Vec<u8>, out: &mut Vec<usize>) {
        out.extend(0..self.n);
    }
    fn next_state(&self, s: &Vec<u8>, i: usize) -> Option<Vec<u8>> {
        let mut s = s.clone();
        s[i] = if s[i] == self.k { 0 } else { s[i] + 1 };
        Some(s)
    }
    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("sum-below", |_: &Wrap, s: &Vec<u8>| s.iter().map(|&c| c as u32).sum::<u32>() < 9),
            Property::sometimes("first-max", |m: &Wrap, s: &Vec<u8>| s[0] == m.k),
            // Never true: a fair cycle (or none, without fairness) decides it after the run.
            Property::eventually("never", |_: &Wrap, s: &Vec<u8>| s.len() > 99),
        ]
    }
}

fn same(a: &super::Outcome<usize>, b: &super::Outcome<usize>, what: &str) {
    assert_eq!((a.unique, a.generated, a.max_depth, a.end), (b.unique, b.generated, b.max_depth, b.end), "{what}");
    for (p, q) in a.properties.iter().zip(&b.properties) {
        assert_eq!(p.discovery, q.discovery, "{what}: {}", p.name);
    }
}

#[test]
fn expansion_held_at_the_window_gives_what_one_thread_gives() {
    let m = Wrap { n: 4, k: 5 };
    let one = run_in(&m, &Plain, &Options::default(), super::pool::WINDOW);
    assert_eq!((one.unique, one.end), (1296, End::Exhausted));
    assert!(matches!(one.property("sum-below").unwrap().discovery, Discovery::Found(_)));
    assert!(matches!(one.property("never").unwrap().discovery, Discovery::Found(_)));
    for threads in [2, 3] {
        for window in [1, 2] {
            let o = run_in(&m, &Plain, &Options { threads, ..Options::default() }, window);
            same(&o, &one, &format!("{threads} threads, window {window}"));
            for (states, depth) in [(Some(300), None), (None, Some(7))] {
                let opts = Options { threads, max_states: states, max_depth: depth, ..Options::default() };
                let r = run_in(&m, &Plain, &Options { threads: 1, ..opts }, super::pool::WINDOW);
                let o = run_in(&m, &Plain, &opts, window);
                assert!(!o.exhaustive());
                same(&o, &r, &format!("{threads} threads, window {window}, bounds {states:?} {depth:?}"));
            }
        }
    }
}

#[test]
fn the_stop_hook_ends_a_run_held_at_the_window() {
    let m = Wrap { n: 4, k: 5 };
    for threads in [2, 3] {
        let polls = AtomicUsize::new(0);
        let hook = |_: &Progress| (polls.fetch_add(1, Ordering::Relaxed) >= 400).then_some(Stop::Timeout);
        let o = run_in(&m, &Plain, &Options { threads, stop: Some(&hook), ..Options::default() }, 1);
        assert_eq!(o.end, End::Stopped(Stop::Timeout));
        assert!(o.unique < 1296, "{}", o.unique);
        assert_eq!(o.property("never").unwrap().discovery, Discovery::Unknown);
    }
}
