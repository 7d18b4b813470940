//! Basic identifiers and the abstract KV content model.
//!
//! KV content is tracked as a [`ContentTag`]: the chained prefix hash of the tokens whose KV
//! really sits in a GPU block or host chunk. Corruption is then a comparison between the tag
//! and the hash a reader (or a key) expects.

use std::fmt;

/// A physical GPU block id. Block 0 is vLLM's null block and never holds KV.
pub type BlockId = u32;
/// Blocks listed under one hash (almost always one): inline up to four, hashed and compared
/// exactly as a `Vec<BlockId>` (a slice), so state fingerprints do not depend on it.
pub type BlockIds = crate::system::collections::inline_vec::InlineVec<BlockId, 4>;
/// What a host chunk holds, per GPU block of the chunk (inline for one- and two-block chunks;
/// hashed and compared as a `Vec<ContentTag>`).
pub type Contents = crate::system::collections::inline_vec::InlineVec<ContentTag, 1>;
/// A block table or a list of a job's blocks: inline up to four (the checker's scopes), hashed and
/// compared as a `Vec<BlockId>`.
pub type TableIds = crate::system::collections::inline_vec::InlineVec<BlockId, 4>;
/// vLLM's null block (`BlockPool.null_block`).
pub const NULL_BLOCK: BlockId = 0;
/// Index of a request in the workload (its scope position), not vLLM's string id.
pub type ReqId = u16;
/// No request: the owner of a SimpleCPU lazy-mode store (`_prepare_lazy_store_specs` stores
/// blocks near eviction, whoever computed them).
pub const NO_REQ: ReqId = ReqId::MAX;
/// A token id.
pub type Token = u32;
/// A transfer job id (vLLM `OffloadingConnectorScheduler._job_counter`, shared by loads and
/// stores). The model renumbers live jobs 0..n to keep the state canonical.
pub type JobId = u32;

/// Chained prefix hash of one full block: it fingerprints every token up to the block's end
/// (vLLM `hash_block_tokens` with `NONE_HASH` as the parent of block 0).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub struct BlockHash(pub u64);

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{:08x}", (self.0 >> 32) as u32)
    }
}

/// Parent hash of block 0 (vLLM `NONE_HASH`).
pub const NONE_HASH: BlockHash = BlockHash(0x6a09_e667_f3bc_c908);

/// Extends a running (unfinished) prefix hash by one token: xor, odd multiply, rotate. Each
/// is a bijection of `h`, so for one parent, distinct token runs of one length never collide;
/// [`finish_hash`] then mixes the result. Cheap on purpose: replay hashes every prompt token.
#[inline]
pub fn extend_hash(h: u64, token: Token) -> u64 {
    (h ^ u64::from(token)).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26)
}

/// The splitmix64 finalizer (a bijection too): a running hash becomes a block hash or tag.
#[inline]
pub fn finish_hash(h: u64) -> u64 {
    let z = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of a block (or the tag of the first `tokens.len()` positions of one) given its
/// parent: the finished fold of its tokens over the parent's hash. A full block's hash is
/// this fold over all its tokens, so the fold over the first `k` tokens of a block is the tag
/// of a block into which only those `k` tokens were written.
pub fn fold_tokens(parent: BlockHash, tokens: &[Token]) -> u64 {
    fold_token_iter(parent, tokens.iter().copied())
}

/// [`fold_tokens`] over tokens that are not in one slice.
pub fn fold_token_iter(parent: BlockHash, tokens: impl IntoIterator<Item = Token>) -> u64 {
    finish_hash(tokens.into_iter().fold(parent.0, extend_hash))
}

/// Why a piece of KV is known to be wrong.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize)]
pub enum BadKind {
    /// Computed by a forward pass that attended to wrong KV.
    Tainted,
    /// A load into this block failed (the block holds no valid KV).
    LoadFailed,
    /// A store copied this chunk while its source block was being overwritten.
    Torn,
}

/// What a GPU block or host chunk really holds.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ContentTag {
    /// Never written since allocation (or a load has not landed yet).
    Empty,
    /// The first `len` positions hold the KV of the prefix whose hash ([`fold_tokens`]) is `hash`
    /// (`len == block_size` means a full block and `hash` is its [`BlockHash`]).
    Kv { hash: u64, len: u16 },
    /// Known-wrong content.
    Bad(BadKind),
}

impl ContentTag {
    pub fn full(h: BlockHash, block_size: u32) -> Self {
        ContentTag::Kv { hash: h.0, len: block_size as u16 }
    }
}

impl fmt::Debug for ContentTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContentTag::Empty => write!(f, "empty"),
            ContentTag::Kv { hash, len } => write!(f, "kv(#{:08x},{len})", (hash >> 32) as u32),
            ContentTag::Bad(k) => write!(f, "bad({k:?})"),
        }
    }
}

/// Why a request finished (vLLM `RequestStatus.FINISHED_*`).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize)]
pub enum FinishReason {
    Stopped,
    LengthCapped,
    Aborted,
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stopped => "stop",
            FinishReason::LengthCapped => "length",
            FinishReason::Aborted => "abort",
            FinishReason::Error => "error",
        }
    }
}

