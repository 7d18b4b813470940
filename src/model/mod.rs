//! The stateright `Model` over one engine (`system::Engine`), for a scope read from a model
//! file. Environment actions: arrivals, engine steps, transfer completion or failure, client
//! aborts and request errors, and (NIXL P/D) the consumer's read of a finished request. Engine decisions stay deterministic; only the environment
//! branches.

pub mod display;
pub mod scenario;
pub mod scope;
mod scope_mooncake;

use crate::props::{self, PropDef};
use crate::system::connector::Phase;
use crate::system::engine::StepInput;
use crate::system::ghost::Mark;
use crate::system::{Ctx, Direction, Engine, Events, Rules};
use scope::{Arrivals, Scope};
use stateright::{Model, Property};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

pub use scope::parse_tokens;

/// An environment action.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Action {
    /// Request `r` arrives (`add_request`).
    Arrive(u16),
    /// One engine step (async scheduling: one iteration of the batch queue).
    Step,
    /// One engine step in which every copy submitted so far finishes before the worker
    /// reports (stores submitted at this step's start are reported in this step).
    StepDrain,
    /// One engine step in which the stores submitted at its start finish before the worker
    /// reports (loads keep their time). Never explored: trace replay writes it (`store_steps
    /// = 0`) and scenarios read it.
    StepStoresDrain,
    /// One engine step whose sync load fails from its `k`-th block on.
    StepSyncLoadFails(u32),
    /// The worker's handler finishes its oldest copy of that direction.
    TransferDone(Direction),
    /// The oldest async load fails from its `k`-th block on.
    LoadFails(u32),
    /// The client aborts request `r`.
    Abort(u16),
    /// Request `r` finishes with an error.
    Error(u16),
    /// The client sends streaming session `r` its next input (or ends the session).
    StreamInput(u16),
    /// NIXL P/D: the consumer (decode instance) reads finished request `r`'s blocks from the
    /// producer's host buffer.
    ConsumerRead(u16),
}

/// A model state: the engine, plus the scope for rendering (not part of identity).
#[derive(Clone)]
pub struct KvState {
    pub engine: Engine,
    pub scope: Arc<Scope>,
}

impl PartialEq for KvState {
    fn eq(&self, o: &Self) -> bool {
        self.engine == o.engine
    }
}
impl Eq for KvState {}
impl Hash for KvState {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.engine.hash(h)
    }
}

/// The model of one scope under one rule set.
pub struct KvModel {
    pub scope: Arc<Scope>,
    pub profile: String,
    pub variant: Option<String>,
    pub rules: Rules,
    /// The properties this run checks (always-properties and their guards).
    pub props: Vec<&'static PropDef>,
}

impl KvModel {
    pub fn new(
        scope: Arc<Scope>,
        profile: Option<&str>,
        variant: Option<&str>,
        props: Vec<&'static PropDef>,
    ) -> Result<Self, String> {
        let profile = profile.unwrap_or(&scope.profile).to_string();
        let rules = crate::system::rules::resolve(&profile, variant)?;
        Ok(KvModel { scope, profile, variant: variant.map(str::to_string), rules, props })
    }

    pub fn ctx(&self) -> Ctx<'_> {
        Ctx { cfg: &self.scope.cfg, rules: &self.rules, wl: &self.scope.workload }
    }

    pub fn init(&self) -> KvState {
        KvState { engine: Engine::new(&self.scope.cfg, &self.scope.workload, &self.rules), scope: self.scope.clone() }
    }

    fn arrival_enabled(&self, e: &Engine, r: usize) -> bool {
        use crate::system::types::Status;
        if e.reqs[r].status != Status::Pending {
            return false;
        }
        if let Some(a) = self.scope.after[r] {
            if !e.reqs[a as usize].status.is_finished() {
                return false;
            }
        }
        match self.scope.arrivals {
            Arrivals::Any => true,
            Arrivals::InOrder => r == 0 || e.reqs[r - 1].status != Status::Pending,
        }
    }

    fn stream_input_enabled(&self, e: &Engine, r: u16) -> bool {
        e.stream_input_enabled(self.ctx(), r)
            && (self.scope.stream_input == scope::StreamInput::Any
                || e.reqs[r as usize].status == crate::system::types::Status::Parked)
    }

    /// Apply `a` to `s` (events on or off); None if the action changes nothing. With
    /// `canonical` the result has job ids and LRU ranks renumbered (the checker's states);
    /// without, it keeps the real counters (stories, replays).
    pub fn apply(&self, s: &Engine, a: Action, ev: &mut Events, canonical: bool) -> Option<Engine> {
        let ctx = self.ctx();
        let mut e = s.clone();
        e.ghost.marks = 0;
        match a {
            Action::Arrive(r) => e.arrive(ctx, r, ev),
            Action::Step | Action::StepDrain | Action::StepStoresDrain | Action::StepSyncLoadFails(_) => {
                // The bounded step counter is for single runs (scenarios, stories); in the
                // checker's states it stays 0 (not part of a state's identity): the checker
                // finds livelocks as fair cycles (`requests-finish`, src/check/hooks.rs).
                if !canonical {
                    e.ghost.idle_steps = s.ghost.idle_steps.saturating_add(1);
                }
                let mut input = StepInput {
                    drain: a == Action::StepDrain,
                    drain_stores: a == Action::StepStoresDrain,
                    ..Default::default()
                };
                if let Action::StepSyncLoadFails(k) = a {
                    input.sync_load_fail = Some(k);
                    e.ghost.faults += 1;
                }
                e.step(ctx, &input, ev);
                if input.sync_load_fail.is_some() && !e.ghost.marked(Mark::LoadFailure) {
                    return None; // no sync load failed: same as a plain step
                }
                if (input.drain || input.drain_stores) && !e.ghost.marked(Mark::Drained) {
                    return None; // nothing finished within the step: same as a plain step
                }
            }
            Action::TransferDone(d) => {
                let j = e.next_transfer(d)?;
                e.transfer_done(ctx, d, j, ev);
            }
            Action::LoadFails(k) => {
                let j = e.next_transfer(Direction::Load)?;
                e.ghost.faults += 1;
                e.transfer_failed(ctx, j, k, ev);
            }
            Action::Abort(r) => e.abort(ctx, r, ev),
            Action::Error(r) => e.error(ctx, r, ev),
            Action::StreamInput(r) => e.stream_input(ctx, r, ev),
            Action::ConsumerRead(r) => e.consumer_read(ctx, r, ev),
        }
        if canonical {
            e.canonicalize();
        }
        if matches!(a, Action::Step | Action::StepDrain | Action::StepStoresDrain | Action::StepSyncLoadFails(_)) {
            let unchanged = if canonical {
                e.same_ignoring_marks(s)
            } else {
                let (mut x, mut y) = (e.clone(), s.clone());
                x.canonicalize();
                y.canonicalize();
                x.same_ignoring_marks(&y)
            };
            if unchanged {
                return None;
            }
        }
        Some(e)
    }

    /// True when work remains and nothing but a fault can move the engine (a deadlock).
    pub fn is_stuck(&self, s: &Engine) -> bool {
        if !s.has_work() || s.is_dead() {
            return false;
        }
        if (0..s.reqs.len()).any(|r| self.arrival_enabled(s, r) || self.stream_input_enabled(s, r as u16)) {
            return false;
        }
        if s.next_transfer(Direction::Store).is_some() || s.next_transfer(Direction::Load).is_some() {
            return false;
        }
        if !s.consumer_readable().is_empty() {
            return false;
        }
        self.apply(s, Action::Step, &mut Events::off(), true).is_none()
    }

    /// The most blocks an async load of the next load job has (for failure choices).
    fn load_fail_choices(&self, e: &Engine) -> u32 {
        let Some(id) = e.next_transfer(Direction::Load) else {
            return 0;
        };
        e.conn.load_job_blocks(id)
    }
}

