//! Parsers never panic: every input is either accepted or rejected with a file and line.

use kvmc::check::specs::Spec;
use kvmc::scope::{parse_tokens, Scope};
use proptest::prelude::*;
use std::path::Path;

const GOOD: &str = r#"description = "d"
[engine]
profile = "vllm-0.33"
connector = "offloading"
block_size = 2
gpu_blocks = 4
max_num_batched_tokens = 4
[offload]
host_chunks = 2
[[request]]
name = "A"
prompt = "ab|c"
output = "x"
[[request]]
name = "B"
prompt = "ab|d"
output = "y"
after = "A"
[faults]
abort = true
"#;

#[test]
fn the_reference_scope_parses() {
    let s = Scope::parse("t", Path::new("t.toml"), GOOD).expect("parses");
    assert_eq!(s.workload.requests.len(), 2);
    assert_eq!(s.workload.requests[0].tokens, parse_tokens("abcx"));
    assert_eq!(s.after[1], Some(0));
    assert_eq!(s.cfg.max_model_len, 6);
}

fn check_error(text: &str) {
    match Scope::parse("t", Path::new("t.toml"), text) {
        Ok(_) => {}
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("t.toml:"), "names the file: {msg}");
            let line: usize = msg["t.toml:".len()..].split(':').next().unwrap().parse().expect("a line number");
            assert!(line >= 1 && line <= text.lines().count() + 1, "line {line} in range: {msg}");
            assert_eq!(e.exit_code(), 2);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn tokens_ignore_separators(s in "[a-z| ]{0,20}") {
        let t = parse_tokens(&s);
        prop_assert_eq!(t.len(), s.chars().filter(|c| c.is_ascii_lowercase()).count());
    }

    #[test]
    fn scope_parser_never_panics_on_arbitrary_text(s in "\\PC{0,200}") {
        check_error(&s);
    }

    #[test]
    fn scope_parser_never_panics_on_mutated_scopes(pos in 0usize..GOOD.len(), del in 0usize..6, ins in "[a-z0-9=\\[\\]\"\\n .|-]{0,6}") {
        let mut t = GOOD.to_string();
        let p = (0..=pos).rev().find(|&i| t.is_char_boundary(i)).unwrap();
        let end = (p + del).min(t.len());
        let end = (end..=t.len()).find(|&i| t.is_char_boundary(i)).unwrap();
        t.replace_range(p..end, &ins);
        check_error(&t);
    }

    #[test]
    fn scope_parser_rejects_out_of_range_numbers(b in 0u32..200, n in 0u32..3_000_000, budget in 0u32..10) {
        let t = format!("[engine]\nblock_size = {b}\ngpu_blocks = {n}\nmax_num_batched_tokens = {budget}\n[[request]]\nname = \"A\"\nprompt = \"ab\"\noutput = \"x\"\n");
        check_error(&t);
    }

    #[test]
    fn spec_parser_never_panics(s in "\\PC{0,200}", v in prop::sample::select(vec!["holds", "violated", "maybe", ""])) {
        let _ = Spec::parse(Path::new("s.toml"), &s);
        let t = format!("property = \"host-integrity\"\nsummary = \"x\"\n[[expect]]\nmodel = \"m\"\nverdict = \"{v}\"\n");
        match Spec::parse(Path::new("s.toml"), &t) {
            Ok(sp) => prop_assert!(v == "holds" || v == "violated", "{:?}", sp.expects),
            Err(e) => prop_assert!(e.to_string().starts_with("s.toml:5:"), "{}", e),
        }
    }

    #[test]
    fn kv_event_parser_never_panics_on_arbitrary_or_mutated_bytes(
        junk in prop::collection::vec(any::<u8>(), 0..64),
        pos in 0usize..400,
        byte in any::<u8>(),
    ) {
        let p = Path::new("x.kvevents");
        let _ = kvmc::conform::kv_events::parse(p, &junk);
        let mut good = std::fs::read(crate::common::root().join("tests/conformance/fixtures/main.kvevents")).unwrap();
        let at = pos % good.len();
        good[at] = byte;
        if let Ok(b) = kvmc::conform::kv_events::parse(p, &good) {
            let _ = kvmc::conform::kv_events::consistency(&b, false);
        }
        good.truncate(at);
        match kvmc::conform::kv_events::parse(p, &good) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().starts_with("x.kvevents:"), "{}", e),
        }
    }

    #[test]
    fn conform_log_parser_never_panics_on_mutated_session_logs(
        pos in 0usize..100_000,
        del in 0usize..8,
        ins in "[a-z0-9:,\"{}\\[\\] _.@-]{0,8}",
    ) {
        // The session lines (resumable arrive, stream_input / stream_end, stream_queued,
        // turn_end / turn_start) are all in the first steps of this fixture.
        let p = Path::new("x.jsonl");
        let good = std::fs::read_to_string(crate::common::root().join("tests/conformance/fixtures/stream-queued.jsonl")).unwrap();
        let cut = good.match_indices('\n').nth(40).map_or(good.len(), |(i, _)| i + 1);
        let mut t = good[..cut].to_string();
        let at = pos % t.len();
        let end = (at + del).min(t.len());
        t.replace_range(at..end, &ins);
        match kvmc::conform::log::parse(p, &t, false) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().starts_with("x.jsonl:"), "{}", e),
        }
    }
}

