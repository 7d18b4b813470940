//! Spec files (`specs/NAME.toml`): one property each, with its summary, the bugs it guards,
//! its reachability guards and the expected verdict per (model, profile, variant).
//!
//! ```toml
//! property = "host-integrity"
//! summary = "every ready host entry holds exactly the KV of the prefix its key names"
//! bugs = ["vllm #63937"]
//! reach = ["reach-store-done"]
//! description = """longer text for kvmc explain"""
//! [[expect]]
//! model = "error-mid-prefill"
//! verdict = "violated"            # profile vllm-0.33 (the model's own) still has #63937
//! reach = ["reach-store-done"]   # optional: guards for this expectation instead of the property's
//! bug = "vllm #63937"             # optional: a row of docs/releases.md (which release has it)
//! [[expect]]
//! model = "error-mid-prefill"
//! profile = "vllm-main"
//! verdict = "holds"
//! ```
//!
//! A file without a top-level `property` is an *expectations file*: only `[[expect]]`
//! entries, each naming its `property`, merged into that property's spec (so one connector's
//! expectations can live together, e.g. `specs/scpu.toml`).

use crate::error::{line_of_offset, read_text, toml_error, KvmcError, Result};
use crate::props::{self, Kind};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    property: Spanned<String>,
    summary: String,
    #[serde(default)]
    bugs: Vec<String>,
    #[serde(default)]
    reach: Vec<Spanned<String>>,
    #[serde(default)]
    description: String,
    #[serde(default, rename = "expect")]
    expects: Vec<RawExpect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpectations {
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    /// `"deep"`: these expectations belong to the deep tier (`kvmc check --tier deep`), not
    /// the fast gate.
    #[serde(default)]
    tier: Option<Spanned<String>>,
    /// Per property: a paragraph appended to that property's description.
    #[serde(default)]
    notes: std::collections::BTreeMap<String, String>,
    #[serde(default, rename = "expect")]
    expects: Vec<RawExpect>,
}

/// What an expectations file adds to the property specs.
struct Additions {
    expects: Vec<(String, Expect)>,
    notes: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    /// Only in expectations files (in a property's own spec it may repeat that property).
    #[serde(default)]
    property: Option<Spanned<String>>,
    model: Spanned<String>,
    #[serde(default)]
    profile: Option<Spanned<String>>,
    #[serde(default)]
    variant: Option<Spanned<String>>,
    verdict: Spanned<String>,
    /// Guards for this expectation instead of the property's (a scope where one of them
    /// cannot happen, e.g. G1 hits with prefix caching off).
    #[serde(default)]
    reach: Option<Vec<Spanned<String>>>,
    /// The bug this expectation documents, for docs/releases.md ("vllm #60810").
    #[serde(default)]
    bug: Option<String>,
}

/// One expectation: checking `property` on `model` under (profile, variant) gives `holds`
/// or `violated`.
#[derive(Clone, Debug)]
pub struct Expect {
    pub model: String,
    pub profile: Option<String>,
    pub variant: Option<String>,
    pub violated: bool,
    /// Reachability guards replacing the property's for this expectation.
    pub reach: Option<Vec<String>>,
    /// The bug this expectation documents (a row of docs/releases.md).
    pub bug: Option<String>,
    /// Where the expectation is written (file, line).
    pub at: (PathBuf, usize),
    /// In the deep tier (`kvmc check --tier deep`) rather than the fast gate.
    pub deep: bool,
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub property: String,
    pub summary: String,
    pub bugs: Vec<String>,
    pub reach: Vec<String>,
    pub description: String,
    pub expects: Vec<Expect>,
    pub path: PathBuf,
}

impl Spec {
    pub fn parse(path: &Path, text: &str) -> Result<Spec> {
        let raw: RawSpec = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
        let at = |sp: std::ops::Range<usize>| line_of_offset(text, sp.start);
        let name = raw.property.get_ref();
        match props::find(name) {
            Some(p) if p.kind == Kind::Always => {}
            Some(_) => {
                return Err(KvmcError::input(
                    path,
                    at(raw.property.span()),
                    format!("'{name}' is a reachability guard, not a property"),
                ))
            }
            None => {
                return Err(KvmcError::input(
                    path,
                    at(raw.property.span()),
                    format!(
                        "unknown property '{name}'{} (see kvmc list)",
                        crate::suggest::did_you_mean(name, props::REGISTRY.iter().map(|p| p.name))
                    ),
                ))
            }
        }
        let reach = parse_guards(path, text, &raw.reach)?;
        let mut expects = Vec::new();
        for x in &raw.expects {
            if let Some(p) = &x.property {
                if p.get_ref() != name {
                    return Err(KvmcError::input(
                        path,
                        at(p.span()),
                        format!(
                            "this spec is for '{name}'; an expectation for '{}' belongs in its own spec",
                            p.get_ref()
                        ),
                    ));
                }
            }
            expects.push(parse_expect(path, text, x)?);
        }
        Ok(Spec {
            property: name.clone(),
            summary: raw.summary,
            bugs: raw.bugs,
            reach,
            description: raw.description,
            expects,
            path: path.to_path_buf(),
        })
    }

