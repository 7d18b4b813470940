//! An ordered set of `(Rank, T)` for trace replay's host tier (the evictable set and the
//! eviction-order reference), ordered exactly like a `BTreeSet<(Rank, T)>`, with the common
//! operations in O(1):
//! - *fresh* ranks `(m, 0)` are drawn from a counter, so a new one is above every other: they
//!   live in a deque indexed by `m` (append at the back, remove by index, victims at the front);
//! - everything else (a request's rank `(rr, -position)` shared by its keys, or a rank that
//!   comes back after a load unpinned its key) lives in per-major buckets, each a deque sorted
//!   by `(minor, T)`: a request's keys arrive in position order (new ones at the front) and
//!   leave tail first (from the front).
//!
//! Removed entries inside a deque are tombstones, trimmed at the ends and compacted when they
//! outnumber live entries.

/// An eviction rank: (major, minor), smaller evicted first.
pub type Rank = (u64, i64);

use std::collections::VecDeque;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Bucket<T> {
    /// Sorted by (minor, T); `false` = removed (kept for order until trimmed).
    items: VecDeque<(i64, T, bool)>,
    live: usize,
}

impl<T: Ord + Copy> Bucket<T> {
    fn find(&self, minor: i64, t: T) -> Result<usize, usize> {
        self.items.binary_search_by(|(m, x, _)| (*m, *x).cmp(&(minor, t)))
    }

    /// Insert; false if already present. A request's keys arrive in position order, so
    /// most go in front (minors descend).
    #[inline(always)]
    fn insert(&mut self, minor: i64, t: T) -> bool {
        if self.items.front().is_none_or(|&(m, x, _)| (minor, t) < (m, x)) {
            self.items.push_front((minor, t, true));
        } else if self.items.back().is_some_and(|&(m, x, _)| (minor, t) > (m, x)) {
            self.items.push_back((minor, t, true));
        } else {
            match self.find(minor, t) {
                Ok(i) => {
                    if self.items[i].2 {
                        return false;
                    }
                    self.items[i].2 = true;
                }
                Err(i) => self.items.insert(i, (minor, t, true)),
            }
        }
        self.live += 1;
        true
    }

    /// Remove; false if absent. A request's keys leave tail first, so most leave from the
    /// front (the ends are always live: removals trim tombstones there).
    #[inline(always)]
    fn remove(&mut self, minor: i64, t: T) -> bool {
        if self.items.front() == Some(&(minor, t, true)) {
            self.items.pop_front();
            while self.items.front().is_some_and(|e| !e.2) {
                self.items.pop_front();
            }
        } else {
            match self.find(minor, t) {
                Ok(i) if self.items[i].2 => self.items[i].2 = false,
                _ => return false,
            }
            while self.items.back().is_some_and(|e| !e.2) {
                self.items.pop_back();
            }
        }
        self.live -= 1;
        if self.items.len() > 2 * self.live + 16 {
            self.items.retain(|e| e.2);
        }
        true
    }
}

/// See the module documentation.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RankQueue<T> {
    /// `fresh[i]` holds the entry of rank `(lo + i, 0)`, if any.
    lo: u64,
    fresh: VecDeque<Option<T>>,
    fresh_live: usize,
    /// Sorted by major. Few at a time (one per request rank still holding keys), and a
    /// request's keys come and go together, so `hint` (the last bucket used) usually hits.
    buckets: Vec<(u64, Bucket<T>)>,
    hint: usize,
    /// No bucket has a major above this (fresh ranks, above it, skip the bucket lookup).
    max_major: u64,
    len: usize,
    /// Emptied bucket deques, kept for their capacity (a request's bucket grows to its key
    /// count, and the next request's would regrow from empty).
    spare: Vec<VecDeque<(i64, T, bool)>>,
}

/// How many emptied bucket deques a queue keeps.
const SPARE: usize = 16;

impl<T: Ord + Copy> Default for RankQueue<T> {
    fn default() -> Self {
        RankQueue {
            lo: 0,
            fresh: VecDeque::new(),
            fresh_live: 0,
            buckets: Vec::new(),
            hint: 0,
            max_major: 0,
            len: 0,
            spare: Vec::new(),
        }
    }
}

