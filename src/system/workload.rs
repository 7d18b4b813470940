//! The workload: every request's tokens, known up front (prompt and the tokens the model
//! will sample), and a registry of every block hash they can produce, for labels and for
//! checking a host key against the content stored under it.
//!
//! Trace replay uses a *lazy* workload instead: one spec per request slot, filled when a
//! request arrives and replaced when the slot carries the next one, and no registry (labels
//! fall back to hex digests; chains of more than one block come from a parent map).

use super::types::{extend_hash, finish_hash, fold_tokens, BlockHash, ContentTag, Token, NONE_HASH};
use std::collections::{BTreeMap, HashMap};

pub use super::layouts::{stop_outputs, LaterInput, Layout, Offered, NUM_LAYOUTS, STALE_TOKEN};

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
    /// Which input of a streaming session this spec describes (0 for plain requests).
    pub turn: u8,
    /// Router replay: `sampling_params.routed_experts_prompt_start` (s, 0..=prompt_len).
    pub rows_start: u32,
    /// A session's later input: the keys vLLM 0.24 gives its full blocks, when they differ from
    /// `hashes` (its `_update_request_as_session` keeps the previous input's block hashes, so
    /// the block of the dropped sampled token keeps a key over that token; empty otherwise).
    pub unrehashed: Vec<BlockHash>,
    /// The hashes of the tokens the full blocks hold, when `hashes` are keys that name other
    /// tokens ([`Workload::unrehash_sessions`]; empty: the keys are the content).
    pub content: Vec<BlockHash>,
    /// Prompt tokens vLLM counts (`num_prompt_tokens`) that the request no longer holds: a
    /// session's input laid out by [`Layout::Lost`] (0 otherwise).
    pub lost: u32,
    /// vLLM 0.24: how many leading keys of [`Self::unrehashed`] the input had before it took a
    /// token (its previous input's block hashes, never truncated: more than the input holds
    /// after [`Layout::Lost`]).
    pub inherited: u32,
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
        let mut spec = Self::unhashed(name, prompt, output, max_tokens, eos_at);
        spec.hashes = chain_hashes(&spec.tokens, block_size);
        spec
    }

    /// Several [`new`](Self::new) requests at once (trace replay): their hash chains are
    /// computed together ([`chain_hashes_many`]), with the same results.
    pub fn new_many(reqs: Vec<(String, Vec<Token>, Vec<Token>, EndKind)>, block_size: u32) -> Vec<Self> {
        let mut specs: Vec<Self> = reqs
            .into_iter()
            .map(|(name, prompt, output, end)| {
                let n = output.len() as u32;
                let eos_at = (end == EndKind::Stop && n > 0).then(|| n - 1);
                Self::unhashed(&name, prompt, output, n, eos_at)
            })
            .collect();
        let seqs: Vec<&[Token]> = specs.iter().map(|s| s.tokens.as_slice()).collect();
        let hashes = chain_hashes_many(&seqs, block_size);
        for (s, h) in specs.iter_mut().zip(hashes) {
            s.hashes = h;
        }
        specs
    }

    /// Everything but the hashes.
    fn unhashed(name: &str, prompt: Vec<Token>, output: Vec<Token>, max_tokens: u32, eos_at: Option<u32>) -> Self {
        let prompt_len = prompt.len() as u32;
        let mut tokens = prompt;
        let known = output.len() as u32;
        tokens.extend(output);
        tokens.extend((known..max_tokens).map(|i| u32::MAX - i));
        let hashes = Vec::new();
        RequestSpec {
            name: name.to_string(),
            tokens,
            prompt_len,
            max_tokens,
            eos_at,
            hashes,
            turn: 0,
            rows_start: 0,
            unrehashed: Vec::new(),
            content: Vec::new(),
            lost: 0,
            inherited: 0,
        }
    }

    /// `num_prompt_tokens`: the prompt vLLM counts, its held prompt plus [`Self::lost`].
    pub fn num_prompt_tokens(&self) -> u32 {
        self.prompt_len + self.lost
    }

    /// Parent hash of block `i` (`NONE_HASH` for block 0).
    pub fn parent(&self, i: usize) -> BlockHash {
        if i == 0 {
            NONE_HASH
        } else {
            self.hashes[i - 1]
        }
    }

    /// The hashes of the tokens its full blocks hold (its keys unless [`Self::content`] is set).
    pub fn content_hashes(&self) -> &[BlockHash] {
        if self.content.is_empty() {
            &self.hashes
        } else {
            &self.content
        }
    }

    /// The content hash block `i` chains from (`NONE_HASH` for block 0).
    pub fn content_parent(&self, i: usize) -> BlockHash {
        if i == 0 {
            NONE_HASH
        } else {
            self.content_hashes()[i - 1]
        }
    }
}

