//! Small helpers every layer may use (no kvmc types): number formatting for reports.

/// 12345678 -> "12,345,678".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The progress bars' style (`kvmc check`, `kvmc replay`): elapsed time, the bar, done of
/// total `unit`, a rounded rate, the ETA, and the message (the item being worked on).
pub fn progress_style(unit: &str) -> indicatif::ProgressStyle {
    let template =
        format!("{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{rate}}, ETA {{eta}}) {{wide_msg}}");
    indicatif::ProgressStyle::with_template(&template)
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .with_key("rate", |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
            let r = s.per_sec();
            let _ = if r >= 10.0 || r == 0.0 { write!(w, "{r:.0}/s") } else { write!(w, "{r:.1}/s") };
        })
        .progress_chars("=> ")
}

/// The layout version of every JSON report (`"schema_version"`; docs/schema/README.md).
pub const SCHEMA_VERSION: u32 = 1;

static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `--quiet` (set by the command line): no progress bars, no run header.
pub fn quiet() -> bool {
    QUIET.load(std::sync::atomic::Ordering::Relaxed)
}

pub fn set_quiet(q: bool) {
    QUIET.store(q, std::sync::atomic::Ordering::Relaxed)
}
