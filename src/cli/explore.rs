//! `kvmc explore [MODEL]`: kvmc's counterexample explorer (src/explorer) on loopback: G1, the
//! host tier, the requests, the connector and router replay's rows of each state of a path,
//! with what changed at each step and the violating state marked.

use crate::error::{KvmcError, Result};
use crate::explorer::{self, server, Target};
use crate::scope::scenario::{read_header, scenario_actions};
use clap::Args;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use crate::explorer::MAX_PATH_STEPS;

#[derive(Args, Debug)]
pub struct ExploreArgs {
    /// The model file (optional when --path is a scenario file, which names its model).
    pub model: Option<PathBuf>,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(long)]
    pub variant: Option<String>,
    /// Use this profile instead of the model's own.
    #[arg(long)]
    pub profile: Option<String>,
    /// The property the path is about: the page marks the first state violating it.
    #[arg(long)]
    pub property: Option<String>,
    /// Address to serve on. Loopback by default; another address serves the explorer to the
    /// network (a warning is printed).
    #[arg(long, alias = "addr", value_name = "ADDR", default_value = "127.0.0.1:3000")]
    pub bind: String,
    /// Open at a path: an index path ("0/1/0/2": the initial state's index, then one action
    /// index per step; at most 4096 steps) or a scenario file (its model, profile and variant
    /// are used unless given here).
    #[arg(long)]
    pub path: Option<String>,
    /// Open a `kvmc conform` run instead of a model: the event log beside the model, step by
    /// step up to the first divergence (checked under --profile, default the log's release, and
    /// --variant, as `kvmc conform` does).
    #[arg(long, value_name = "LOG", conflicts_with_all = ["model", "path", "property"])]
    pub conform: Option<PathBuf>,
    /// Print the URL, check the path (every index names an action of the state it is taken
    /// in) and say which properties its last state violates, without serving.
    #[arg(long)]
    pub dry_run: bool,
}

/// The directory to serve from and the model as the target names it (relative to it when
/// it can be).
fn root_and_name(model: &Path) -> (PathBuf, String) {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let abs = if model.is_absolute() { model.to_path_buf() } else { cwd.join(model) };
    let (Ok(c), Ok(m)) = (cwd.canonicalize(), abs.canonicalize()) else {
        return (cwd, model.display().to_string());
    };
    match m.strip_prefix(&c) {
        Ok(rel) => (c, rel.display().to_string()),
        Err(_) => {
            let dir = m.parent().map(Path::to_path_buf).unwrap_or(c);
            let name = m.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            (dir, name)
        }
    }
}