/// How many block hashes vLLM 0.24's session has when it takes the input after `prev`, which
/// sampled `prev_output` tokens: every full block it ever held (its hashes are never truncated).
pub fn inherited_keys(prev: &RequestSpec, prev_output: u32, block_size: u32) -> u32 {
    let prev_keys = if prev.unrehashed.is_empty() { &prev.hashes } else { &prev.unrehashed };
    ((prev.prompt_len + prev_output) / block_size).max(prev.inherited).min(prev_keys.len() as u32)
}

/// vLLM 0.24's keys for the full blocks of `spec`, a session's input that follows `prev` after
/// `prev` sampled `prev_output` tokens (`_update_request_as_session` without the truncation):
/// `prev`'s block hashes over its tokens up to the dropped sampled one stay (all of them, even
/// past what the input holds), the new blocks chain from them. Empty when they are
/// `spec.hashes` (the dropped token did not complete a block).
pub fn unrehashed_keys(prev: &RequestSpec, prev_output: u32, spec: &RequestSpec, block_size: u32) -> Vec<BlockHash> {
    let prev_keys = if prev.unrehashed.is_empty() { &prev.hashes } else { &prev.unrehashed };
    let kept = inherited_keys(prev, prev_output, block_size) as usize;
    let mut keys = prev_keys[..kept].to_vec();
    let parent = keys.last().copied().unwrap_or(NONE_HASH);
    extend_chain(&mut keys, parent, spec.tokens.get(kept * block_size as usize..).unwrap_or(&[]), block_size);
    if keys == spec.hashes {
        Vec::new()
    } else {
        keys
    }
}

/// Hashes of every full block of `tokens`.
pub fn chain_hashes(tokens: &[Token], block_size: u32) -> Vec<BlockHash> {
    let mut out = Vec::with_capacity(tokens.len() / block_size as usize);
    extend_chain(&mut out, NONE_HASH, tokens, block_size);
    out
}

/// Append to `out` the hashes of the full blocks of `tokens`, chained from `parent`.
fn extend_chain(out: &mut Vec<BlockHash>, mut parent: BlockHash, tokens: &[Token], block_size: u32) {
    for chunk in tokens.chunks_exact(block_size as usize) {
        parent = BlockHash(fold_tokens(parent, chunk));
        out.push(parent);
    }
}

