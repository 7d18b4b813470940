//! Request traces: Mooncake JSON Lines (`timestamp` ms, `input_length`, `output_length`,
//! `hash_ids` of trace blocks), its session form (`session_id`, `delay`), and the token
//! synthesis that turns a row into an engine request (docs/replay.md).
//!
//! Two dialects (aisimulate's names):
//! - `mooncake`: every row carries its whole prompt; `hash_ids` cover it.
//! - `mooncake-delta`: rows that share a `session_id` are the turns of one conversation, and a
//!   later turn's row carries only its new input. Its prompt is the previous turn's prompt,
//!   that turn's answer (its `output_length` generated tokens) and the new input.
//!
//! Token synthesis (what aisimulate and Dynamo replay do): trace block `k` of a row
//! contributes its (interned) id, repeated `trace_block_size` times, cut at `input_length`;
//! the engine then hashes those tokens at its own block size. A generated token is a function
//! of the row and the position, so a session's next turn sees exactly the answer its previous
//! turn generated.
//!
//! The whole file is read and checked before anything runs: a bad row is an input error
//! naming the file and line (exit 2), and nothing is written.

use crate::error::{KvmcError, Result};
use crate::system::collections::side::FastMap;
use crate::system::types::Token;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Lengths beyond this are rejected as absurd (no engine serves a 10 M-token request).
pub const MAX_LEN: u64 = 10_000_000;
/// Generated tokens live above every interned trace id.
const OUT_BASE: Token = 0x8000_0000;

/// Which trace dialect a file is read as.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// Every row is a whole prompt.
    Mooncake,
    /// Rows with a `session_id` carry only their new input.
    MooncakeDelta,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Mooncake => "mooncake",
            Format::MooncakeDelta => "mooncake-delta",
        }
    }
}

/// One request of the trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// 1-based line in the file.
    pub line: u32,
    /// Arrival time (µs), if the row has a timestamp.
    pub timestamp_us: Option<u64>,
    /// Wait after the previous turn finished (µs); later turns only.
    pub delay_us: Option<u64>,
    /// `input_length`: the whole prompt (mooncake) or the new input (a delta row).
    pub input_len: u32,
    pub output_len: u32,
    /// The row's ids in `Trace::ids`: `ids_from .. ids_from + ids_len`.
    pub ids_from: u32,
    pub ids_len: u32,
    /// Session index (`Trace::sessions`), if the row has a `session_id`.
    pub session: Option<u32>,
    /// 0 for a session's first row (and for rows without a session).
    pub turn: u32,
    /// The session's previous and next rows.
    pub prev: Option<u32>,
    pub next: Option<u32>,
    /// The request's whole prompt length (a delta row: with its history).
    pub prompt_len: u32,
}

/// A parsed, validated trace.
#[derive(Clone, Debug)]
pub struct Trace {
    pub path: PathBuf,
    pub format: Format,
    pub trace_block_size: u32,
    pub rows: Vec<Row>,
    /// Every row's trace-block ids, interned to dense integers in first-use order.
    pub ids: Vec<u32>,
    pub sessions: Vec<String>,
}

#[derive(Deserialize)]
struct RawRow {
    #[serde(default, alias = "created_time")]
    timestamp: Option<f64>,
    #[serde(default, alias = "input_tokens")]
    input_length: Option<i64>,
    #[serde(default, alias = "output_tokens")]
    output_length: Option<i64>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
    #[serde(default)]
    session_id: Option<serde_json::Value>,
    #[serde(default, alias = "delay_ms")]
    delay: Option<f64>,
}

fn ms_to_us(ms: f64) -> u64 {
    (ms * 1000.0).round() as u64
}

impl Trace {
    pub fn load(path: &Path, trace_block_size: u32, format: Option<Format>) -> Result<Trace> {
        let text = crate::error::read_text(path)?;
        Self::parse(path, &text, trace_block_size, format)
    }

