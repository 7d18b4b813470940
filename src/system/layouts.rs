//! The layouts of a streaming session's inputs that the run decides (vLLM 0.24 under async
//! scheduling, rule `session_stop_drops_in_flight` false; vLLM 0.24 and 0.32 under async
//! scheduling, rule `session_keeps_computed_only`): how many sampled tokens the next input
//! keeps and whether the stopped turn's in-flight output is its first token, or whether the
//! input keeps nothing at all (`Scheduler._update_request_as_session` keeping
//! `_all_token_ids[:num_computed_tokens]`). A session gets a spec for every sequence of layouts
//! of its inputs; the request's spec index follows the one its run takes ([`Workload::next_spec`]).

use super::types::Token;
use super::workload::{inherited_keys, unrehashed_keys, RequestSpec, Workload};

/// How a streaming session's next input is laid out over the previous one
/// (`_update_request_as_session`), which the run decides when a stopped turn's in-flight
/// output is not dropped (vLLM 0.24 under async scheduling, rule `session_stop_drops_in_flight`).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Layout {
    /// Every sampled token but the last is kept (no output was in flight, or it was dropped).
    Dropped = 0,
    /// Every sampled token is kept; the in-flight output was appended to the parked turn
    /// before the input came, and the input cut it off again.
    Kept = 1,
    /// Every sampled token is kept, and the in-flight output, still to come, is the new
    /// input's first output token.
    KeptStale = 2,
    /// Nothing is kept: the session was preempted (`num_computed_tokens` 0) while the output
    /// that ended its input was in flight, so it holds the new input alone, while its
    /// `prompt_token_ids` (and `num_prompt_tokens`) still count the whole previous prompt
    /// (0.24 and 0.32, rule `session_keeps_computed_only`; finding 34).
    Lost = 3,
}

/// How many layouts there are (the width of a session's table of next specs).
pub const NUM_LAYOUTS: usize = 4;

/// Which layouts besides [`Layout::Dropped`] the run may take.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub struct Offered {
    /// [`Layout::Kept`] and [`Layout::KeptStale`] (a stopped turn's in-flight output stays).
    pub stale: bool,
    /// [`Layout::Lost`].
    pub lost: bool,
}

impl Offered {
    /// The layouts offered, [`Layout::Dropped`] first.
    fn layouts(self) -> impl Iterator<Item = Layout> {
        [Layout::Dropped, Layout::Kept, Layout::KeptStale, Layout::Lost].into_iter().filter(move |l| match l {
            Layout::Dropped => true,
            Layout::Kept | Layout::KeptStale => self.stale,
            Layout::Lost => self.lost,
        })
    }

    /// The most inputs (the first included) a session may have when the checker explores
    /// every sequence of these layouts ([`Workload::with_layouts`]): its specs, a full tree
    /// with one child per layout, are indexed by a byte.
    pub fn max_inputs(self) -> usize {
        let k = self.layouts().count();
        let (mut total, mut level, mut n) = (0usize, 1usize, 0usize);
        while total + level <= u8::MAX as usize {
            total += level;
            level *= k;
            n += 1;
        }
        n
    }
}

/// One later input of a streaming session, for [`Workload::with_layouts`]: its new
/// tokens, the tokens it samples itself (after the in-flight output it may take first), and
/// its stop (`max_tokens`, and the EOS index in `outputs`).
#[derive(Clone, Debug)]
pub struct LaterInput {
    pub input: Vec<Token>,
    pub outputs: Vec<Token>,
    pub max_tokens: u32,
    pub eos_at: Option<u32>,
    /// The layout over the previous input of the spec at this input's chain index.
    pub layout: Layout,
    /// The in-flight output token it takes first under [`Layout::KeptStale`].
    pub stale: Token,
}

/// The synthetic token a stopped turn's in-flight step samples (minus the input number),
/// where no log names it; far from the tokens scopes write and the placeholders of
/// [`RequestSpec::with_limits`].
pub const STALE_TOKEN: Token = 0xFFF0_0000;

/// `spec`, with a token after its last sampled one (the output a step in flight at its stop
/// samples), so that 0.24's block hashes over that token exist.
fn with_stale_room(spec: &RequestSpec, block_size: u32, max_model_len: u32) -> RequestSpec {
    let o = stop_outputs(spec, max_model_len);
    if spec.tokens.len() as u32 > spec.prompt_len + o {
        return spec.clone();
    }
    let p = spec.prompt_len as usize;
    let mut outputs = spec.tokens[p..].to_vec();
    outputs.push(STALE_TOKEN + 0x1000 - u32::from(spec.turn));
    let mut out = RequestSpec::with_limits(
        &spec.name,
        spec.tokens[..p].to_vec(),
        outputs,
        spec.max_tokens,
        spec.eos_at,
        block_size,
    );
    out.turn = spec.turn;
    out.rows_start = spec.rows_start;
    out.unrehashed = spec.unrehashed.clone();
    out
}

