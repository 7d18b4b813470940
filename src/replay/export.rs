//! A violation's history as files the checker reads: a model file (the engine's
//! configuration and every request that arrived, tokens written one character each) and a
//! scenario (the actions in order). `kvmc replay SCENARIO` and
//! `kvmc explore MODEL --path SCENARIO` re-run it. Behaviour depends only on which tokens are
//! equal, so renaming every distinct token to a character keeps it exactly.
//!
//! Steps that changed nothing are left out (the checker has no such transition), found by
//! re-running the history through the checker's model; the re-run also confirms the
//! violation, and its last action, run once more with events on, tells what a ghost-flag
//! property saw (replay runs with events off, so its own verdict only names the flag).

use super::driver::{Act, Driver, Found};
use super::trace::Trace;
use super::Finding;
use crate::props;
use crate::scope::Scope;
use crate::system::display;
use crate::system::events::Events;
use crate::system::types::Token;
use crate::system::Input;
use crate::system::{ConnectorConfig, Direction, EngineConfig, LoadFailurePolicy};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Characters for `n` distinct tokens: printable, no whitespace, no '|', nothing TOML escapes.
fn token_chars(n: usize) -> Option<Vec<char>> {
    let mut out = Vec::with_capacity(n);
    let mut c: u32 = 0xC0;
    while out.len() < n {
        if c > 0x10_FFFF {
            return None;
        }
        if let Some(ch) = char::from_u32(c) {
            let nonchar = (0xFDD0..=0xFDEF).contains(&c) || (c & 0xFFFE) == 0xFFFE;
            if !ch.is_whitespace() && !ch.is_control() && ch != '|' && !nonchar && c != 0xFEFF {
                out.push(ch);
            }
        }
        c += 1;
    }
    Some(out)
}

fn engine_toml(cfg: &EngineConfig, profile: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "[engine]");
    let _ = writeln!(s, "profile = {profile:?}");
    let conn = match &cfg.connector {
        ConnectorConfig::Offloading(_) => "offloading",
        ConnectorConfig::SimpleCpu(_) => "simple-cpu",
        ConnectorConfig::Mooncake(_) => "mooncake",
        _ => "none",
    };
    let _ = writeln!(s, "connector = {conn:?}");
    let _ = writeln!(s, "block_size = {}", cfg.block_size);
    let _ = writeln!(s, "gpu_blocks = {}", cfg.num_gpu_blocks);
    let _ = writeln!(s, "max_num_batched_tokens = {}", cfg.max_num_batched_tokens);
    let _ = writeln!(s, "max_num_seqs = {}", cfg.max_num_seqs);
    let _ = writeln!(s, "max_model_len = {}", cfg.max_model_len);
    let _ = writeln!(s, "long_prefill_token_threshold = {}", cfg.long_prefill_token_threshold);
    let pol = if cfg.load_failure_policy == LoadFailurePolicy::Recompute { "recompute" } else { "fail" };
    let _ = writeln!(s, "load_failure_policy = {pol:?}");
    let _ = writeln!(s, "async_scheduling = {}", cfg.async_scheduling);
    let _ = writeln!(s, "enable_prefix_caching = {}", cfg.enable_prefix_caching);
    if cfg.cache_aware_admission_window > 0 {
        let _ = writeln!(s, "cache_aware_admission_window = {}", cfg.cache_aware_admission_window);
        let t = f64::from(cfg.cache_aware_admission_threshold_permille) / 1000.0;
        let _ = writeln!(s, "cache_aware_admission_threshold = {t:?}");
    }
    if let ConnectorConfig::Offloading(o) = &cfg.connector {
        let _ = writeln!(s, "\n[offload]");
        let _ = writeln!(s, "host_chunks = {}", o.host_chunks);
        let _ = writeln!(s, "blocks_per_chunk = {}", o.blocks_per_chunk);
        let _ = writeln!(s, "offload_prompt_only = {}", o.offload_prompt_only);
        let _ = writeln!(s, "sync_load_budget_tokens = {}", o.sync_load_budget_tokens);
        if o.eviction_policy == crate::system::EvictionPolicy::Arc {
            let _ = writeln!(s, "eviction_policy = \"arc\"");
        }
    }
    if let ConnectorConfig::SimpleCpu(c) = &cfg.connector {
        let _ = writeln!(s, "\n[simple_cpu]");
        let _ = writeln!(s, "cpu_blocks = {}", c.cpu_blocks);
        let _ = writeln!(s, "mode = {:?}", if c.lazy { "lazy" } else { "eager" });
    }
    if let ConnectorConfig::Mooncake(m) = &cfg.connector {
        // `preload` (block hashes of prefixes another instance put) is not written back: the
        // exported model would need them as prompts.
        let role = match m.kv_role {
            crate::system::KvRole::Both => "kv_both",
            crate::system::KvRole::Producer => "kv_producer",
            crate::system::KvRole::Consumer => "kv_consumer",
        };
        let _ = writeln!(s, "\n[mooncake]");
        let _ = writeln!(s, "kv_role = {role:?}");
        let _ = writeln!(s, "save_decode_cache = {}", m.save_decode_cache);
        let _ = writeln!(s, "enable_lookup = {}", m.enable_lookup);
    }
    if let Some(rr) = &cfg.router_replay {
        let _ = writeln!(s, "\n[router_replay]");
        let _ = writeln!(s, "store_objects = {}", rr.store_objects);
    }
    s
}

