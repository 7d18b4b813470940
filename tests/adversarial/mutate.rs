//! The adversarial suite's mutations: a seeded xorshift generator and the ways an input file
//! is damaged (byte flips, lines deleted or duplicated, truncation, numbers replaced by
//! boundary values, keys renamed, bytes that are not UTF-8, an empty file, deep nesting).
//! Every mutation is a pure function of the input and the generator's state, so a case is
//! reproduced from its seed alone.

/// xorshift64* (Vigna): small, fast and good enough to pick mutations.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // SplitMix64 of the seed, so that nearby seeds start far apart (and 0 is not stuck).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// The replacement values for a number: boundaries of the integer types kvmc reads, values
/// past them, and things that are not numbers at all.
pub const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "1e400",
    "-0",
    "0.5",
    "nan",
    "NaN",
    "inf",
    "\"x\"",
    "x",
    "65535",
    "65536",
    "1000001",
    "4194305",
];

/// Which mutation; its name is reported with every case.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    ByteFlip,
    DeleteLine,
    DuplicateLine,
    SwapLines,
    Truncate,
    Number,
    /// A number changed to a nearby plausible one (n ± 1, 2n, 10n, n / 2): the file mostly
    /// stays valid, so the run goes past the parser into the model.
    Tweak,
    RenameKey,
    InvalidUtf8,
    Empty,
    DeepNesting,
    InsertByte,
}

pub const ALL: &[Mutation] = &[
    Mutation::ByteFlip,
    Mutation::DeleteLine,
    Mutation::DuplicateLine,
    Mutation::SwapLines,
    Mutation::Truncate,
    Mutation::Number,
    Mutation::Number,
    Mutation::Number,
    Mutation::Tweak,
    Mutation::Tweak,
    Mutation::Tweak,
    Mutation::Tweak,
    Mutation::RenameKey,
    Mutation::InvalidUtf8,
    Mutation::Empty,
    Mutation::DeepNesting,
    Mutation::InsertByte,
];

impl Mutation {
    pub fn name(self) -> &'static str {
        match self {
            Mutation::ByteFlip => "byte-flip",
            Mutation::DeleteLine => "delete-line",
            Mutation::DuplicateLine => "duplicate-line",
            Mutation::SwapLines => "swap-lines",
            Mutation::Truncate => "truncate",
            Mutation::Number => "number",
            Mutation::Tweak => "tweak",
            Mutation::RenameKey => "rename-key",
            Mutation::InvalidUtf8 => "invalid-utf8",
            Mutation::Empty => "empty",
            Mutation::DeepNesting => "deep-nesting",
            Mutation::InsertByte => "insert-byte",
        }
    }
}

/// Byte ranges of the lines of `b` (each without its newline).
fn lines(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if c == b'\n' {
            out.push((start, i));
            start = i + 1;
        }
    }
    if start < b.len() {
        out.push((start, b.len()));
    }
    out
}

/// Byte ranges of the runs of ASCII digits (with a leading '-') in `b`.
fn numbers(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let s = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            let mut e = i;
            while e < b.len() && (b[e].is_ascii_digit() || b[e] == b'.' || b[e] == b'_') {
                e += 1;
            }
            out.push((s, e));
            i = e;
        } else {
            i += 1;
        }
    }
    out
}

/// One time in four, only the numbers of the first line that has any: a log's header (its
/// sizes), otherwise one number among hundreds.
fn header_biased(rng: &mut Rng, b: &[u8], ns: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    if rng.below(4) != 0 {
        return ns;
    }
    let Some(&(first, _)) = ns.first() else { return ns };
    let end = b[first..].iter().position(|&c| c == b'\n').map_or(b.len(), |i| first + i);
    ns.into_iter().filter(|&(s, _)| s < end).collect()
}

/// Byte ranges of keys: a TOML `key =` at a line's start, a JSON `"key":`, a `[table]` name.
fn keys(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (s, e) in lines(b) {
        let l = &b[s..e];
        let lead = l.iter().take_while(|c| c.is_ascii_whitespace()).count();
        let ident = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-' || *c == b'.';
        // TOML: `key = ...` or `[table]` / `[[table]]`.
        let start = lead + l[lead..].iter().take_while(|c| **c == b'[').count();
        let n = l[start..].iter().take_while(|c| ident(c)).count();
        if n > 0 {
            out.push((s + start, s + start + n));
        }
        // JSON: `"key":` anywhere on the line.
        let mut i = 0;
        while i < l.len() {
            if l[i] == b'"' {
                let k = l[i + 1..].iter().take_while(|c| ident(c)).count();
                if k > 0 && l.get(i + 1 + k) == Some(&b'"') && l.get(i + 2 + k) == Some(&b':') {
                    out.push((s + i + 1, s + i + 1 + k));
                }
                i += k + 1;
            } else {
                i += 1;
            }
        }
    }
    out
}