/// How many outputs `spec` samples before it stops (`check_stop`: EOS, `max_tokens`, or
/// `max_model_len`).
pub fn stop_outputs(spec: &RequestSpec, max_model_len: u32) -> u32 {
    let n = spec.eos_at.map_or(spec.max_tokens, |e| (e + 1).min(spec.max_tokens));
    n.min(max_model_len.saturating_sub(spec.prompt_len))
}

/// The spec of the input `inp` after spec `prev` laid out by `layout`
/// (`_update_request_as_session` keeping `prev`'s tokens up to `num_computed_tokens`, and
/// extending `prompt_token_ids` by those past `num_prompt_tokens`). `stale`: room for an
/// in-flight output past the stop (0.24).
fn layout_spec(prev: &RequestSpec, inp: &LaterInput, layout: Layout, b: u32, mml: u32, stale: bool) -> RequestSpec {
    let o = stop_outputs(prev, mml);
    let held = match layout {
        Layout::Lost => 0,
        Layout::Dropped => prev.prompt_len + o.saturating_sub(1),
        Layout::Kept | Layout::KeptStale => prev.prompt_len + o,
    };
    let mut prompt = prev.tokens[..held as usize].to_vec();
    prompt.extend_from_slice(&inp.input);
    let (mut outputs, mut eos_at) = (inp.outputs.clone(), inp.eos_at);
    if layout == Layout::KeptStale {
        outputs.insert(0, inp.stale);
        eos_at = eos_at.map(|e| e + 1);
    }
    let mut spec = RequestSpec::with_limits(&prev.name, prompt, outputs, inp.max_tokens, eos_at, b);
    spec.turn = prev.turn + 1;
    let mut spec = if stale { with_stale_room(&spec, b, mml) } else { spec };
    spec.rows_start = prev.rows_start;
    // The counted prompt keeps every previous prompt token, held or not.
    spec.lost = prev.num_prompt_tokens().saturating_sub(held);
    // 0.24's block hashes cover every token the session ever held: under `Kept` the in-flight
    // output appended to the parked turn too.
    let ever = if layout == Layout::Kept { o + 1 } else { o };
    spec.unrehashed = unrehashed_keys(prev, ever, &spec, b);
    spec.inherited = inherited_keys(prev, ever, b);
    spec
}

impl Workload {
    /// Sessions whose layouts the run decides: every session `r` with `later[r]` not empty
    /// gets, besides the chain of `later[r]`'s layouts (spec indices 0 to its number of
    /// inputs - 1, as before), a spec for every other sequence of the `offered` layouts
    /// ([`Layout`]), appended to `turns[r]` (`full`, at most [`Offered::max_inputs`] inputs:
    /// what the checker explores), or only for each other layout one input off the chain (a
    /// conformance log: the model must follow the log's chain, and a step off it is a
    /// divergence). An input under [`Layout::KeptStale`] samples its `stale` token first.
    /// `max_model_len` caps what an input samples.
    pub fn with_layouts(&self, later: &[Vec<LaterInput>], max_model_len: u32, full: bool, offered: Offered) -> Self {
        let b = self.block_size;
        let stale = offered.stale;
        let room = |s: &RequestSpec| if stale { with_stale_room(s, b, max_model_len) } else { s.clone() };
        let mut turns: Vec<Vec<RequestSpec>> = Vec::with_capacity(self.requests.len());
        let mut layouts: Vec<Vec<[u8; NUM_LAYOUTS]>> = Vec::with_capacity(self.requests.len());
        for (r, first) in self.requests.iter().enumerate() {
            let inputs = later.get(r).map_or(&[][..], |v| v.as_slice());
            if inputs.is_empty() {
                turns.push(self.turns[r].clone());
                layouts.push(Vec::new());
                continue;
            }
            // Every spec: (spec, its index's children); the chain first.
            let mut specs: Vec<RequestSpec> = vec![room(first)];
            let mut next: Vec<[u8; NUM_LAYOUTS]> = vec![[u8::MAX; NUM_LAYOUTS]];
            let mut chain = 0usize;
            for inp in inputs {
                let child = layout_spec(&specs[chain], inp, inp.layout, b, max_model_len, stale);
                specs.push(child);
                next.push([u8::MAX; NUM_LAYOUTS]);
                next[chain][inp.layout as usize] = (specs.len() - 1) as u8;
                chain = specs.len() - 1;
            }
            // Then every other layout, breadth first, from every spec but the last input's.
            let mut i = 0;
            while i < specs.len() {
                let depth = specs[i].turn as usize;
                let on_chain = i <= inputs.len();
                if depth < inputs.len() && (full || on_chain) {
                    for l in offered.layouts() {
                        if next[i][l as usize] == u8::MAX {
                            assert!(specs.len() < u8::MAX as usize, "too many session layouts");
                            let child = layout_spec(&specs[i], &inputs[depth], l, b, max_model_len, stale);
                            specs.push(child);
                            next.push([u8::MAX; NUM_LAYOUTS]);
                            next[i][l as usize] = (specs.len() - 1) as u8;
                        }
                    }
                }
                i += 1;
            }
            specs.remove(0);
            turns.push(specs);
            layouts.push(next);
        }
        let requests = self.requests.iter().enumerate().map(|(r, q)| match later.get(r) {
            Some(v) if !v.is_empty() => room(q),
            _ => q.clone(),
        });
        let mut wl = Self::with_sessions(b, requests.collect(), turns);
        wl.layouts = layouts;
        wl
    }