proptest! {
    #[test]
    fn conform_log_parser_never_panics_on_mutated_simple_cpu_logs(
        pos in 0usize..100_000,
        del in 0usize..8,
        ins in "[a-z0-9:,\"{}\\[\\] _.@-]{0,8}",
    ) {
        // SimpleCPU lines: lookups with pins, store / load events, transfer_done with a kind,
        // store_completed / load_completed, cpu snapshots with string-keyed ref counts.
        let p = Path::new("x.jsonl");
        let good = std::fs::read_to_string(crate::common::root().join("tests/conformance/fixtures/scpu-pressure.jsonl")).unwrap();
        let at = pos % good.len();
        let end = (at + del).min(good.len());
        let mut t = good.clone();
        t.replace_range(at..end, &ins);
        match kvmc::conform::log::parse(p, &t, false) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().starts_with("x.jsonl:"), "{}", e),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn conform_never_panics_on_mutated_mooncake_logs(
        pos in 0usize..100_000,
        del in 0usize..8,
        ins in "[a-z0-9:,\"{}\\[\\] _.@-]{0,8}",
    ) {
        // Mooncake lines: the header's preload, loads and stores without slots, transfer_done
        // with a kind, transfer_failed of a load, mooncake snapshots with string-keyed pins.
        // Parsed and replayed: a changed log conforms, diverges or is bad input at a line.
        let p = Path::new("x.jsonl");
        let good = std::fs::read_to_string(crate::common::root().join("tests/conformance/fixtures/mooncake-load-fail.jsonl")).unwrap();
        let at = pos % good.len();
        let end = (at + del).min(good.len());
        let mut t = good.clone();
        t.replace_range(at..end, &ins);
        match kvmc::conform::check_text(p, &t, "vllm-0.33", None, 2) {
            Ok(_) => {}
            Err(e) => prop_assert!(e.to_string().starts_with("x.jsonl:"), "{}", e),
        }
    }
}

/// SimpleCPU scopes: the `[simple_cpu]` table, and what kvmc does not model, named in the error.
#[test]
fn simple_cpu_scopes_parse_or_say_what_is_not_modelled() {
    let base = "[engine]\nconnector = \"simple-cpu\"\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 4\n";
    let req = "[[request]]\nname = \"A\"\nprompt = \"ab|c\"\noutput = \"x\"\n";
    let ok = format!("{base}[simple_cpu]\ncpu_blocks = 3\nmode = \"eager\"\n{req}");
    let s = Scope::parse("t", Path::new("t.toml"), &ok).expect("parses");
    assert_eq!(s.cfg.simple_cpu().map(|c| c.cpu_blocks), Some(3));
    let err = |text: String| Scope::parse("t", Path::new("t.toml"), &text).unwrap_err().to_string();
    assert!(err(format!("{base}{req}")).contains("needs a [simple_cpu] table"));
    let lazy =
        Scope::parse("t", Path::new("t.toml"), &format!("{base}[simple_cpu]\ncpu_blocks = 3\nmode = \"lazy\"\n{req}"))
            .expect("lazy mode parses");
    assert_eq!(lazy.cfg.simple_cpu().map(|c| c.lazy), Some(true));
    assert_eq!(s.cfg.simple_cpu().map(|c| c.lazy), Some(false));
    assert!(err(format!("{base}[simple_cpu]\ncpu_blocks = 3\nmode = \"sloth\"\n{req}"))
        .contains("t.toml:8: mode must be \"eager\" or \"lazy\", got \"sloth\""));
    assert!(err(format!("{base}[simple_cpu]\ncpu_blocks = 1\n{req}")).contains("null block"));
    assert!(err(format!("{base}[offload]\nhost_chunks = 2\n{req}")).contains("an [offload] table needs"));
    assert!(err(format!("{base}[simple_cpu]\ncpu_blocks = 3\n{req}[faults]\nload_failure = true\n"))
        .contains("never reports load failures"));
    let no_cache =
        base.replace("max_num_batched_tokens = 4\n", "max_num_batched_tokens = 4\nenable_prefix_caching = false\n");
    assert!(err(format!("{no_cache}[simple_cpu]\ncpu_blocks = 3\n{req}")).contains("prefix caching"));
}

