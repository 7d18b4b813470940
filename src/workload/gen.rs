//! The workload space of a `[workload]` table: every workload within the bounds, enumerated
//! and deduplicated up to isomorphism.
//!
//! A workload is a list of requests (in arrival priority order), the arrival mode and the pool
//! sizes. A prompt is a word over the block alphabet (letter `k` is one full block of
//! `block_size` copies of the character `'a' + k`), optionally followed by a partial block
//! (1..block_size-1 tokens of a letter), so that shared prefixes arise from shared letters: a
//! prompt `ab` is a prefix of `abc`, `ab` and `ab` are the same prompt, `ab` and `ba` are
//! disjoint, and `ab` + 1 token of `c` ends mid-block inside `abc`. Every request samples
//! tokens of its own (never shared), so sharing is decided by the prompts and inputs alone.
//!
//! Two workloads are *isomorphic* when one becomes the other by renaming block letters (a
//! bijection of the alphabet that keeps letters of a Mooncake preload fixed) and, under
//! `arrivals = "any"`, by renaming requests (a permutation of the list, with `after` links
//! following their requests). The *canonical form* of a workload is the least (in the derived
//! order of `Workload`) of its letter-normalized permutations, where letter normalization
//! renames the letters that are not fixed in order of first occurrence (requests in list
//! order: prompt blocks, prompt tail, then each turn's input) to the smallest free letters.
//! Isomorphic workloads have equal canonical forms, and only canonical forms are explored.

use super::bounds::Bounds;
use crate::error::{KvmcError, Result};
use std::collections::BTreeSet;

/// A prompt or input: full blocks (letters) then a partial block of `tail` tokens of
/// `tail_letter` (0 when `tail` is 0).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Shape {
    pub blocks: Vec<u8>,
    pub tail: u8,
    pub tail_letter: u8,
}

impl Shape {
    pub fn tokens(&self, b: u32) -> u32 {
        self.blocks.len() as u32 * b + u32::from(self.tail)
    }

    /// The token string as a model file writes it (`aa|bb|c`).
    pub fn text(&self, b: u32) -> String {
        let ch = |l: u8| char::from(b'a' + l);
        let mut parts: Vec<String> = self.blocks.iter().map(|&l| ch(l).to_string().repeat(b as usize)).collect();
        if self.tail > 0 {
            parts.push(ch(self.tail_letter).to_string().repeat(self.tail as usize));
        }
        parts.join("|")
    }
}

/// A further input of a streaming session.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Turn {
    pub input: Shape,
    pub output: u8,
    pub stop: bool,
}

/// One request of a generated workload.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Req {
    pub prompt: Shape,
    pub output: u8,
    pub stop: bool,
    /// With `stop`: `max_tokens` is one more than the output (`end = "stop-early"`).
    pub room: bool,
    /// Arrives only after this (earlier) request finished.
    pub after: Option<u8>,
    /// Router replay's `start` (0 without router replay).
    pub start: u32,
    pub turns: Vec<Turn>,
}

/// One generated workload.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Workload {
    pub reqs: Vec<Req>,
    /// `arrivals = "any"` (else in-order).
    pub any: bool,
    pub gpu_blocks: u32,
    /// host_chunks or cpu_blocks (0: the file has none).
    pub host: u32,
}

impl Workload {
    /// The workload's class for the coverage report: its number of requests.
    pub fn class(&self) -> usize {
        self.reqs.len()
    }

    /// The order workloads are explored in: fewer requests, fewer tokens, smaller pools first.
    fn size_key(&self, b: u32) -> (usize, u32, u32, u32, bool) {
        let toks = self
            .reqs
            .iter()
            .map(|r| {
                r.prompt.tokens(b)
                    + u32::from(r.output)
                    + r.turns.iter().map(|t| t.input.tokens(b) + u32::from(t.output)).sum::<u32>()
            })
            .sum();
        (self.reqs.len(), toks, self.gpu_blocks, self.host, self.any)
    }