/// Every arrived row's tokens (prompt, output), in arrival order.
fn requests(trace: &Trace, rows: &[u32]) -> Vec<(u32, Vec<Token>, Vec<Token>)> {
    rows.iter().map(|&r| (r, trace.prompt(r), trace.output(r).collect())).collect()
}

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Write the model and scenario of `f` and re-run them; never fails (a problem is a note).
pub fn write(d: &Driver, f: &Found, profile: &str, variant: Option<&str>, out: Option<&Path>) -> Finding {
    let mut finding = Finding {
        property: f.violation.property.to_string(),
        detail: f.violation.detail.clone(),
        engine: f.engine,
        step: f.step,
        action: f.action,
        model_file: None,
        scenario_file: None,
        note: None,
        explorable: !d.inst[f.engine].log.contains(&Act::StepStoresDrain),
    };
    match build(d, f, profile, variant, out) {
        Ok(b) => {
            finding.model_file = Some(b.model);
            finding.scenario_file = Some(b.scenario);
            finding.note = b.note;
            if let Some(detail) = b.detail {
                finding.detail = detail;
            }
        }
        Err(why) => finding.note = Some(why),
    }
    finding
}

/// What [`build`] wrote and learnt.
struct Built {
    model: PathBuf,
    scenario: PathBuf,
    note: Option<String>,
    /// The violation as the last action's events tell it, if they do.
    detail: Option<String>,
}

