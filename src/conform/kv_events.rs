//! vLLM KV cache events (`KVEventBatch`, msgspec msgpack; traces-and-events.md §4): parsing a
//! recorded stream and checking it for consistency, on its own and against the model.
//!
//! A stream file is the published payloads back to back. Each batch is an array
//! `[ts, [events...], dp_rank?]`; each event a map tagged by `"type"`: `BlockStored`,
//! `BlockRemoved` or `AllBlocksCleared`. Hashes are opaque (int or bytes).
//!
//! Checks: per medium, a hash is removed only while stored (GPU counts duplicates: one entry
//! per cached block); a GPU store's parent is stored; `AllBlocksCleared` empties the GPU medium;
//! GPU stores carry `block_size * len(block_hashes)` tokens, and so do offload stores with a
//! block size and a payload (SimpleCPU's carry the block's tokens); offload placeholders
//! (OffloadingConnector) carry `block_size` 0 and no tokens, and a host key is not stored twice
//! without a removal between.
//! 0.24's SimpleCPU publishes its CPU evictions as GPU removals (`consistency`'s `cpu_as_gpu`).
//! With a conformance log, every batch's counts of stored and removed blocks per medium must
//! equal what the model cached, evicted, stored and evicted in the same step.

use crate::error::{KvmcError, Result};
use rmpv::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Hash {
    U64(u64),
    Bytes(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq)]
pub enum KvEvent {
    Stored { hashes: Vec<Hash>, parent: Option<Hash>, tokens: usize, block_size: u64, medium: String },
    Removed { hashes: Vec<Hash>, medium: String },
    Cleared,
}

#[derive(Clone, Debug)]
pub struct Batch {
    /// 1-based position in the file.
    pub index: usize,
    /// Byte offset where it starts.
    pub offset: usize,
    pub events: Vec<KvEvent>,
}

fn field<'a>(m: &'a [(Value, Value)], k: &str) -> Option<&'a Value> {
    m.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v)
}

fn hash(v: &Value) -> Option<Hash> {
    match v {
        Value::Integer(i) => i.as_u64().map(Hash::U64),
        Value::Binary(b) => Some(Hash::Bytes(b.clone())),
        _ => None,
    }
}

fn hashes(v: Option<&Value>) -> Option<Vec<Hash>> {
    v?.as_array()?.iter().map(hash).collect()
}

/// A string field; a string that is not UTF-8 is an error that says so (not "missing").
fn str_field<'a>(m: &'a [(Value, Value)], k: &str) -> std::result::Result<Option<&'a str>, String> {
    match field(m, k) {
        Some(Value::String(s)) => match s.as_str() {
            Some(t) => Ok(Some(t)),
            None => Err(format!("the event's {k:?} is not UTF-8 ({:?})", String::from_utf8_lossy(s.as_bytes()))),
        },
        Some(_) | None => Ok(None),
    }
}

fn event(v: &Value) -> std::result::Result<KvEvent, String> {
    let m = v.as_map().ok_or("an event is not a map")?;
    if m.iter().any(|(k, _)| matches!(k, Value::String(s) if s.as_str().is_none())) {
        return Err("an event has a key that is not UTF-8".into());
    }
    let ty = str_field(m, "type")?.ok_or("an event has no \"type\"")?;
    let medium = str_field(m, "medium")?.unwrap_or("GPU").to_string();
    match ty {
        "BlockStored" => Ok(KvEvent::Stored {
            hashes: hashes(field(m, "block_hashes")).ok_or("BlockStored without block_hashes")?,
            parent: field(m, "parent_block_hash").and_then(hash),
            tokens: field(m, "token_ids").and_then(|t| t.as_array()).map_or(0, |a| a.len()),
            block_size: field(m, "block_size").and_then(|b| b.as_u64()).ok_or("BlockStored without block_size")?,
            medium,
        }),
        "BlockRemoved" => Ok(KvEvent::Removed {
            hashes: hashes(field(m, "block_hashes")).ok_or("BlockRemoved without block_hashes")?,
            medium,
        }),
        "AllBlocksCleared" => Ok(KvEvent::Cleared),
        other => Err(format!("unknown event type {other:?}")),
    }
}