/// NIXL scopes: producer requests sample one token (max_tokens = 1); what is not modelled is
/// named in the error.
#[test]
fn nixl_scopes_parse_or_say_what_is_not_modelled() {
    let base = "[engine]\nconnector = \"nixl\"\nblock_size = 2\ngpu_blocks = 4\nmax_num_batched_tokens = 3\n";
    let req = "[[request]]\nname = \"A\"\nprompt = \"ab|cd\"\noutput = \"x\"\n";
    let s = Scope::parse("t", Path::new("t.toml"), &format!("{base}{req}")).expect("parses");
    assert_eq!(s.cfg.connector_kind(), kvmc::system::ConnectorKind::Nixl);
    let err = |text: String| Scope::parse("t", Path::new("t.toml"), &text).unwrap_err().to_string();
    assert!(err(format!("{base}{}", req.replace("\"x\"", "\"xy\""))).contains("max_tokens = 1"));
    assert!(err(format!("{base}{req}[[request.turn]]\ninput = \"e\"\noutput = \"y\"\n")).contains("no further inputs"));
    assert!(err(format!("{}{req}", base.replace("[engine]\n", "[engine]\nasync_scheduling = true\n")))
        .contains("synchronous scheduling only"));
    // Router replay with NixlConnector: vLLM refuses it (its own message, at the connector's
    // line); prime-rl's bypass makes the model a P/D pair.
    let e = err(format!("{base}{req}[router_replay]\n"));
    assert!(e.contains("t.toml:2: --enable-return-routed-experts is incompatible with NixlConnector"), "{e}");
    let pd = format!("{}{req}[router_replay]\n", base.replace("[engine]\n", "[engine]\nprofile = \"prime-rl\"\n"));
    assert!(Scope::parse("t", Path::new("t.toml"), &pd).expect("a P/D pair").is_pd());
    assert!(err(format!("{base}{req}[faults]\nload_failure = true\n")).contains("load_failure"));
}

/// A release whose connector or row store kvmc does not model there (vllm-0.24's Mooncake store,
/// its routed-expert capture) is refused: at the profile's line in the file, and naming the file
/// when `--profile` asks for it, exit 2 (never a verdict borrowed from the later release).
#[test]
fn releases_kvmc_does_not_model_are_refused() {
    use crate::common::{kvmc, root, stderr};
    let err = |text: &str| Scope::parse("t", Path::new("t.toml"), text).unwrap_err().to_string();
    let mc = std::fs::read_to_string(root().join("models/mooncake-preempt.toml")).unwrap();
    let mc24 = mc.replace("profile = \"vllm-0.33\"", "profile = \"vllm-0.24\"");
    assert_ne!(mc, mc24);
    let e = err(&mc24);
    assert!(e.contains("t.toml:4: profile vllm-0.24: kvmc models MooncakeStoreConnector as vLLM 0.32 to 0.34"), "{e}");
    let rows = std::fs::read_to_string(root().join("models/rows-offload.toml")).unwrap();
    let rows24 = rows.replace("profile = \"prime-rl\"", "profile = \"vllm-0.24\"");
    assert_ne!(rows, rows24);
    let e = err(&rows24);
    assert!(
        e.contains("t.toml:4: profile vllm-0.24: vLLM 0.24 captures routed experts in a slot-indexed buffer"),
        "{e}"
    );
    for (model, what) in
        [("models/mooncake-preempt.toml", "MooncakeStoreConnector"), ("models/rows-offload.toml", "routed experts")]
    {
        let o = kvmc(&["-q", "check", model, "--profile", "vllm-0.24"]);
        assert_eq!(o.status.code(), Some(2), "{model}");
        let e = stderr(&o);
        assert!(e.contains(&format!("{model}: profile vllm-0.24")) && e.contains(what), "{e}");
        // vllm-0.32 models both: a report (whatever its verdicts), not a refusal.
        let o = kvmc(&["-q", "check", model, "--profile", "vllm-0.32"]);
        assert_ne!(o.status.code(), Some(2), "{model}: {}", stderr(&o));
    }
}

mod traces {
    //! The trace parser (src/replay/trace.rs): never panics; a bad row is an input error that
    //! names the file and its line; valid rows round-trip.
    use kvmc::replay::trace::{Format, Trace};
    use proptest::prelude::*;
    use std::path::Path;

