//! `kvmc explore MODEL`: stateright's Explorer on loopback, states rendered as tables.

use crate::error::{KvmcError, Result};
use crate::model::scenario::scenario_actions;
use crate::model::scope::Scope;
use crate::model::KvModel;
use crate::props::{self, Kind};
use clap::Args;
use stateright::Model;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct ExploreArgs {
    pub model: PathBuf,
    #[arg(long)]
    pub variant: Option<String>,
    #[arg(long)]
    pub profile: Option<String>,
    /// Address to serve on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: String,
    /// Open at a path: stateright's index path ("0/1/0/2") or a scenario file.
    #[arg(long)]
    pub path: Option<String>,
    /// Print the URL (and check the path) without serving.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(a: ExploreArgs) -> Result<i32> {
    let scope = Arc::new(Scope::load(&a.model)?);
    let defs: Vec<_> =
        props::CATALOGUE.iter().filter(|p| props::applies(p, &scope.cfg) && p.kind == Kind::Always).collect();
    let model = KvModel::new(scope, a.profile.as_deref(), a.variant.as_deref(), defs).map_err(KvmcError::Usage)?;
    let mut url = format!("http://{}/", a.addr);
    if let Some(p) = &a.path {
        let idx = if std::path::Path::new(p).is_file() {
            let acts = scenario_actions(&model, std::path::Path::new(p))?;
            if acts.contains(&crate::model::Action::StepStoresDrain) {
                return Err(KvmcError::input(
                    std::path::Path::new(p),
                    1,
                    "the scenario has steps in which stores finish within the step (kvmc replay with \
                     store_steps = 0), which the explorer does not offer; run it with `kvmc replay SCENARIO`, \
                     or replay the trace with store_steps = 1 to get a scenario the explorer opens"
                        .to_string(),
                ));
            }
            let mut s = model.init();
            let mut idx = vec!["0".to_string()];
            for x in acts {
                let mut acts = Vec::new();
                model.actions(&s, &mut acts);
                idx.push(acts.iter().position(|y| *y == x).expect("resolved").to_string());
                s = model.next_state(&s, x).expect("resolved");
            }
            idx.join("/")
        } else {
            if !p.split('/').all(|x| x.parse::<usize>().is_ok()) {
                return Err(KvmcError::Usage(format!("--path {p}: neither a file nor an index path like 0/1/2")));
            }
            p.clone()
        };
        url.push_str(&format!("#/steps/{idx}"));
    }
    let addr: std::net::SocketAddr =
        a.addr.parse().map_err(|_| KvmcError::Usage(format!("--addr {}: expected IP:PORT", a.addr)))?;
    if !addr.ip().is_loopback() {
        eprintln!("warning: serving on {addr}, which is not a loopback address");
    }
    println!("Explorer: {url}");
    if a.dry_run {
        return Ok(0);
    }
    std::net::TcpListener::bind(addr).map_err(|e| KvmcError::Usage(format!("cannot listen on {addr}: {e}")))?;
    model.checker().serve(addr);
    Ok(0)
}
