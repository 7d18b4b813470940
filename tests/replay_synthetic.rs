//! Trace replay on Mooncake's synthetic trace: the first 300 rows (tests/traces), replayed
//! with the benchmark model under every release's profile, give the counts vLLM's own
//! scheduler side gave for them (docs/replay.md, "The synthetic trace"), the row whose prompt
//! is longer than the model refused on both sides.

use crate::common::*;
use kvmc::replay::trace::Trace;
use kvmc::replay::{run_trace, Options};
use kvmc::scope::replay::ReplayModel;

/// What `tests/conformance/vllm/scheduler_replay.py --trace synthetic_trace.jsonl --limit 300`
/// printed on vLLM 0.24.0, 0.32.0, 0.33.0 and 0.34.0 (the same on all four), in kvmc's
/// counting: the script counts the last prompt token of row 75's whole-prompt load as restored
/// and then recomputed (`host_restored_tokens_first` 90,128, `prefill_computed_first`
/// 3,596,088, `recomputed` 1); kvmc counts it as computed.
const VLLM_300: [(&str, u64); 19] = [
    ("steps", 4086),
    ("preemptions", 0),
    ("finished", 299),
    ("rejected", 1),
    ("prompt_tokens", 3_718_392),
    ("output_tokens", 56_949),
    ("g1_hit_tokens", 32_176),
    ("host_hit_tokens", 90_128 - 1),
    ("prefill_tokens", 3_596_088 + 1),
    ("decode_tokens", 56_650),
    ("recomputed_tokens", 0), // vLLM: 1 (the restored last prompt token, above)
    ("scheduled_tokens", 3_652_739),
    ("store_jobs", 683),
    ("stored_chunks", 224_620),
    ("load_jobs", 9),
    ("loaded_chunks", 5633),
    ("store_refusals", 0),
    ("g1_evictions", 225_596),
    ("host_evictions", 159_084),
];

#[test]
fn the_synthetic_trace_head_replays_as_vllm_ran_it() {
    let path = root().join("tests/traces/synthetic-head-300.jsonl");
    let text = std::fs::read_to_string(&path).expect("the trace excerpt (tests/traces/README.md)");
    let t = Trace::parse(&path, &text, 512, None).expect("trace parses");
    let model_path = root().join("models/replay-mooncake.toml");
    let model = std::fs::read_to_string(&model_path).unwrap();
    let m = ReplayModel::parse("replay-mooncake", &model_path, &model).expect("model parses");
    let d = tempdir("synthetic-head");
    for profile in ["vllm-0.24", "vllm-0.32", "vllm-0.33", "vllm-0.34"] {
        let opts = Options { profile: Some(profile.into()), out_dir: Some(d.clone()), ..Default::default() };
        let o = run_trace(&t, &m, &opts).expect("replay runs");
        assert!(o.finding.is_none(), "{profile}: {:?}", o.finding);
        let json = serde_json::to_value(&o.metrics).unwrap();
        for (field, want) in VLLM_300 {
            assert_eq!(json[field].as_u64(), Some(want), "{profile}: {field}");
        }
        // Row 250 (a 134,773-token prompt) is refused; the next row takes its place at once.
        assert!(o.requests.iter().all(|r| r.line != 250), "{profile}");
        let row = |line: u32| o.requests.iter().find(|r| r.line == line).unwrap();
        let times = |line: u32| (row(line).arrival_ms, row(line).finish_ms);
        assert_eq!(times(249), (63_460.0, 82_800.0), "{profile}");
        assert_eq!(times(251), (63_480.0, 83_480.0), "{profile}");
        assert_eq!(times(300), (80_920.0, 91_700.0), "{profile}");
        // Row 75 (2,752 tokens, 172 whole blocks) loads its whole prompt from the host tier but
        // the last token, which vLLM computes again.
        let r = row(75);
        assert_eq!((r.host_hit_tokens, r.prefill_tokens, r.recomputed_tokens), (2751, 1, 0), "{profile}");
        assert_eq!(times(75), (5_500.0, 17_880.0), "{profile}");
    }
}
