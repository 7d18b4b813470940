//! The visited set: one 24-byte node per state (fingerprint, parent, action index) in chunks
//! of 2^16, found through an open-addressing table of 8-byte slots (32 bits of the fingerprint
//! as a tag, 32 bits of node index), linear probing, at most 3/4 full.
//!
//! Nodes are numbered in insertion order, which the search makes BFS order; a node's parent
//! has a smaller number. No full state is stored here.

use super::fingerprint::Fingerprint;

/// A node index (the order in which states were first found).
pub type NodeId = u32;

/// The parent of an initial state.
pub const ROOT: NodeId = NodeId::MAX;

/// The most nodes a table holds (a slot stores `index + 1`, and `ROOT` is reserved).
pub const MAX_NODES: usize = (NodeId::MAX - 1) as usize;

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

#[derive(Copy, Clone, Debug)]
pub struct Node {
    pub fp: Fingerprint,
    /// The node this state was first reached from (`ROOT` for an initial state).
    pub parent: NodeId,
    /// The index, in the parent's action list, of the action that first reached it (for an
    /// initial state: its index in `init_states()`).
    pub action: u32,
}

pub struct Visited {
    slots: Vec<u64>,
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
        Visited { slots: vec![0; 1024], mask: 1023, chunks: Vec::new(), len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn node(&self, id: NodeId) -> &Node {
        let i = id as usize;
        &self.chunks[i >> CHUNK_BITS][i & (CHUNK - 1)]
    }

    fn home(&self, fp: Fingerprint) -> usize {
        fp.0[0] as usize & self.mask
    }

    fn tag(fp: Fingerprint) -> u64 {
        fp.0[1] >> 32
    }

    /// The node with fingerprint `fp`, if any.
    pub fn get(&self, fp: Fingerprint) -> Option<NodeId> {
        let tag = Self::tag(fp);
        let mut i = self.home(fp);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let id = (s as u32) - 1;
                if self.node(id).fp == fp {
                    return Some(id);
                }
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Insert a node for `fp` unless one exists: `Ok(new id)` or `Err(existing id)`. The
    /// caller keeps `len() < MAX_NODES`.
    pub fn insert(&mut self, fp: Fingerprint, parent: NodeId, action: u32) -> Result<NodeId, NodeId> {
        if let Some(id) = self.get(fp) {
            return Err(id);
        }
        assert!(self.len < MAX_NODES, "the visited set is full ({MAX_NODES} states)");
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let id = self.len as NodeId;
        if self.len & (CHUNK - 1) == 0 {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        self.chunks.last_mut().unwrap().push(Node { fp, parent, action });
        self.len += 1;
        self.place(fp, id);
        Ok(id)
    }

    fn place(&mut self, fp: Fingerprint, id: NodeId) {
        let mut i = self.home(fp);
        while self.slots[i] != 0 {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = (Self::tag(fp) << 32) | u64::from(id + 1);
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        self.slots = Vec::new(); // free the old table before the new one is allocated
        self.slots = vec![0; n];
        self.mask = n - 1;
        for id in 0..self.len as NodeId {
            let fp = self.node(id).fp;
            self.place(fp, id);
        }
    }

    /// Bytes this set holds now: the slot table and the node chunks, counted by capacity.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
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
        assert_eq!(std::mem::size_of::<Node>(), 24);
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
        assert_eq!(v.node(13).action, 1);
        // 262,144 slots (8 B) and 4 chunks of 65,536 nodes (24 B): 42 B per node here.
        let per = v.bytes() as f64 / v.len() as f64;
        assert!(per < 64.0, "{per} bytes per visited state");
    }

    #[test]
    fn a_tag_collision_is_told_apart_by_the_full_fingerprint() {
        let mut v = Visited::new();
        let a = Fingerprint([5, 9 << 32]);
        let b = Fingerprint([5 + 1024 * 7, (9 << 32) | 1]); // same home slot, same tag
        assert_eq!(v.insert(a, ROOT, 0), Ok(0));
        assert_eq!(v.get(b), None);
        assert_eq!(v.insert(b, ROOT, 1), Ok(1));
        assert_eq!((v.get(a), v.get(b)), (Some(0), Some(1)));
    }
}
