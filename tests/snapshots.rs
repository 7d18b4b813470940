//! Snapshots of what a user reads (issue 25): every subcommand's `--help`, and the typical
//! error messages with their "did you mean" suggestions, committed under tests/snapshots/.
//! A change to an option or a message shows up as a diff there:
//! `KVMC_UPDATE_SNAPSHOTS=1 cargo test --profile dev-fast snapshots` rewrites them.

use crate::common::*;

fn snapshot(name: &str, actual: &str) {
    let p = root().join("tests/snapshots").join(name);
    if std::env::var_os("KVMC_UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&p, actual).unwrap();
    }
    let want = std::fs::read_to_string(&p).unwrap_or_default();
    assert!(
        want == actual,
        "{} differs (KVMC_UPDATE_SNAPSHOTS=1 rewrites it):\n--- committed\n{want}\n--- now\n{actual}",
        p.display()
    );
}

const SUBCOMMANDS: &[&str] = &[
    "check",
    "list",
    "explain",
    "explore",
    "bench",
    "conform",
    "merge",
    "replay",
    "reproduce",
    "testgen",
    "completions",
    "man",
];

#[test]
fn help_of_every_subcommand() {
    let o = kvmc(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    snapshot("help.txt", &stdout(&o));
    for sub in SUBCOMMANDS {
        let o = kvmc(&[sub, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub}");
        let text = stdout(&o);
        // Every option says what it does: no option line stands alone without text.
        for l in text.lines().filter(|l| l.trim_start().starts_with('-')) {
            let opt = l.trim();
            let described = opt.contains("  ")
                || text.lines().skip_while(|x| x.trim() != opt).nth(1).is_some_and(|n| n.starts_with("          "));
            assert!(described, "kvmc {sub}: option without help text: {opt}");
        }
        snapshot(&format!("help-{sub}.txt"), &text);
    }
}

#[test]
fn typical_errors_and_their_suggestions() {
    let cases: &[(&str, &[&str])] = &[
        ("error-variant.txt", &["check", "models/preempt-store.toml", "--variant", "pre-2987"]),
        ("error-profile.txt", &["check", "models/preempt-store.toml", "--profile", "vllm-0.3"]),
        ("error-property.txt", &["check", "models/preempt-store.toml", "--property", "host-integrty"]),
        ("error-explain.txt", &["explain", "host-integrty"]),
        ("error-model.txt", &["check", "models/preempt-stor.toml"]),
        (
            "error-replay-variant.txt",
            &[
                "replay",
                "tests/traces/conversation-head-300.jsonl",
                "-m",
                "models/replay-mooncake.toml",
                "-b",
                "fix-5910",
            ],
        ),
        ("error-flag.txt", &["check", "--proprety", "host-integrity"]),
        ("error-subcommand.txt", &["chek"]),
    ];
    for (file, args) in cases {
        let o = kvmc(args);
        let text = format!("$ kvmc {}\nexit {}\n{}", args.join(" "), o.status.code().unwrap_or(-1), stderr(&o));
        assert_eq!(o.status.code(), Some(2), "{text}");
        snapshot(file, &text);
    }
    // The suggestions are there, and the variant error does not list every variant.
    let o = kvmc(&["check", "models/preempt-store.toml", "--variant", "pre-2987"]);
    assert!(stderr(&o).contains("did you mean 'pre-29870'?"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("fix-59102"), "{}", stderr(&o));
    assert!(stderr(&kvmc(&["explain", "host-integrty"])).contains("did you mean 'host-integrity'?"));
    assert!(stderr(&kvmc(&["check", "models/preempt-stor.toml"])).contains("did you mean models/preempt-store.toml?"));
    assert!(stderr(&kvmc(&["check", "--proprety", "x"])).contains("--property"), "clap's own suggestion stays");
}

#[test]
fn completions_and_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let o = kvmc(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        assert!(stdout(&o).contains("replay") && stdout(&o).contains("property"), "{shell}");
    }
    let o = kvmc(&["man"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with(".ie \\n(.g .ds Aq") || stdout(&o).contains(".TH kvmc"), "{}", stdout(&o));
    let d = tempdir("man");
    let o = kvmc(&["man", "--dir", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(d.join("kvmc.1").is_file() && d.join("kvmc-check.1").is_file());
    let o = kvmc(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `--quiet` and `--color` are accepted by every subcommand.
#[test]
fn quiet_and_color_on_every_subcommand() {
    for sub in SUBCOMMANDS {
        let o = kvmc(&[sub, "--quiet", "--color", "never", "--help"]);
        assert_eq!(o.status.code(), Some(0), "{sub}: {}", stderr(&o));
        assert!(stdout(&o).contains("-q, --quiet") && stdout(&o).contains("--color <WHEN>"), "{sub}");
    }
    let o = kvmc(&["check", "models/shared-prefix.toml", "-P", "g1-accounting", "-q"]);
    assert!(!stdout(&o).starts_with("kvmc check:"), "--quiet drops the run header: {}", stdout(&o));
    assert!(stdout(&o).contains("results:"), "{}", stdout(&o));
}
