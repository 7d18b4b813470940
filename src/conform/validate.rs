//! Checks of a log that look at more than one line: the marker a recorder leaves at the end
//! of a partial log, and the worker's transfer reports against the jobs the log created
//! (docs/conformance-format.md, "Partial logs" and "Inputs"), and the lines and header fields
//! that do not fit the header's connector.

use super::log::{Ev, Header, Line};
use crate::error::{KvmcError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// A partial log: the recorder stopped in `step` (whose lines are not in the log) because of
/// `error`; its marker is the log's last line, `line`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub line: usize,
    pub step: u32,
    pub error: String,
}

/// `{"ev":"partial","step":N,"error":"..."}`.
#[derive(Deserialize)]
struct Marker {
    ev: String,
    step: u32,
    #[serde(default)]
    error: String,
}

fn marker(line: &str) -> Option<Marker> {
    if !line.contains("\"partial\"") {
        return None;
    }
    serde_json::from_str::<Marker>(line).ok().filter(|m| m.ev == "partial")
}

/// Split a partial log's marker off its text: the text without it, and the marker. A marker
/// anywhere but on the last line is bad input.
pub fn split_partial<'a>(path: &Path, text: &'a str) -> Result<(&'a str, Option<Partial>)> {
    let body = text.trim_end();
    let start = body.rfind('\n').map_or(0, |i| i + 1);
    let last_no = body[..start].matches('\n').count() + 1;
    for (i, l) in body[..start].lines().enumerate() {
        if marker(l).is_some() {
            return Err(KvmcError::input(path, i + 1, "a partial-log marker must be the log's last line"));
        }
    }
    Ok(match marker(&body[start..]) {
        Some(m) => (&text[..start], Some(Partial { line: last_no, step: m.step, error: m.error })),
        None => (text, None),
    })
}

/// A transfer report the log cannot make: (line, step, why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTransfer {
    pub line: usize,
    pub step: u32,
    pub why: String,
}

/// The first `transfer_done` / `transfer_failed` line that names a job no earlier `load` or
/// `store` line created, or one that an earlier line already reported finished. SimpleCPU's
/// store and load events, and Mooncake's save and load jobs, are counted apart (`tagged`:
/// `kind`; a Mooncake `transfer_failed` is a load's); the OffloadingConnector has one job
/// counter. A worker reports each job once (`get_finished` drops what it reported).
pub fn bad_transfer(lines: &[Line], tagged: bool) -> Option<BadTransfer> {
    let scpu = tagged;
    // (stream, job) -> the line that created it, and the line that reported it finished.
    let mut created: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    let mut reported: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    let what = |stream: &str, job: u32| match stream {
        "store" => format!("store event {job}"),
        "load" => format!("load event {job}"),
        _ => format!("job {job}"),
    };
    for l in lines {
        let (stream, job, ev) = match &l.ev {
            Ev::Load { job, .. } => {
                created.entry((if scpu { "load" } else { "" }, *job)).or_insert(l.no);
                continue;
            }
            Ev::Store { job, .. } => {
                created.entry((if scpu { "store" } else { "" }, *job)).or_insert(l.no);
                continue;
            }
            Ev::TransferDone { job, kind, .. } => (kind.as_deref().unwrap_or(""), *job, "transfer_done"),
            Ev::TransferFailed { job, .. } => (if tagged { "load" } else { "" }, *job, "transfer_failed"),
            _ => continue,
        };
        let why = if !created.contains_key(&(stream, job)) {
            format!(
                "{ev}: {} was never created (no {} line names it before this one)",
                what(stream, job),
                match stream {
                    "store" => "store",
                    "load" => "load",
                    _ => "load or store",
                }
            )
        } else if let Some(first) = reported.get(&(stream, job)) {
            format!("{ev}: {} was already reported finished at line {first}", what(stream, job))
        } else {
            reported.insert((stream, job), l.no);
            continue;
        };
        return Some(BadTransfer { line: l.no, step: l.ev.step(), why });
    }
    None
}

/// The first `transfer_failed` line whose form does not fit the profile: an OffloadingConnector
/// under rule `failed_load_request_level` (0.34) reports a failed async load per request (no
/// `invalid_blocks`), and stops the engine on a failed sync load (`get_finished` raises
/// RuntimeError); without the rule, and for the other connectors, a failed load names its
/// unwritten blocks.
pub fn bad_failure_form(lines: &[Line], offloading: bool, request_level: bool) -> Option<BadTransfer> {
    let mut sync_jobs: BTreeMap<u32, bool> = BTreeMap::new();
    for l in lines {
        let (job, invalid) = match &l.ev {
            Ev::Load { job, sync, .. } => {
                sync_jobs.entry(*job).or_insert(*sync);
                continue;
            }
            Ev::TransferFailed { job, invalid_blocks, .. } => (*job, invalid_blocks),
            _ => continue,
        };
        let level = offloading && request_level;
        let sync = sync_jobs.get(&job).copied().unwrap_or(false);
        let why = match (invalid, level) {
            (Some(_), true) if !sync => format!(
                "transfer_failed of job {job} names invalid_blocks: under this profile the \
                 OffloadingConnector reports a failed async load per request (failed_recving), \
                 without block ids; drop \"invalid_blocks\""
            ),
            (None, true) if sync => format!(
                "transfer_failed of sync load job {job} without invalid_blocks: a failed sync load \
                 stops this profile's engine (OffloadingConnectorWorker.get_finished raises \
                 RuntimeError), which the model does not replay"
            ),
            (None, false) => format!(
                "transfer_failed of job {job} without invalid_blocks: a request-level failure \
                 (failed_recving) is what vLLM 0.34's OffloadingConnector reports; this \
                 connector and profile report the failed load's blocks (\"invalid_blocks\")"
            ),
            _ => continue,
        };
        return Some(BadTransfer { line: l.no, step: l.ev.step(), why });
    }
    None
}