    /// A valid row: `input` tokens over `ceil(input / 512)` ids from `ids`.
    fn row(ts: u64, input: u32, output: u32, ids: &[u64], session: Option<(u32, bool)>) -> String {
        let n = input.div_ceil(512) as usize;
        let hs: Vec<String> = (0..n).map(|i| ids[i % ids.len()].to_string()).collect();
        let mut s = format!(
            "{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": [{}]",
            hs.join(", ")
        );
        if let Some((sid, later)) = session {
            s.push_str(&format!(", \"session_id\": \"s{sid}\""));
            if later {
                s.push_str(", \"delay\": 5");
            }
        }
        s.push('}');
        s
    }

    fn valid_rows() -> impl Strategy<Value = Vec<(u64, u32, u32, Vec<u64>)>> {
        prop::collection::vec(
            (0u64..100_000, 1u32..5000, 1u32..600, prop::collection::vec(0u64..u64::MAX, 1..4)),
            1..30,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn trace_parser_never_panics(s in "\\PC{0,300}") {
            if let Err(e) = Trace::parse(Path::new("t.jsonl"), &s, 512, None) {
                let m = e.to_string();
                prop_assert!(m.starts_with("t.jsonl:"), "{}", m);
                let line: usize = m["t.jsonl:".len()..].split(':').next().unwrap().parse().unwrap();
                prop_assert!(line >= 1 && line <= s.lines().count().max(1), "{}", m);
                prop_assert_eq!(e.exit_code(), 2);
            }
        }

        #[test]
        fn valid_rows_round_trip(rows in valid_rows()) {
            let text: String = rows.iter().map(|(t, i, o, ids)| row(*t, *i, *o, ids, None) + "\n").collect();
            let t = Trace::parse(Path::new("t.jsonl"), &text, 512, None).unwrap();
            prop_assert_eq!(t.format, Format::Mooncake);
            prop_assert_eq!(t.rows.len(), rows.len());
            for (k, (r, (ts, i, o, ids))) in t.rows.iter().zip(&rows).enumerate() {
                prop_assert_eq!(r.line as usize, k + 1);
                prop_assert_eq!(r.timestamp_us, Some(ts * 1000));
                prop_assert_eq!((r.input_len, r.output_len, r.prompt_len), (*i, *o, *i));
                prop_assert_eq!(t.prompt(k as u32).len() as u32, *i);
                // Equal raw ids, equal interned ids (and tokens).
                let raw: Vec<u64> = (0..i.div_ceil(512) as usize).map(|x| ids[x % ids.len()]).collect();
                let got = t.row_ids(k as u32);
                for a in 0..raw.len() {
                    for b in 0..raw.len() {
                        prop_assert_eq!(raw[a] == raw[b], got[a] == got[b]);
                    }
                }
            }
        }

        #[test]
        fn sessions_accumulate_prompt_and_answer(turns in prop::collection::vec((1u32..2000, 1u32..300), 1..6)) {
            let text: String = turns
                .iter()
                .enumerate()
                .map(|(k, (i, o))| row(0, *i, *o, &[k as u64 + 1], Some((7, k > 0))) + "\n")
                .collect();
            let t = Trace::parse(Path::new("t.jsonl"), &text, 512, None).unwrap();
            prop_assert_eq!(t.format, Format::MooncakeDelta);
            let mut want = 0u32;
            for (k, (i, o)) in turns.iter().enumerate() {
                want += i;
                prop_assert_eq!(t.rows[k].prompt_len, want);
                prop_assert_eq!(t.prompt(k as u32).len() as u32, want);
                prop_assert_eq!(t.rows[k].turn, k as u32);
                want += o;
            }
        }

        /// One broken row among good ones: the error names its line.
        #[test]
        fn a_broken_row_is_named(rows in valid_rows(), at in 0usize..30, how in 0u8..7) {
            let at = at % rows.len();
            let mut lines: Vec<String> = rows.iter().map(|(t, i, o, ids)| row(*t, *i, *o, ids, None)).collect();
            let (_, i, _, _) = rows[at];
            lines[at] = match how {
                0 => lines[at].replace("\"input_length\": ", "\"input_length\": -"),
                1 => lines[at].replace("\"output_length\": ", "\"output_length\": -"),
                2 => lines[at][..lines[at].len() / 2].to_string(),
                3 => lines[at].replace("\"hash_ids\": [", "\"hash_ids\": [1, "),
                4 => lines[at].replace(&format!("\"input_length\": {i}"), "\"input_length\": 99999999999"),
                5 => lines[at].replace('}', ", \"delay\": 3}"),
                _ => lines[at].replace("\"hash_ids\"", "\"hashes\""),
            };
            let text = lines.join("\n");
            let e = Trace::parse(Path::new("t.jsonl"), &text, 512, None).unwrap_err();
            prop_assert!(e.to_string().starts_with(&format!("t.jsonl:{}:", at + 1)), "{}", e);
        }
    }
}