/// Parse a stream file: every batch, or an input error naming the batch and byte offset.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Batch>> {
    let mut out = Vec::new();
    let mut cur = std::io::Cursor::new(bytes);
    while (cur.position() as usize) < bytes.len() {
        let offset = cur.position() as usize;
        let index = out.len() + 1;
        let bad = |msg: String| KvmcError::input(path, index, format!("batch {index} at byte {offset}: {msg}"));
        let v = rmpv::decode::read_value(&mut cur).map_err(|e| bad(format!("not msgpack: {e}")))?;
        let arr = v.as_array().ok_or_else(|| bad("a batch is an array [ts, events, dp_rank]".into()))?;
        if arr.len() < 2 || !arr[0].is_number() {
            return Err(bad("a batch is an array [ts, events, dp_rank]".into()));
        }
        let evs = arr[1].as_array().ok_or_else(|| bad("events is not an array".into()))?;
        let events = evs.iter().map(event).collect::<std::result::Result<Vec<_>, _>>().map_err(bad)?;
        out.push(Batch { index, offset, events });
    }
    Ok(out)
}

/// Per-batch counts: (medium, stored blocks, removed blocks).
pub type Counts = BTreeMap<String, (usize, usize)>;

pub fn counts(b: &Batch) -> Counts {
    let mut c = Counts::new();
    for e in &b.events {
        match e {
            KvEvent::Stored { hashes, medium, .. } => c.entry(medium.clone()).or_default().0 += hashes.len(),
            KvEvent::Removed { hashes, medium } => c.entry(medium.clone()).or_default().1 += hashes.len(),
            KvEvent::Cleared => {}
        }
    }
    c
}

/// The stream's own consistency. Returns the first problem, naming its batch.
///
/// `cpu_as_gpu` (0.24's SimpleCPU): its CPU pool's evictions are published as GPU removals,
/// which a reader cannot tell from the GPU's own. A GPU removal of a hash the GPU medium does
/// not hold is then taken for a CPU eviction, and a GPU store's parent is not checked (a CPU
/// eviction of the parent's hash may have been taken for the GPU's): the per-step counts
/// against the model are the check there.
pub fn consistency(batches: &[Batch], cpu_as_gpu: bool) -> Option<(usize, String)> {
    let mut resident: BTreeMap<String, BTreeMap<Hash, u32>> = BTreeMap::new();
    for b in batches {
        for e in &b.events {
            match e {
                KvEvent::Stored { hashes, parent, tokens, block_size, medium } => {
                    let gpu = medium == "GPU";
                    if gpu && *tokens as u64 != block_size * hashes.len() as u64 {
                        return Some((
                            b.index,
                            format!(
                                "GPU BlockStored carries {tokens} tokens for {} blocks of {block_size}",
                                hashes.len()
                            ),
                        ));
                    }
                    if !gpu && *block_size == 0 && *tokens != 0 {
                        return Some((b.index, "an offload placeholder (block_size 0) carries tokens".into()));
                    }
                    // SimpleCPU's CPU events carry the block's tokens (BlockStoreMeta), or none
                    // when it has no payload for the block (`_process_store_completion`).
                    if !gpu && *block_size > 0 && *tokens != 0 && *tokens as u64 != block_size * hashes.len() as u64 {
                        return Some((
                            b.index,
                            format!(
                                "{medium} BlockStored carries {tokens} tokens for {} blocks of {block_size}",
                                hashes.len()
                            ),
                        ));
                    }
                    let m = resident.entry(medium.clone()).or_default();
                    if gpu && !cpu_as_gpu {
                        if let Some(p) = parent {
                            if m.get(p).copied().unwrap_or(0) == 0 {
                                return Some((b.index, format!("GPU BlockStored whose parent {p:?} is not stored")));
                            }
                        }
                    }
                    for h in hashes {
                        let n = m.entry(h.clone()).or_default();
                        if !gpu && *block_size == 0 && *n > 0 {
                            return Some((b.index, format!("{medium} key {h:?} stored twice without a removal")));
                        }
                        *n += 1;
                    }
                }
                KvEvent::Removed { hashes, medium } => {
                    let m = resident.entry(medium.clone()).or_default();
                    for h in hashes {
                        match m.get_mut(h) {
                            Some(n) if *n > 0 => *n -= 1,
                            _ if cpu_as_gpu && medium == "GPU" => {}
                            _ => {
                                return Some((b.index, format!("{medium} BlockRemoved of {h:?}, which is not stored")))
                            }
                        }
                    }
                }
                KvEvent::Cleared => {
                    resident.remove("GPU");
                }
            }
        }
    }
    None
}
