//! "Did you mean" for names the user types: properties, profiles, variants and models. The
//! closest known names by Jaro-Winkler similarity (strsim), as clap does for flags.

/// Known names close to `typed`, best first (at most three).
pub fn closest<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let t = typed.to_ascii_lowercase();
    let mut scored: Vec<(f64, &str)> = known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(&t, &k.to_ascii_lowercase()), k))
        // A known name that contains what was typed (a prefix, a bug number) is close too.
        .map(|(s, k)| if t.len() >= 3 && k.contains(t.as_str()) { (s.max(0.9), k) } else { (s, k) })
        .filter(|(s, _)| *s >= 0.85)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    // Only names about as close as the best one.
    let best = scored.first().map_or(0.0, |s| s.0);
    scored.into_iter().take_while(|(s, _)| *s >= best - 0.02).take(3).map(|(_, k)| k).collect()
}

/// " (did you mean 'x'?)", " (did you mean 'x' or 'y'?)", or "" when nothing is close.
pub fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let c = closest(typed, known);
    match c.as_slice() {
        [] => String::new(),
        [one] => format!(" (did you mean '{one}'?)"),
        [init @ .., last] => format!(
            " (did you mean {} or '{last}'?)",
            init.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The `.toml` file stems in `dir` (model names), sorted.
pub fn model_names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".toml").map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// For a model path that does not exist: the close file names beside it.
pub fn missing_model(path: &std::path::Path) -> String {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let names = model_names(dir);
    let c = closest(&stem, names.iter().map(String::as_str));
    match c.as_slice() {
        [] => String::new(),
        _ => format!(
            " (did you mean {}?)",
            c.iter().map(|n| format!("{}", dir.join(format!("{n}.toml")).display())).collect::<Vec<_>>().join(" or ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        let known = ["pre-29870", "pre-31020", "fix-59102", "no-defer"];
        assert_eq!(closest("pre-2987", known), vec!["pre-29870"]);
        assert_eq!(did_you_mean("fix-5910", known), " (did you mean 'fix-59102'?)");
        assert_eq!(did_you_mean("zzzz", known), "");
        assert_eq!(closest("59102", known), vec!["fix-59102"]);
    }
}