/// [`chain_hashes`] of several sequences, with the same results. One chain is bound by the
/// latency of its multiplications, so the chains advance together, token by token across the
/// sequences still running, and the CPU overlaps their independent work.
pub fn chain_hashes_many(seqs: &[&[Token]], block_size: u32) -> Vec<Vec<BlockHash>> {
    const LANES: usize = 4;
    let b = block_size as usize;
    let idle: Vec<Token> = vec![0; b];
    let mut out: Vec<Vec<BlockHash>> = seqs.iter().map(|t| Vec::with_capacity(t.len() / b)).collect();
    // Longest first, so that the lanes run out of work together (an idle lane hashes
    // throwaway tokens alongside the others).
    let mut order: Vec<usize> = (0..seqs.len()).filter(|&l| seqs[l].len() >= b).collect();
    order.sort_by_key(|&l| std::cmp::Reverse(seqs[l].len() / b));
    let mut next = order.into_iter().peekable();
    // Per lane: the sequence it hashes (None: idle, hashing throwaway tokens), its running
    // hash and its next block. A lane that finishes takes the next sequence.
    let mut lane: [Option<usize>; LANES] = std::array::from_fn(|_| next.next());
    let mut h = [NONE_HASH.0; LANES];
    let mut pos = [0usize; LANES];
    while lane.iter().any(Option::is_some) {
        if next.peek().is_none() && lane.iter().flatten().count() == 1 {
            // One chain left: the others would only hash throwaway tokens beside it.
            let j = lane.iter().position(Option::is_some).expect("a lane");
            let l = lane[j].take().expect("running");
            extend_chain(&mut out[l], BlockHash(h[j]), &seqs[l][pos[j] * b..], block_size);
            break;
        }
        let run = (0..LANES).map(|j| lane[j].map_or(usize::MAX, |l| seqs[l].len() / b - pos[j])).min();
        for _ in 0..run.expect("lanes") {
            let src: [&[Token]; LANES] = std::array::from_fn(|j| match lane[j] {
                Some(l) => &seqs[l][pos[j] * b..(pos[j] + 1) * b],
                None => &idle,
            });
            // The four lanes side by side, zipped (every source is `b` tokens long), so that
            // no token read needs a bounds check.
            let [s0, s1, s2, s3] = src;
            for (((&t0, &t1), &t2), &t3) in s0.iter().zip(s1).zip(s2).zip(s3) {
                h[0] = extend_hash(h[0], t0);
                h[1] = extend_hash(h[1], t1);
                h[2] = extend_hash(h[2], t2);
                h[3] = extend_hash(h[3], t3);
            }
            for j in 0..LANES {
                if let Some(l) = lane[j] {
                    h[j] = finish_hash(h[j]);
                    out[l].push(BlockHash(h[j]));
                    pos[j] += 1;
                }
            }
        }
        for j in 0..LANES {
            if lane[j].is_some_and(|l| pos[j] == seqs[l].len() / b) {
                lane[j] = next.next();
                h[j] = NONE_HASH.0;
                pos[j] = 0;
            }
        }
    }
    out
}

/// What the registry knows about a block hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    pub(crate) parent: BlockHash,
    /// "A.1": block 1 of the first request (in workload order) that has this prefix.
    pub(crate) label: String,
    pub(crate) index: u32,
}

/// One further input chunk of a streaming-input session (`StreamingUpdate`).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TurnInput {
    /// The new prompt tokens.
    pub(crate) input: Vec<Token>,
    /// The tokens the model samples in this turn.
    pub(crate) output: Vec<Token>,
    pub(crate) end: EndKind,
}

/// The spec of the next turn of a session whose current turn is `prev` and which sampled
/// `prev_output` tokens in it (`Scheduler._update_request_as_session`): every token but
/// the last sampled one stays, the kept outputs join the prompt, the new input follows.
pub fn next_turn_spec(
    prev: &RequestSpec,
    prev_output: u32,
    t: &TurnInput,
    turn: usize,
    block_size: u32,
) -> RequestSpec {
    let keep = (prev.prompt_len + prev_output).saturating_sub(1) as usize;
    let mut prompt = prev.tokens[..keep].to_vec();
    prompt.extend_from_slice(&t.input);
    let mut spec = RequestSpec::new(&prev.name, prompt, t.output.clone(), t.end, block_size);
    spec.turn = turn as u8;
    spec.unrehashed = unrehashed_keys(prev, prev_output, &spec, block_size);
    spec
}

/// All requests of one engine's workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub block_size: u32,
    /// Every request's first turn (its only one unless it is a streaming session).
    pub requests: Vec<RequestSpec>,
    /// Streaming-input sessions: the specs of turns 1, 2, ... (empty for plain requests).
    pub turns: Vec<Vec<RequestSpec>>,
    registry: BTreeMap<BlockHash, BlockInfo>,
    /// Lazy workloads with multi-block chunks: the parent of every block hash seen.
    parents: Option<HashMap<BlockHash, BlockHash>>,
    /// Sessions whose next input's layout the run decides ([`Workload::with_layouts`]):
    /// per spec index (0 = the first input, `i` = `turns[r][i - 1]`), the spec index that
    /// follows it under each [`Layout`]. Empty: the specs form one chain, index = input.
    pub(super) layouts: Vec<Vec<[u8; NUM_LAYOUTS]>>,
}

