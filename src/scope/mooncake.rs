//! The `[mooncake]` table of a scope file (connector = "mooncake"): the connector's settings
//! and the pool's contents at start (`preload`).

use super::parse_tokens;
use crate::error::{KvmcError, Result};
use crate::system::{KvRole, MooncakeConfig, Workload};
use serde::Deserialize;
use std::ops::Range;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMooncake {
    #[serde(default)]
    kv_role: Option<Spanned<String>>,
    #[serde(default)]
    save_decode_cache: bool,
    #[serde(default = "yes")]
    enable_lookup: bool,
    /// Prefixes another instance already put into the pool: request names (their full prompt
    /// blocks) or token strings.
    #[serde(default)]
    preload: Vec<Spanned<String>>,
}

fn yes() -> bool {
    true
}

/// Where the table sets `kv_role` (a P/D pair sets the roles itself).
pub(super) fn role_span(mc: &RawMooncake) -> Option<Range<usize>> {
    mc.kv_role.as_ref().map(|r| r.span())
}

/// The connector's settings (the preload is resolved once the requests are known).
pub(super) fn config(
    mc: Option<&RawMooncake>,
    bad: &impl Fn(Range<usize>, String) -> KvmcError,
) -> Result<MooncakeConfig> {
    let kv_role = match mc.and_then(|m| m.kv_role.as_ref()).map(|r| (r.get_ref().as_str(), r.span())) {
        None | Some(("kv_both", _)) => KvRole::Both,
        Some(("kv_producer", _)) => KvRole::Producer,
        Some(("kv_consumer", _)) => KvRole::Consumer,
        Some((other, sp)) => {
            return Err(bad(
                sp,
                format!("kv_role must be \"kv_both\", \"kv_producer\" or \"kv_consumer\", got \"{other}\""),
            ))
        }
    };
    Ok(MooncakeConfig {
        kv_role,
        save_decode_cache: mc.is_some_and(|m| m.save_decode_cache),
        enable_lookup: mc.is_none_or(|m| m.enable_lookup),
        preload: Vec::new(),
    })
}

/// `preload`: an entry naming a request stands for its full prompt blocks; any other entry is
/// a token string, whose blocks are labelled `poolN.i` unless a request produces them too.
pub(super) fn resolve_preload(
    m: &mut MooncakeConfig,
    raw: &RawMooncake,
    workload: &mut Workload,
    bad: &impl Fn(Range<usize>, String) -> KvmcError,
) -> Result<()> {
    let b = workload.block_size;
    for (i, p) in raw.preload.iter().enumerate() {
        let text = p.get_ref();
        let hashes = match workload.requests.iter().find(|r| &r.name == text) {
            Some(r) => r.hashes[..(r.prompt_len / b) as usize].to_vec(),
            None => workload.register_extra(&format!("pool{}", i + 1), &parse_tokens(text)),
        };
        if hashes.is_empty() {
            return Err(bad(p.span(), format!("preload {text:?} has no full block (block_size {b})")));
        }
        for h in hashes {
            if !m.preload.contains(&h) {
                m.preload.push(h);
            }
        }
    }
    Ok(())
}