    pub fn load(path: &Path) -> Result<Spec> {
        let text = read_text(path)?;
        Spec::parse(path, &text)
    }
}

/// A list of reachability guards, validated.
fn parse_guards(path: &Path, text: &str, raw: &[Spanned<String>]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for r in raw {
        match props::find(r.get_ref()) {
            Some(p) if p.kind == Kind::Sometimes => out.push(r.get_ref().clone()),
            _ => {
                return Err(KvmcError::input(
                    path,
                    line_of_offset(text, r.span().start),
                    format!("'{}' is not a reachability guard (see kvmc list)", r.get_ref()),
                ))
            }
        }
    }
    Ok(out)
}

/// One `[[expect]]` entry, validated.
fn parse_expect(path: &Path, text: &str, x: &RawExpect) -> Result<Expect> {
    let at = |sp: std::ops::Range<usize>| line_of_offset(text, sp.start);
    if let Some(p) = &x.profile {
        if crate::system::rules::profile(p.get_ref()).is_none() {
            return Err(KvmcError::input(
                path,
                at(p.span()),
                crate::system::rules::resolve(p.get_ref(), None).unwrap_err(),
            ));
        }
    }
    if let Some(v) = &x.variant {
        if crate::system::rules::variant(v.get_ref()).is_none() {
            return Err(KvmcError::input(
                path,
                at(v.span()),
                crate::system::rules::resolve("vllm-0.33", Some(v.get_ref())).unwrap_err(),
            ));
        }
    }
    let violated = match x.verdict.get_ref().as_str() {
        "holds" => false,
        "violated" => true,
        other => {
            return Err(KvmcError::input(
                path,
                at(x.verdict.span()),
                format!("verdict must be \"holds\" or \"violated\", got \"{other}\""),
            ))
        }
    };
    Ok(Expect {
        model: x.model.get_ref().clone(),
        profile: x.profile.as_ref().map(|p| p.get_ref().clone()),
        variant: x.variant.as_ref().map(|v| v.get_ref().clone()),
        violated,
        reach: x.reach.as_deref().map(|r| parse_guards(path, text, r)).transpose()?,
        bug: x.bug.clone(),
        at: (path.to_path_buf(), at(x.model.span())),
        deep: false,
    })
}

/// An expectations file: (property, expectation) pairs and notes for properties specified
/// elsewhere.
fn parse_expectations(path: &Path, text: &str) -> Result<Additions> {
    let raw: RawExpectations = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
    for name in raw.notes.keys() {
        if !props::find(name).is_some_and(|d| d.kind == Kind::Always) {
            return Err(KvmcError::input(path, 1, format!("[notes]: unknown property '{name}' (see kvmc list)")));
        }
    }
    let deep = match &raw.tier {
        None => false,
        Some(t) if t.get_ref() == "fast" => false,
        Some(t) if t.get_ref() == "deep" => true,
        Some(t) => {
            return Err(KvmcError::input(
                path,
                line_of_offset(text, t.span().start),
                format!("tier must be \"fast\" or \"deep\", got \"{}\"", t.get_ref()),
            ))
        }
    };
    let mut out = Vec::new();
    for x in &raw.expects {
        let Some(p) = &x.property else {
            return Err(KvmcError::input(
                path,
                line_of_offset(text, x.model.span().start),
                "an expectation outside a property's own spec must name its property",
            ));
        };
        match props::find(p.get_ref()) {
            Some(d) if d.kind == Kind::Always => {}
            _ => {
                return Err(KvmcError::input(
                    path,
                    line_of_offset(text, p.span().start),
                    format!("unknown property '{}' (see kvmc list)", p.get_ref()),
                ))
            }
        }
        out.push((p.get_ref().clone(), Expect { deep, ..parse_expect(path, text, x)? }));
    }
    Ok(Additions { expects: out, notes: raw.notes.into_iter().collect() })
}

