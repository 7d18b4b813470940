//! The visited set: an open-addressing table of 16-byte slots (96 bits of the state's
//! fingerprint and a 32-bit node number), linear probing, at most 3/4 full, and one 8-byte node
//! per state (parent, action index) in chunks of 2^16. A look-up reads one slot line and no node;
//! no full state is stored here.
//!
//! Nodes are numbered in insertion order, which the search makes BFS order; a node's parent
//! has a smaller number.
//!
//! The table ([`Table`]) takes one writer and any number of readers at the same time: a slot's
//! words are atomics, and the writer stores the node number (which marks the slot taken) last,
//! with release ordering, so a reader that sees it sees the key too. A reader may miss a state
//! being inserted (it then reports the state as new, and the writer's insert decides); it never
//! sees a wrong one. Growing moves every slot and needs the table alone (`&mut`); the search
//! grows it between readers.

use super::fingerprint::Fingerprint;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A node index (the order in which states were first found).
pub type NodeId = u32;

/// The parent of an initial state.
pub const ROOT: NodeId = NodeId::MAX;

/// The most nodes a table holds (a slot stores `index + 1`, and `ROOT` is reserved).
pub const MAX_NODES: usize = (NodeId::MAX - 1) as usize;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node this state was first reached from (`ROOT` for an initial state).
    pub parent: NodeId,
    /// The index, in the parent's action list, of the action that first reached it (for an
    /// initial state: its index in `init_states()`).
    pub action: u32,
}

/// A table slot: the fingerprint's low 64 bits, 32 more bits, and `node + 1` (0: empty).
#[derive(Default)]
#[repr(C, align(16))]
struct Slot {
    lo: AtomicU64,
    hi: AtomicU32,
    id1: AtomicU32,
}

fn key(fp: Fingerprint) -> (u64, u32) {
    (fp.0[0], (fp.0[1] >> 32) as u32)
}

/// The fingerprint table: one writer ([`Table::insert`]) and concurrent readers.
pub struct Table {
    slots: Vec<Slot>,
    mask: usize,
    /// Slots taken (written by the writer only).
    len: AtomicUsize,
}

fn empty_slots(n: usize) -> Vec<Slot> {
    (0..n).map(|_| Slot::default()).collect()
}

impl Table {
    pub fn new() -> Self {
        Table { slots: empty_slots(1024), mask: 1023, len: AtomicUsize::new(0) }
    }

