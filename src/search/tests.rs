//! The parallel search's scheduling paths that the integration tests' small models never take:
//! expansion held back at the window (a helper waiting for the merge) on every chunk, with
//! discoveries, liveness edges, bounds and the stop hook. Every run must give what one thread
//! gives.

use super::bfs::run_in;
use super::{Discovery, End, Hooks, Options, Plain, Progress, Stop};
use stateright::{Model, Property};
use std::sync::atomic::{AtomicUsize, Ordering};

/// `n` counters 0..=k, `Inc(i)` wraps counter `i` to 0 after k (every state on a cycle).
struct Wrap {
    n: usize,
    k: u8,
    /// With the `Eventually` property (the search records the graph).
    live: bool,
}

/// Frontier states as bytes (the counters themselves).
struct Bytes;

impl Hooks<Wrap> for Bytes {
    fn encodes(&self) -> bool {
        true
    }
    fn encode(&self, _: &Wrap, s: &Vec<u8>, out: &mut Vec<u8>) {
        out.extend_from_slice(s);
    }
    fn decode(&self, _: &Wrap, bytes: &[u8]) -> Vec<u8> {
        bytes.to_vec()
    }
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
        let mut p = vec![
            Property::always("sum-below", |_: &Wrap, s: &Vec<u8>| s.iter().map(|&c| c as u32).sum::<u32>() < 9),
            Property::sometimes("first-max", |m: &Wrap, s: &Vec<u8>| s[0] == m.k),
        ];
        if self.live {
            // Never true: a fair cycle (or none, without fairness) decides it after the run.
            p.push(Property::eventually("never", |_: &Wrap, s: &Vec<u8>| s.len() > 99));
        } else {
            // Holds: the run stays exhaustive.
            p.push(Property::always("n-counters", |m: &Wrap, s: &Vec<u8>| s.len() == m.n));
        }
        p
    }
}

fn same(a: &super::Outcome<usize>, b: &super::Outcome<usize>, what: &str) {
    assert_eq!((a.unique, a.generated, a.max_depth, a.end), (b.unique, b.generated, b.max_depth, b.end), "{what}");
    for (p, q) in a.properties.iter().zip(&b.properties) {
        assert_eq!(p.discovery, q.discovery, "{what}: {}", p.name);
    }
}

/// Every thread count and window gives what one thread with whole states gives, with states
/// whole or encoded (the candidates cut into pieces, repeats dropped from them, small pieces
/// copied), with and without the graph.
fn held_at_the_window<H: Hooks<Wrap>>(hooks: &H, live: bool) {
    let m = Wrap { n: 4, k: 5, live };
    let one = run_in(&m, &Plain, &Options::default(), super::pool::WINDOW);
    assert_eq!((one.unique, one.end), (1296, End::Exhausted));
    assert!(matches!(one.property("sum-below").unwrap().discovery, Discovery::Found(_)));
    if live {
        assert!(matches!(one.property("never").unwrap().discovery, Discovery::Found(_)));
    }
    let enc = run_in(&m, hooks, &Options::default(), super::pool::WINDOW);
    same(&enc, &one, "1 thread");
    for threads in [2, 3] {
        for window in [1, 2] {
            let o = run_in(&m, hooks, &Options { threads, ..Options::default() }, window);
            same(&o, &one, &format!("{threads} threads, window {window}"));
            for (states, depth) in [(Some(300), None), (None, Some(7))] {
                let opts = Options { threads, max_states: states, max_depth: depth, ..Options::default() };
                let r = run_in(&m, &Plain, &Options { threads: 1, ..opts }, super::pool::WINDOW);
                let o = run_in(&m, hooks, &opts, window);
                assert!(!o.exhaustive());
                same(&o, &r, &format!("{threads} threads, window {window}, bounds {states:?} {depth:?}"));
            }
        }
    }
}

#[test]
fn expansion_held_at_the_window_gives_what_one_thread_gives() {
    held_at_the_window(&Plain, true);
    held_at_the_window(&Plain, false);
}

#[test]
fn encoded_states_held_at_the_window_give_what_one_thread_gives() {
    held_at_the_window(&Bytes, true);
    held_at_the_window(&Bytes, false);
    let m = Wrap { n: 4, k: 5, live: true };
    let o = run_in(&m, &Bytes, &Options { threads: 2, ..Options::default() }, 1);
    assert!(o.frontier_states > 0 && o.frontier_bytes >= 4 * o.frontier_states, "{} B", o.frontier_bytes);
    // Six successors a state: a chunk's candidates are cut into more than one piece.
    let m = Wrap { n: 6, k: 3, live: true };
    let one = run_in(&m, &Plain, &Options::default(), super::pool::WINDOW);
    assert_eq!(one.unique, 4096);
    for (threads, window) in [(1, super::pool::WINDOW), (2, 1), (2, super::pool::WINDOW), (3, 2)] {
        let o = run_in(&m, &Bytes, &Options { threads, ..Options::default() }, window);
        same(&o, &one, &format!("six counters, {threads} threads, window {window}"));
    }
}

#[test]
fn the_stop_hook_ends_a_run_held_at_the_window() {
    let m = Wrap { n: 4, k: 5, live: true };
    for threads in [2, 3] {
        let polls = AtomicUsize::new(0);
        let hook = |_: &Progress| (polls.fetch_add(1, Ordering::Relaxed) >= 400).then_some(Stop::Timeout);
        let o = run_in(&m, &Plain, &Options { threads, stop: Some(&hook), ..Options::default() }, 1);
        assert_eq!(o.end, End::Stopped(Stop::Timeout));
        assert!(o.unique < 1296, "{}", o.unique);
        assert_eq!(o.property("never").unwrap().discovery, Discovery::Unknown);
    }
}
