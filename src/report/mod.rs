//! Reports: text for people, JSON for machines (layouts in `crate::schema`, published
//! as docs/schema/*.json), JUnit for CI dashboards, and counterexample files.

pub mod counterexample;
pub mod coverage;
pub mod link;
pub mod reproduce;
mod reproduce_pd;
pub mod rows;
pub mod state;
pub mod testgen;

pub use rows::{Row, Status, Verdict};
use std::fmt::Write;
use std::path::Path;

fn variant_name(r: &Row) -> String {
    r.variant.clone().unwrap_or_else(|| "fixed".to_string())
}

fn mark(r: &Row) -> &'static str {
    match r.status() {
        Status::Ok => "ok",
        Status::Mismatch => "FAIL",
        Status::Incomplete => "INCOMPLETE",
    }
}

/// Text: one line per result, then every counterexample as a story.
pub fn text(rows: &[Row], verbose_cx: bool) -> String {
    let mut s = String::new();
    for r in rows {
        let exp = r.expected.map_or(String::new(), |e| format!(" (expected {})", e.as_str()));
        let _ = write!(
            s,
            "{:<10} {:<20} {} {:<10} {:<30} {}{}  [{} states, {:.2}s]",
            mark(r),
            r.property,
            r.model,
            r.profile,
            variant_name(r),
            r.verdict.as_str(),
            exp,
            r.unique_states,
            r.seconds
        );
        if !r.unreached.is_empty() {
            let _ = write!(s, "  VACUOUS: never reached {}", r.unreached.join(", "));
        }
        if let Some(c) = &r.cut_by {
            if r.verdict == Verdict::Incomplete {
                let _ = write!(s, "  stopped by {c}");
            }
        }
        s.push('\n');
        if let Some(c) = &r.coverage {
            let _ = writeln!(s, "{:<10} {}", "", c.line());
        }
    }
    let show: Vec<&Row> =
        rows.iter().filter(|r| r.counterexample.is_some() && (verbose_cx || r.status() != Status::Ok)).collect();
    for r in show {
        let cx = r.counterexample.as_ref().unwrap();
        if let Some(w) = r.coverage.as_ref().and_then(|c| c.cx.as_ref()) {
            let _ = writeln!(
                s,
                "\ncounterexample: {} on {} workload {} ({}, {}), {} steps; kvmc check --out DIR writes the workload as a model file\n  workload: {}",
                r.property,
                r.model,
                coverage::workload_label(w.index),
                r.profile,
                variant_name(r),
                cx.steps.len(),
                w.summary
            );
            s.push_str(&counterexample::to_text(cx));
            continue;
        }
        let _ = writeln!(
            s,
            "\ncounterexample: {} on {} ({}, {}), {} steps",
            r.property,
            r.model,
            r.profile,
            variant_name(r),
            cx.steps.len(),
        );
        if let Some(t) = explore_target(r) {
            let _ = writeln!(s, "  explore: {}\n  open:    http://127.0.0.1:3000{}", t.command(), t.url_path());
        }
        s.push_str(&counterexample::to_text(cx));
        if verbose_cx {
            let _ = writeln!(s, "    final state:");
            for l in cx.final_state.lines() {
                let _ = writeln!(s, "      {l}");
            }
        }
    }
    let (ok, bad, inc) = rows.iter().fold((0, 0, 0), |(a, b, c), r| match r.status() {
        Status::Ok => (a + 1, b, c),
        Status::Mismatch => (a, b + 1, c),
        Status::Incomplete => (a, b, c + 1),
    });
    let _ = writeln!(s, "\n{} results: {ok} as expected, {bad} not as expected, {inc} incomplete", rows.len());
    s
}

/// The JSON report (`crate::schema::CheckReport`, docs/schema/check.v1.json).
pub fn json(rows: &[Row], peak_rss: Option<u64>) -> serde_json::Value {
    let results: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "model": r.model,
                "profile": r.profile,
                "variant": variant_name(r),
                "property": r.property,
                "expected": r.expected.map(|e| e.as_str()),
                "verdict": r.verdict.as_str(),
                "ok": r.status() == Status::Ok,
                "vacuous": !r.unreached.is_empty(),
                "unreached_guards": r.unreached,
                "unique_states": r.unique_states,
                "states": r.states,
                "max_depth": r.max_depth,
                "seconds": r.seconds,
                "stopped_by": r.cut_by,
                "counterexample": r.counterexample.as_ref().map(|c| {
                    let mut v = serde_json::json!({"steps": c.steps, "path": c.path});
                    if let Some(t) = explore_target(r) {
                        v["explore"] = serde_json::json!({"model": t.model, "command": t.command(), "url": t.url_path()});
                    }
                    if let Some(k) = c.cycle_start {
                        // A lasso: steps[k..] lead back to the state before steps[k].
                        v["cycle_start"] = serde_json::json!(k);
                    }
                    v
                }),
                "workloads": r.coverage.as_ref().map(|c| c.to_json()),
            })
        })
        .collect();
    serde_json::json!({
        "schema_version": crate::util::SCHEMA_VERSION,
        "kvmc_version": env!("CARGO_PKG_VERSION"),
        "ok": rows.iter().all(|r| r.status() == Status::Ok),
        "peak_rss_bytes": peak_rss,
        "results": results,
    })
}