    /// One line for people: `A aa|b -> 1; B aa|bb -> 2 after A; any; gpu 4`.
    pub fn summary(&self, b: u32) -> String {
        let reqs: Vec<String> = self
            .reqs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let mut s = format!(
                    "{} {} ->{}{}",
                    name(i),
                    r.prompt.text(b),
                    r.output,
                    match (r.stop, r.room) {
                        (true, true) => " stop-early",
                        (true, false) => " stop",
                        _ => "",
                    }
                );
                for t in &r.turns {
                    s.push_str(&format!(" +{} ->{}", t.input.text(b), t.output));
                }
                if let Some(a) = r.after {
                    s.push_str(&format!(" after {}", name(a as usize)));
                }
                if r.start > 0 {
                    s.push_str(&format!(" start {}", r.start));
                }
                s
            })
            .collect();
        let host = if self.host > 0 { format!(", host {}", self.host) } else { String::new() };
        format!(
            "{}; arrivals {}; gpu_blocks {}{host}",
            reqs.join("; "),
            if self.any { "any" } else { "in-order" },
            self.gpu_blocks
        )
    }
}

/// The name of request `i`: A, B, ...
pub fn name(i: usize) -> String {
    char::from(b'A' + i as u8).to_string()
}

/// Rename letters: fixed letters stay, the others take the smallest free letters in order of
/// first occurrence.
fn normalize_letters(w: &mut Workload, fixed: &[u8]) {
    let mut map: [Option<u8>; 32] = [None; 32];
    for &l in fixed {
        map[l as usize] = Some(l);
    }
    let mut free = (0u8..32).filter(|l| !fixed.contains(l));
    let mut rename = |l: &mut u8| {
        let m = map[*l as usize].unwrap_or_else(|| {
            let n = free.next().expect("at most 32 letters");
            map[*l as usize] = Some(n);
            n
        });
        *l = m;
    };
    let mut shape = |s: &mut Shape| {
        s.blocks.iter_mut().for_each(&mut rename);
        if s.tail > 0 {
            rename(&mut s.tail_letter);
        } else {
            s.tail_letter = 0;
        }
    };
    for r in &mut w.reqs {
        shape(&mut r.prompt);
        for t in &mut r.turns {
            shape(&mut t.input);
        }
    }
}

/// Every permutation of 0..n (Heap's algorithm; n <= 6).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    fn go(k: usize, a: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if k <= 1 {
            out.push(a.clone());
            return;
        }
        for i in 0..k {
            go(k - 1, a, out);
            let j = if k.is_multiple_of(2) { i } else { 0 };
            a.swap(j, k - 1);
        }
    }
    let mut out = Vec::new();
    go(n, &mut (0..n).collect(), &mut out);
    out
}

/// The canonical form of `w` (see the module doc).
pub fn canonical(w: &Workload, fixed: &[u8]) -> Workload {
    let perms = if w.any { permutations(w.reqs.len()) } else { vec![(0..w.reqs.len()).collect()] };
    let mut best: Option<Workload> = None;
    for p in perms {
        // New position i holds old request p[i].
        let mut pos = vec![0u8; p.len()];
        for (i, &old) in p.iter().enumerate() {
            pos[old] = i as u8;
        }
        let mut c = w.clone();
        c.reqs = p
            .iter()
            .map(|&old| {
                let mut r = w.reqs[old].clone();
                r.after = r.after.map(|a| pos[a as usize]);
                r
            })
            .collect();
        normalize_letters(&mut c, fixed);
        if best.as_ref().is_none_or(|b| c < *b) {
            best = Some(c);
        }
    }
    best.expect("at least one permutation")
}

/// Every shape with `blocks` full blocks in range, optionally a partial tail.
fn shapes(b: &Bounds, blocks: (u32, u32)) -> Vec<Shape> {
    let mut words: Vec<Vec<u8>> = Vec::new();
    for len in blocks.0..=blocks.1 {
        let mut cur: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..len {
            cur = cur
                .into_iter()
                .flat_map(|w| (0..b.alphabet as u8).map(move |l| [w.clone(), vec![l]].concat()))
                .collect();
        }
        words.extend(cur);
    }
    let mut out = Vec::new();
    for w in words {
        if !w.is_empty() {
            out.push(Shape { blocks: w.clone(), tail: 0, tail_letter: 0 });
        }
        if b.partial {
            for t in 1..b.block_size.min(256) as u8 {
                for l in 0..b.alphabet as u8 {
                    out.push(Shape { blocks: w.clone(), tail: t, tail_letter: l });
                }
            }
        }
    }
    out
}