fn build(d: &Driver, f: &Found, profile: &str, variant: Option<&str>, out: Option<&Path>) -> Result<Built, String> {
    let inst = &d.inst[f.engine];
    let trace = d.trace;
    let reqs = requests(trace, &inst.arrived);
    let mut distinct: BTreeMap<Token, usize> = BTreeMap::new();
    for (_, p, o) in &reqs {
        for t in p.iter().chain(o) {
            distinct.insert(*t, 0);
        }
    }
    let chars = token_chars(distinct.len()).ok_or("too many distinct tokens to write as characters")?;
    for (i, v) in distinct.values_mut().enumerate() {
        *v = i;
    }
    let text = |ts: &[Token]| ts.iter().map(|t| chars[distinct[t]]).collect::<String>();
    let stem = trace.path.file_stem().map_or("trace".into(), |s| s.to_string_lossy().into_owned());
    let dir = out.map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let model_path = dir.join(format!("{stem}.violation.model.toml"));
    let scen_path = dir.join(format!("{stem}.violation.scenario.toml"));
    let mut m = String::new();
    let _ = writeln!(
        m,
        "description = \"replay of {} (engine {}) up to a violation of {}\"\n",
        trace.path.display().to_string().replace('"', "'"),
        f.engine,
        f.violation.property
    );
    m.push_str(&engine_toml(&d.model.cfg, profile));
    for (r, p, o) in &reqs {
        let _ = writeln!(m, "\n[[request]]\nname = \"{}\"", trace.name(*r));
        let _ = writeln!(m, "prompt = \"{}\"", text(p));
        let _ = writeln!(m, "output = \"{}\"", text(o));
    }
    let _ = writeln!(m, "\n[bounds]\narrivals = \"in-order\"\nprogress_steps = {}", d.model.replay.progress_steps);
    // The checker's model of the same history.
    let scope = Scope::parse(&format!("{stem}.violation.model"), &model_path, &m).map_err(|e| e.to_string())?;
    let sys = scope.system(Some(profile), variant)?;
    let pos: BTreeMap<u32, u16> = inst.arrived.iter().enumerate().map(|(i, &r)| (r, i as u16)).collect();
    let mut s = sys.init();
    let mut labels: Vec<String> = Vec::new();
    let mut note = None;
    let acts = &inst.log[..inst.log.len().min(f.action as usize)];
    // The state before the last action, and that action (to run it again with events on).
    let mut last = None;
    for (i, act) in acts.iter().enumerate() {
        let a = match act {
            Act::Arrive(r) => Input::Arrive(pos[r]),
            Act::Step => Input::Step,
            Act::StepStoresDrain => Input::StepStoresDrain,
            Act::Done(Direction::Store) => Input::TransferDone(Direction::Store),
            Act::Done(Direction::Load) => Input::TransferDone(Direction::Load),
        };
        if i + 1 == acts.len() {
            last = Some((s.clone(), a));
        }
        match sys.apply(&s, a, &mut Events::off(), true) {
            Some(n) => {
                labels.push(display::action_label(&sys, &a));
                s = n;
            }
            None if a == Input::Step => {}
            None => {
                note = Some(format!(
                    "the checker's model cannot take \"{}\" where replay did",
                    display::action_label(&sys, &a)
                ));
                break;
            }
        }
    }
    let mut detail = None;
    if note.is_none() {
        let def = props::find(f.violation.property).ok_or("unknown property")?;
        if (def.check)(&sys, &s) {
            note = Some("re-run through the checker's model, the scenario does not violate it (a kvmc bug)".into());
        } else if let Some((before, a)) = last {
            let mut ev = Events::on();
            if sys.apply(&before, a, &mut ev, true).is_some() {
                detail = display::violation_text(&sys, &ev.list, f.violation.property);
            }
        }
    }
    let mut sc = String::new();
    let _ = writeln!(
        sc,
        "# kvmc scenario: replay of {} up to a violation of {}",
        trace.path.display(),
        f.violation.property
    );
    // Beside the scenario: readers resolve `model` against the scenario's directory.
    let _ = writeln!(sc, "model = {:?}", format!("{stem}.violation.model.toml"));
    let _ = writeln!(sc, "profile = {profile:?}");
    if let Some(v) = variant {
        let _ = writeln!(sc, "variant = {v:?}");
    }
    sc.push_str("actions = [\n");
    for l in &labels {
        let _ = writeln!(sc, "  {l:?},");
    }
    sc.push_str("]\n");
    write_atomic(&model_path, &m).map_err(|e| format!("{}: {e}", model_path.display()))?;
    write_atomic(&scen_path, &sc).map_err(|e| format!("{}: {e}", scen_path.display()))?;
    Ok(Built { model: model_path, scenario: scen_path, note, detail })
}
