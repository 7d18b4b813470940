//! The checker's BFS (the search engine, `crate::search`) on kvmc's own model: determinism over
//! thread counts, and symmetry reduction's soundness. On every exploration of the gate, and on
//! scopes whose requests share a role (bench/flagship-same2.toml, -same3), `--symmetry on` gives
//! the same verdicts and the same counterexample depths as `--symmetry off`; and renaming
//! same-role requests commutes with every action on every reachable state.

use crate::common::root;
use kvmc::check::gate::{execute, plan_paths, plan_specs, Job};
use kvmc::check::specs::load_dir;
use kvmc::check::RunOpts;
use kvmc::model::KvModel;
use kvmc::scope::Scope;
use kvmc::system::symmetry::{rename, Roles};
use stateright::Model;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

fn jobs() -> Vec<Job> {
    let specs = load_dir(&root().join("specs")).expect("specs load");
    let mut jobs = plan_specs(&specs, &root().join("models")).expect("the gate plans");
    let same: Vec<_> = [2, 3].iter().map(|n| root().join(format!("bench/flagship-same{n}.toml"))).collect();
    jobs.extend(plan_paths(&same, None, None, &[], &specs).expect("symmetric scopes plan"));
    jobs
}

/// (verdict, counterexample length, unique states) per row.
fn rows(job: &Job, opts: &RunOpts) -> Vec<(String, String, Option<usize>, usize)> {
    execute(job, opts)
        .expect("runs")
        .into_iter()
        .map(|r| (r.property, r.verdict.as_str().to_string(), r.counterexample.map(|c| c.steps.len()), r.unique_states))
        .collect()
}

#[test]
fn symmetry_keeps_every_verdict_and_counterexample_depth() {
    let mut reduced = 0;
    let mut compared = 0;
    for job in &jobs() {
        let off = rows(job, &RunOpts::default());
        let on = rows(job, &RunOpts { symmetry: true, ..RunOpts::default() });
        for (a, b) in off.iter().zip(&on) {
            let what = format!("{} {:?} {:?} {}", job.scope.name, job.profile, job.variant, a.0);
            assert_eq!((&a.1, a.2), (&b.1, b.2), "{what}: verdict and counterexample depth");
            assert!(b.3 <= a.3, "{what}");
            reduced += usize::from(b.3 < a.3);
            compared += 1;
        }
    }
    assert!(compared > 268, "{compared} rows");
    assert!(reduced >= 20, "symmetry reduced {reduced} rows: it must apply somewhere for this test to mean anything");
}

#[test]
fn two_threads_give_the_same_rows_as_one() {
    for job in jobs().iter().step_by(3) {
        let full = |t| execute(job, &RunOpts { threads: t, ..RunOpts::default() }).expect("runs");
        let (a, b) = (full(1), full(2));
        for (x, y) in a.iter().zip(&b) {
            let what = format!("{} {:?} {}", job.scope.name, job.variant, x.property);
            assert_eq!(
                (x.verdict, x.unique_states, x.states, x.max_depth),
                (y.verdict, y.unique_states, y.states, y.max_depth),
                "{what}"
            );
            assert_eq!(
                x.counterexample.as_ref().map(|c| &c.actions),
                y.counterexample.as_ref().map(|c| &c.actions),
                "{what}"
            );
        }
    }
}

