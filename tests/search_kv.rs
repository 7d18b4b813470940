//! The search engine on kvmc's own model: on every exploration of the gate it finds what
//! `kvmc check`'s explorer finds (unique states, depth, the stop decision, every discovery's
//! path), on 1 and 2 threads. The engine is not wired into the checker yet; this is what
//! makes wiring it a change of engine, not of results.

use crate::common::root;
use kvmc::check::gate::plan_specs;
use kvmc::check::specs::load_dir;
use kvmc::check::{run, RunOpts};
use kvmc::model::KvModel;
use kvmc::props;
use kvmc::search::{search, Discovery, End, Options, Plain};

#[test]
fn every_gate_exploration_matches_the_checker() {
    let specs = load_dir(&root().join("specs")).expect("specs load");
    let jobs = plan_specs(&specs, &root().join("models")).expect("the gate plans");
    assert!(jobs.len() > 50, "{} explorations", jobs.len());
    let mut found = 0;
    for job in &jobs {
        let mut names: Vec<&'static str> = job.checks.iter().map(|(p, _)| props::find(p).unwrap().name).collect();
        for g in job.reach.values().flatten() {
            let n = props::find(g).unwrap().name;
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let defs: Vec<_> = names.iter().map(|n| props::find(n).unwrap()).collect();
        let model = || KvModel::new(job.scope.clone(), job.profile.as_deref(), job.variant.as_deref(), defs.clone());
        let what = format!("{} {:?} {:?}", job.scope.name, job.profile, job.variant);
        let want = run(model().unwrap(), &RunOpts::default());
        let m = model().unwrap();
        for threads in [1, 2] {
            let o = search(&m, &Plain, &Options { threads, ..Options::default() });
            assert_eq!((o.unique, o.max_depth), (want.unique_states, want.max_depth), "{what}, {threads} threads");
            assert_eq!(o.end == End::Exhausted, want.complete && want.props.iter().any(|p| !p.discovered), "{what}");
            for p in &o.properties {
                let w = want.outcome(p.name).unwrap();
                match &p.discovery {
                    Discovery::Found(t) => {
                        assert_eq!(Some(&t.actions), w.path.as_ref(), "{what}: {}", p.name);
                        found += 1;
                    }
                    Discovery::Absent | Discovery::Unknown => assert!(!w.discovered, "{what}: {}", p.name),
                }
            }
        }
    }
    assert!(found > 100, "{found} discoveries compared");
}