    /// Parse and check a JSONL trace. `format`: None picks `mooncake-delta` when any row has
    /// a `session_id`, else `mooncake`.
    pub fn parse(path: &Path, text: &str, trace_block_size: u32, format: Option<Format>) -> Result<Trace> {
        let tbs = u64::from(trace_block_size.max(1));
        let bad = |line: usize, msg: String| KvmcError::input(path, line, msg);
        let mut raws: Vec<(usize, RawRow)> = Vec::new();
        for (i, l) in text.lines().enumerate() {
            let line = i + 1;
            if l.trim().is_empty() {
                continue;
            }
            let r: RawRow = serde_json::from_str(l).map_err(|e| {
                let what = if e.is_data() { "bad row" } else { "not a JSON object" };
                bad(line, format!("{what}: {e}"))
            })?;
            raws.push((line, r));
        }
        if raws.is_empty() {
            return Err(bad(1, "the trace has no requests".into()));
        }
        let format = format.unwrap_or(if raws.iter().any(|(_, r)| r.session_id.is_some()) {
            Format::MooncakeDelta
        } else {
            Format::Mooncake
        });
        // Interned in order of first appearance (the map's hasher does not matter), sized for
        // every id up front.
        let total_ids: usize = raws.iter().map(|(_, r)| r.hash_ids.as_ref().map_or(0, Vec::len)).sum();
        let mut interned: FastMap<u64, u32> = FastMap::with_capacity_and_hasher(total_ids, Default::default());
        let mut ids: Vec<u32> = Vec::new();
        let mut sessions: Vec<String> = Vec::new();
        let mut session_of: HashMap<String, u32> = HashMap::new();
        let mut last_of_session: Vec<u32> = Vec::new();
        let mut rows: Vec<Row> = Vec::with_capacity(raws.len());
        for (line, r) in raws {
            let hash_ids = r.hash_ids.ok_or_else(|| bad(line, "missing hash_ids".into()))?;
            if hash_ids.is_empty() {
                return Err(bad(line, "hash_ids is empty".into()));
            }
            let input = match r.input_length {
                None => hash_ids.len() as u64 * tbs,
                Some(n) if n < 1 => return Err(bad(line, format!("input_length must be positive, got {n}"))),
                Some(n) => n as u64,
            };
            if input > MAX_LEN {
                return Err(bad(line, format!("input_length {input} is absurd (more than {MAX_LEN} tokens)")));
            }
            let output = match r.output_length {
                None => return Err(bad(line, "missing output_length".into())),
                Some(n) if n < 1 => return Err(bad(line, format!("output_length must be positive, got {n}"))),
                Some(n) if n as u64 > MAX_LEN => {
                    return Err(bad(line, format!("output_length {n} is absurd (more than {MAX_LEN} tokens)")))
                }
                Some(n) => n as u64,
            };
            let want = input.div_ceil(tbs);
            if hash_ids.len() as u64 != want {
                return Err(bad(
                    line,
                    format!(
                        "{} hash_ids do not match input_length {input}: {tbs}-token trace blocks (the replay \
                         model's trace_block_size) need {want}",
                        hash_ids.len()
                    ),
                ));
            }
            let timestamp_us = match r.timestamp {
                None => None,
                Some(t) if !(t.is_finite() && (0.0..=1e12).contains(&t)) => {
                    return Err(bad(line, format!("timestamp must be 0..=1e12 ms, got {t}")))
                }
                Some(t) => Some(ms_to_us(t)),
            };
            let session = match &r.session_id {
                None => None,
                Some(v) => {
                    let key = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Number(n) => n.to_string(),
                        other => {
                            return Err(bad(line, format!("session_id must be a string or a number, got {other}")))
                        }
                    };
                    let next = sessions.len() as u32;
                    let id = *session_of.entry(key.clone()).or_insert(next);
                    if id == next {
                        sessions.push(key);
                        last_of_session.push(u32::MAX);
                    }
                    Some(id)
                }
            };
            let prev = session.and_then(|s| Some(last_of_session[s as usize]).filter(|&p| p != u32::MAX));
            let delay_us = match r.delay {
                None => None,
                Some(_) if prev.is_none() => {
                    let why = if session.is_none() { "a row without a session_id" } else { "a session's first turn" };
                    return Err(bad(line, format!("delay on {why} (it is the wait after the previous turn)")));
                }
                Some(d) if !(d.is_finite() && (0.0..=1e12).contains(&d)) => {
                    return Err(bad(line, format!("delay must be 0..=1e12 ms, got {d}")))
                }
                Some(d) => Some(ms_to_us(d)),
            };
            let idx = rows.len() as u32;
            let (turn, prompt_len) = match prev {
                Some(p) => {
                    let pr = &rows[p as usize];
                    let len = if format == Format::MooncakeDelta {
                        u64::from(pr.prompt_len) + u64::from(pr.output_len) + input
                    } else {
                        input
                    };
                    (pr.turn + 1, len)
                }
                None => (0, input),
            };
            if prompt_len > MAX_LEN {
                return Err(bad(line, format!("the session's prompt grows to {prompt_len} tokens (absurd)")));
            }
            if let Some(p) = prev {
                rows[p as usize].next = Some(idx);
            }
            if let Some(s) = session {
                last_of_session[s as usize] = idx;
            }
            let ids_from = ids.len() as u32;
            for h in &hash_ids {
                let next = interned.len() as u32;
                ids.push(*interned.entry(*h).or_insert(next));
            }
            rows.push(Row {
                line: line as u32,
                timestamp_us,
                delay_us,
                input_len: input as u32,
                output_len: output as u32,
                ids_from,
                ids_len: hash_ids.len() as u32,
                session,
                turn,
                prev,
                next: None,
                prompt_len: prompt_len as u32,
            });
        }
        Ok(Trace { path: path.to_path_buf(), format, trace_block_size: tbs as u32, rows, ids, sessions })
    }

    /// The trace-block ids of row `i`.
    pub fn row_ids(&self, i: u32) -> &[u32] {
        let r = &self.rows[i as usize];
        &self.ids[r.ids_from as usize..(r.ids_from + r.ids_len) as usize]
    }

    /// Appends the tokens row `i`'s `input_length` stands for (the whole prompt of a
    /// `mooncake` row, the new input of a delta row).
    pub fn push_input_tokens(&self, i: u32, out: &mut Vec<Token>) {
        let r = &self.rows[i as usize];
        let tbs = self.trace_block_size as usize;
        let mut left = r.input_len as usize;
        for &id in self.row_ids(i) {
            let n = left.min(tbs);
            out.extend(std::iter::repeat_n(id, n));
            left -= n;
        }
    }

    /// Row `i`'s whole prompt. A delta row's is its previous turn's prompt and answer and
    /// its own input (built from the first turn on; use [`Trace::prompt_after`] to reuse a
    /// previous turn's tokens).
    pub fn prompt(&self, i: u32) -> Vec<Token> {
        let r = &self.rows[i as usize];
        match r.prev {
            Some(p) if self.format == Format::MooncakeDelta => {
                let before = self.prompt(p);
                self.prompt_after(i, &before)
            }
            _ => {
                // Room for the answer too: the request's spec appends it.
                let mut out = Vec::with_capacity(r.input_len as usize + r.output_len as usize);
                self.push_input_tokens(i, &mut out);
                out
            }
        }
    }

    /// A delta row's prompt given its previous turn's prompt; any other row's own prompt.
    pub fn prompt_after(&self, i: u32, prev_prompt: &[Token]) -> Vec<Token> {
        let r = &self.rows[i as usize];
        let Some(p) = r.prev.filter(|_| self.format == Format::MooncakeDelta) else {
            let mut out = Vec::with_capacity(r.input_len as usize + r.output_len as usize);
            self.push_input_tokens(i, &mut out);
            return out;
        };
        let mut out = Vec::with_capacity(r.prompt_len as usize + r.output_len as usize);
        out.extend_from_slice(prev_prompt);
        out.extend(self.output(p));
        self.push_input_tokens(i, &mut out);
        out
    }

    /// The tokens row `i`'s request generates (its answer).
    pub fn output(&self, i: u32) -> impl Iterator<Item = Token> {
        let n = self.rows[i as usize].output_len;
        let salt = i.wrapping_mul(0x9e37_79b9) >> 16;
        (0..n).map(move |p| OUT_BASE + (salt.wrapping_add(p) & 0xffff))
    }

    /// Total prompt tokens over every row.
    pub fn prompt_tokens(&self) -> u64 {
        self.rows.iter().map(|r| u64::from(r.prompt_len)).sum()
    }

    /// A readable name of row `i` (`L<line>`).
    pub fn name(&self, i: u32) -> String {
        format!("L{}", self.rows[i as usize].line)
    }
}