    /// The node with fingerprint `fp` (its first 96 bits), if any (or if the writer has not
    /// finished inserting it: `None`).
    #[inline]
    pub fn get(&self, fp: Fingerprint) -> Option<NodeId> {
        let (lo, hi) = key(fp);
        let mut i = lo as usize & self.mask;
        loop {
            let s = &self.slots[i];
            let id1 = s.id1.load(Ordering::Acquire);
            if id1 == 0 {
                return None;
            }
            if s.lo.load(Ordering::Relaxed) == lo && s.hi.load(Ordering::Relaxed) == hi {
                return Some(id1 - 1);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Ask the CPU to bring the slot a look-up of `fp` starts at into cache, ahead of the
    /// look-up ([`expand`](super::expand) does this while it steps other states). A hint only:
    /// it changes no result.
    #[inline]
    pub fn prefetch(&self, fp: Fingerprint) {
        #[cfg(target_arch = "x86_64")]
        {
            let slot: *const Slot = &self.slots[key(fp).0 as usize & self.mask];
            // SAFETY: `slot` points into the table; a prefetch reads nothing the program sees
            // and cannot fault.
            unsafe { std::arch::x86_64::_mm_prefetch(slot.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = fp;
    }

    /// True when `more` inserts could take the table past 3/4 full: grow it first.
    pub fn needs_room(&self, more: usize) -> bool {
        (self.len.load(Ordering::Relaxed) + more) * 4 > self.slots.len() * 3
    }

    /// Give node `id` to `fp` unless a node has it: `Ok(())` or `Err(existing id)`. One writer
    /// at a time (readers may run meanwhile); the caller keeps the table under 3/4 full
    /// ([`Table::needs_room`], [`Table::grow`]).
    pub fn insert(&self, fp: Fingerprint, id: NodeId) -> Result<(), NodeId> {
        let (lo, hi) = key(fp);
        let mut i = lo as usize & self.mask;
        loop {
            let s = &self.slots[i];
            let id1 = s.id1.load(Ordering::Relaxed);
            if id1 == 0 {
                break;
            }
            if s.lo.load(Ordering::Relaxed) == lo && s.hi.load(Ordering::Relaxed) == hi {
                return Err(id1 - 1);
            }
            i = (i + 1) & self.mask;
        }
        let s = &self.slots[i];
        s.lo.store(lo, Ordering::Relaxed);
        s.hi.store(hi, Ordering::Relaxed);
        s.id1.store(id + 1, Ordering::Release);
        // The only writer: a load and a store, no read-modify-write.
        self.len.store(self.len.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Double the table until `more` inserts fit.
    pub fn grow(&mut self, more: usize) {
        while self.needs_room(more) {
            let n = self.slots.len() * 2;
            let old = std::mem::replace(&mut self.slots, empty_slots(n));
            self.mask = n - 1;
            for s in old.into_iter() {
                let (lo, hi, id1) = (s.lo.into_inner(), s.hi.into_inner(), s.id1.into_inner());
                if id1 == 0 {
                    continue;
                }
                let mut i = lo as usize & self.mask;
                while *self.slots[i].id1.get_mut() != 0 {
                    i = (i + 1) & self.mask;
                }
                self.slots[i] = Slot { lo: AtomicU64::new(lo), hi: AtomicU32::new(hi), id1: AtomicU32::new(id1) };
            }
        }
    }

    /// Bytes of the slot table (by capacity).
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
    }
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

/// The nodes (parent links), numbered in insertion order.
#[derive(Default)]
pub struct Nodes {
    chunks: Vec<Vec<Node>>,
    len: usize,
}

impl Nodes {
    pub fn len(&self) -> usize {
        self.len
    }

    /// The next node's number (the one [`Nodes::push`] gives).
    pub fn next_id(&self) -> NodeId {
        self.len as NodeId
    }

    pub fn push(&mut self, parent: NodeId, action: u32) -> NodeId {
        assert!(self.len < MAX_NODES, "the visited set is full ({MAX_NODES} states)");
        if self.len & (CHUNK - 1) == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.last_mut().unwrap().push(Node { parent, action });
        self.len += 1;
        (self.len - 1) as NodeId
    }

    pub fn node(&self, id: NodeId) -> Node {
        let i = id as usize;
        self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.capacity() * std::mem::size_of::<Node>()).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Node>>()
    }
}

/// The table and the nodes together.
#[derive(Default)]
pub struct Visited {
    pub table: Table,
    pub nodes: Nodes,
}

impl Visited {
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn node(&self, id: NodeId) -> Node {
        self.nodes.node(id)
    }

    /// The node with fingerprint `fp` (its first 96 bits), if any.
    #[inline]
    pub fn get(&self, fp: Fingerprint) -> Option<NodeId> {
        self.table.get(fp)
    }

    /// Insert a node for `fp` unless one exists: `Ok(new id)` or `Err(existing id)`. The
    /// caller keeps `len() < MAX_NODES`. (The search inserts through the table and the nodes
    /// apart, the table shared with the expanding threads.)
    #[cfg(test)]
    pub fn insert(&mut self, fp: Fingerprint, parent: NodeId, action: u32) -> Result<NodeId, NodeId> {
        self.table.grow(1);
        let id = self.nodes.next_id();
        self.table.insert(fp, id)?;
        Ok(self.nodes.push(parent, action))
    }

    /// Bytes this set holds now: the slot table and the node chunks, counted by capacity.
    pub fn bytes(&self) -> usize {
        self.table.bytes() + self.nodes.bytes()
    }

    /// The chain of nodes from a root to `id`, root first.
    pub fn chain(&self, mut id: NodeId) -> Vec<NodeId> {
        let mut out = vec![id];
        while self.node(id).parent != ROOT {
            id = self.node(id).parent;
            out.push(id);
        }
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(i: u64) -> Fingerprint {
        super::super::fingerprint::fingerprint(&i, 1)
    }

    #[test]
    fn insert_get_grow_and_chain() {
        assert_eq!((std::mem::size_of::<Slot>(), std::mem::size_of::<Node>()), (16, 8));
        let mut v = Visited::default();
        assert_eq!(v.insert(fp(0), ROOT, 0), Ok(0));
        for i in 1..200_000u64 {
            assert_eq!(v.insert(fp(i), (i / 2) as NodeId, (i % 3) as u32), Ok(i as NodeId));
        }
        assert_eq!(v.insert(fp(77), 0, 0), Err(77));
        assert_eq!(v.len(), 200_000);
        for i in (0..200_000u64).step_by(997) {
            assert_eq!(v.get(fp(i)), Some(i as NodeId));
        }
        assert_eq!(v.get(fp(200_000)), None);
        assert_eq!(v.chain(13), vec![0, 1, 3, 6, 13]);
        assert_eq!(v.node(13), Node { parent: 6, action: 1 });
        // 524,288 slots (16 B) and 4 chunks of 65,536 nodes (8 B): 52 B per node here, just
        // after a growth (the most a table costs per state is 16 / (3/8) + 8 = 50.7 B).
        let per = v.bytes() as f64 / v.len() as f64;
        assert!(per < 64.0, "{per} bytes per visited state");
    }

    #[test]
    fn states_that_share_a_home_slot_or_most_bits_are_told_apart() {
        let mut v = Visited::default();
        let a = Fingerprint([5, 9 << 32]);
        let b = Fingerprint([5 + 1024 * 7, 9 << 32]); // the same home slot
        let c = Fingerprint([5, 10 << 32]); // the same low 64 bits
        let d = Fingerprint([5, (9 << 32) | 1]); // differs only in bits the key does not keep
        assert_eq!(v.insert(a, ROOT, 0), Ok(0));
        assert_eq!((v.get(b), v.get(c)), (None, None));
        assert_eq!(v.insert(b, ROOT, 1), Ok(1));
        assert_eq!(v.insert(c, ROOT, 2), Ok(2));
        assert_eq!((v.get(a), v.get(b), v.get(c)), (Some(0), Some(1), Some(2)));
        assert_eq!(v.get(d), Some(0), "a 96-bit key");
    }
}