impl Workload {
    pub fn new(block_size: u32, requests: Vec<RequestSpec>) -> Self {
        let turns = vec![Vec::new(); requests.len()];
        Self::with_sessions(block_size, requests, turns)
    }

    /// A workload in which request `i` is a streaming-input session when `turns[i]` is not
    /// empty (the specs of its later turns, see [`next_turn_spec`]).
    pub fn with_sessions(block_size: u32, requests: Vec<RequestSpec>, turns: Vec<Vec<RequestSpec>>) -> Self {
        assert_eq!(requests.len(), turns.len());
        let mut registry = BTreeMap::new();
        // Each request's turns right after it: a block gets the label of the first input
        // (in that order) whose keys produce it. Keys of every input first, then (0.24's
        // unrehashed sessions) the content their blocks hold: a hash that is only content for
        // one input but a key of another is named after the key, as the recorder names it.
        // A session's chain of inputs (turns 1, 2, ... in order) comes before the other layouts
        // of its inputs (`with_layouts`), which a conformance run never takes: a key of
        // a layout that did not happen must not name a block that a later request's key
        // names in the run.
        let chain = |ts: &[RequestSpec]| ts.iter().enumerate().take_while(|(i, t)| t.turn as usize == i + 1).count();
        let primary =
            || requests.iter().zip(&turns).flat_map(move |(r, ts)| std::iter::once(r).chain(&ts[..chain(ts)]));
        let others = || turns.iter().flat_map(move |ts| &ts[chain(ts)..]);
        let inputs = || primary().chain(others());
        let keys = inputs().flat_map(|r| r.hashes.iter().enumerate().map(move |(i, h)| (r, i, *h, r.parent(i))));
        let content =
            inputs().flat_map(|r| r.content.iter().enumerate().map(move |(i, h)| (r, i, *h, r.content_parent(i))));
        for (r, i, h, parent) in keys.chain(content) {
            registry.entry(h).or_insert_with(|| BlockInfo {
                parent,
                label: if r.turn == 0 {
                    format!("{}.{}", r.name, i)
                } else {
                    format!("{}@{}.{}", r.name, r.turn + 1, i)
                },
                index: i as u32,
            });
        }
        Workload { block_size, requests, turns, registry, parents: None, layouts: Vec::new() }
    }

    /// vLLM 0.24 (`session_rehash = false`): every later input of a session keys its blocks by
    /// [`RequestSpec::unrehashed`]; what the blocks hold stays in [`RequestSpec::content`], so
    /// the ghost checks see KV stored or read under a key that names other tokens.
    pub fn unrehash_sessions(&self) -> Self {
        let mut turns = self.turns.clone();
        for spec in turns.iter_mut().flatten().filter(|s| !s.unrehashed.is_empty()) {
            spec.content = std::mem::replace(&mut spec.hashes, std::mem::take(&mut spec.unrehashed));
        }
        let mut wl = Self::with_sessions(self.block_size, self.requests.clone(), turns);
        wl.layouts = self.layouts.clone();
        wl
    }

    /// A lazy workload (trace replay): no slots yet, no registry. With `track_parents` every
    /// spec's parent links are kept, so that chains of several blocks can be named.
    pub fn lazy(block_size: u32, track_parents: bool) -> Self {
        Workload {
            block_size,
            requests: Vec::new(),
            turns: Vec::new(),
            registry: BTreeMap::new(),
            parents: track_parents.then(HashMap::new),
            layouts: Vec::new(),
        }
    }

