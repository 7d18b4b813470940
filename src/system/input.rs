//! The system's input: everything the environment of one vLLM engine can do to it (a request
//! arrives, the engine steps, a copy finishes or fails, a client aborts, a request errors, a
//! streaming session sends its next chunk, a P/D consumer reads; with a P/D pair, the decode
//! instance's and the router's inputs, `Input::Decode`), and [`System`], which applies
//! one input to an engine state. The checker explores every enabled input ([`System::inputs`]),
//! replay and conformance apply the inputs a trace or a log dictates; all three go through
//! [`System::apply`], so a rule lives in one place.

use super::engine::StepInput;
use super::ghost::Mark;
use super::types::Status;
use super::{Ctx, Direction, Engine, EngineConfig, Events, Rules, Workload};

/// One input from the environment.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Input {
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
    /// P/D with router replay: an input of the decode instance or the router (`src/system/pd`).
    Decode(super::pd::PdInput),
}

impl Input {
    /// An engine step of any kind.
    pub fn is_step(self) -> bool {
        matches!(self, Input::Step | Input::StepDrain | Input::StepStoresDrain | Input::StepSyncLoadFails(_))
    }
}

/// When a streaming session's client sends its next input.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum StreamInput {
    /// Any time while the session is live (queued unless it is parked).
    Any,
    /// Only while the session is parked waiting for it (a smaller scope).
    WhenParked,
}

/// How arrivals are ordered.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Arrivals {
    /// Request i arrives only after request i-1 arrived (any time after).
    InOrder,
    /// Any pending request may arrive at any time.
    Any,
}

/// Which environment faults the model explores.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// A client may abort any live request between steps.
    pub abort: bool,
    /// A running request may finish with an error between steps.
    pub error: bool,
    /// A load may fail (from any of its blocks on).
    pub load_failure: bool,
    /// At most this many load failures per run (fairness: failures are finite).
    pub max_load_failures: u8,
}

/// What the environment may do, beyond the workload: the order of arrivals, the faults, when
/// streaming input comes, and how many idle steps count as a livelock.
#[derive(Clone, Debug)]
pub struct Environment {
    /// `after[r]`: request that must have finished before `r` may arrive.
    pub after: Vec<Option<u16>>,
    pub faults: Faults,
    pub arrivals: Arrivals,
    pub stream_input: StreamInput,
    /// Engine steps without progress (a sampled token, a finish, an arrival) that count as a
    /// livelock for `requests-finish`.
    pub progress_steps: u32,
}

/// One engine under one rule set, its workload and its environment: everything needed to
/// start it, apply inputs to it and evaluate properties of its states.
#[derive(Clone, Debug)]
pub struct System {
    pub cfg: EngineConfig,
    pub workload: Workload,
    pub env: Environment,
    pub rules: Rules,
    /// P/D: the decode instance's configuration and workload (None: one engine).
    pub pd: Option<Box<super::pd::PdSys>>,
}