/// Request status (vLLM `RequestStatus`), plus `Pending` for a request that has not arrived.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, serde::Serialize, serde::Deserialize)]
pub enum Status {
    Pending,
    Waiting,
    WaitingForRemoteKvs,
    Running,
    Preempted,
    /// `WAITING_FOR_STREAMING_REQ`: a streaming session between turns, keeping its blocks.
    Parked,
    Finished(FinishReason),
}

impl Status {
    pub fn is_finished(self) -> bool {
        matches!(self, Status::Finished(_))
    }
    pub fn is_live(self) -> bool {
        !matches!(self, Status::Pending | Status::Finished(_))
    }
    pub fn short(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Waiting => "WAITING",
            Status::WaitingForRemoteKvs => "WAITING_FOR_REMOTE_KVS",
            Status::Running => "RUNNING",
            Status::Preempted => "PREEMPTED",
            Status::Parked => "WAITING_FOR_STREAMING_REQ",

            Status::Finished(FinishReason::Stopped) => "FINISHED_STOPPED",
            Status::Finished(FinishReason::LengthCapped) => "FINISHED_LENGTH_CAPPED",
            Status::Finished(FinishReason::Aborted) => "FINISHED_ABORTED",
            Status::Finished(FinishReason::Error) => "FINISHED_ERROR",
        }
    }
}

/// Ceiling division.
#[inline]
pub fn cdiv(a: u32, b: u32) -> u32 {
    a.div_ceil(b)
}

/// A value's std hash (tests that a replacement type hashes like what it replaced).
#[cfg(test)]
pub(crate) fn hash_of(x: &impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::hash::DefaultHasher::new();
    x.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline vectors in states hash exactly as the `Vec`s they replaced, inline or
    /// spilled, so checker fingerprints do not depend on them.
    #[test]
    fn inline_vectors_hash_like_vecs() {
        for n in 0..7u32 {
            let v: Vec<BlockId> = (1..=n).collect();
            assert_eq!(hash_of(&BlockIds::from_slice(&v)), hash_of(&v));
            let c: Vec<ContentTag> = (0..n).map(|i| ContentTag::Kv { hash: u64::from(i), len: 16 }).collect();
            assert_eq!(hash_of(&Contents::from_slice(&c)), hash_of(&c));
        }
    }
}

/// Packed (`collections::pack`): the hash.
impl crate::system::collections::pack::Pack for BlockHash {
    #[inline(always)]
    fn pack(&self, out: &mut Vec<u8>) {
        self.0.pack(out)
    }
    #[inline(always)]
    fn unpack(&mut self, r: &mut crate::system::collections::pack::Reader<'_>) -> Option<()> {
        self.0.unpack(r)
    }
}

crate::system::collections::pack::pack_unit_enum!(BadKind { Tainted, LoadFailed, Torn });

/// The state before anything is written (a decoder's starting value).
impl Default for ContentTag {
    fn default() -> Self {
        ContentTag::Empty
    }
}

/// Packed (`collections::pack`): a tag, then `Kv`'s hash and length or `Bad`'s kind.
impl crate::system::collections::pack::Pack for ContentTag {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        use crate::system::collections::pack::put;
        match self {
            ContentTag::Empty => put(out, [0]),
            ContentTag::Kv { hash, len } => {
                put(out, [1]);
                hash.pack(out);
                len.pack(out);
            }
            ContentTag::Bad(k) => {
                put(out, [2]);
                k.pack(out);
            }
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut crate::system::collections::pack::Reader<'_>) -> Option<()> {
        *self = match r.tag()? {
            0 => ContentTag::Empty,
            1 => {
                let (mut hash, mut len) = (0u64, 0u16);
                hash.unpack(r)?;
                len.unpack(r)?;
                ContentTag::Kv { hash, len }
            }
            2 => {
                let mut k = BadKind::Tainted;
                k.unpack(r)?;
                ContentTag::Bad(k)
            }
            _ => return None,
        };
        Some(())
    }
}

crate::system::collections::pack::pack_unit_enum!(FinishReason { Stopped, LengthCapped, Aborted, Error });

/// Packed (`collections::pack`): a tag, the variant's index, then `Finished`'s reason.
impl crate::system::collections::pack::Pack for Status {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        use crate::system::collections::pack::put;
        match self {
            Status::Pending => put(out, [0]),
            Status::Waiting => put(out, [1]),
            Status::WaitingForRemoteKvs => put(out, [2]),
            Status::Running => put(out, [3]),
            Status::Preempted => put(out, [4]),
            Status::Parked => put(out, [5]),
            Status::Finished(f) => {
                put(out, [6]);
                f.pack(out);
            }
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut crate::system::collections::pack::Reader<'_>) -> Option<()> {
        *self = match r.tag()? {
            0 => Status::Pending,
            1 => Status::Waiting,
            2 => Status::WaitingForRemoteKvs,
            3 => Status::Running,
            4 => Status::Preempted,
            5 => Status::Parked,
            6 => {
                let mut f = FinishReason::Stopped;
                f.unpack(r)?;
                Status::Finished(f)
            }
            _ => return None,
        };
        Some(())
    }
}
