//! The host tier's evictable set ([`RankSet`]): the checker's sorted inline vector or trace
//! replay's [`RankQueue`], the same order either way.

use super::rank_queue::{first_n, Rank, RankQueue};

/// Entries a checker's `RankSet` keeps inline (more spill to the heap).
pub const RANK_SET_INLINE: usize = 4;

/// The host tier's evictable set: a sorted inline vector in the checker (hashed exactly as a
/// `BTreeSet`), a [`RankQueue`] in trace replay. Same order either way.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(bound(deserialize = "T: Ord + serde::Deserialize<'de>"))]
pub enum RankSet<T> {
    Tree(super::vec_map::VecSet<(Rank, T), RANK_SET_INLINE>),
    Queue(Box<RankQueue<T>>),
}

impl<T: Copy + Ord> Clone for RankSet<T> {
    fn clone(&self) -> Self {
        match self {
            RankSet::Tree(s) => RankSet::Tree(s.clone()),
            RankSet::Queue(q) => RankSet::Queue(q.clone()),
        }
    }
    /// The tree form reuses its allocation, if any (see `clone_fields`).
    fn clone_from(&mut self, src: &Self) {
        match (self, src) {
            (RankSet::Tree(a), RankSet::Tree(b)) => a.clone_from(b),
            (a, b) => *a = b.clone(),
        }
    }
}

impl<T> Default for RankSet<T> {
    fn default() -> Self {
        RankSet::Tree(Default::default())
    }
}

impl<T: Ord + Copy> RankSet<T> {
    /// Switch to the queue (replay).
    pub fn use_queue(&mut self) {
        if let RankSet::Tree(t) = self {
            let mut q = RankQueue::default();
            for (r, x) in std::mem::take(t).into_elems() {
                q.insert(r, x);
            }
            *self = RankSet::Queue(Box::new(q));
        }
    }
    #[inline(always)]
    pub fn insert(&mut self, r: Rank, t: T) -> bool {
        match self {
            RankSet::Tree(s) => s.insert((r, t)),
            RankSet::Queue(q) => q.insert(r, t),
        }
    }
    #[inline(always)]
    pub fn remove(&mut self, r: Rank, t: T) -> bool {
        match self {
            RankSet::Tree(s) => s.remove(&(r, t)),
            RankSet::Queue(q) => q.remove(r, t),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            RankSet::Tree(s) => s.len(),
            RankSet::Queue(q) => q.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Entries in order, smallest first.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (Rank, T)> + '_> {
        match self {
            RankSet::Tree(s) => Box::new(s.iter().copied()),
            RankSet::Queue(q) => Box::new(q.iter()),
        }
    }
    /// The first `n` entries, smallest first, for which `keep` holds (fewer if there are not
    /// that many): `iter().filter(keep).take(n)` without the boxed iterator's call per entry
    /// (a store's victims are picked here, thousands per step in replay). `keep` must be a
    /// pure predicate ([`RankQueue::first`] may ask it twice about an entry).
    pub fn first(&self, n: usize, keep: impl FnMut(&(Rank, T)) -> bool) -> Vec<(Rank, T)> {
        match self {
            RankSet::Tree(s) => first_n(s.iter().copied(), n, keep),
            RankSet::Queue(q) => q.first(n, keep),
        }
    }
    /// Entries in reverse order (largest first).
    pub fn iter_rev(&self) -> Box<dyn Iterator<Item = (Rank, T)> + '_> {
        match self {
            RankSet::Tree(s) => Box::new(s.iter().rev().copied()),
            RankSet::Queue(q) => Box::new(q.iter().collect::<Vec<_>>().into_iter().rev()),
        }
    }
}

impl<T: Ord + Copy> PartialEq for RankSet<T> {
    fn eq(&self, o: &Self) -> bool {
        match (self, o) {
            (RankSet::Tree(a), RankSet::Tree(b)) => a == b,
            _ => self.len() == o.len() && self.iter().eq(o.iter()),
        }
    }
}
impl<T: Ord + Copy> Eq for RankSet<T> {}

impl<T: Ord + Copy + std::hash::Hash> std::hash::Hash for RankSet<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        match self {
            // Exactly a BTreeSet's hash.
            RankSet::Tree(s) => s.hash(h),
            RankSet::Queue(q) => {
                h.write_usize(q.len());
                for x in q.iter() {
                    x.hash(h);
                }
            }
        }
    }
}

/// Packed (`super::pack`): a tag (0 the checker's tree, 1 replay's queue), then the (rank,
/// item) pairs in rank order; a queue is rebuilt by insertion.
impl<T: super::pack::Pack + Default + Ord + Copy> super::pack::Pack for RankSet<T> {
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            RankSet::Tree(s) => {
                super::pack::put(out, [0]);
                s.pack(out);
            }
            RankSet::Queue(q) => {
                super::pack::put(out, [1]);
                super::pack::put_len(out, q.len());
                for (r, x) in q.iter() {
                    (r, x).pack(out);
                }
            }
        }
    }
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        match r.tag()? {
            0 => {
                if !matches!(self, RankSet::Tree(_)) {
                    *self = RankSet::default();
                }
                let RankSet::Tree(s) = self else { unreachable!() };
                s.unpack(r)
            }
            1 => {
                let n = r.len()?;
                let mut q = RankQueue::default();
                for _ in 0..n {
                    let mut e: (Rank, T) = Default::default();
                    e.unpack(r)?;
                    q.insert(e.0, e.1);
                }
                *self = RankSet::Queue(Box::new(q));
                Some(())
            }
            _ => None,
        }
    }
}