impl System {
    pub fn ctx(&self) -> Ctx<'_> {
        Ctx { cfg: &self.cfg, rules: &self.rules, wl: &self.workload }
    }

    /// The initial engine state.
    pub fn init(&self) -> Engine {
        let mut e = Engine::new(&self.cfg, &self.workload, &self.rules);
        if let Some(pd) = &self.pd {
            e.pd = Some(Box::new(super::pd::PdState::new(pd, &self.rules)));
        }
        e
    }

    fn arrival_enabled(&self, e: &Engine, r: usize) -> bool {
        if e.reqs[r].status != Status::Pending {
            return false;
        }
        if let Some(a) = self.env.after[r] {
            if !e.reqs[a as usize].status.is_finished() {
                return false;
            }
            if e.pd.as_ref().is_some_and(|x| !x.answered(a)) {
                return false; // P/D: the client waits for the router's answer
            }
        }
        match self.env.arrivals {
            Arrivals::Any => true,
            Arrivals::InOrder => r == 0 || e.reqs[r - 1].status != Status::Pending,
        }
    }

    fn stream_input_enabled(&self, e: &Engine, r: u16) -> bool {
        e.stream_input_enabled(self.ctx(), r)
            && (self.env.stream_input == StreamInput::Any || e.reqs[r as usize].status == Status::Parked)
    }

    /// Apply `a` to `s` (events on or off); None if the input changes nothing. With
    /// `canonical` the result has job ids and LRU ranks renumbered (the checker's states);
    /// without, it keeps the real counters (stories, replays).
    pub fn apply(&self, s: &Engine, a: Input, ev: &mut Events, canonical: bool) -> Option<Engine> {
        let mut e = s.clone();
        self.apply_on_copy(s, &mut e, a, ev, canonical).then_some(e)
    }

    /// [`System::apply`] written into `out`, whose allocations are reused (`out` becomes a
    /// copy of `s` first, whatever it held): the checker's search keeps one such engine per
    /// thread, so a successor it drops (seen before, or no transition) costs no allocation.
    /// False (and `out` unspecified) when the input changes nothing.
    ///
    /// A draining step (`Input::StepDrain`) of a stamped engine whose plain step this thread
    /// has taken is known without taking it when that plain step saw no copy submitted at the
    /// point where the drain would finish them (`Ghost::drainable`): until that point the two
    /// steps run alike (nothing before it reads `StepInput::drain`), and a drain that finishes
    /// nothing leaves the rest alike too, so the draining step is no transition.
    pub fn apply_into(&self, s: &Engine, a: Input, ev: &mut Events, canonical: bool, out: &mut Engine) -> bool {
        if a == Input::StepDrain && canonical && !ev.is_on() && drains_nothing(s) {
            debug_assert!(
                {
                    let mut x = s.clone();
                    !self.apply_on_copy(s, &mut x, a, &mut Events::off(), canonical)
                },
                "a draining step skipped as no transition is one"
            );
            return false;
        }
        out.clone_from(s);
        self.apply_on_copy(s, out, a, ev, canonical)
    }

    /// [`System::apply_into`] for the checker (canonical, events off) with `e` as both the
    /// source and the successor, for the last input the search takes from a decoded frontier
    /// state, which it does not read again: no copy. `None` (and `e` untouched) for the inputs
    /// whose rule reads the source beside the successor (every engine step: the "a step that
    /// changes nothing is no step" comparison and the step memo; P/D: the router's sync);
    /// `Some(false)` (and `e` unspecified) when the input changes nothing. The rest of
    /// `apply_on_copy` for the other inputs, which read nothing of the source but its idle-step
    /// counter.
    pub fn apply_last_in_place(&self, e: &mut Engine, a: Input) -> Option<bool> {
        if a.is_step() || self.pd.is_some() {
            return None;
        }
        e.stamp = Default::default(); // no longer the decoded frontier state it was
        let idle = e.ghost.idle_steps;
        if !apply_in_place(self.ctx(), e, a, &mut Events::off()) {
            return Some(false);
        }
        e.ghost.idle_steps = idle;
        e.canonicalize();
        Some(true)
    }

    /// The rest of [`System::apply`], on `e`, a fresh copy of `s`.
    fn apply_on_copy(&self, s: &Engine, e: &mut Engine, a: Input, ev: &mut Events, canonical: bool) -> bool {
        if let Some(pd) = &self.pd {
            // P/D: the decode side's inputs, and the router after every input.
            e.ghost.marks = 0;
            if let Some(x) = e.pd.as_mut() {
                x.d.ghost.marks = 0;
            }
            let moved = match a {
                Input::Decode(x) => super::pd::apply(self, pd, e, x, ev),
                _ => apply_in_place(self.ctx(), e, a, ev),
            };
            note_step(s, e, a);
            if !moved {
                return false;
            }
            super::pd::sync(self, pd, e, ev);
            if let Input::Decode(super::pd::PdInput::Step) = a {
                let before = s.pd.as_ref().expect("a P/D state");
                let after = e.pd.as_ref().expect("a P/D state");
                if after.d.same_ignoring_marks(&before.d) && after.route == before.route {
                    return false; // D's step changed nothing
                }
            }
        } else {
            let moved = apply_in_place(self.ctx(), e, a, ev);
            note_step(s, e, a);
            if !moved {
                return false;
            }
        }
        if canonical {
            // The bounded step counter is for single runs (scenarios, stories); in the
            // checker's states it stays 0 (not part of a state's identity): the checker finds
            // livelocks as fair cycles (`requests-finish`, src/check/hooks.rs).
            e.ghost.idle_steps = s.ghost.idle_steps;
        }
        if let Input::StepSyncLoadFails(_) = a {
            if !e.ghost.marked(Mark::LoadFailure) {
                return false; // no sync load failed: same as a plain step
            }
        }
        if matches!(a, Input::StepDrain | Input::StepStoresDrain) && !e.ghost.marked(Mark::Drained) {
            return false; // nothing finished within the step: same as a plain step
        }
        if canonical {
            e.canonicalize();
        }
        if a.is_step() {
            let unchanged = if canonical {
                e.same_ignoring_marks(s)
            } else {
                let (mut x, mut y) = (e.clone(), s.clone());
                x.canonicalize();
                y.canonicalize();
                x.same_ignoring_marks(&y)
            };
            if unchanged {
                return false;
            }
        }
        true
    }

    /// True when work remains and nothing but a fault can move the engine (a deadlock).
    pub fn is_stuck(&self, s: &Engine) -> bool {
        clear_step_memo();
        if !s.has_work() || s.is_dead() {
            return false;
        }
        if (0..s.reqs.len()).any(|r| self.arrival_enabled(s, r) || self.stream_input_enabled(s, r as u16)) {
            return false;
        }
        if s.next_transfer(Direction::Store).is_some() || s.next_transfer(Direction::Load).is_some() {
            return false;
        }
        if self.pd.is_none() && !s.consumer_readable().is_empty() {
            return false;
        }
        if super::pd::can_move(self, s) {
            return false;
        }
        // One reused engine per thread: this runs on every state the checker visits. The step
        // is kept for the search's own step of the same state (`take_step_memo`).
        STEP_MEMO.with(|c| {
            let mut c = c.borrow_mut();
            let m = c.get_or_insert_with(|| StepMemo {
                sys: 0,
                src: s.clone(),
                stamp: 0,
                out: s.clone(),
                changed: false,
                valid: false,
            });
            m.out.clone_from(s);
            m.changed = self.apply_on_copy(s, &mut m.out, Input::Step, &mut Events::off(), true);
            // A decoded frontier state is known by its stamp; any other engine by a copy.
            m.stamp = s.stamp.get();
            if m.stamp == 0 || cfg!(debug_assertions) {
                m.src.clone_from(s);
            }
            m.sys = self as *const System as usize;
            m.valid = true;
            !m.changed
        })
    }

    /// The checker's `Input::Step` from `s` (canonical, events off) if the deadlock check
    /// ([`System::is_stuck`]) on this thread last computed it, from an engine equal to `s`, for
    /// this system: `Some(changed)`, with the successor moved into `out` when it changed.
    /// Every property is evaluated on a state just before the search expands it, so the step
    /// is taken once, not twice. Call [`clear_step_memo`] when a run begins (a memo names its
    /// system by address, which a later system may reuse).
    pub fn take_step_memo(&self, s: &Engine, out: &mut Engine) -> Option<bool> {
        STEP_MEMO.with(|c| {
            let mut c = c.borrow_mut();
            let m = c.as_mut()?;
            if !m.valid || m.sys != self as *const System as usize {
                return None;
            }
            let same = if m.stamp != 0 {
                // The same decoded engine, untouched since (the search holds it read-only
                // until its last action, which `apply_last_in_place` takes, unstamping it).
                let same = s.stamp.get() == m.stamp;
                debug_assert!(!same || m.src == *s, "a stamped engine changed");
                same
            } else {
                m.src == *s
            };
            if !same {
                return None;
            }
            m.valid = false;
            if m.changed {
                std::mem::swap(out, &mut m.out);
            }
            Some(m.changed)
        })
    }

    /// The most blocks an async load of the next load job has (for failure choices). Under
    /// `failed_load_request_level` the OffloadingConnector's failed load is reported per request
    /// and its request recomputes from 0 (or fails): where it broke off changes nothing, so the
    /// one choice is the whole job (from block 0).
    fn load_fail_choices(&self, e: &Engine) -> u32 {
        let Some(id) = e.next_transfer(Direction::Load) else {
            return 0;
        };
        let n = e.conn.load_job_blocks(id);
        if self.rules.failed_load_request_level && self.cfg.connector_kind() == super::ConnectorKind::Offloading {
            n.min(1)
        } else {
            n
        }
    }

    /// Every input the environment may give in state `e`, in a fixed order (the checker's
    /// branching; stateright rebuilds paths from indices into this list).
    pub fn inputs(&self, e: &Engine, out: &mut Vec<Input>) {
        if u32::from(e.ghost.idle_steps) > self.env.progress_steps {
            return; // a livelock was found; do not explore past it
        }
        if e.is_dead() {
            return; // the engine died (rows-present, connector-assert)
        }
        for r in 0..e.reqs.len() {
            if self.arrival_enabled(e, r) {
                out.push(Input::Arrive(r as u16));
            }
        }
        out.push(Input::Step);
        if self.cfg.has_connector() {
            out.push(Input::StepDrain);
        }
        let f = &self.env.faults;
        let can_fail = f.load_failure && e.ghost.faults < f.max_load_failures;
        if can_fail {
            let sync_budget = self.cfg.offload().map_or(0, |o| o.sync_load_budget_tokens);
            if sync_budget > 0 {
                for k in 0..sync_budget.div_ceil(self.cfg.block_size) {
                    out.push(Input::StepSyncLoadFails(k));
                }
            }
        }
        if e.next_transfer(Direction::Store).is_some() {
            out.push(Input::TransferDone(Direction::Store));
        }
        if e.next_transfer(Direction::Load).is_some() {
            out.push(Input::TransferDone(Direction::Load));
            if can_fail {
                for k in 0..self.load_fail_choices(e) {
                    out.push(Input::LoadFails(k));
                }
            }
        }
        for r in 0..e.reqs.len() as u16 {
            if self.stream_input_enabled(e, r) {
                out.push(Input::StreamInput(r));
            }
        }
        if self.pd.is_some() {
            // P/D: D's reads are the consumer's; the router and D move too.
            let mut d = Vec::new();
            super::pd::inputs(self, e, &mut d);
            out.extend(d.into_iter().map(Input::Decode));
        } else {
            for r in e.consumer_readable() {
                out.push(Input::ConsumerRead(r));
            }
        }
        for (r, q) in e.reqs.iter().enumerate() {
            if f.abort && q.status.is_live() {
                out.push(Input::Abort(r as u16));
            }
            if f.error && q.status == Status::Running {
                out.push(Input::Error(r as u16));
            }
        }
    }
}

