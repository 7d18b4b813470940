//! The frontier: the states of the level being expanded and of the next one, in chunks of up
//! to [`MAX_CHUNK`] states. A chunk keeps its states whole, or, when the hooks encode
//! ([`Hooks::encodes`](super::Hooks::encodes)), as compact bytes one after another in one
//! arena (a few hundred bytes per state instead of a whole state's heap), decoded when the
//! chunk is expanded.
//!
//! Encoded states are cut into chunks by the thread that expanded their parents ([`cut`]):
//! it encodes its candidates into a reused buffer and copies them, while they are in its
//! cache, into exactly sized pieces of [`CHUNK`] to [`MAX_CHUNK`] states (fewer when it found
//! fewer). The merge, which decides which candidates are new, then hands a piece to the next
//! level as it is: it copies no byte of it and marks a candidate it found visited as dropped.
//! Only a piece with fewer than `CHUNK / 2` states left is copied, into the level's open
//! chunk, so that chunks stay large enough to be worth a thread's claim.

/// The states a thread's chunk output is cut into at least (when it has that many), and the
/// size of a chunk the merge fills itself (whole states, small pieces, the initial states).
pub const CHUNK: usize = 16;

/// The most states in a chunk (a piece of `n` candidates is cut into `n / CHUNK` near-equal
/// ones); the dropped mask has a bit for each.
pub const MAX_CHUNK: usize = 2 * CHUNK - 1;
const _: () = assert!(MAX_CHUNK <= u32::BITS as usize, "a chunk's dropped mask is a u32");

/// Up to [`MAX_CHUNK`] states: whole in `states`, or encoded in `bytes` (`ends[i]`: the end of
/// the i-th entry; entry i is skipped when bit i of `dropped` is set). A run uses one form
/// throughout.
pub struct Chunk<S> {
    pub states: Vec<S>,
    pub bytes: Vec<u8>,
    pub ends: Vec<u32>,
    pub dropped: u32,
}

impl<S> Default for Chunk<S> {
    fn default() -> Self {
        Chunk { states: Vec::new(), bytes: Vec::new(), ends: Vec::new(), dropped: 0 }
    }
}

impl<S> Chunk<S> {
    /// States it holds (dropped entries not counted).
    pub fn len(&self) -> usize {
        self.states.len() + self.ends.len() - self.dropped.count_ones() as usize
    }

    /// The i-th encoded entry's bytes.
    pub fn encoded(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }

    /// The encoded entries not dropped, in order.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.ends.len()).filter(|&i| self.dropped >> i & 1 == 0)
    }

    /// Mark encoded entry `i` dropped.
    pub fn drop_entry(&mut self, i: usize) {
        self.dropped |= 1 << i;
    }

    /// Bytes this chunk holds for encoded states (arena and ends, by capacity).
    pub fn bytes(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * 4
    }
}

/// Cut the encoded entries in `bytes` (`spans[i]`: the start and end of the i-th, in order; the
/// bytes between them are left out) into pieces of near-equal length, [`CHUNK`] to
/// [`MAX_CHUNK`] entries each (one piece of fewer when there are fewer), each copied into its
/// own exactly sized arena, appended to `out`.
pub fn cut<S>(bytes: &[u8], spans: &[(u32, u32)], out: &mut Vec<Chunk<S>>) {
    let n = spans.len();
    let pieces = (n / CHUNK).max(1);
    let mut first = 0;
    for p in 0..pieces {
        let len = n / pieces + usize::from(p < n % pieces);
        let part = &spans[first..first + len];
        let mut piece = Vec::with_capacity(part.iter().map(|&(s, e)| (e - s) as usize).sum());
        let mut ends = Vec::with_capacity(len);
        for &(s, e) in part {
            piece.extend_from_slice(&bytes[s as usize..e as usize]);
            ends.push(piece.len() as u32);
        }
        out.push(Chunk { states: Vec::new(), bytes: piece, ends, dropped: 0 });
        first += len;
    }
}

/// A level under construction: its chunks, the last of them open to more states when the merge
/// filled it itself.
#[derive(Default)]
pub struct Level<S> {
    pub chunks: Vec<Chunk<S>>,
    pub len: usize,
    /// Bytes of its encoded states (by capacity; 0 for whole states).
    pub bytes: usize,
    /// The last chunk takes more states.
    open: bool,
}