/// A line that does not fit the header's connector: SimpleCPU logs name each completion's
/// stream and the pins of every lookup, and have `cpu` snapshots; the other connectors none
/// of these. A NIXL producer's log has its own lines and no transfer jobs, and each of its
/// requests is a P/D prefill request (kvmc's `connector = "nixl"` model).
pub(super) fn connector_mismatch(h: &Header, ev: &Ev) -> Option<String> {
    let scpu = h.connector == "simple-cpu";
    let mc = h.connector == "mooncake";
    let nixl = h.connector == "nixl";
    match ev {
        Ev::NixlSave { .. } | Ev::ConsumerRead { .. } | Ev::FinishedSending { .. } | Ev::Nixl { .. } if !nixl => {
            Some("nixl_save, consumer_read, finished_sending and nixl lines go with the nixl connector".into())
        }
        Ev::Load { .. }
        | Ev::Store { .. }
        | Ev::StoreRefused { .. }
        | Ev::Evict { .. }
        | Ev::Flush { .. }
        | Ev::Host { .. }
        | Ev::TransferDone { .. }
        | Ev::TransferFailed { .. }
            if nixl =>
        {
            Some(
                "the NIXL producer has no load or store jobs and no host tier (its host-buffer copies are nixl_save lines)"
                    .into(),
            )
        }
        Ev::Arrive { req, max_tokens, resumable, .. } if nixl && (*max_tokens != 1 || *resumable) => Some(format!(
            "request {req}: with the nixl connector every request is a P/D prefill request (max_tokens 1, not resumable)"
        )),
        Ev::TransferDone { kind: None, .. } if scpu || mc => Some(format!(
            "a {} transfer_done names its stream (\"kind\": \"store\" or \"load\")",
            if mc { "Mooncake" } else { "SimpleCPU" }
        )),
        Ev::TransferDone { kind: Some(k), .. } if !(scpu || mc) || !["store", "load"].contains(&k.as_str()) => Some(
            format!("transfer_done kind {k:?}: only SimpleCPU and Mooncake logs name a stream (\"store\" or \"load\")"),
        ),
        Ev::Mooncake { .. } if !mc => Some("mooncake lines go with the mooncake connector".into()),
        Ev::Host { .. } | Ev::StoreRefused { .. } | Ev::Flush { .. } | Ev::Evict { .. } if mc => Some(
            "host, store_refused, flush and evict lines are the OffloadingConnector's (this log is mooncake)".into(),
        ),
        Ev::TransferFailed { .. } if scpu => Some("SimpleCPU never reports a failed load".into()),
        Ev::Lookup { pins: None, .. } if scpu => {
            Some("a SimpleCPU lookup lists the CPU blocks it pinned (\"pins\")".into())
        }
        Ev::Lookup { pins: Some(_), .. } if !scpu => Some("\"pins\" goes with the simple-cpu connector".into()),
        Ev::StoreCompleted { .. } | Ev::LoadCompleted { .. } | Ev::Cpu { .. } if !scpu => {
            Some("store_completed, load_completed and cpu lines go with the simple-cpu connector".into())
        }
        Ev::Host { .. } | Ev::StoreRefused { .. } | Ev::Flush { .. } if scpu => {
            Some("host, store_refused and flush lines are the OffloadingConnector's (this log is simple-cpu)".into())
        }
        _ => None,
    }
}

/// A Mooncake header kvmc cannot replay: a `mooncake` object goes with that connector.
/// Preloaded sequences are bounded like a model file's prompts.
pub(super) fn mooncake_header_error(h: &Header) -> Option<String> {
    let mc = h.connector == "mooncake";
    if !mc {
        return h.mooncake.is_some().then(|| "a \"mooncake\" object goes with \"connector\": \"mooncake\"".into());
    }
    let pre = h.mooncake.as_ref().map_or(&[][..], |m| m.preload.as_slice());
    if pre.len() > 64 || pre.iter().any(|p| p.len() > 4096) {
        return Some("mooncake.preload: at most 64 sequences of at most 4096 tokens".into());
    }
    pre.iter()
        .position(|p| (p.len() as u32) < h.block_size)
        .map(|i| format!("mooncake.preload[{i}] has no full block (block_size {})", h.block_size))
}
