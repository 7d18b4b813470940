//! State fingerprints, 128 bits, seeded, no random keys; the visited set keeps 96 of them.
//! Two functions, never mixed in one search ([`crate::search::key`] picks one):
//! - over a state's encoding, when the hooks encode the frontier: XXH3-128
//!   ([`fingerprint_bytes`], the `xxhash-rust` crate). kvmc's checker always encodes.
//! - over the words a state's `Hash` writes, for states kept whole: MurmurHash3 x64_128's block
//!   and finalisation functions ([`fingerprint`]), below.
//!
//! Every integer a `Hash` impl writes is widened to one 64-bit word (so `u32` and `usize` hash
//! the same on every machine); byte slices are packed eight bytes to a word, little-endian,
//! their last partial word tagged with its length. Two words make one MurmurHash3 block. The
//! only thing a machine can change is the bytes std's integer `hash_slice` writes (native
//! endianness): fingerprints would differ on a big-endian machine, the search's results would
//! not (node order, counts and paths never depend on fingerprint values, only on equality).

use std::hash::{Hash, Hasher};

/// The default fingerprint seed (any fixed value; `Options::seed` changes it).
pub const DEFAULT_SEED: u64 = 0x6b76_6d63_5f66_7073; // "kvmc_fps"

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

/// A state's 128-bit fingerprint.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Fingerprint(pub [u64; 2]);

impl Fingerprint {
    pub fn as_u128(self) -> u128 {
        (u128::from(self.0[1]) << 64) | u128::from(self.0[0])
    }
}

/// MurmurHash3 x64_128's state (h1, h2) and its number of input bytes.
#[derive(Clone)]
struct Murmur {
    h1: u64,
    h2: u64,
    len: u64,
}

#[inline]
fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

impl Murmur {
    #[inline]
    fn new(seed: u64) -> Self {
        Murmur { h1: seed, h2: seed, len: 0 }
    }

    #[inline]
    fn block(&mut self, k1: u64, k2: u64) {
        self.h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        self.h1 = self.h1.rotate_left(27).wrapping_add(self.h2).wrapping_mul(5).wrapping_add(0x52dc_e729);
        self.h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        self.h2 = self.h2.rotate_left(31).wrapping_add(self.h1).wrapping_mul(5).wrapping_add(0x3849_5ab5);
        self.len += 16;
    }

    /// The tail (up to 15 bytes as two little-endian words, `n` bytes) and the finalisation.
    #[inline]
    fn finish(mut self, k1: u64, k2: u64, n: u64) -> [u64; 2] {
        if n > 8 {
            self.h2 ^= k2.wrapping_mul(C2).rotate_left(33).wrapping_mul(C1);
        }
        if n > 0 {
            self.h1 ^= k1.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
        }
        let len = self.len + n;
        let (mut h1, mut h2) = (self.h1 ^ len, self.h2 ^ len);
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        h1 = fmix(h1);
        h2 = fmix(h2);
        h1 = h1.wrapping_add(h2);
        h2 = h2.wrapping_add(h1);
        [h1, h2]
    }
}

/// A `Hasher` that computes a [`Fingerprint`] (its `finish` gives the low 64 bits).
#[derive(Clone)]
pub struct FpHasher {
    m: Murmur,
    /// A word waiting for its block partner.
    pending: Option<u64>,
}

impl FpHasher {
    #[inline]
    pub fn new(seed: u64) -> Self {
        FpHasher { m: Murmur::new(seed), pending: None }
    }

    #[inline]
    fn word(&mut self, w: u64) {
        match self.pending.take() {
            Some(k1) => self.m.block(k1, w),
            None => self.pending = Some(w),
        }
    }

    #[inline]
    pub fn finish128(&self) -> Fingerprint {
        let m = self.m.clone();
        Fingerprint(match self.pending {
            Some(k1) => m.finish(k1, 0, 8),
            None => m.finish(0, 0, 0),
        })
    }
}

impl Hasher for FpHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.finish128().0[0]
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.word(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            b[7] = 0x80 | rest.len() as u8; // at most 7 bytes: the top byte is free
            self.word(u64::from_le_bytes(b));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.word(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.word(i as u64);
        self.word((i >> 64) as u64);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }
    #[inline]
    fn write_i8(&mut self, i: i8) {
        self.word(i as u64);
    }
    #[inline]
    fn write_i16(&mut self, i: i16) {
        self.word(i as u64);
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.word(i as u64);
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.word(i as u64);
    }
    #[inline]
    fn write_isize(&mut self, i: isize) {
        self.word(i as u64);
    }
}

/// The fingerprint of `s` under `seed`.
#[inline]
pub fn fingerprint<S: Hash + ?Sized>(s: &S, seed: u64) -> Fingerprint {
    let mut h = FpHasher::new(seed);
    s.hash(&mut h);
    h.finish128()
}