/// Renaming two same-role requests commutes with every action: rename(next(s, a)) ==
/// next(rename(s), rename(a)) on every reachable state (the definition of a symmetry).
#[test]
fn renaming_same_role_requests_commutes_with_every_action() {
    use kvmc::model::Action;
    for n in [2, 3] {
        let scope = Arc::new(Scope::load(&root().join(format!("bench/flagship-same{n}.toml"))).unwrap());
        let m = KvModel::new(scope.clone(), None, None, vec![]).unwrap();
        let roles = Roles::new(&scope.workload, &scope.after, false, true).expect("one role");
        let class = &roles.classes[0];
        let mut map: Vec<u16> = (0..scope.workload.requests.len() as u16).collect();
        map.swap(class[0] as usize, class[1] as usize);
        let ra = |a: Action| match a {
            Action::Arrive(r) => Action::Arrive(map[r as usize]),
            Action::Abort(r) => Action::Abort(map[r as usize]),
            Action::Error(r) => Action::Error(map[r as usize]),
            Action::StreamInput(r) => Action::StreamInput(map[r as usize]),
            Action::ConsumerRead(r) => Action::ConsumerRead(map[r as usize]),
            a => a,
        };
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([m.init()]);
        let mut checked = 0;
        while let Some(s) = queue.pop_front() {
            if !seen.insert(s.engine.clone()) || seen.len() > 20_000 {
                continue;
            }
            let rs = kvmc::model::KvState { engine: rename(&s.engine, &map), sys: s.sys.clone() };
            let (mut acts, mut racts) = (Vec::new(), Vec::new());
            m.actions(&s, &mut acts);
            m.actions(&rs, &mut racts);
            let mut mapped: Vec<Action> = acts.iter().map(|a| ra(*a)).collect();
            mapped.sort_by_key(|a| format!("{a:?}"));
            racts.sort_by_key(|a| format!("{a:?}"));
            assert_eq!(mapped, racts, "the same actions are enabled, renamed");
            for a in acts {
                let next = m.next_state(&s, a);
                let rnext = m.next_state(&rs, ra(a));
                assert_eq!(
                    next.as_ref().map(|x| rename(&x.engine, &map)),
                    rnext.map(|x| x.engine),
                    "{n} requests: {a:?} does not commute with the renaming"
                );
                checked += 1;
                if let Some(x) = next {
                    queue.push_back(x);
                }
            }
        }
        assert!(checked > 1000, "{checked} transitions checked");
    }
}

/// requests-finish's livelock half: mut-preempt-oldest makes two requests restart each other
/// forever on preempt-livelock; the counterexample is a lasso whose cycle returns to its first
/// state, and the released rule (FCFS, the newest is preempted) holds.
#[test]
fn a_starving_mutation_is_found_as_a_lasso() {
    use kvmc::check::{replay, Verdict};
    let specs = load_dir(&root().join("specs")).expect("specs load");
    let path = vec![root().join("models/preempt-livelock.toml")];
    let only = vec!["requests-finish".to_string()];
    for (variant, violated) in [(None, false), (Some("mut-preempt-oldest"), true)] {
        let job = &plan_paths(&path, None, variant, &only, &specs).unwrap()[0];
        let row = execute(job, &RunOpts::default()).unwrap().remove(0);
        assert_eq!(row.verdict, if violated { Verdict::Violated } else { Verdict::Holds }, "{variant:?}");
        if !violated {
            continue;
        }
        let cx = row.counterexample.expect("a counterexample");
        let k = cx.cycle_start.expect("a lasso, not a deadlock");
        assert!(k < cx.actions.len());
        let m = KvModel::new(job.scope.clone(), None, variant, vec![]).unwrap();
        let states = replay(&m, &cx.actions).expect("the lasso replays");
        assert_eq!(states[k].engine, states.last().unwrap().engine, "the cycle returns to its first state");
        assert!(states.iter().all(|s| !s.engine.reqs.iter().all(|q| q.status.is_finished())));
        // With every step it takes, some request never finishes: the engine keeps stepping.
        assert!(cx.actions[k..].iter().all(|a| *a == kvmc::model::Action::Step));
    }
}

/// The checker's hooks, with every encoding of a frontier state checked: it is the engine's
/// packed form, it decodes to an equal state with the same fingerprint (and the engine's serde
/// form round-trips through bincode), and decoded in place over the state decoded before (the
/// search's way) it equals the state decoded whole.
struct RoundTrip(kvmc::check::hooks::KvHooks);