/// What opens a row's counterexample in the explorer (None: no counterexample, or one of a
/// `[workload]` model's workloads, which has no model file of its own until `--out` writes it).
pub fn explore_target(r: &Row) -> Option<link::Target> {
    let cx = r.counterexample.as_ref()?;
    if r.coverage.as_ref().is_some_and(|c| c.cx.is_some()) {
        return None;
    }
    Some(link::Target {
        model: cx.model_file.clone()?,
        profile: Some(r.profile.clone()),
        variant: r.variant.clone(),
        property: Some(r.property.clone()),
        path: cx.path.clone(),
        scenario: None,
    })
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// JUnit XML: one test suite per model, one test case per (property, profile, variant).
pub fn junit(rows: &[Row]) -> String {
    let mut by_model: std::collections::BTreeMap<&str, Vec<&Row>> = Default::default();
    for r in rows {
        by_model.entry(&r.model).or_default().push(r);
    }
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvmc\">\n");
    for (m, rs) in by_model {
        let failures = rs.iter().filter(|r| r.status() == Status::Mismatch).count();
        let skipped = rs.iter().filter(|r| r.status() == Status::Incomplete).count();
        let time: f64 = rs.iter().map(|r| r.seconds).sum();
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{time:.3}\">",
            xml_escape(m),
            rs.len()
        );
        for r in rs {
            let name = format!("{} [{} {}]", r.property, r.profile, variant_name(r));
            let _ = write!(
                s,
                "    <testcase classname=\"{}\" name=\"{}\" time=\"{:.3}\"",
                xml_escape(m),
                xml_escape(&name),
                r.seconds
            );
            let link = explore_target(r).map(|t| {
                format!(
                    "<properties><property name=\"explore_command\" value=\"{}\"/><property name=\"explore_url\" value=\"{}\"/></properties>",
                    xml_escape(&t.command()),
                    xml_escape(&t.url_path())
                )
            });
            match r.status() {
                Status::Ok if link.is_some() => {
                    let _ = writeln!(s, ">{}</testcase>", link.as_deref().unwrap_or_default());
                }
                Status::Ok => s.push_str("/>\n"),
                Status::Incomplete => {
                    let _ = writeln!(
                        s,
                        "><skipped message=\"incomplete: {}\"/></testcase>",
                        xml_escape(r.cut_by.as_deref().unwrap_or(""))
                    );
                }
                Status::Mismatch => {
                    let msg = format!(
                        "verdict {} (expected {}){}",
                        r.verdict.as_str(),
                        r.expected.unwrap_or(Verdict::Holds).as_str(),
                        if r.unreached.is_empty() {
                            String::new()
                        } else {
                            format!("; vacuous: {}", r.unreached.join(", "))
                        }
                    );
                    let mut body = r.counterexample.as_ref().map(counterexample::to_text).unwrap_or_default();
                    if let Some(t) = explore_target(r) {
                        body = format!("explore: {}\nopen: http://127.0.0.1:3000{}\n{body}", t.command(), t.url_path());
                    }
                    let _ = writeln!(
                        s,
                        ">{}<failure message=\"{}\">{}</failure></testcase>",
                        link.as_deref().unwrap_or_default(),
                        xml_escape(&msg),
                        xml_escape(&body)
                    );
                }
            }
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

/// Write every counterexample of `rows` under `dir`: JSON steps, ITF, DOT and a scenario.
pub fn write_counterexamples(
    rows: &[Row],
    dir: &Path,
    models: &dyn Fn(&Row) -> Option<crate::model::KvModel>,
) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let mut n = 0;
    for r in rows {
        let (Some(cx), Some(m)) = (&r.counterexample, models(r)) else {
            continue;
        };
        let stem = format!("{}__{}__{}__{}", r.model.replace('/', "-"), r.profile, variant_name(r), r.property);
        if let Some(w) = r.coverage.as_ref().and_then(|c| c.cx.as_ref()) {
            // The workload that produced it, as a model file `kvmc check` re-runs.
            std::fs::write(dir.join(format!("{stem}.model.toml")), &w.model_text)?;
        }
        std::fs::write(
            dir.join(format!("{stem}.json")),
            serde_json::to_string_pretty(&serde_json::json!({"steps": cx.steps, "path": cx.path}))? + "\n",
        )?;
        std::fs::write(
            dir.join(format!("{stem}.itf.json")),
            serde_json::to_string_pretty(&counterexample::to_itf(&m, cx, &r.property))? + "\n",
        )?;
        std::fs::write(dir.join(format!("{stem}.dot")), counterexample::to_dot(cx, &r.property))?;
        std::fs::write(dir.join(format!("{stem}.scenario.toml")), counterexample::to_scenario(&m, cx, dir))?;
        n += 1;
    }
    Ok(n)
}