    /// The later inputs of every session, read off its chain of specs laid out by
    /// [`Layout::Dropped`] (what a scope or a generated workload builds): for
    /// [`Workload::with_layouts`], with synthetic in-flight output tokens.
    pub fn later_inputs(&self, max_model_len: u32) -> Vec<Vec<LaterInput>> {
        (0..self.requests.len() as u16)
            .map(|r| {
                let mut prev = &self.requests[r as usize];
                let mut out = Vec::new();
                for spec in self.chain(r) {
                    let kept = (prev.prompt_len + stop_outputs(prev, max_model_len)).saturating_sub(1) as usize;
                    let p = spec.prompt_len as usize;
                    let o = stop_outputs(spec, max_model_len) as usize;
                    out.push(LaterInput {
                        input: spec.tokens[kept.min(p)..p].to_vec(),
                        outputs: spec.tokens[p..(p + o).min(spec.tokens.len())].to_vec(),
                        max_tokens: spec.max_tokens,
                        eos_at: spec.eos_at,
                        layout: Layout::Dropped,
                        stale: STALE_TOKEN - u32::from(spec.turn),
                    });
                    prev = spec;
                }
                out
            })
            .collect()
    }

    /// vLLM 0.24 (rule `session_max_tokens` false): `_update_request_as_session` leaves
    /// `max_tokens` alone, so every later input of a session stops at its first input's
    /// `max_tokens` (or an earlier EOS), whatever the input says. The chain of specs rebuilt
    /// that way: outputs cut to that count, or run past their scripted tokens (the placeholder
    /// tokens of [`RequestSpec::with_limits`]), and each next input kept over the output its
    /// previous one really had. `None`: nothing changes (every input already has the
    /// first's `max_tokens`, as in a conformance log's scope, or the run decides the layouts);
    /// an input that then grows the session past `max_model_len` is kept as vLLM takes it (it
    /// checks each input by its own length; finding 37: the scheduler's running cap goes
    /// negative, rule `running_cap_clamped`).
    pub fn with_first_max_tokens(&self, max_model_len: u32) -> Option<Workload> {
        let n = self.requests.len() as u16;
        let differs =
            (0..n).any(|r| self.chain(r).iter().any(|s| s.max_tokens != self.requests[r as usize].max_tokens));
        if !differs || self.has_layouts() {
            return None;
        }
        let b = self.block_size;
        let later = self.later_inputs(max_model_len);
        let mut turns = Vec::with_capacity(later.len());
        for (r, inputs) in later.iter().enumerate() {
            let first = &self.requests[r];
            let m = first.max_tokens;
            let mut prev = first.clone();
            let mut specs = Vec::with_capacity(inputs.len());
            for (i, inp) in inputs.iter().enumerate() {
                let o = stop_outputs(&prev, max_model_len);
                let mut prompt = prev.tokens[..(prev.prompt_len + o).saturating_sub(1) as usize].to_vec();
                prompt.extend_from_slice(&inp.input);
                let mut out = inp.outputs.clone();
                out.truncate(m as usize);
                let mut spec = RequestSpec::with_limits(&first.name, prompt, out, m, inp.eos_at.filter(|&e| e < m), b);
                spec.turn = (i + 1) as u8;
                spec.rows_start = self.turns[r][i].rows_start;
                spec.unrehashed = unrehashed_keys(&prev, o, &spec, b);
                specs.push(spec.clone());
                prev = spec;
            }
            turns.push(specs);
        }
        Some(Self::with_sessions(b, self.requests.clone(), turns))
    }
}