/// Is this spec file a property's own spec (it names `property` at the top level)?
fn is_property_spec(path: &Path, text: &str) -> Result<bool> {
    let t: toml::Table = toml::from_str(text).map_err(|e| toml_error(path, text, e))?;
    Ok(t.contains_key("property"))
}

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_specs.rs"));
}
/// `specs/*.toml` as built into the binary (build.rs): (file name, text), sorted by name.
pub use embedded::EMBEDDED;

/// The specs: those in `dir` (`--specs DIR`), else the ones built into the binary, so that
/// verdicts and explanations do not depend on the directory kvmc runs in.
pub fn load(dir: Option<&Path>) -> Result<Vec<Spec>> {
    match dir {
        Some(d) => load_dir(d),
        None => {
            if let Some(n) = stale_note() {
                eprintln!("{n}");
            }
            load_embedded()
        }
    }
}

/// The specs built into the binary (messages name them `specs/NAME.toml`, as in the source tree).
pub fn load_embedded() -> Result<Vec<Spec>> {
    let files = EMBEDDED.iter().map(|(n, t)| (Path::new("specs").join(n), t.to_string())).collect();
    load_files(Path::new("specs/ (built in)"), files)
}

/// A note when the current directory has a `specs/` that differs from the built-in specs
/// (a spec edited without rebuilding kvmc, or someone else's specs): they are not read
/// unless `--specs specs` says so.
pub fn stale_note() -> Option<String> {
    let dir = Path::new("specs");
    let rd = std::fs::read_dir(dir).ok()?;
    let mut here: Vec<(String, Vec<u8>)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok().map(|n| (n, e.path())))
        .filter(|(n, _)| n.ends_with(".toml"))
        .map(|(n, p)| (n, std::fs::read(p).unwrap_or_default()))
        .collect();
    here.sort();
    let same = here.len() == EMBEDDED.len()
        && here.iter().zip(EMBEDDED).all(|((n, t), (en, et))| n == en && t.as_slice() == et.as_bytes());
    (!same).then(|| {
        "note: ./specs differs from the specs built into this kvmc, which are the ones used \
         (rebuild kvmc, or pass --specs specs to read these)"
            .to_string()
    })
}

/// Every spec in `dir`, sorted by file name; at most one spec per property.
pub fn load_dir(dir: &Path) -> Result<Vec<Spec>> {
    let rd = std::fs::read_dir(dir).map_err(|e| KvmcError::io(dir, e))?;
    let mut paths: Vec<PathBuf> =
        rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
    paths.sort();
    let mut files = Vec::new();
    for p in paths {
        let text = read_text(&p)?;
        files.push((p, text));
    }
    load_files(dir, files)
}

/// Parse spec files (path, text), in order; `dir` names where they come from in messages.
fn load_files(dir: &Path, files: Vec<(PathBuf, String)>) -> Result<Vec<Spec>> {
    if files.is_empty() {
        return Err(KvmcError::io(dir, "no spec files (*.toml): the gate would check nothing"));
    }
    let mut specs: Vec<Spec> = Vec::new();
    let mut extra: Vec<(PathBuf, Additions)> = Vec::new();
    for (p, text) in files {
        if !is_property_spec(&p, &text)? {
            let add = parse_expectations(&p, &text)?;
            if add.expects.is_empty() && add.notes.is_empty() {
                return Err(KvmcError::input(
                    &p,
                    1,
                    "an empty spec: no `property`, no [[expect]], no [notes] (its expectations would vanish from the gate)",
                ));
            }
            extra.push((p.clone(), add));
            continue;
        }
        let s = Spec::parse(&p, &text)?;
        if let Some(other) = specs.iter().find(|o| o.property == s.property) {
            return Err(KvmcError::input(
                &p,
                1,
                format!("property '{}' already has a spec in {}", s.property, other.path.display()),
            ));
        }
        specs.push(s);
    }
    for (p, add) in extra {
        for (prop, note) in add.notes {
            let Some(s) = specs.iter_mut().find(|s| s.property == prop) else {
                return Err(KvmcError::input(&p, 1, format!("[notes]: property '{prop}' has no spec of its own")));
            };
            s.description = format!("{}\n\n{}", s.description.trim_end(), note.trim());
        }
        for (prop, x) in add.expects {
            let Some(s) = specs.iter_mut().find(|s| s.property == prop) else {
                return Err(KvmcError::input(
                    &p,
                    x.at.1,
                    format!("property '{prop}' has no spec of its own in {}", dir.display()),
                ));
            };
            s.expects.push(x);
        }
    }
    if let Some(s) = specs.iter().find(|s| s.expects.is_empty()) {
        return Err(KvmcError::input(
            &s.path,
            1,
            format!("property '{}' has no [[expect]] in any spec: the gate would never check it", s.property),
        ));
    }
    Ok(specs)
}