impl<S> Level<S> {
    pub fn new() -> Self {
        Level { chunks: Vec::new(), len: 0, bytes: 0, open: false }
    }

    /// The open chunk with room for one more state.
    fn open(&mut self) -> &mut Chunk<S> {
        if !self.open || self.chunks.last().is_none_or(|c| c.len() >= CHUNK) {
            self.close();
            self.chunks.push(Chunk::default());
            self.open = true;
        }
        self.chunks.last_mut().expect("a chunk")
    }

    /// No more states go into the last chunk; a chunk of encoded states the merge filled keeps
    /// no slack.
    pub fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            if let Some(c) = self.chunks.last_mut() {
                self.bytes -= c.bytes();
                c.bytes.shrink_to_fit();
                self.bytes += c.bytes();
            }
        }
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

    /// Add a piece of encoded states ([`cut`]) after the merge marked its repeats dropped:
    /// as it is, or, when fewer than `CHUNK / 2` states are left in it, copied into the open
    /// chunk. Order is kept either way.
    pub fn push_piece(&mut self, c: Chunk<S>) {
        let n = c.len();
        if n == 0 {
        } else if n < CHUNK / 2 {
            for i in c.live() {
                self.push_encoded(c.encoded(i));
            }
        } else {
            self.close();
            self.len += n;
            self.bytes += c.bytes();
            self.chunks.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` entries of 1 to 3 bytes, entry i's bytes all `i`, and their spans.
    fn entries(n: usize) -> (Vec<u8>, Vec<(u32, u32)>) {
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        for i in 0..n {
            let start = bytes.len() as u32;
            bytes.extend(std::iter::repeat_n(i as u8, 1 + i % 3));
            spans.push((start, bytes.len() as u32));
        }
        (bytes, spans)
    }

    #[test]
    fn pieces_are_near_equal_and_keep_every_entry_in_order() {
        // Every entry, then every other one (the bytes between the spans left out).
        for (n, step) in [1, 7, 15, 16, 17, 31, 32, 33, 47, 48, 100].into_iter().flat_map(|n| [(n, 1), (2 * n, 2)]) {
            let (bytes, all) = entries(n);
            let spans: Vec<(u32, u32)> = all.iter().copied().step_by(step).collect();
            let mut out: Vec<Chunk<()>> = Vec::new();
            cut(&bytes, &spans, &mut out);
            let lens: Vec<usize> = out.iter().map(|c| c.len()).collect();
            assert_eq!(lens.iter().sum::<usize>(), spans.len());
            assert!(lens.iter().all(|&l| l <= MAX_CHUNK && (l >= CHUNK || out.len() == 1)), "{n}: {lens:?}");
            assert!(lens.iter().max().unwrap() - lens.iter().min().unwrap() <= 1, "{n}: {lens:?}");
            let back: Vec<&[u8]> = out.iter().flat_map(|c| (0..c.ends.len()).map(move |i| c.encoded(i))).collect();
            let want: Vec<&[u8]> = spans.iter().map(|&(s, e)| &bytes[s as usize..e as usize]).collect();
            assert_eq!(back, want, "{n} {step}");
            assert!(out.iter().all(|c| c.bytes.capacity() == c.bytes.len()));
        }
    }

    #[test]
    fn a_level_keeps_large_pieces_and_copies_small_ones_in_order() {
        let (bytes, spans) = entries(40);
        let mut pieces: Vec<Chunk<()>> = Vec::new();
        cut(&bytes, &spans[..3], &mut pieces); // 3 entries: copied
        cut(&bytes, &spans, &mut pieces); // 20 and 20 entries
        pieces[1].drop_entry(0);
        pieces[1].drop_entry(5);
        for i in 0..15 {
            pieces[2].drop_entry(i); // 5 left: copied
        }
        let mut level = Level::new();
        for p in pieces {
            level.push_piece(p);
        }
        level.close();
        let lens: Vec<usize> = level.chunks.iter().map(|c| c.len()).collect();
        assert_eq!((lens, level.len), (vec![3, 18, 5], 26));
        let all: Vec<u8> = level.chunks.iter().flat_map(|c| c.live().map(move |i| c.encoded(i)[0])).collect();
        let want: Vec<u8> = [0, 1, 2].into_iter().chain((1..20).filter(|&i| i != 5)).chain(35..40).collect();
        assert_eq!(all, want);
        assert_eq!(level.bytes, level.chunks.iter().map(Chunk::bytes).sum::<usize>());
    }
}
