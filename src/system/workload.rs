//! The workload: every request's tokens, known up front (prompt and the tokens the model
//! will sample), and a registry of every block hash they can produce, for labels and for
//! checking a host key against the content stored under it.

use super::types::{fold_tokens, BlockHash, Token, NONE_HASH};
use std::collections::BTreeMap;

/// How a request ends when it has sampled all of its scripted output tokens.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum EndKind {
    /// `max_tokens` reached (`FINISHED_LENGTH_CAPPED`).
    Length,
    /// The last scripted token is EOS (`FINISHED_STOPPED`).
    Stop,
}

/// One request of the workload.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct RequestSpec {
    pub name: String,
    /// Prompt followed by the scripted output tokens.
    pub tokens: Vec<Token>,
    pub prompt_len: u32,
    /// `max_tokens`.
    pub max_tokens: u32,
    /// The output index whose sampled token is EOS (the request stops there, STOPPED).
    pub eos_at: Option<u32>,
    /// Block hashes of every full block of `tokens`.
    pub hashes: Vec<BlockHash>,
}

impl RequestSpec {
    /// A request whose model samples `output` (max_tokens = its length); with `EndKind::Stop`
    /// its last token is EOS.
    pub fn new(name: &str, prompt: Vec<Token>, output: Vec<Token>, end: EndKind, block_size: u32) -> Self {
        let n = output.len() as u32;
        let eos_at = (end == EndKind::Stop && n > 0).then(|| n - 1);
        Self::with_limits(name, prompt, output, n, eos_at, block_size)
    }

    /// A request with `max_tokens` of its own: the model samples `output` first; positions past
    /// it (never sampled, e.g. after an abort) are filled with placeholder tokens.
    pub fn with_limits(
        name: &str,
        prompt: Vec<Token>,
        output: Vec<Token>,
        max_tokens: u32,
        eos_at: Option<u32>,
        block_size: u32,
    ) -> Self {
        let prompt_len = prompt.len() as u32;
        let mut tokens = prompt;
        let known = output.len() as u32;
        tokens.extend(output);
        tokens.extend((known..max_tokens).map(|i| u32::MAX - i));
        let hashes = chain_hashes(&tokens, block_size);
        RequestSpec { name: name.to_string(), tokens, prompt_len, max_tokens, eos_at, hashes }
    }

    /// Parent hash of block `i` (`NONE_HASH` for block 0).
    pub fn parent(&self, i: usize) -> BlockHash {
        if i == 0 {
            NONE_HASH
        } else {
            self.hashes[i - 1]
        }
    }
}

/// Hashes of every full block of `tokens`.
pub fn chain_hashes(tokens: &[Token], block_size: u32) -> Vec<BlockHash> {
    let b = block_size as usize;
    let mut out = Vec::with_capacity(tokens.len() / b);
    let mut parent = NONE_HASH;
    for chunk in tokens.chunks_exact(b) {
        parent = BlockHash(fold_tokens(parent, chunk));
        out.push(parent);
    }
    out
}

/// What the registry knows about a block hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub parent: BlockHash,
    /// "A.1": block 1 of the first request (in workload order) that has this prefix.
    pub label: String,
    pub index: u32,
}

/// All requests of one engine's workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub block_size: u32,
    pub requests: Vec<RequestSpec>,
    registry: BTreeMap<BlockHash, BlockInfo>,
}

impl Workload {
    pub fn new(block_size: u32, requests: Vec<RequestSpec>) -> Self {
        let mut registry = BTreeMap::new();
        for r in &requests {
            for (i, h) in r.hashes.iter().enumerate() {
                registry.entry(*h).or_insert_with(|| BlockInfo {
                    parent: r.parent(i),
                    label: format!("{}.{}", r.name, i),
                    index: i as u32,
                });
            }
        }
        Workload { block_size, requests, registry }
    }

    pub fn info(&self, h: BlockHash) -> Option<&BlockInfo> {
        self.registry.get(&h)
    }

    /// A readable name for a block hash ("A.1"), or its hex digest if unknown.
    pub fn label(&self, h: BlockHash) -> String {
        self.registry.get(&h).map_or_else(|| format!("{h:?}"), |i| i.label.clone())
    }

    /// The hashes of the `n` blocks that end with block `last` (oldest first), if the
    /// registry knows the chain.
    pub fn chain_ending_at(&self, last: BlockHash, n: u32) -> Option<Vec<BlockHash>> {
        let mut out = vec![last];
        let mut cur = last;
        for _ in 1..n {
            cur = self.registry.get(&cur)?.parent;
            out.push(cur);
        }
        out.reverse();
        Some(out)
    }
}