/// The last step [`System::is_stuck`] took on this thread (see [`System::take_step_memo`]).
struct StepMemo {
    /// The system's address (valid within one run: see [`clear_step_memo`]).
    sys: usize,
    /// The stepped engine: its stamp when it had one (a decoded frontier state), else a copy
    /// (debug builds keep the copy always, to check the stamp).
    src: Engine,
    stamp: u64,
    out: Engine,
    changed: bool,
    valid: bool,
}

thread_local! {
    static STEP_MEMO: std::cell::RefCell<Option<StepMemo>> = const { std::cell::RefCell::new(None) };
}

thread_local! {
    /// The stamp of the last stamped engine this thread took a plain step of, and that step's
    /// `Ghost::drainable` (see [`System::apply_into`]).
    static STEP_DRAINABLE: std::cell::Cell<(u64, bool)> = const { std::cell::Cell::new((0, true)) };
}

/// After a plain step of `s` (into `e`): keep what it saw of the drain point, if `s` is stamped.
#[inline]
fn note_step(s: &Engine, e: &Engine, a: Input) {
    let stamp = s.stamp.get();
    if a == Input::Step && stamp != 0 {
        STEP_DRAINABLE.with(|c| c.set((stamp, e.ghost.drainable.0)));
    }
}

/// Did this thread's plain step of `s` (a stamped engine) see no copy to drain?
#[inline]
fn drains_nothing(s: &Engine) -> bool {
    let stamp = s.stamp.get();
    stamp != 0 && STEP_DRAINABLE.with(|c| c.get()) == (stamp, false)
}

