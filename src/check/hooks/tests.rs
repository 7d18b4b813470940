//! The frontier format on engines reached by steps of gate models: the hooks' `encode`,
//! `decode` and `decode_into` (the engine's packed form, `crate::system::collections::pack`)
//! round-trip afresh and in place, and damaged bytes are refused, never a panic.

use super::KvHooks;
use crate::model::{KvModel, KvState};
use crate::search::Hooks;
use crate::system::collections::pack::{unpack_all, Pack};
use crate::system::Engine;
use proptest::prelude::*;
use std::sync::OnceLock;

/// Gate models covering every connector the checker runs (OffloadingConnector with ARC,
/// SimpleCPU, Mooncake, NIXL producer and P/D with its decode engine, with and without a shared
/// Mooncake pool), router replay's rows, async scheduling's batches in flight.
const MODELS: &[&str] =
    &["host-arc", "async-preempt", "scpu-pressure", "mooncake-a", "pd-shared", "pd-rows-c", "pd-rows-e", "rows-a"];

/// Each model with states reached by a breadth-first walk (every other one of the first 600
/// states met, so that some are several steps deep).
fn models() -> &'static Vec<(KvModel, Vec<KvState>)> {
    static MODELS_STATES: OnceLock<Vec<(KvModel, Vec<KvState>)>> = OnceLock::new();
    MODELS_STATES.get_or_init(|| {
        use stateright::Model;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
        MODELS
            .iter()
            .map(|name| {
                let scope = crate::scope::Scope::load(&root.join(format!("{name}.toml"))).expect("model loads");
                let model = KvModel::new(std::sync::Arc::new(scope), None, None, Vec::new()).expect("rules resolve");
                let mut seen = std::collections::HashSet::new();
                let mut queue = std::collections::VecDeque::from([model.init()]);
                let (mut out, mut actions) = (Vec::new(), Vec::new());
                while let Some(s) = queue.pop_front() {
                    if seen.len() >= 600 {
                        break;
                    }
                    if !seen.insert(s.engine.clone()) {
                        continue;
                    }
                    actions.clear();
                    model.actions(&s, &mut actions);
                    queue.extend(actions.iter().filter_map(|&a| model.next_state(&s, a)));
                    if seen.len() % 2 == 1 {
                        out.push(s);
                    }
                }
                assert!(out.len() >= 5, "{name}: {} states", out.len());
                (model, out)
            })
            .collect()
    })
}

fn packed(e: &Engine) -> Vec<u8> {
    let mut b = Vec::new();
    e.pack(&mut b);
    b
}

/// Every state encodes to its engine's packed form and decodes to itself afresh and in place
/// (over a state of another model, its connector another variant or the same, and over another
/// state of its own), encoding again to the same bytes; each state decoded in place is stamped
/// afresh for the step memo. Equal engines encode alike, distinct ones differently.
#[test]
fn frontier_round_trip_afresh_and_in_place() {
    let all = models();
    let mut checked = 0;
    for (m, (model, states)) in all.iter().enumerate() {
        let hooks = KvHooks::new(model, false);
        let other = &all[(m + 1) % all.len()].1;
        let mut last_stamp = 0;
        for (i, s) in states.iter().enumerate() {
            let mut bytes = Vec::new();
            hooks.encode(model, s, &mut bytes);
            assert_eq!(bytes, packed(&s.engine));
            let fresh = hooks.decode(model, &bytes);
            assert!(fresh == *s, "{}: afresh", MODELS[m]);
            assert_eq!(packed(&fresh.engine), bytes, "{}: encoded again", MODELS[m]);
            for place in [None, Some(other[i % other.len()].clone()), Some(states[(i + 1) % states.len()].clone())] {
                let mut out = place;
                hooks.decode_into(model, &bytes, &mut out);
                let out = out.expect("a state");
                assert!(out == *s, "{}: in place", MODELS[m]);
                let stamp = out.engine.stamp.get();
                assert!(stamp != 0 && stamp != last_stamp, "stamped afresh");
                last_stamp = stamp;
            }
            assert_eq!(packed(&s.engine.clone()), bytes);
            if let Some(prev) = i.checked_sub(1).map(|j| &states[j]) {
                assert_ne!(packed(&prev.engine), bytes, "{}: distinct engines, distinct bytes", MODELS[m]);
            }
            checked += 1;
        }
    }
    assert!(checked > 200, "{checked} states");
    // What the engines hold: every connector variant the checker runs (D's inside P/D's state),
    // router replay's rows, batches in flight, a decode instance with blocks.
    let mut kinds = std::collections::BTreeSet::new();
    let (mut rows, mut batches, mut pd) = (0, 0, 0);
    for e in all.iter().flat_map(|(_, states)| states.iter().map(|s| &s.engine)) {
        for c in std::iter::once(&e.conn).chain(e.pd.as_ref().map(|p| &p.d.conn)) {
            kinds.insert(format!("{c:?}").split('(').next().unwrap_or_default().to_string());
        }
        rows += usize::from(e.aux.is_some());
        batches += usize::from(!e.batches.is_empty());
        pd += usize::from(e.pd.as_ref().is_some_and(|p| p.d.reqs.iter().any(|q| !q.table.is_empty())));
    }
    let want = ["Offloading", "SimpleCpu", "Mooncake", "Nixl", "NixlStore", "NixlDecode", "NixlDecodeStore"];
    assert!(want.iter().all(|k| kinds.contains(*k)), "{kinds:?}");
    assert!(rows > 0 && batches > 0 && pd > 0, "rows {rows}, batches {batches}, pd {pd}");
}

/// Bytes cut short anywhere, or followed by more, are not an engine.
#[test]
fn every_prefix_is_refused() {
    for (_, states) in models() {
        for s in states.iter().step_by(17) {
            let mut bytes = packed(&s.engine);
            let mut place = Engine::default();
            for k in 0..bytes.len() {
                assert!(unpack_all(&mut place, &bytes[..k]).is_none(), "a prefix of {k} bytes");
            }
            bytes.push(0);
            assert!(unpack_all(&mut place, &bytes).is_none(), "a byte too many");
        }
    }
}

/// The search decodes only its own bytes: anything else is a bug, and panics as it says.
#[test]
#[should_panic(expected = "a frontier state decodes")]
fn foreign_bytes_panic() {
    let (model, states) = &models()[0];
    let mut bytes = packed(&states[1].engine);
    bytes.push(0);
    KvHooks::new(model, false).decode(model, &bytes);
}

proptest! {
    /// A real engine's bytes with a few of them changed, unpacked afresh and in place over
    /// another engine: `None` or an engine, never a panic.
    #[test]
    fn damaged_engines_never_panic(m in 0..MODELS.len(), i in any::<prop::sample::Index>(),
                                   edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4)) {
        let states = &models()[m].1;
        let mut bytes = packed(&i.get(states).engine);
        for (at, v) in &edits {
            let k = at.index(bytes.len());
            bytes[k] = *v;
        }
        let _ = unpack_all(&mut Engine::default(), &bytes);
        let _ = unpack_all(&mut states[0].engine.clone(), &bytes);
    }
}