pub fn run(a: ExploreArgs) -> Result<i32> {
    if let Some(log) = &a.conform {
        return run_conform(&a, log);
    }
    let scenario = a.path.as_deref().map(Path::new).filter(|p| p.is_file());
    let header = scenario.map(read_header).transpose()?;
    let model_path = match (&a.model, &header) {
        (Some(m), _) => m.clone(),
        (None, Some(h)) => h.model_path()?,
        (None, None) => {
            return Err(KvmcError::Usage(
                "kvmc explore needs a MODEL file, or --path SCENARIO (a scenario names its model)".into(),
            ))
        }
    };
    let profile = a.profile.clone().or_else(|| header.as_ref().and_then(|h| h.profile.clone()));
    let variant = a.variant.clone().or_else(|| header.as_ref().and_then(|h| h.variant.clone()));
    if let Some(p) = &a.property {
        if crate::props::find(p).is_none() {
            return Err(KvmcError::Usage(format!("--property {p}: unknown property (see kvmc list)")));
        }
    }
    let model = explorer::load_model(&model_path, profile.as_deref(), variant.as_deref())?;
    let (root, name) = root_and_name(&model_path);
    let mut target = Target {
        model: name,
        profile: Some(model.profile.clone()),
        variant: model.variant.clone(),
        property: a.property.clone(),
        path: "0".into(),
        scenario: None,
    };
    if let (Some(sp), Some(p)) = (scenario, &a.path) {
        let acts = scenario_actions(&model.sys, sp)?;
        if acts.len() > MAX_PATH_STEPS {
            return Err(KvmcError::input(
                sp,
                1,
                format!(
                    "the scenario has {} steps; the explorer opens paths of at most {MAX_PATH_STEPS} steps \
                     (run it with `kvmc replay {p}`)",
                    acts.len()
                ),
            ));
        }
        match explorer::index_path(&model, &acts) {
            Some(path) => target.path = path,
            // Steps in which stores finish (a replay's store_steps = 0) are not the checker's
            // actions: the page replays the scenario itself.
            None => {
                let (sroot, sname) = root_and_name(sp);
                if sroot != root {
                    return Err(KvmcError::input(
                        sp,
                        1,
                        format!(
                            "the scenario has steps in which stores finish within the step, which the checker \
                             does not offer, so the explorer opens it as a file, and it must be under the \
                             directory it serves ({}); run kvmc explore from a directory that holds both",
                            root.display()
                        ),
                    ));
                }
                target.scenario = Some(sname);
                target.path = String::new();
            }
        }
    } else if let Some(p) = &a.path {
        explorer::resolve_path(&model, p).map_err(|why| {
            let shown: String = p.chars().take(48).collect();
            let more = if shown.len() < p.len() { "..." } else { "" };
            KvmcError::Usage(format!("--path {shown}{more}: {why}"))
        })?;
        target.path = p.strip_suffix('/').unwrap_or(p).to_string();
    }
    let addr = bind_addr(&a.bind, &root)?;
    if a.dry_run {
        println!("Explorer: http://{addr}{}", target.url_path());
        let acts = match scenario.filter(|_| target.scenario.is_some()) {
            Some(sp) => scenario_actions(&model.sys, sp)?,
            None => explorer::resolve_path(&model, &target.path).map_err(KvmcError::Usage)?,
        };
        let r = explorer::replay(&model, &acts);
        let last = r.violated.last().cloned().unwrap_or_default();
        println!(
            "last state (step {}) violates: {}",
            r.states.len() - 1,
            if last.is_empty() { "nothing".to_string() } else { last.join(", ") }
        );
        return Ok(0);
    }
    let listener = TcpListener::bind(addr).map_err(|e| KvmcError::Usage(format!("cannot listen on {addr}: {e}")))?;
    // The bound address (port 0 picks a free one).
    println!("Explorer: http://{}{}", listener.local_addr().unwrap_or(addr), target.url_path());
    let ex = Arc::new(server::Explorer::new(root, target));
    server::serve(ex, listener);
    Ok(0)
}

/// The address to serve on; a warning when it is not loopback.
fn bind_addr(bind: &str, root: &Path) -> Result<std::net::SocketAddr> {
    let addr: std::net::SocketAddr =
        bind.parse().map_err(|_| KvmcError::Usage(format!("--bind {bind}: expected IP:PORT")))?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "warning: --bind {addr} is not a loopback address: anyone who can reach it can read the models \
             and logs under {} through the explorer",
            root.display()
        );
    }
    Ok(addr)
}

/// `kvmc explore --conform LOG`: check the log as `kvmc conform` does (bad input exits 2 here,
/// not in the page), then serve it, or with --dry-run print the URL and the verdict.
fn run_conform(a: &ExploreArgs, log: &Path) -> Result<i32> {
    use crate::explorer::conform::ConformTarget;
    let text = crate::error::read_text(log)?;
    let choice = crate::conform::profile::choose(&text, a.profile.as_deref());
    if let Some(n) = &choice.note {
        eprintln!("note: {n}");
    }
    let profile = choice.profile;
    crate::system::rules::resolve(&profile, a.variant.as_deref()).map_err(KvmcError::Usage)?;
    let report = crate::conform::check_text(log, &text, &profile, a.variant.as_deref(), 8)?;
    let (root, name) = root_and_name(log);
    let t = ConformTarget { log: name, profile, variant: a.variant.clone() };
    let addr = bind_addr(&a.bind, &root)?;
    if a.dry_run {
        println!("Explorer: http://{addr}{}", t.url_path());
        match &report.divergence {
            Some(d) => println!("diverges at step {} (line {}: {})", d.step, d.line, d.what),
            None => println!("conforms ({} steps)", report.steps),
        }
        return Ok(0);
    }
    let listener = TcpListener::bind(addr).map_err(|e| KvmcError::Usage(format!("cannot listen on {addr}: {e}")))?;
    println!("Explorer: http://{}{}", listener.local_addr().unwrap_or(addr), t.url_path());
    let mut ex = server::Explorer::new(root, Target::default());
    ex.home = Some(t.url_path());
    server::serve(Arc::new(ex), listener);
    Ok(0)
}
