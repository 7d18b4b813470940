//! What the search engine needs from kvmc's model beyond stateright's `Model`: the symmetry
//! representative of a state (`--symmetry on`, `crate::system::symmetry`) and the weak
//! fairness of its actions (for the liveness half of `requests-finish`).
//!
//! Weakly fair (a behaviour in which one of them stays enabled forever takes it infinitely
//! often; each class apart):
//! - the engine step, in any of its timings (`Step`, `StepDrain`, `StepStoresDrain`): vLLM's
//!   engine core loops while it has requests;
//! - a transfer's completion, per direction (`TransferDone(Store)`, `TransferDone(Load)`): the
//!   worker's copies finish;
//! - a request's arrival, a session's next input and a consumer read (one class each):
//!   the client sends every request the workload names, the decoder reads every handoff.
//!
//! Not fair: the faults (aborts, errors, load failures, a sync load that fails). A behaviour may
//! take them or not, finitely often (the scope bounds them). An action is enabled where it has a
//! successor: a step that changes nothing is no step, so a request waiting on nothing but an
//! unfair fault is a dead end, which the deadlock half of `requests-finish` reports.
//!
//! The frontier is kept encoded: an engine state is written in its packed form
//! (`crate::system::collections::pack`, `Engine`'s impl in `crate::system::engine`: every
//! field in order, integers fixed-width little-endian, `u32` lengths, one-byte tags, no
//! visitor), about 1 KB where the whole state's heap takes about 2 KB, and unpacked in place
//! into the engine the search thread keeps when the search expands it. The state's `Side` data
//! (never on in the checker) and its step-memo stamp pack to nothing. The encoding is canonical
//! (equal engines encode to equal bytes: every container in a checker's engine is ordered, and
//! the replay-only forms never appear), so the search keys a state by the fingerprint of its
//! encoding (`crate::search::key`). The serde derives stay for JSON (the explorer, reports).

use crate::model::{Action, KvModel, KvState};
use crate::search::Hooks;
use crate::system::collections::pack::{unpack_all, Pack};
use crate::system::input::Arrivals;
use crate::system::symmetry::Roles;
use crate::system::{ConnectorKind, Engine};

#[cfg(test)]
mod tests;

pub struct KvHooks {
    /// The interchangeable requests, when symmetry reduction is on (and can apply).
    roles: Option<Roles>,
    /// Keep frontier states encoded (the default; off: whole, for tests that compare).
    encode: bool,
}

impl KvHooks {
    pub fn new(model: &KvModel, symmetry: bool) -> Self {
        let sys = &model.sys;
        let kind = sys.cfg.connector_kind();
        let connector_ok =
            matches!(kind, ConnectorKind::None | ConnectorKind::Offloading) && sys.cfg.router_replay.is_none();
        let in_order = sys.env.arrivals == Arrivals::InOrder;
        crate::system::input::clear_step_memo();
        let roles = if symmetry { Roles::new(&sys.workload, &sys.env.after, in_order, connector_ok) } else { None };
        KvHooks { roles, encode: true }
    }

    /// The same hooks with the frontier kept whole (`false`) or encoded (`true`).
    pub fn with_encoding(self, encode: bool) -> Self {
        KvHooks { encode, ..self }
    }

    /// Does symmetry reduction apply to this model (some requests are interchangeable)?
    pub fn reduces(&self) -> bool {
        self.roles.is_some()
    }
}

impl Hooks<KvModel> for KvHooks {
    fn representative(&self, _model: &KvModel, s: &KvState) -> Option<KvState> {
        let roles = self.roles.as_ref()?;
        let e = crate::system::symmetry::representative(&s.engine, roles)?;
        Some(KvState { engine: e, sys: s.sys.clone() })
    }

    /// `System::apply_into` on the engine the search reuses: no allocation for a successor it
    /// drops.
    fn next_state_into(&self, model: &KvModel, s: &KvState, a: Action, out: &mut Option<KvState>) -> bool {
        use stateright::Model;
        if a == Action::Step {
            if let Some(changed) = out.as_mut().and_then(|o| model.sys.take_step_memo(&s.engine, &mut o.engine)) {
                return changed;
            }
        }
        match out {
            Some(o) => model.sys.apply_into(&s.engine, a, &mut crate::system::Events::off(), true, &mut o.engine),
            None => match model.next_state(s, a) {
                Some(n) => {
                    *out = Some(n);
                    true
                }
                None => false,
            },
        }
    }

    /// `System::apply_last_in_place`: every input but the engine steps (and P/D's).
    fn next_state_in_place(&self, model: &KvModel, s: &mut KvState, a: &Action) -> Option<bool> {
        model.sys.apply_last_in_place(&mut s.engine, *a)
    }

    fn encodes(&self) -> bool {
        self.encode
    }

    /// The engine's packed form appended to `out`: the search's buffer for the successor's key
    /// (`crate::search::key`), reused from one successor to the next.
    #[inline]
    fn encode(&self, _model: &KvModel, s: &KvState, out: &mut Vec<u8>) {
        s.engine.pack(out);
    }

    /// Unpacked over a decoder's starting engine (`Engine::default`). All of `bytes` must be
    /// one engine: the frontier holds only what `encode` wrote.
    fn decode(&self, model: &KvModel, bytes: &[u8]) -> KvState {
        let mut engine = Engine::default();
        unpack_all(&mut engine, bytes).expect("a frontier state decodes");
        KvState { engine, sys: model.sys.clone() }
    }

    /// Into the engine there, in place (`Pack::unpack`: its vectors, boxes and the connector's
    /// box are reused, not allocated again).
    fn decode_into(&self, model: &KvModel, bytes: &[u8], out: &mut Option<KvState>) {
        match out {
            Some(s) => unpack_all(&mut s.engine, bytes).expect("a frontier state decodes"),
            None => *out = Some(self.decode(model, bytes)),
        }
        // A new identity for the step memo (`System::take_step_memo`): the search holds this
        // state read-only until its last action, which may write into it
        // (`next_state_in_place`, which unstamps it first).
        if let Some(s) = out {
            s.engine.stamp = crate::system::collections::side::Stamp::fresh();
        }
    }

    fn fairness_class(&self, _model: &KvModel, a: &Action) -> Option<u8> {
        use crate::system::Direction;
        match a {
            Action::Step | Action::StepDrain | Action::StepStoresDrain => Some(0),
            Action::TransferDone(Direction::Store) => Some(1),
            Action::TransferDone(Direction::Load) => Some(2),
            // One class per kind, not per request, so that a permutation of requests keeps every
            // action's class (symmetry). Per request would decide the same: each of these
            // happens at most once per request or session input, so no cycle holds one, and a
            // cycle is fair for them exactly when none is enabled on it.
            Action::Arrive(_) => Some(3),
            Action::StreamInput(_) => Some(4),
            Action::ConsumerRead(_) => Some(5),
            Action::Decode(crate::system::pd::PdInput::Send(_)) => Some(6),
            Action::Decode(crate::system::pd::PdInput::Step) => Some(7),
            Action::Decode(crate::system::pd::PdInput::ReadDone) => Some(8),
            Action::Decode(crate::system::pd::PdInput::ReadFails(_)) => None,
            Action::StepSyncLoadFails(_) | Action::LoadFails(_) | Action::Abort(_) | Action::Error(_) => None,
        }
    }
}