/// The request options of one position: plain requests, and sessions with their turns.
fn request_options(b: &Bounds) -> (Vec<Req>, Vec<Req>) {
    let prompts = shapes(b, b.prompt_blocks);
    let outputs: Vec<u8> = (b.output.0..=b.output.1).map(|o| o as u8).collect();
    let mut plain = Vec::new();
    for p in &prompts {
        let mut starts: Vec<u32> = b.starts.iter().map(|&s| s.min(p.tokens(b.block_size))).collect();
        starts.dedup();
        for &o in &outputs {
            for &end in &b.ends {
                for &start in &starts {
                    let (stop, room) = (end >= 1, end == 2);
                    plain.push(Req { prompt: p.clone(), output: o, stop, room, after: None, start, turns: vec![] });
                }
            }
        }
    }
    let mut sessions = Vec::new();
    if b.sessions > 0 {
        let inputs = shapes(b, b.turn_blocks);
        let mut turn_ends: Vec<bool> = b.ends.iter().map(|&e| e >= 1).collect();
        turn_ends.dedup();
        let mut one_turn = Vec::new();
        for i in &inputs {
            for &o in &outputs {
                for &stop in &turn_ends {
                    one_turn.push(Turn { input: i.clone(), output: o, stop });
                }
            }
        }
        let mut turn_lists: Vec<Vec<Turn>> = Vec::new();
        let mut cur: Vec<Vec<Turn>> = vec![vec![]];
        for k in 1..=b.turns.1 {
            cur = cur
                .into_iter()
                .flat_map(|l| one_turn.iter().map(move |t| [l.clone(), vec![t.clone()]].concat()))
                .collect();
            if k >= b.turns.0 {
                turn_lists.extend(cur.iter().cloned());
            }
        }
        for r in &plain {
            for ts in &turn_lists {
                sessions.push(Req { turns: ts.clone(), ..r.clone() });
            }
        }
    }
    (plain, sessions)
}

/// What fits: every request's sequence within `max_model_len` and its KV within G1.
pub struct Fit {
    /// `max_model_len` of the file, or None for the default `(gpu_blocks - 1) * block_size`.
    pub max_model_len: Option<u32>,
}

fn fits(w: &Workload, b: u32, fit: &Fit) -> bool {
    let g1 = (w.gpu_blocks - 1) * b;
    let mml = fit.max_model_len.unwrap_or(g1);
    w.reqs.iter().all(|r| {
        let mut len = r.prompt.tokens(b) + u32::from(r.output);
        // `stop-early`: max_tokens, one past the output, within max_model_len too.
        let mut ok = len + u32::from(r.room) <= mml;
        for t in &r.turns {
            len = len - 1 + t.input.tokens(b) + u32::from(t.output);
            ok &= len <= mml;
        }
        ok && len - 1 <= g1 && r.start <= r.prompt.tokens(b)
    })
}

/// The enumerated space: the canonical workloads (sorted: smallest first) and counts.
pub struct Space {
    pub workloads: Vec<Workload>,
    /// Workloads enumerated before deduplication.
    pub raw: u64,
    /// Canonical workloads dropped because a request cannot fit (max_model_len or G1).
    pub pruned: usize,
}