    /// Lazy workloads: a new, empty request slot.
    pub fn push_slot(&mut self) -> u16 {
        let empty = RequestSpec {
            name: String::new(),
            tokens: Vec::new(),
            prompt_len: 0,
            max_tokens: 0,
            eos_at: None,
            hashes: Vec::new(),
            turn: 0,
            rows_start: 0,
            unrehashed: Vec::new(),
            content: Vec::new(),
            lost: 0,
            inherited: 0,
        };
        self.requests.push(empty);
        self.turns.push(Vec::new());
        (self.requests.len() - 1) as u16
    }

    /// Lazy workloads: slot `r` now carries `spec` (a plain request).
    pub fn set_spec(&mut self, r: u16, spec: RequestSpec) {
        if let Some(p) = self.parents.as_mut() {
            for i in 1..spec.hashes.len() {
                p.insert(spec.hashes[i], spec.hashes[i - 1]);
            }
        }
        self.requests[r as usize] = spec;
    }

    /// Name the blocks of a token sequence no request produces (a prefix another instance put
    /// into the Mooncake pool): block i is labelled "NAME.i" unless a request already names it.
    pub fn register_extra(&mut self, name: &str, tokens: &[Token]) -> Vec<BlockHash> {
        let hashes = chain_hashes(tokens, self.block_size);
        for (i, h) in hashes.iter().enumerate() {
            let parent = if i == 0 { NONE_HASH } else { hashes[i - 1] };
            self.registry.entry(*h).or_insert_with(|| BlockInfo {
                parent,
                label: format!("{name}.{i}"),
                index: i as u32,
            });
        }
        hashes
    }

    /// [`register_extra`](Self::register_extra) whose labels (`name.i`) also replace those of
    /// the requests that produce the same blocks, but not those `keep` lists (a conformance
    /// log names every block of a Mooncake preload after its sequence).
    pub fn register_extra_named(&mut self, name: &str, tokens: &[Token], keep: &[BlockHash]) -> Vec<BlockHash> {
        let hashes = self.register_extra(name, tokens);
        for (i, h) in hashes.iter().enumerate() {
            if !keep.contains(h) {
                if let Some(info) = self.registry.get_mut(h) {
                    info.label = format!("{name}.{i}");
                }
            }
        }
        hashes
    }

    /// Request `r`'s name, or "-" for [`NO_REQ`](crate::system::types::NO_REQ) (a SimpleCPU
    /// lazy-mode store, which belongs to no request; the recorder writes "-" too).
    pub fn req_name(&self, r: u16) -> &str {
        if r == crate::system::types::NO_REQ {
            return "-";
        }
        &self.requests[r as usize].name
    }

    /// The spec of request `r` in turn `turn` (0 = its first input).
    pub fn spec(&self, r: u16, turn: u8) -> &RequestSpec {
        if turn == 0 {
            &self.requests[r as usize]
        } else {
            &self.turns[r as usize][turn as usize - 1]
        }
    }

    /// How many inputs request `r` has (1 unless it is a streaming session).
    pub fn num_turns(&self, r: u16) -> u8 {
        match self.layouts.get(r as usize) {
            Some(t) if !t.is_empty() => 1 + self.turns[r as usize].iter().map(|s| s.turn).max().unwrap_or(0),
            _ => 1 + self.turns[r as usize].len() as u8,
        }
    }

    /// Some session's layouts are the run's ([`Workload::with_layouts`]).
    pub fn has_layouts(&self) -> bool {
        self.layouts.iter().any(|t| !t.is_empty())
    }

    /// The input number (0 = the first) of request `r`'s spec `ix`.
    pub fn input_no(&self, r: u16, ix: u8) -> u8 {
        if self.layouts.get(r as usize).is_none_or(|t| t.is_empty()) {
            ix
        } else {
            self.spec(r, ix).turn
        }
    }