impl kvmc::search::Hooks<KvModel> for RoundTrip {
    fn representative(&self, m: &KvModel, s: &kvmc::model::KvState) -> Option<kvmc::model::KvState> {
        self.0.representative(m, s)
    }
    fn next_state_into(
        &self,
        m: &KvModel,
        s: &kvmc::model::KvState,
        a: kvmc::model::Action,
        out: &mut Option<kvmc::model::KvState>,
    ) -> bool {
        self.0.next_state_into(m, s, a, out)
    }
    fn fairness_class(&self, m: &KvModel, a: &kvmc::model::Action) -> Option<u8> {
        self.0.fairness_class(m, a)
    }
    fn encodes(&self) -> bool {
        true
    }
    fn encode(&self, m: &KvModel, s: &kvmc::model::KvState, out: &mut Vec<u8>) {
        let from = out.len();
        self.0.encode(m, s, out);
        // The frontier holds the engine's packed form.
        use kvmc::system::collections::pack::Pack;
        let mut packed = Vec::new();
        s.engine.pack(&mut packed);
        assert!(out[from..] == packed[..], "the frontier holds the engine's packed form");
        let back = self.0.decode(m, &out[from..]);
        assert!(back == *s, "a frontier state decodes to itself");
        let mut again = Vec::new();
        self.0.encode(m, &back, &mut again);
        assert!(again[..] == out[from..], "a decoded state encodes to the same bytes");
        // The serde form (bincode's fixed-width format) still round-trips.
        use bincode::Options;
        let opts = bincode::DefaultOptions::new().with_fixint_encoding();
        let theirs = opts.serialize(&s.engine).unwrap();
        assert!(opts.deserialize::<kvmc::system::Engine>(&theirs).unwrap() == s.engine, "the serde form round-trips");
        let fp = |s: &kvmc::model::KvState| kvmc::search::fingerprint(s, kvmc::search::DEFAULT_SEED);
        assert_eq!(fp(&back), fp(s), "a decoded state keeps its fingerprint");
    }
    fn decode(&self, m: &KvModel, bytes: &[u8]) -> kvmc::model::KvState {
        self.0.decode(m, bytes)
    }
    fn decode_into(&self, m: &KvModel, bytes: &[u8], out: &mut Option<kvmc::model::KvState>) {
        self.0.decode_into(m, bytes, out);
        let whole = self.0.decode(m, bytes);
        assert!(out.as_ref() == Some(&whole), "a state decoded in place equals the one decoded whole");
    }
}

/// Two searches of one model end alike: the same end, counts, depth and discoveries.
fn assert_same_outcome<A: PartialEq + std::fmt::Debug>(
    a: &kvmc::search::Outcome<A>,
    b: &kvmc::search::Outcome<A>,
    what: &str,
) {
    assert_eq!((a.end, a.unique, a.generated, a.max_depth), (b.end, b.unique, b.generated, b.max_depth), "{what}");
    for (x, y) in a.properties.iter().zip(&b.properties) {
        assert_eq!(x.discovery, y.discovery, "{what}: {}", x.name);
    }
}