/// XXH3-128 of `data` under `seed`: the fingerprint of an encoded state (the search keys
/// states by their encoding when its hooks encode the frontier). A kilobyte takes about a
/// tenth of MurmurHash3's instructions (vector stripes instead of two multiplies per 16 bytes).
#[inline]
pub fn fingerprint_bytes(data: &[u8], seed: u64) -> Fingerprint {
    let h = xxhash_rust::xxh3::xxh3_128_with_seed(data, seed);
    Fingerprint([h as u64, (h >> 64) as u64])
}

/// The probability that two of `n` distinct states share a key: the visited set identifies a
/// state by 96 bits of its fingerprint, and assuming they behave as independent uniform draws,
/// the birthday bound is `n(n-1)/2^97` (TLC reports the same kind of estimate for its 64-bit
/// fingerprints).
pub fn collision_probability(n: u64) -> f64 {
    let n = n as f64;
    n * (n - 1.0).max(0.0) / 2f64.powi(97)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MurmurHash3_x64_128 over bytes, built from the same block and finalisation functions.
    fn murmur_bytes(data: &[u8], seed: u64) -> [u64; 2] {
        let mut m = Murmur::new(seed);
        let mut blocks = data.chunks_exact(16);
        for b in &mut blocks {
            m.block(u64::from_le_bytes(b[..8].try_into().unwrap()), u64::from_le_bytes(b[8..].try_into().unwrap()));
        }
        let rest = blocks.remainder();
        let mut t = [0u8; 16];
        t[..rest.len()].copy_from_slice(rest);
        let k1 = u64::from_le_bytes(t[..8].try_into().unwrap());
        let k2 = u64::from_le_bytes(t[8..].try_into().unwrap());
        m.finish(k1, k2, rest.len() as u64)
    }

    #[test]
    fn byte_fingerprints_are_xxh3_128() {
        // XXH3-128 of the empty input, seed 0 (xxHash's published value 99aa06d3014798d86001c324468d497f).
        assert_eq!(fingerprint_bytes(b"", 0).as_u128(), 0x99aa_06d3_0147_98d8_6001_c324_468d_497f);
        let kb: Vec<u8> = (0..1100u32).map(|i| (i * 7) as u8).collect();
        let mut other = kb.clone();
        other[1099] ^= 1;
        assert_ne!(fingerprint_bytes(&kb, 1), fingerprint_bytes(&other, 1));
        assert_ne!(fingerprint_bytes(&kb, 1), fingerprint_bytes(&kb, 2));
    }

    #[test]
    fn murmur3_x64_128_matches_published_values() {
        // mmh3.hash64(b"hello") == (-3758069500696749310, 6565844092913065241).
        assert_eq!(murmur_bytes(b"hello", 0), [0xcbd8_a7b3_41bd_9b02, 0x5b1e_906a_48ae_1d19]);
        // SMHasher's verification value for MurmurHash3_x64_128: hash keys [0], [0,1], ..., of
        // lengths 0..=255 with seed 256 - len, hash the concatenated digests with seed 0, and
        // read the first four bytes little-endian.
        let key: Vec<u8> = (0..=255u8).collect();
        let mut all = Vec::new();
        for i in 0..256 {
            let h = murmur_bytes(&key[..i], 256 - i as u64);
            all.extend_from_slice(&h[0].to_le_bytes());
            all.extend_from_slice(&h[1].to_le_bytes());
        }
        let f = murmur_bytes(&all, 0);
        assert_eq!(f[0] as u32, 0x6384_ba69);
    }

    #[test]
    fn fingerprints_are_deterministic_and_width_independent() {
        // Scalars are widened to words: the same values hash the same at any width.
        let a = fingerprint(&(1u32, 2u8, "ab", 5usize), DEFAULT_SEED);
        assert_eq!(a, fingerprint(&(1u64, 2u16, "ab", 5u64), DEFAULT_SEED));
        assert_ne!(a, fingerprint(&(2u32, 1u8, "ab", 5usize), DEFAULT_SEED));
        assert_ne!(a, fingerprint(&(1u32, 2u8, "ab", 5usize), DEFAULT_SEED + 1));
        // A byte tail carries its length.
        assert_ne!(fingerprint(&[1u8, 2][..], 0), fingerprint(&[1u8, 2, 0][..], 0));
        assert_eq!(fingerprint(&vec![3u16, 4], 9), fingerprint(&vec![3u16, 4], 9));
    }

    #[test]
    fn collision_estimate() {
        assert!(collision_probability(1_000_000_000) < 1e-11);
        assert_eq!(collision_probability(1), 0.0);
    }
}
