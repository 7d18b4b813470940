//! The visited set: an open-addressing table of 16-byte slots (96 bits of the state's
//! fingerprint and a 32-bit node number), linear probing, at most 3/4 full, and one 8-byte node
//! per state (parent, action index) in chunks of 2^16. A look-up reads one slot line and no node;
//! no full state is stored here.
//!
//! Nodes are numbered in insertion order, which the search makes BFS order; a node's parent
//! has a smaller number.

use super::fingerprint::Fingerprint;

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
#[derive(Copy, Clone, Default)]
#[repr(C, align(16))]
struct Slot {
    lo: u64,
    hi: u32,
    id1: u32,
}

impl Slot {
    fn key(fp: Fingerprint) -> (u64, u32) {
        (fp.0[0], (fp.0[1] >> 32) as u32)
    }
}

pub struct Visited {
    slots: Vec<Slot>,
    mask: usize,
    chunks: Vec<Vec<Node>>,
    len: usize,
}

impl Default for Visited {
    fn default() -> Self {
        Self::new()
    }
}

impl Visited {
    pub fn new() -> Self {
        Visited { slots: vec![Slot::default(); 1024], mask: 1023, chunks: Vec::new(), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn node(&self, id: NodeId) -> Node {
        let i = id as usize;
        self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    /// The node with fingerprint `fp` (its first 96 bits), if any.
    #[inline]
    pub fn get(&self, fp: Fingerprint) -> Option<NodeId> {
        let (lo, hi) = Slot::key(fp);
        let mut i = lo as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if s.id1 == 0 {
                return None;
            }
            if s.lo == lo && s.hi == hi {
                return Some(s.id1 - 1);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Insert a node for `fp` unless one exists: `Ok(new id)` or `Err(existing id)`. The
    /// caller keeps `len() < MAX_NODES`.
    pub fn insert(&mut self, fp: Fingerprint, parent: NodeId, action: u32) -> Result<NodeId, NodeId> {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let (lo, hi) = Slot::key(fp);
        let mut i = lo as usize & self.mask;
        loop {
            let s = &self.slots[i];
            if s.id1 == 0 {
                break;
            }
            if s.lo == lo && s.hi == hi {
                return Err(s.id1 - 1);
            }
            i = (i + 1) & self.mask;
        }
        assert!(self.len < MAX_NODES, "the visited set is full ({MAX_NODES} states)");
        let id = self.len as NodeId;
        self.slots[i] = Slot { lo, hi, id1: id + 1 };
        if self.len & (CHUNK - 1) == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.last_mut().unwrap().push(Node { parent, action });
        self.len += 1;
        Ok(id)
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); n]);
        self.mask = n - 1;
        for s in old.into_iter().filter(|s| s.id1 != 0) {
            let mut i = s.lo as usize & self.mask;
            while self.slots[i].id1 != 0 {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = s;
        }
    }

    /// Bytes this set holds now: the slot table and the node chunks, counted by capacity.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.chunks.iter().map(|c| c.capacity() * std::mem::size_of::<Node>()).sum::<usize>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<Node>>()
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
        let mut v = Visited::new();
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
        let mut v = Visited::new();
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