/// Deep nesting in the file's own syntax: TOML arrays or dotted tables, JSON arrays and
/// objects, msgpack arrays.
fn deep(rng: &mut Rng, kind: Syntax) -> Vec<u8> {
    let depth = *rng.pick(&[64usize, 200, 1_000, 10_000, 100_000]);
    match kind {
        Syntax::Toml => match rng.below(3) {
            0 => format!("\ndeep = {}1{}\n", "[".repeat(depth), "]".repeat(depth)).into_bytes(),
            1 => format!("\n[{}]\nx = 1\n", vec!["t"; depth.min(20_000)].join(".")).into_bytes(),
            _ => format!("\ndeep = {}1{}\n", "{ a = ".repeat(depth), " }".repeat(depth)).into_bytes(),
        },
        Syntax::Json => match rng.below(2) {
            0 => format!("{}1{}\n", "[".repeat(depth), "]".repeat(depth)).into_bytes(),
            _ => format!("{}1{}\n", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes(),
        },
        Syntax::Msgpack => {
            // `[ts, [[[...]]]]`: fixarray headers, innermost an integer.
            let mut v = vec![0x92, 0x00];
            v.extend(std::iter::repeat_n(0x91, depth));
            v.push(0x01);
            v
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Syntax {
    Toml,
    Json,
    Msgpack,
}

/// Apply `m` to `b` in place. Returns a short description of what changed.
pub fn apply(rng: &mut Rng, m: Mutation, b: &mut Vec<u8>, syntax: Syntax) -> String {
    match m {
        Mutation::ByteFlip if !b.is_empty() => {
            let i = rng.below(b.len());
            let bit = 1u8 << rng.below(8);
            b[i] ^= bit;
            format!("flip bit {bit:#04x} of byte {i}")
        }
        Mutation::InsertByte => {
            let i = rng.below(b.len() + 1);
            // A msgpack header byte that claims a huge length, or a stray structural byte.
            let x = match syntax {
                Syntax::Msgpack => *rng.pick(&[0xdd, 0xdf, 0xdb, 0xc6, 0x9f, 0xc1, 0xd9, 0xff]),
                _ => *rng.pick(&[b'[', b'{', b'"', b'=', b',', b'\\', b'#', 0]),
            };
            b.insert(i, x);
            format!("insert {x:#04x} at byte {i}")
        }
        Mutation::DeleteLine | Mutation::DuplicateLine | Mutation::SwapLines => {
            let ls = lines(b);
            if ls.is_empty() {
                return "no line to change".into();
            }
            let k = rng.below(ls.len());
            let (s, e) = ls[k];
            match m {
                Mutation::DeleteLine => {
                    let end = (e + 1).min(b.len());
                    b.drain(s..end);
                    format!("delete line {}", k + 1)
                }
                Mutation::DuplicateLine => {
                    let line: Vec<u8> = b[s..e].iter().copied().chain([b'\n']).collect();
                    b.splice(s..s, line);
                    format!("duplicate line {}", k + 1)
                }
                _ => {
                    let j = rng.below(ls.len());
                    let (a, c) = if j < k { (ls[j], ls[k]) } else { (ls[k], ls[j]) };
                    if a == c {
                        return format!("swap line {} with itself", k + 1);
                    }
                    let first = b[a.0..a.1].to_vec();
                    let second = b[c.0..c.1].to_vec();
                    b.splice(c.0..c.1, first);
                    b.splice(a.0..a.1, second);
                    format!("swap lines {} and {}", k.min(j) + 1, k.max(j) + 1)
                }
            }
        }
        Mutation::Truncate => {
            let n = rng.below(b.len() + 1);
            b.truncate(n);
            format!("truncate to {n} bytes")
        }
        Mutation::Number => {
            let ns = header_biased(rng, b, numbers(b));
            if ns.is_empty() {
                return "no number".into();
            }
            let (s, e) = ns[rng.below(ns.len())];
            let v = *rng.pick(NUMBERS);
            b.splice(s..e, v.bytes());
            format!("number at byte {s} -> {v}")
        }
        Mutation::Tweak => {
            let ns: Vec<_> = numbers(b).into_iter().filter(|&(s, e)| b[s..e].iter().all(u8::is_ascii_digit)).collect();
            let ns = header_biased(rng, b, ns);
            if ns.is_empty() {
                return "no number".into();
            }
            let (s, e) = ns[rng.below(ns.len())];
            let Ok(n) = std::str::from_utf8(&b[s..e]).unwrap().parse::<u64>() else {
                return "a number too long to tweak".into();
            };
            let v = match rng.below(6) {
                0 => n + 1,
                1 => n.saturating_sub(1),
                2 => n.saturating_mul(2),
                3 => n.saturating_mul(10),
                4 => n / 2,
                _ => n.saturating_mul(100),
            };
            b.splice(s..e, v.to_string().bytes());
            format!("tweak number at byte {s}: {n} -> {v}")
        }
        Mutation::RenameKey => {
            let ks = keys(b);
            if ks.is_empty() {
                return "no key".into();
            }
            let (s, e) = ks[rng.below(ks.len())];
            let old = String::from_utf8_lossy(&b[s..e]).into_owned();
            let new = match rng.below(3) {
                0 => format!("{old}x"),
                1 => {
                    let (s2, e2) = ks[rng.below(ks.len())];
                    String::from_utf8_lossy(&b[s2..e2]).into_owned()
                }
                _ => old.chars().rev().collect(),
            };
            b.splice(s..e, new.bytes());
            format!("rename key {old} -> {new}")
        }
        Mutation::InvalidUtf8 => {
            let i = rng.below(b.len() + 1);
            let x = rng.pick(&[&[0xffu8][..], &[0xc3], &[0xe2, 0x82], &[0xed, 0xa0, 0x80], &[0xc0, 0xaf]]).to_vec();
            let n = x.len();
            b.splice(i..i, x);
            format!("insert {n} non-UTF-8 bytes at byte {i}")
        }
        Mutation::Empty => {
            b.clear();
            "empty file".into()
        }
        Mutation::DeepNesting => {
            let d = deep(rng, syntax);
            let at = match syntax {
                // Msgpack: a batch of its own, at a batch boundary (the end).
                Syntax::Msgpack => b.len(),
                // A new line (TOML: at the end, a top-level key would land in the last table).
                _ => lines(b).last().map_or(0, |l| l.1),
            };
            let n = d.len();
            b.splice(at..at, d);
            format!("{n} bytes of deep nesting at byte {at}")
        }
        Mutation::ByteFlip => "empty file, no byte to flip".into(),
    }
}
