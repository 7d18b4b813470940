//! The frontier: the states of the level being expanded and of the next one, in chunks of up
//! to [`CHUNK`] states. A chunk keeps its states whole, or, when the hooks encode
//! ([`Hooks::encodes`](super::Hooks::encodes)), as compact bytes one after another in one
//! arena (a few hundred bytes per state instead of a whole state's heap), decoded when the
//! chunk is expanded.

/// States per chunk (the unit a thread claims and the merge visits).
pub const CHUNK: usize = 16;

/// Up to [`CHUNK`] states: whole in `states`, or encoded in `bytes` (`ends[i]`: the end of
/// the i-th). A run uses one form throughout.
pub struct Chunk<S> {
    pub states: Vec<S>,
    pub bytes: Vec<u8>,
    pub ends: Vec<u32>,
}

impl<S> Default for Chunk<S> {
    fn default() -> Self {
        Chunk { states: Vec::new(), bytes: Vec::new(), ends: Vec::new() }
    }
}

impl<S> Chunk<S> {
    pub fn len(&self) -> usize {
        self.states.len() + self.ends.len()
    }

    /// The i-th encoded state's bytes.
    pub fn encoded(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// Bytes this chunk holds for encoded states (arena and ends, by capacity).
    pub fn bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 4
    }
}

/// A level under construction: full chunks, then the one being filled.
#[derive(Default)]
pub struct Level<S> {
    pub chunks: Vec<Chunk<S>>,
    pub len: usize,
    /// Bytes of its encoded states (by capacity; 0 for whole states).
    pub bytes: usize,
}

impl<S> Level<S> {
    pub fn new() -> Self {
        Level { chunks: Vec::new(), len: 0, bytes: 0 }
    }

    fn open(&mut self) -> &mut Chunk<S> {
        if self.chunks.last().is_none_or(|c| c.len() >= CHUNK) {
            if let Some(c) = self.chunks.last_mut() {
                // A full chunk of encoded states keeps no slack.
                self.bytes -= c.bytes();
                c.bytes.shrink_to_fit();
                self.bytes += c.bytes();
            }
            self.chunks.push(Chunk::default());
        }
        self.chunks.last_mut().expect("a chunk")
    }

    pub fn push_state(&mut self, s: S) {
        self.open().states.push(s);
        self.len += 1;
    }

    pub fn push_encoded(&mut self, b: &[u8]) {
        let c = self.open();
        let before = c.bytes();
        if c.ends.is_empty() {
            c.ends.reserve_exact(CHUNK);
            c.bytes.reserve(b.len() * CHUNK);
        }
        c.bytes.extend_from_slice(b);
        c.ends.push(c.bytes.len() as u32);
        let after = c.bytes();
        self.bytes = self.bytes + after - before;
        self.len += 1;
    }
}
