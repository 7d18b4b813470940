//! The stateright `Model` over one system (`system::System`), for a scope read from a model
//! file: the checker explores every input the environment may give
//! ([`System::inputs`](crate::system::System::inputs)) and evaluates the registry's properties
//! (src/props) on every state. Engine decisions stay deterministic; only the environment
//! branches.

use crate::props::{PropDef, REGISTRY};
use crate::scope::Scope;
use crate::system::display;
use crate::system::{Engine, Events, Input, System};
use stateright::{Model, Property};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The checker's action: the system's input.
pub type Action = Input;

/// A model state: the engine, plus the system for rendering (not part of identity).
#[derive(Clone)]
pub struct KvState {
    pub engine: Engine,
    pub sys: Arc<System>,
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

impl std::fmt::Debug for KvState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display::render(&self.sys, &self.engine))
    }
}

/// The model of one scope under one rule set.
pub struct KvModel {
    pub scope: Arc<Scope>,
    /// The system the scope describes under the chosen rules.
    pub sys: Arc<System>,
    pub profile: String,
    pub variant: Option<String>,
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
        let sys = Arc::new(scope.system(Some(&profile), variant)?);
        Ok(KvModel { scope, sys, profile, variant: variant.map(str::to_string), props })
    }

    pub fn init(&self) -> KvState {
        KvState { engine: self.sys.init(), sys: self.sys.clone() }
    }

    /// [`System::apply`] (the checker's states are canonical; stories and replays are not).
    pub fn apply(&self, s: &Engine, a: Input, ev: &mut Events, canonical: bool) -> Option<Engine> {
        self.sys.apply(s, a, ev, canonical)
    }
}

/// A registry entry's predicate as stateright's `fn(&Model, &State)`: one instance per index
/// (stateright's properties are plain function pointers).
fn lifted<const I: usize>(m: &KvModel, s: &KvState) -> bool {
    (REGISTRY[I].check)(&m.sys, &s.engine)
}

macro_rules! lift_table {
    ($($i:literal)*) => {
        [$(lifted::<$i> as fn(&KvModel, &KvState) -> bool),*]
    };
}

/// `lifted` for every index the registry may have.
const LIFTED: [fn(&KvModel, &KvState) -> bool; 64] = lift_table!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
    32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63
);
const _: () = assert!(REGISTRY.len() <= LIFTED.len(), "the registry outgrew the model's table: extend LIFTED");

/// A registry entry as a stateright property of the checker's model.
pub fn to_stateright(p: &'static PropDef) -> Property<KvModel> {
    let f = LIFTED[p.id as usize];
    match p.kind {
        crate::props::Kind::Always => Property::always(p.name, f),
        crate::props::Kind::Sometimes => Property::sometimes(p.name, f),
    }
}

impl Model for KvModel {
    type State = KvState;
    type Action = Input;

    fn init_states(&self) -> Vec<KvState> {
        vec![self.init()]
    }

    fn actions(&self, s: &KvState, out: &mut Vec<Input>) {
        self.sys.inputs(&s.engine, out)
    }

    fn next_state(&self, s: &KvState, a: Input) -> Option<KvState> {
        let e = self.sys.apply(&s.engine, a, &mut Events::off(), true)?;
        Some(KvState { engine: e, sys: s.sys.clone() })
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut out: Vec<Property<Self>> = self.props.iter().map(|p| to_stateright(p)).collect();
        // requests-finish, its liveness half: every fair behaviour finishes every request.
        if let Some(p) = self.props.iter().find(|p| p.name == "requests-finish") {
            out.push(Property::eventually(p.name, |m: &KvModel, s: &KvState| {
                crate::props::progress::finished_or_dead(&m.sys, &s.engine)
            }));
        }
        out
    }

    fn format_action(&self, a: &Input) -> String {
        display::action_label(&self.sys, a)
    }

    fn format_step(&self, s: &KvState, a: Input) -> Option<String> {
        let mut ev = Events::on();
        let next = self.sys.apply(&s.engine, a, &mut ev, true)?;
        Some(display::step_story(&self.sys, &s.engine, &next, &ev.list))
    }
}