impl Model for KvModel {
    type State = KvState;
    type Action = Action;

    fn init_states(&self) -> Vec<KvState> {
        vec![self.init()]
    }

    fn actions(&self, s: &KvState, out: &mut Vec<Action>) {
        let e = &s.engine;
        if u32::from(e.ghost.idle_steps) > self.scope.progress_steps {
            return; // a livelock was found; do not explore past it
        }
        if e.is_dead() {
            return; // the engine died (rows-present, connector-assert)
        }
        for r in 0..e.reqs.len() {
            if self.arrival_enabled(e, r) {
                out.push(Action::Arrive(r as u16));
            }
        }
        out.push(Action::Step);
        if self.scope.cfg.has_connector() {
            out.push(Action::StepDrain);
        }
        let f = &self.scope.faults;
        let can_fail = f.load_failure && e.ghost.faults < f.max_load_failures;
        if can_fail {
            let sync_budget = self.scope.cfg.offload().map_or(0, |o| o.sync_load_budget_tokens);
            if sync_budget > 0 {
                for k in 0..sync_budget.div_ceil(self.scope.cfg.block_size) {
                    out.push(Action::StepSyncLoadFails(k));
                }
            }
        }
        if e.next_transfer(Direction::Store).is_some() {
            out.push(Action::TransferDone(Direction::Store));
        }
        if e.next_transfer(Direction::Load).is_some() {
            out.push(Action::TransferDone(Direction::Load));
            if can_fail {
                for k in 0..self.load_fail_choices(e) {
                    out.push(Action::LoadFails(k));
                }
            }
        }
        for r in 0..e.reqs.len() as u16 {
            if self.stream_input_enabled(e, r) {
                out.push(Action::StreamInput(r));
            }
        }
        for r in e.consumer_readable() {
            out.push(Action::ConsumerRead(r));
        }
        for (r, q) in e.reqs.iter().enumerate() {
            if f.abort && q.status.is_live() {
                out.push(Action::Abort(r as u16));
            }
            if f.error && q.status == crate::system::types::Status::Running {
                out.push(Action::Error(r as u16));
            }
        }
    }

    fn next_state(&self, s: &KvState, a: Action) -> Option<KvState> {
        let e = self.apply(&s.engine, a, &mut Events::off(), true)?;
        Some(KvState { engine: e, scope: s.scope.clone() })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut out: Vec<Property<Self>> = self.props.iter().map(|p| props::to_stateright(p)).collect();
        // requests-finish, its liveness half: every fair behaviour finishes every request.
        if let Some(p) = self.props.iter().find(|p| p.name == "requests-finish") {
            out.push(Property::eventually(p.name, props::progress::finished_or_dead));
        }
        out
    }

    fn format_action(&self, a: &Action) -> String {
        display::action_label(&self.scope, a)
    }

    fn format_step(&self, s: &KvState, a: Action) -> Option<String> {
        let mut ev = Events::on();
        let next = self.apply(&s.engine, a, &mut ev, true)?;
        Some(display::step_story(&self.scope, &s.engine, &next, &ev.list))
    }
}

/// Jobs still moving through the worker (for display).
pub fn live_phase(p: Phase) -> &'static str {
    match p {
        Phase::Built => "built",
        Phase::Queued => "queued",
        Phase::Submitted => "copying",
        Phase::Done => "done",
        Phase::Failed => "failed",
        Phase::Reported => "reported",
    }
}