/// The encoded frontier changes nothing: on every other exploration of the gate and the
/// symmetric scopes (the rest: `the_drain_shortcut_changes_nothing`), the search with frontier states kept encoded (checked to decode to
/// themselves) gives the same counts, depth and discoveries as with them whole, on 1 and 2
/// threads, with symmetry off and on.
#[test]
fn the_encoded_frontier_gives_the_same_outcome_as_whole_states() {
    use kvmc::check::hooks::KvHooks;
    use kvmc::search::{search, Options};
    let mut compared = 0;
    for job in jobs().iter().filter(|j| j.family.is_none()).step_by(2) {
        let defs: Vec<_> = job.checks.iter().map(|(p, _)| kvmc::props::find(p).expect("a property")).collect();
        let model = KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), defs)
            .expect("the model builds");
        for symmetry in [false, true] {
            let whole = search(&model, &KvHooks::new(&model, symmetry).with_encoding(false), &Options::default());
            for threads in [1, 2] {
                let hooks = RoundTrip(KvHooks::new(&model, symmetry));
                let enc = search(&model, &hooks, &Options { threads, ..Options::default() });
                let what = format!("{} {:?} symmetry {symmetry}, {threads} threads", job.scope.name, job.variant);
                assert_same_outcome(&enc, &whole, &what);
                assert!(enc.frontier_states > 0 && enc.frontier_bytes > 0, "{what}: the frontier was encoded");
                assert_eq!((whole.frontier_bytes, whole.frontier_states), (0, 0), "{what}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 40, "{compared} runs compared");
}

/// The draining step the checker skips without taking it (`System::apply_into`: the plain step
/// of the same decoded state saw no copy to drain) is no transition: on the gate's explorations
/// the previous test leaves out, the search over decoded (stamped) states, where the shortcut
/// applies, gives the same counts, depth and discoveries as over whole states, where it never
/// does.
#[test]
fn the_drain_shortcut_changes_nothing() {
    use kvmc::check::hooks::KvHooks;
    use kvmc::search::{search, Options};
    let mut compared = 0;
    for job in jobs().iter().filter(|j| j.family.is_none()).skip(1).step_by(2) {
        let defs: Vec<_> = job.checks.iter().map(|(p, _)| kvmc::props::find(p).expect("a property")).collect();
        let model = KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), defs)
            .expect("the model builds");
        let whole = search(&model, &KvHooks::new(&model, false).with_encoding(false), &Options::default());
        let enc = search(&model, &KvHooks::new(&model, false), &Options::default());
        assert_same_outcome(&enc, &whole, &format!("{} {:?}", job.scope.name, job.variant));
        compared += 1;
    }
    assert!(compared >= 40, "{compared} runs compared");
}

/// The last successor written in place (`System::apply_last_in_place`, which the search uses
/// for the last action of a decoded state) is the successor `System::apply` gives, on every
/// reachable state (up to 2,000 per model) of every model of the gate, for every input it
/// takes; it declines exactly the engine steps and P/D's inputs, and leaves the state
/// untouched when it declines.
#[test]
fn the_last_successor_in_place_is_the_copied_one() {
    use std::collections::BTreeMap;
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut done = HashSet::new();
    for job in jobs().iter().filter(|j| j.family.is_none()) {
        if !done.insert((job.scope.name.clone(), job.profile.clone(), job.variant.clone())) {
            continue;
        }
        let m = KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), vec![])
            .expect("the model builds");
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([m.init()]);
        while let Some(s) = queue.pop_front() {
            if seen.len() >= 2_000 || !seen.insert(s.engine.clone()) {
                continue;
            }
            let mut acts = Vec::new();
            m.actions(&s, &mut acts);
            for a in acts {
                let copied = m.next_state(&s, a);
                let mut e = s.engine.clone();
                let what = format!("{} {:?} {:?}: {a:?}", job.scope.name, job.profile, job.variant);
                match m.sys.apply_last_in_place(&mut e, a) {
                    None => {
                        assert!(a.is_step() || m.sys.pd.is_some(), "{what}: declined");
                        assert!(e == s.engine, "{what}: declined but changed the state");
                    }
                    Some(changed) => {
                        assert!(!a.is_step() && m.sys.pd.is_none(), "{what}: taken");
                        assert_eq!(changed, copied.is_some(), "{what}: transition or not");
                        if let Some(c) = &copied {
                            assert!(e == c.engine, "{what}: a different successor");
                        }
                        let kind = format!("{a:?}");
                        *by_kind.entry(kind.split('(').next().unwrap_or_default().to_string()).or_default() += 1;
                    }
                }
                if let Some(c) = copied {
                    queue.push_back(c);
                }
            }
        }
    }
    for kind in ["Arrive", "TransferDone", "LoadFails", "Abort", "Error", "StreamInput", "ConsumerRead"] {
        assert!(by_kind.get(kind).copied().unwrap_or(0) > 20, "{kind}: {by_kind:?}");
    }
}