/// Forget this thread's kept step (a checker run calls it when it begins).
pub fn clear_step_memo() {
    STEP_MEMO.with(|c| {
        if let Some(m) = c.borrow_mut().as_mut() {
            m.valid = false;
        }
    });
}

/// Apply `a` to `e` in place, with the ghost marks of the last input cleared first (replay's
/// way: one engine, never cloned). False when the input has nothing to act on (no copy of that
/// direction in flight). [`System::apply`] is this on a copy, plus the checker's rule that an
/// input which changes nothing is no transition.
pub fn apply_in_place(ctx: Ctx<'_>, e: &mut Engine, a: Input, ev: &mut Events) -> bool {
    e.ghost.marks = 0;
    e.ghost.drainable.0 = false;
    match a {
        Input::Arrive(r) => e.arrive(ctx, r, ev),
        Input::Step | Input::StepDrain | Input::StepStoresDrain | Input::StepSyncLoadFails(_) => {
            e.ghost.idle_steps = e.ghost.idle_steps.saturating_add(1);
            let mut input = StepInput {
                drain: a == Input::StepDrain,
                drain_stores: a == Input::StepStoresDrain,
                ..Default::default()
            };
            if let Input::StepSyncLoadFails(k) = a {
                input.sync_load_fail = Some(k);
                e.ghost.faults += 1;
            }
            e.step(ctx, &input, ev);
        }
        Input::TransferDone(d) => {
            let Some(j) = e.next_transfer(d) else { return false };
            e.transfer_done(ctx, d, j, ev);
        }
        Input::LoadFails(k) => {
            let Some(j) = e.next_transfer(Direction::Load) else { return false };
            e.ghost.faults += 1;
            e.transfer_failed(ctx, j, k, ev);
        }
        Input::Abort(r) => e.abort(ctx, r, ev),
        Input::Error(r) => e.error(ctx, r, ev),
        Input::StreamInput(r) => e.stream_input(ctx, r, ev),
        Input::ConsumerRead(r) => e.consumer_read(ctx, r, ev),
        Input::Decode(_) => return false, // only a P/D System applies these
    }
    true
}
