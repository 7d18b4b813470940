//! The output worker's routed-expert rows data plane (vLLM 0.33
//! `aux_output_connector/worker.py: AuxOutputWorkerConnector` and
//! `routed_experts.py: RoutedExpertsBuffer`), for one worker (TP rank 0) and synchronous
//! steps (no output in flight when the next step begins).
//!
//! Per request it keeps the keys the scheduler sent (one per full hash block), the capture
//! and emit cursors, the incomplete tail block, and completed blocks still waiting for their
//! key. A forward over `[c, c + n)` yields `n` rows; full blocks are published to the store
//! once keyed. A step that samples emits `[emit_cursor, token_end)`: straight from this
//! step's rows when `emit_cursor >= c`, otherwise read back (*materialized*) from the store
//! and the tail — a missing key is `BlockObjectStoreError` and the engine dies.

use super::row_store::RowStore;
use crate::system::types::{BlockHash, ReqId};

/// `_WorkerRequestState` plus the request's buffer tail.
#[derive(Clone, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct WorkerReq {
    /// `aux_output_keys`: block hashes sent so far, block 0 first.
    pub(crate) keys: Vec<BlockHash>,
    /// `pending_blocks`: starts of completed blocks not yet keyed.
    pub(crate) pending: Vec<u32>,
    pub(crate) capture_cursor: Option<u32>,
    pub(crate) emit_cursor: u32,
    /// The buffer's incomplete block: (block start, rows held).
    pub(crate) tail: Option<(u32, u32)>,
    /// prime-rl `skip_remote_prefill_partial_block`: rows before this position are neither
    /// buffered nor published.
    pub(crate) buffer_start: Option<u32>,
}

/// Why the engine died.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Crash {
    /// `BlockObjectStoreError`: a materialized read needs a key the store lacks.
    MissingRows { block: u32, key: BlockHash },
    /// `RoutedExpertsBuffer` asserts (capture not contiguous, range unavailable).
    Buffer(String),
    /// `BlockObjectStoreError("cannot retain the requested batch")` (0.31/0.32): publishing
    /// the step's blocks left more objects than slots, every one referenced or new.
    StoreFull(super::StoreFull),
}

/// One request's rows in one step: positions `[start, end)` (end = the step's token end).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct RowsOutput {
    pub(crate) req: ReqId,
    pub(crate) start: u32,
    pub(crate) end: u32,
    /// Some rows were read back from the store.
    pub(crate) from_store: bool,
}

impl WorkerReq {
    /// `RoutedExpertsBuffer.capture`: returns the starts of completed blocks.
    fn capture(&mut self, token_start: u32, n: u32, b: u32) -> Result<Vec<u32>, Crash> {
        let mut done = Vec::new();
        let mut offset = 0;
        while offset < n {
            let pos = token_start + offset;
            let block_start = pos / b * b;
            let local = pos - block_start;
            if self.tail.is_none() && local == 0 && n - offset >= b {
                done.push(block_start);
                offset += b;
                continue;
            }
            let (ts, len) = *self.tail.get_or_insert((block_start, 0));
            if ts != block_start {
                return Err(Crash::Buffer(format!("capture skipped the incomplete block at {ts} (now at {pos})")));
            }
            if local != len {
                return Err(Crash::Buffer(format!(
                    "capture is not contiguous: expected position {}, got {pos}",
                    block_start + len
                )));
            }
            let count = (b - local).min(n - offset);
            let len = len + count;
            offset += count;
            if len == b {
                self.tail = None;
                done.push(block_start);
            } else {
                self.tail = Some((block_start, len));
            }
        }
        Ok(done)
    }

    /// `RoutedExpertsBuffer.read(start, end)`: only the tail block's held rows.
    fn read_tail(&self, start: u32, end: u32) -> Result<(), Crash> {
        match self.tail {
            Some((ts, len)) if start >= ts && start < end && end <= ts + len => Ok(()),
            _ => Err(Crash::Buffer(format!("rows [{start},{end}) are not in the buffer"))),
        }
    }

