//! Bad replay input: traces and replay models that exit 2, naming the file and the line.

use crate::common::*;

/// Bad traces: exit 2, the message names the file and the line, nothing is printed or
/// written.
#[test]
fn bad_traces_exit_2_naming_file_and_line() {
    let d = tempdir("bad-traces");
    let model = write(&d, "m.toml", &session_model(false));
    let ok = r#"{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1, 2]}"#;
    let cases: &[(&str, &str, &str)] = &[
        ("malformed", "{\"timestamp\": 0, \"input_length\": 10", "not a JSON object"),
        ("negative", r#"{"input_length": -5, "output_length": 5, "hash_ids": [1]}"#, "input_length must be positive"),
        ("absurd", r#"{"input_length": 100000000, "output_length": 5, "hash_ids": [1]}"#, "absurd"),
        (
            "zero-output",
            r#"{"input_length": 10, "output_length": 0, "hash_ids": [1]}"#,
            "output_length must be positive",
        ),
        (
            "hash-mismatch",
            r#"{"input_length": 100, "output_length": 5, "hash_ids": [1, 2, 3]}"#,
            "do not match input_length",
        ),
        (
            "first-turn-delay",
            r#"{"session_id": "a", "delay": 10, "input_length": 10, "output_length": 5, "hash_ids": [1]}"#,
            "first turn",
        ),
        (
            "delay-no-session",
            r#"{"delay": 10, "input_length": 10, "output_length": 5, "hash_ids": [1]}"#,
            "without a session_id",
        ),
        ("bad-hash", r#"{"input_length": 10, "output_length": 5, "hash_ids": [-1]}"#, "bad row"),
    ];
    for (name, bad, want) in cases {
        let out = d.join(format!("out-{name}"));
        let text = format!("{ok}\n{ok}\n{bad}\n{ok}\n");
        let trace = write(&d, &format!("{name}.jsonl"), &text);
        let o = kvmc(&[
            "replay",
            trace.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(&format!("{name}.jsonl:3:")), "{name}: names the file and line 3: {err}");
        assert!(err.contains(want), "{name}: says {want:?}: {err}");
        assert!(stdout(&o).is_empty(), "{name}: nothing printed: {}", stdout(&o));
        assert!(!out.exists(), "{name}: nothing written");
    }
    let empty = write(&d, "empty.jsonl", "\n\n");
    let o = kvmc(&["replay", empty.to_str().unwrap(), "--model", model.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("empty.jsonl:1:"), "{}", stderr(&o));
    let o = kvmc(&["replay", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "a trace needs --model");
}

#[test]
fn bad_replay_models_exit_2() {
    let d = tempdir("bad-models");
    let trace = write(&d, "s.jsonl", &session_trace(1, 1));
    for (name, edit, key) in [
        ("load", ("load = \"closed-loop\"", "load = \"open\""), "load ="),
        ("conc", ("concurrency = 1", "concurrency = 0"), "concurrency ="),
        ("unknown", ("trace_block_size = 64", "trace_block_size = 64\nwarp = 9"), "warp ="),
    ] {
        let text = session_model(false).replace(edit.0, edit.1);
        let line = text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
        let model = write(&d, &format!("{name}.toml"), &text);
        let o = kvmc(&["replay", trace.to_str().unwrap(), "--model", model.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("{name}.toml:{line}:")), "{name}: {}", stderr(&o));
    }
}