/// Enumerate every workload within `b`, deduplicated up to isomorphism. `err` names the
/// table's line for a space that is too large.
pub fn enumerate(b: &Bounds, fit: &Fit, err: &dyn Fn(String) -> KvmcError) -> Result<Space> {
    let (plain, sess) = request_options(b);
    let k = (plain.len() + sess.len()) as u64;
    let pools = (b.gpu_blocks.len() * b.host.len().max(1)) as u64;
    let mut raw: u64 = 0;
    for n in b.requests.0..=b.requests.1 {
        let afters: u64 = if b.after { (1..=n as u64).product() } else { 1 };
        raw = raw
            .saturating_add(k.saturating_pow(n).saturating_mul(afters).saturating_mul(b.arrivals.len() as u64 * pools));
    }
    if raw > MAX_RAW_CHECK {
        return Err(err(format!(
            "the workload space has {raw} workloads before deduplication (more than {MAX_RAW_CHECK}): narrow the bounds \
             (requests, alphabet, prompt_blocks, output, turns) (docs/models.md, \"Limits\")"
        )));
    }
    let all: Vec<&Req> = plain.iter().chain(sess.iter()).collect();
    let mut set: BTreeSet<Workload> = BTreeSet::new();
    let mut count: u64 = 0;
    for &any in &b.arrivals {
        for &g in &b.gpu_blocks {
            let hosts: Vec<u32> = if b.host.is_empty() { vec![0] } else { b.host.clone() };
            for &h in &hosts {
                for n in b.requests.0..=b.requests.1 {
                    let mut idx = vec![0usize; n as usize];
                    loop {
                        let n_sess = idx.iter().filter(|&&i| i >= plain.len()).count() as u32;
                        // Under "any" without after links the order does not matter: only
                        // non-decreasing index lists (the others are permutations of them).
                        let sorted = idx.windows(2).all(|p| p[0] <= p[1]);
                        if n_sess <= b.sessions && (!any || b.after || sorted) {
                            let reqs: Vec<Req> = idx.iter().map(|&i| all[i].clone()).collect();
                            for afters in after_choices(n as usize, b.after) {
                                let mut w = Workload { reqs: reqs.clone(), any, gpu_blocks: g, host: h };
                                for (r, a) in w.reqs.iter_mut().zip(&afters) {
                                    r.after = *a;
                                }
                                count += 1;
                                set.insert(canonical(&w, &b.fixed_letters));
                            }
                        }
                        // Next index list.
                        let mut j = n as usize;
                        loop {
                            if j == 0 {
                                break;
                            }
                            j -= 1;
                            idx[j] += 1;
                            if idx[j] < all.len() {
                                break;
                            }
                            idx[j] = 0;
                            if j == 0 {
                                j = usize::MAX;
                                break;
                            }
                        }
                        if j == usize::MAX || n == 0 {
                            break;
                        }
                    }
                }
            }
        }
    }
    let before = set.len();
    let mut workloads: Vec<Workload> = set.into_iter().filter(|w| fits(w, b.block_size, fit)).collect();
    let pruned = before - workloads.len();
    workloads.sort_by(|x, y| x.size_key(b.block_size).cmp(&y.size_key(b.block_size)).then_with(|| x.cmp(y)));
    if workloads.len() > b.max_workloads {
        return Err(err(format!(
            "the workload space has {} distinct workloads (of {count} enumerated), more than max_workloads = {}: \
             narrow the bounds or raise max_workloads (at most {}) (docs/models.md, \"Limits\")",
            workloads.len(),
            b.max_workloads,
            super::bounds::MAX_WORKLOADS
        )));
    }
    if workloads.is_empty() {
        return Err(err(format!(
            "no workload within these bounds fits the engine ({pruned} need more than max_model_len or G1 holds)"
        )));
    }
    Ok(Space { workloads, raw: count, pruned })
}

const MAX_RAW_CHECK: u64 = super::bounds::MAX_RAW;

/// Every assignment of `after` links: request i may wait for any earlier request.
fn after_choices(n: usize, on: bool) -> Vec<Vec<Option<u8>>> {
    let mut out: Vec<Vec<Option<u8>>> = vec![vec![]];
    for i in 0..n {
        let opts: Vec<Option<u8>> =
            if on { std::iter::once(None).chain((0..i as u8).map(Some)).collect() } else { vec![None] };
        out = out.into_iter().flat_map(|l| opts.iter().map(move |o| [l.clone(), vec![*o]].concat())).collect();
    }
    out
}
