//! Helpers shared by the test modules.

use kvmc::check::{run, RunOpts, RunResult};
use kvmc::model::KvModel;
use kvmc::props::{self, Kind};
use kvmc::scope::Scope;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn scope(name: &str) -> Arc<Scope> {
    Arc::new(Scope::load(&root().join("models").join(format!("{name}.toml"))).expect("model loads"))
}

/// Every applicable always-property and every applicable guard.
pub fn all_props(s: &Scope) -> Vec<&'static props::PropDef> {
    props::REGISTRY.iter().filter(|p| props::applies(p, &s.cfg)).collect()
}

pub fn model(name: &str, profile: Option<&str>, variant: Option<&str>) -> KvModel {
    let s = scope(name);
    let ps = all_props(&s);
    KvModel::new(s, profile, variant, ps).expect("rules resolve")
}

pub fn check(name: &str, profile: Option<&str>, variant: Option<&str>) -> RunResult {
    run(model(name, profile, variant), &RunOpts::default())
}

pub fn always_props(s: &Scope) -> Vec<&'static str> {
    all_props(s).into_iter().filter(|p| p.kind == Kind::Always).map(|p| p.name).collect()
}

pub fn kvmc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvmc")).args(args).current_dir(root()).output().expect("kvmc runs")
}

pub fn kvmc_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvmc")).args(args).current_dir(dir).output().expect("kvmc runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh temporary directory under target/.
pub fn tempdir(tag: &str) -> PathBuf {
    let d = root().join("target").join("test-tmp").join(format!("{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