impl<T: Ord + Copy> RankQueue<T> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Index of rank `r` in the fresh deque (or where it would go), if it can live there.
    fn fresh_slot(&self, r: Rank) -> Option<usize> {
        if r.1 != 0 {
            return None;
        }
        if self.fresh.is_empty() {
            return Some(usize::MAX); // starts the deque
        }
        if r.0 < self.lo {
            return None;
        }
        let i = (r.0 - self.lo) as usize;
        // Appending past the end is fine; a far jump (more than a million majors of gap) is not
        // worth the memory.
        (i < self.fresh.len() + (1 << 20)).then_some(i)
    }

    /// Insert; false if already present.
    #[inline(always)]
    pub fn insert(&mut self, r: Rank, t: T) -> bool {
        // The common cases, inlined (each is what `insert_rest` would do):
        if r.1 == 0 {
            // a fresh rank just above every other (no bucket can hold its major), appended
            // at the back;
            if r.0 > self.max_major && !self.fresh.is_empty() && r.0 == self.lo + self.fresh.len() as u64 {
                self.fresh.push_back(Some(t));
                self.fresh_live += 1;
                self.len += 1;
                return true;
            }
        } else if let Some((m, b)) = self.buckets.get_mut(self.hint) {
            // a key of the last bucket's major (a request's next key, which the bucket puts
            // at its front: positions ascend, minors descend).
            if *m == r.0 {
                let ok = b.insert(r.1, t);
                self.len += usize::from(ok);
                return ok;
            }
        }
        self.insert_rest(r, t)
    }

    #[inline(never)]
    fn insert_rest(&mut self, r: Rank, t: T) -> bool {
        if r.1 == 0 && r.0 >= self.lo && !self.fresh.is_empty() {
            let i = (r.0 - self.lo) as usize;
            if i < self.fresh.len() && self.fresh[i] == Some(t) {
                return false;
            }
        }
        // A major that already has a bucket keeps its later entries there.
        let has_bucket = r.0 <= self.max_major && self.bucket(r.0).is_ok();
        let slot = if has_bucket { None } else { self.fresh_slot(r) };
        match slot {
            Some(usize::MAX) => {
                self.lo = r.0;
                self.fresh.push_back(Some(t));
                self.fresh_live += 1;
                self.len += 1;
                return true;
            }
            Some(i) if i >= self.fresh.len() => {
                self.fresh.resize(i, None);
                self.fresh.push_back(Some(t));
                self.fresh_live += 1;
                self.len += 1;
                return true;
            }
            Some(i) if self.fresh[i].is_none() => {
                self.fresh[i] = Some(t);
                self.fresh_live += 1;
                self.len += 1;
                return true;
            }
            Some(i) if self.fresh[i] == Some(t) => return false,
            _ => {}
        }
        self.max_major = self.max_major.max(r.0);
        let i = match self.bucket(r.0) {
            Ok(i) => i,
            Err(i) => {
                let items = self.spare.pop().unwrap_or_default();
                self.buckets.insert(i, (r.0, Bucket { items, live: 0 }));
                i
            }
        };
        self.hint = i;
        let ok = self.buckets[i].1.insert(r.1, t);
        if ok {
            self.len += 1;
        }
        ok
    }

    /// Remove; false if absent.
    #[inline(always)]
    pub fn remove(&mut self, r: Rank, t: T) -> bool {
        // The common cases, inlined (each is what `remove_rest` would do):
        if r.1 == 0 {
            // the oldest fresh entry (the next victim) leaves and its successor is live;
            if r.0 == self.lo && self.fresh.len() > 1 && self.fresh[0] == Some(t) && self.fresh[1].is_some() {
                self.fresh.pop_front();
                self.lo += 1;
                self.fresh_live -= 1;
                self.len -= 1;
                return true;
            }
        } else if let Some((m, b)) = self.buckets.get_mut(self.hint) {
            // a key of the last bucket used, which keeps another (so the bucket stays; a
            // request's keys leave tail first, from the bucket's front).
            if *m == r.0 && b.live > 1 {
                let ok = b.remove(r.1, t);
                self.len -= usize::from(ok);
                return ok;
            }
        }
        self.remove_rest(r, t)
    }

    #[inline(never)]
    fn remove_rest(&mut self, r: Rank, t: T) -> bool {
        if r.1 == 0 && r.0 >= self.lo {
            let i = (r.0 - self.lo) as usize;
            if i < self.fresh.len() && self.fresh[i] == Some(t) {
                self.fresh[i] = None;
                self.fresh_live -= 1;
                self.len -= 1;
                while self.fresh.front().is_some_and(|x| x.is_none()) {
                    self.fresh.pop_front();
                    self.lo += 1;
                }
                while self.fresh.back().is_some_and(|x| x.is_none()) {
                    self.fresh.pop_back();
                }
                if self.fresh.is_empty() {
                    self.lo = 0;
                }
                return true;
            }
        }
        if r.0 > self.max_major {
            return false;
        }
        let Ok(i) = self.bucket(r.0) else { return false };
        self.hint = i;
        if !self.buckets[i].1.remove(r.1, t) {
            return false;
        }
        if self.buckets[i].1.live == 0 {
            let (_, mut b) = self.buckets.remove(i);
            if self.spare.len() < SPARE {
                b.items.clear();
                self.spare.push(b.items);
            }
        }
        self.len -= 1;
        true
    }

    /// The first `n` entries for which `keep` holds, smallest first: what
    /// `first_n(self.iter(), n, keep)` gives. A store's victims are nearly always fresh
    /// entries below every bucket entry; those are read straight from the fresh deque's two
    /// slices, without the merge. Reaching a bucket entry sends the pick to the merged
    /// iterator, from the start, so `keep` must be a pure predicate (it is asked again).
    pub fn first(&self, n: usize, mut keep: impl FnMut(&(Rank, T)) -> bool) -> Vec<(Rank, T)> {
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return out;
        }
        // The smallest bucket entry: the first live item of the first bucket that has one (the
        // bucket of the smallest major: a bucket leaves the queue with its last live item).
        let bound =
            self.buckets.iter().find_map(|(m, b)| b.items.iter().find(|e| e.2).map(|&(minor, t, _)| ((*m, minor), t)));
        let (f0, f1) = self.fresh.as_slices();
        for (major, x) in (self.lo..).zip(f0.iter().chain(f1)) {
            if let Some(t) = *x {
                let e = ((major, 0), t);
                if bound.is_some_and(|b| b < e) {
                    return first_n(self.iter(), n, keep);
                }
                if keep(&e) {
                    out.push(e);
                    if out.len() == n {
                        return out;
                    }
                }
            }
        }
        if bound.is_none() {
            return out;
        }
        first_n(self.iter(), n, keep)
    }

    /// Where the bucket of `major` is (Ok) or would go (Err).
    #[inline]
    fn bucket(&self, major: u64) -> Result<usize, usize> {
        if self.buckets.get(self.hint).is_some_and(|(m, _)| *m == major) {
            return Ok(self.hint);
        }
        self.buckets.binary_search_by_key(&major, |(m, _)| *m)
    }

    /// Entries in order, smallest first.
    pub fn iter(&self) -> Iter<'_, T> {
        let (f0, f1) = self.fresh.as_slices();
        let mut it = Iter {
            lo: self.lo,
            fresh: [f0, f1],
            fi: 0,
            buckets: &self.buckets,
            bi: 0,
            items: [&[], &[]],
            ii: 0,
            nf: None,
            nb: None,
        };
        if let Some((_, b)) = self.buckets.first() {
            let (i0, i1) = b.items.as_slices();
            it.items = [i0, i1];
        }
        it.nf = it.next_fresh();
        it.nb = it.next_bucket();
        it
    }
}

