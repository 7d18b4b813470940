//! A small growable bit set with a canonical representation: state-friendly (Eq, Hash by
//! its members) and cheap to test.

use super::inline_vec::InlineVec;

/// A small growable bit set with a canonical representation (no trailing zero words; the first
/// word inline).
#[derive(PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct BitSet(InlineVec<u64, 1>);

impl Clone for BitSet {
    fn clone(&self) -> Self {
        BitSet(self.0.clone())
    }
    /// Reuses the target's allocation (see `clone_fields`).
    fn clone_from(&mut self, src: &Self) {
        self.0.clone_from(&src.0)
    }
}

impl BitSet {
    /// An empty set with room for members below `n` (no regrowth while it fills).
    pub fn with_room(n: usize) -> Self {
        BitSet(InlineVec(smallvec::SmallVec::with_capacity(n.div_ceil(64))))
    }
    pub fn insert(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (i % 64);
    }
    pub fn remove(&mut self, i: u32) {
        let w = (i / 64) as usize;
        if w < self.0.len() {
            self.0[w] &= !(1 << (i % 64));
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }
    }
    pub fn extend(&mut self, items: impl IntoIterator<Item = u32>) {
        for i in items {
            self.insert(i);
        }
    }
    pub fn contains(&self, i: u32) -> bool {
        let w = (i / 64) as usize;
        w < self.0.len() && self.0[w] & (1 << (i % 64)) != 0
    }
    /// Keep only the members below `n`.
    pub fn retain_below(&mut self, n: u32) {
        let w = (n / 64) as usize;
        if w < self.0.len() {
            self.0.truncate(w + 1);
            self.0[w] &= (1u64 << (n % 64)) - 1;
            while self.0.last() == Some(&0) {
                self.0.pop();
            }
        }
    }
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }
    pub fn clear(&mut self) {
        self.0.clear();
    }
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0
            .iter()
            .enumerate()
            .flat_map(|(w, &bits)| (0..64).filter(move |b| bits & (1 << b) != 0).map(move |b| w as u32 * 64 + b))
    }
}

/// Packed (`super::pack`): its words.
impl super::pack::Pack for BitSet {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline]
    fn unpack(&mut self, r: &mut super::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}

// SAFETY: its words' vector's.
unsafe impl super::bitwise::Bitwise for BitSet {
    #[inline(always)]
    fn inline(&self) -> bool {
        super::bitwise::Bitwise::inline(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::BitSet;

    #[test]
    fn retain_below_keeps_the_lower_members_and_the_canonical_form() {
        for n in [0u32, 1, 5, 63, 64, 65, 100, 130, 200] {
            let mut s = BitSet::default();
            s.extend([0, 3, 63, 64, 70, 127, 128, 129]);
            s.retain_below(n);
            let mut want = BitSet::default();
            want.extend([0, 3, 63, 64, 70, 127, 128, 129].into_iter().filter(|&i| i < n));
            assert_eq!(s, want, "n = {n}");
            assert_eq!(s.iter().collect::<Vec<_>>(), want.iter().collect::<Vec<_>>());
        }
    }
}