    /// Publish completed blocks whose key is known (`_publish_blocks`); the rest wait.
    fn publishable(&mut self, completed: Vec<u32>, b: u32) -> Vec<BlockHash> {
        let keyed_end = self.keys.len() as u32 * b;
        let mut all = std::mem::take(&mut self.pending);
        all.extend(completed);
        let mut out = Vec::new();
        for s in all {
            if s < keyed_end {
                out.push(self.keys[(s / b) as usize]);
            } else {
                self.pending.push(s);
            }
        }
        out
    }
}

/// One request's forward in this step.
pub struct Forwarded {
    pub(crate) req: ReqId,
    pub(crate) token_start: u32,
    pub(crate) n: u32,
    pub(crate) samples: bool,
}

/// `_commit_output` for one synchronous step: capture every request's rows, publish the full
/// keyed blocks, then emit (materializing from the store where needed).
pub fn commit_output(
    reqs: &mut [Option<WorkerReq>],
    store: &mut RowStore,
    steps: &[Forwarded],
    b: u32,
    partial_skip: bool,
) -> Result<Vec<RowsOutput>, (ReqId, Crash)> {
    let mut outputs = Vec::new();
    let mut materialize: Vec<(ReqId, u32, u32)> = Vec::new();
    let mut publish: Vec<BlockHash> = Vec::new();
    let mut publisher: Option<ReqId> = None;
    for f in steps {
        let st = reqs[f.req as usize].as_mut().expect("the scheduler announced the request");
        let capture_start = f.token_start;
        let first = st.capture_cursor.is_none();
        // prime-rl: a first capture that starts mid-block while emission starts at or after
        // it buffers nothing before the next block boundary.
        if partial_skip && first && capture_start % b != 0 && st.emit_cursor >= capture_start {
            st.buffer_start = Some(capture_start.div_ceil(b) * b);
        }
        let skip = st.buffer_start.map_or(0, |bs| bs.saturating_sub(capture_start).min(f.n));
        let completed = st.capture(capture_start + skip, f.n - skip, b).map_err(|c| (f.req, c))?;
        let token_end = capture_start + f.n;
        st.capture_cursor = Some(token_end);
        let ready = st.publishable(completed, b);
        if !ready.is_empty() && publisher.is_none() {
            publisher = Some(f.req);
        }
        publish.extend(ready);
        let emit_start = st.emit_cursor;
        if f.samples && emit_start <= token_end {
            if emit_start >= capture_start {
                outputs.push(RowsOutput { req: f.req, start: emit_start, end: token_end, from_store: false });
                st.emit_cursor = token_end;
            } else {
                materialize.push((f.req, emit_start, token_end));
            }
        }
    }
    if let Err(full) = store.put(&publish, &[], &[]) {
        // The batch's publication failed: named after the first request that published a block.
        return Err((publisher.unwrap_or(0), Crash::StoreFull(full)));
    }
    for (r, emit_start, token_end) in materialize {
        let st = reqs[r as usize].as_mut().expect("scheduled");
        let stored_end = (token_end / b).min(st.keys.len() as u32) * b;
        if emit_start < stored_end {
            let keys: Vec<BlockHash> = st.keys[(emit_start / b) as usize..(stored_end / b) as usize].to_vec();
            if let Err(k) = store.get(&keys) {
                let block = st.keys.iter().position(|x| *x == k).unwrap_or(0) as u32;
                return Err((r, Crash::MissingRows { block, key: k }));
            }
            if stored_end < token_end {
                st.read_tail(stored_end, token_end).map_err(|c| (r, c))?;
            }
        } else {
            st.read_tail(emit_start, token_end).map_err(|c| (r, c))?;
        }
        outputs.push(RowsOutput { req: r, start: emit_start, end: token_end, from_store: emit_start < stored_end });
        st.emit_cursor = token_end;
    }
    outputs.sort_by_key(|o| o.req);
    Ok(outputs)
}
