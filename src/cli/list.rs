//! `kvmc list`.

use crate::check::specs;
use crate::error::Result;
use crate::model::scope::Scope;
use crate::props::{Kind, CATALOGUE};
use crate::system::rules::{PROFILES, RULE_ROWS, VARIANTS};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print the rules table: every switch and its value per profile.
    #[arg(long)]
    pub rules: bool,
    #[arg(long, default_value = "specs")]
    pub specs: PathBuf,
    #[arg(long, default_value = "models")]
    pub models: PathBuf,
}

/// The rules table as Markdown (also used by docs).
pub fn rules_table() -> String {
    let mut s = String::from("| rule | what it decides | vLLM | ");
    s.push_str(&PROFILES.iter().map(|p| p.name).collect::<Vec<_>>().join(" | "));
    s.push_str(" |\n|---|---|---|");
    s.push_str(&"---|".repeat(PROFILES.len()));
    s.push('\n');
    let rules: Vec<_> = PROFILES.iter().map(|p| (p.rules)()).collect();
    for row in RULE_ROWS {
        s.push_str(&format!("| `{}` | {} | {} | ", row.name, row.what, row.upstream));
        s.push_str(&rules.iter().map(|r| (row.value)(r)).collect::<Vec<_>>().join(" | "));
        s.push_str(" |\n");
    }
    s
}

pub fn run(a: ListArgs) -> Result<i32> {
    if a.rules {
        print!("{}", rules_table());
        return Ok(0);
    }
    let specs = if a.specs.is_dir() { specs::load_dir(&a.specs)? } else { Vec::new() };
    println!("profiles:");
    for p in PROFILES {
        println!("  {:<12} {}", p.name, p.summary);
    }
    println!("variants (--variant NAME, on top of a profile):");
    for v in VARIANTS {
        println!("  {:<30} {:<28} {}", v.name, v.upstream, v.summary);
    }
    println!("properties:");
    for p in CATALOGUE.iter().filter(|p| p.kind == Kind::Always) {
        let sum = specs.iter().find(|s| s.property == p.name).map_or("(no spec)".to_string(), |s| s.summary.clone());
        println!("  {:<20} {}{}", p.name, sum, if p.offload_only { "  [offload]" } else { "" });
    }
    println!("reachability guards:");
    for p in CATALOGUE.iter().filter(|p| p.kind == Kind::Sometimes) {
        println!("  {}", p.name);
    }
    println!("models:");
    if let Ok(rd) = std::fs::read_dir(&a.models) {
        let mut paths: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
        paths.sort();
        for p in paths {
            match Scope::load(&p) {
                Ok(s) => println!("  {:<28} {:<10} {}", s.name, s.profile, s.description),
                Err(e) => println!("  {:<28} INVALID: {e}", p.display()),
            }
        }
    }
    Ok(0)
}