impl<T: Ord + Copy> PartialEq for RankQueue<T> {
    fn eq(&self, o: &Self) -> bool {
        self.len == o.len && self.iter().eq(o.iter())
    }
}

/// In-order iterator over a [`RankQueue`]: a merge of the fresh deque and the buckets, each
/// read through its deque's two slices, with the next entry of each side kept.
pub struct Iter<'a, T> {
    lo: u64,
    fresh: [&'a [Option<T>]; 2],
    /// Fresh entries read so far (live or not).
    fi: usize,
    buckets: &'a [(u64, Bucket<T>)],
    /// The bucket being read and its items.
    bi: usize,
    items: [&'a [(i64, T, bool)]; 2],
    ii: usize,
    /// The next entry of each side, not yet yielded.
    nf: Option<(Rank, T)>,
    nb: Option<(Rank, T)>,
}

impl<T: Ord + Copy> Iter<'_, T> {
    fn next_fresh(&mut self) -> Option<(Rank, T)> {
        let [a, b] = self.fresh;
        while self.fi < a.len() + b.len() {
            let i = self.fi;
            self.fi += 1;
            let x = if i < a.len() { a[i] } else { b[i - a.len()] };
            if let Some(t) = x {
                return Some(((self.lo + i as u64, 0), t));
            }
        }
        None
    }
    fn next_bucket(&mut self) -> Option<(Rank, T)> {
        loop {
            let (m, _) = self.buckets.get(self.bi)?;
            let [a, b] = self.items;
            while self.ii < a.len() + b.len() {
                let i = self.ii;
                self.ii += 1;
                let (minor, t, live) = if i < a.len() { a[i] } else { b[i - a.len()] };
                if live {
                    return Some(((*m, minor), t));
                }
            }
            self.bi += 1;
            self.ii = 0;
            if let Some((_, bk)) = self.buckets.get(self.bi) {
                let (i0, i1) = bk.items.as_slices();
                self.items = [i0, i1];
            }
        }
    }
}

impl<T: Ord + Copy> Iterator for Iter<'_, T> {
    type Item = (Rank, T);
    #[inline(always)]
    fn next(&mut self) -> Option<(Rank, T)> {
        let take_fresh = match (self.nf, self.nb) {
            (None, None) => return None,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(x), Some(y)) => x < y,
        };
        if take_fresh {
            let x = self.nf;
            self.nf = self.next_fresh();
            x
        } else {
            let x = self.nb;
            self.nb = self.next_bucket();
            x
        }
    }
}

/// The first `n` items of `it` for which `keep` holds, in a plain loop: collecting
/// `it.filter(keep).take(n)` left a call per item in the release build.
#[inline(always)]
pub fn first_n<U>(it: impl Iterator<Item = U>, n: usize, mut keep: impl FnMut(&U) -> bool) -> Vec<U> {
    let mut out = Vec::with_capacity(n);
    if n == 0 {
        return out;
    }
    for x in it {
        if keep(&x) {
            out.push(x);
            if out.len() == n {
                break;
            }
        }
    }
    out
}
