//! `kvmc explain PROPERTY`.

use crate::check::specs;
use crate::error::{KvmcError, Result};
use crate::props::{self, Kind};
use crate::system::rules::{self, RULE_ROWS};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    pub property: String,
    #[arg(long, default_value = "specs")]
    pub specs: PathBuf,
}

pub fn run(a: ExplainArgs) -> Result<i32> {
    let Some(def) = props::find(&a.property) else {
        return Err(KvmcError::Usage(format!("unknown property '{}' (see kvmc list)", a.property)));
    };
    if def.kind == Kind::Sometimes {
        println!("{}: a reachability guard (sometimes). It holds an example when some reachable state satisfies it; a model whose guards are never reached is reported vacuous.", def.name);
        return Ok(0);
    }
    let specs = specs::load_dir(&a.specs)?;
    let Some(s) = specs.iter().find(|s| s.property == a.property) else {
        return Err(KvmcError::Usage(format!("property '{}' has no spec in {}", a.property, a.specs.display())));
    };
    println!("{}: {}\n", s.property, s.summary);
    if !s.description.is_empty() {
        println!("{}\n", s.description.trim_end());
    }
    if !s.bugs.is_empty() {
        println!("guards against: {}", s.bugs.join(", "));
    }
    if !s.reach.is_empty() {
        println!("reachability guards: {}", s.reach.join(", "));
    }
    println!("\nexpected verdicts:");
    for x in &s.expects {
        println!(
            "  {:<28} {:<10} {:<28} {}",
            x.model,
            x.profile.clone().unwrap_or_else(|| "(model's)".into()),
            x.variant.clone().unwrap_or_else(|| "fixed".into()),
            if x.violated { "violated" } else { "holds" }
        );
    }
    // The rules-table rows that the variants and profiles named here change.
    let base = rules::resolve("vllm-0.33", None).expect("profile");
    let mut shown = Vec::new();
    for x in &s.expects {
        let r = match rules::resolve(x.profile.as_deref().unwrap_or("vllm-0.33"), x.variant.as_deref()) {
            Ok(r) => r,
            Err(_) => continue,
        };
        for row in RULE_ROWS {
            let (was, now) = ((row.value)(&base), (row.value)(&r));
            let tag = format!("{}{}", x.profile.clone().unwrap_or_default(), x.variant.clone().unwrap_or_default());
            if was != now && !shown.contains(&(row.name, tag.clone())) {
                if shown.is_empty() {
                    println!("\nrules that differ from vllm-0.33 in these expectations:");
                }
                println!("  {:<34} {:<30} vllm-0.33: {was}  ->  {now}   ({})", tag, row.name, row.upstream);
                shown.push((row.name, tag));
            }
        }
    }
    Ok(0)
}