    /// The spec index of request `r`'s next input after spec `ix`, laid out by `layout`.
    pub fn next_spec(&self, r: u16, ix: u8, layout: Layout) -> u8 {
        match self.layouts.get(r as usize) {
            Some(t) if !t.is_empty() => {
                let next = t[ix as usize][layout as usize];
                assert!(next != u8::MAX, "a session's next input after its last");
                next
            }
            _ => {
                assert_eq!(layout, Layout::Dropped, "model gap: a run-decided session layout without its specs");
                ix + 1
            }
        }
    }

    /// The specs of the chain of request `r`'s inputs (the first, then `turns[r]` up to the
    /// last input; variants the run may take instead come after them in `turns[r]`).
    pub fn chain(&self, r: u16) -> &[RequestSpec] {
        &self.turns[r as usize][..self.num_turns(r) as usize - 1]
    }

    /// Request `r` is a streaming-input session (`resumable`).
    pub fn is_session(&self, r: u16) -> bool {
        !self.turns[r as usize].is_empty()
    }

    pub fn info(&self, h: BlockHash) -> Option<&BlockInfo> {
        self.registry.get(&h)
    }

    /// A readable name for a block hash ("A.1"), or its hex digest if unknown.
    /// The block hashes a label names (the inverse of [`Workload::label`]; a label can name
    /// several, e.g. a 0.24 session block keyed by its unrehashed hash).
    pub fn keys_by_label<'a>(&'a self, label: &'a str) -> impl Iterator<Item = BlockHash> + 'a {
        self.registry.iter().filter(move |(_, i)| i.label == label).map(|(h, _)| *h)
    }

    pub fn label(&self, h: BlockHash) -> String {
        self.registry.get(&h).map_or_else(|| format!("{h:?}"), |i| i.label.clone())
    }

    /// A content tag in workload terms: "A.1" for a full block, "A.1[:1]" for a partial one.
    pub fn describe(&self, t: ContentTag) -> String {
        let b = self.block_size as usize;
        match t {
            ContentTag::Empty => "none".to_string(),
            ContentTag::Bad(k) => format!("BAD({k:?})"),
            ContentTag::Kv { hash, len } if len as usize == b => self.label(BlockHash(hash)),
            ContentTag::Kv { hash, len } => {
                for r in self.requests.iter().chain(self.turns.iter().flatten()) {
                    for i in 0..r.tokens.len() / b + 1 {
                        let (from, to) = (i * b, i * b + len as usize);
                        if to <= r.tokens.len() && fold_tokens(r.parent(i), &r.tokens[from..to]) == hash {
                            let who = if r.turn == 0 { r.name.clone() } else { format!("{}@{}", r.name, r.turn + 1) };
                            return format!("{who}.{i}[:{len}]");
                        }
                    }
                }
                format!("partial({len})")
            }
        }
    }

    /// The hashes of the `n` blocks that end with block `last` (oldest first), if the
    /// registry knows the chain.
    pub fn chain_ending_at(&self, last: BlockHash, n: u32) -> Option<Vec<BlockHash>> {
        let mut out: Vec<BlockHash> = self.chain_back(last, n).collect();
        if out.len() < n as usize {
            return None;
        }
        out.reverse();
        Some(out)
    }

    /// The same chain newest first, without allocating: `last`, its parent, ... (`n` at most;
    /// fewer when the registry does not know a parent).
    pub fn chain_back(&self, last: BlockHash, n: u32) -> impl Iterator<Item = BlockHash> + '_ {
        // Lazily: a parent is looked up only when it is wanted (`iter::successors` computes
        // each successor as it yields an item, so a one-block chain cost a lookup it never
        // used, three per stored key in trace replay).
        let (mut next, mut left) = (Some(last), n);
        std::iter::from_fn(move || {
            let h = next.filter(|_| left > 0)?;
            left -= 1;
            next = if left == 0 { None } else { self.parent_of(h) };
            Some(h)
        })
    }

    /// The parent of a known block hash (the registry's, or replay's parent map).
    fn parent_of(&self, h: BlockHash) -> Option<BlockHash> {
        match self.registry.get(&h) {
            Some(i) => Some(i.parent),
            None => self.parents.as_ref()?.get(&h).copied(),
        }
    }
}
