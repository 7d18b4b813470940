#!/usr/bin/env bash
# kvmc's trace replay against vLLM 0.33's own scheduler side, over the same trace and
# configuration, in the same minutes: the yardstick the replay's speed target comes with
# (docs/benchmarks.md, "The speed target").
#
#   scripts/replay-vs-vllm.sh            # about 13 minutes on 2 cores; prints the ratio
#   scripts/replay-vs-vllm.sh 300        # the first 300 requests only: a minute, to check
#                                        # the setup (fixed costs dominate both sides there)
#   scripts/replay-vs-vllm.sh --vllm 0.34 300   # another release (0.24, 0.32, 0.33, 0.34): kvmc
#                                        # replays with --profile vllm-0.34, and the venv
#                                        # (VLLM_VENV) must hold that release
#
# vLLM's side is tests/conformance/vllm/scheduler_replay.py (real Scheduler, KVCacheManager,
# OffloadingConnector scheduler and worker sides; model and copies faked), run once, from the
# venv that scripts/record-fixtures.sh makes (VLLM_VENV, default /work/venv-vllm). kvmc's
# replay of the same trace with models/replay-mooncake.toml (every invariant checked) runs
# again and again on the other core, 20 s apart, until vLLM finishes, so that both see this
# virtual machine in the same state (its speed drifts by a third within an hour). With one
# core, vLLM runs first and kvmc five times after it.
#
# Prints vLLM's CPU seconds, the median and range of kvmc's CPU seconds over its runs, and
# the ratio.
# Both sides must report the same engine steps, or the script exits 1. Traces come from
# ../shared/traces unless KVMC_TRACES names another directory; the work files go to
# target/replay-vs-vllm/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${VLLM_VENV:-/work/venv-vllm}
trace=${KVMC_TRACES:-$root/../shared/traces}/conversation_trace.jsonl
model=$root/models/replay-mooncake.toml
release=0.33
if [ "${1:-}" = --vllm ]; then
  release=${2:-}
  shift 2 || true
fi
case $release in
  0.24 | 0.32 | 0.33 | 0.34) ;;
  *)
    echo "replay-vs-vllm: --vllm takes 0.24, 0.32, 0.33 or 0.34, not '$release'" >&2
    exit 2
    ;;
esac
limit=${1:-0}
case $limit in
  '' | *[!0-9]*)
    echo "replay-vs-vllm: the argument is a number of requests (0: all), not '$limit'" >&2
    exit 2
    ;;
esac
kvmc_limit=()
if [ "$limit" -gt 0 ]; then kvmc_limit=(--limit "$limit"); fi
kvmc_limit+=(--profile "vllm-$release")
work=$root/target/replay-vs-vllm
if [ ! -x "$venv/bin/python" ]; then
  echo "replay-vs-vllm: no venv at $venv (scripts/record-fixtures.sh makes one; or set VLLM_VENV)" >&2
  exit 2
fi
have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm"))' 2>/dev/null || true)
case $have in
  "$release".*) ;;
  *)
    echo "replay-vs-vllm: $venv has vllm '$have', not $release (set VLLM_VENV)" >&2
    exit 2
    ;;
esac
if [ ! -f "$trace" ]; then
  echo "replay-vs-vllm: $trace not found (set KVMC_TRACES to the traces directory)" >&2
  exit 2
fi
cargo build --release --locked >&2
kvmc=$root/target/release/kvmc
rm -rf "$work"
mkdir -p "$work"

# Pin each side to a core where the machine has two.
pin_vllm=() pin_kvmc=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -ge 2 ]; then
  pin_vllm=(taskset -c 0) pin_kvmc=(taskset -c 1)
fi

# One timed replay. The subshell keeps vLLM's CPU time out of `time`: the shell that started
# vLLM counts it among its children's once it has reaped it.
kvmc_once() {
  (
    TIMEFORMAT='%R %U %S'
    time "${pin_kvmc[@]}" "$kvmc" replay "$trace" --model "$model" "${kvmc_limit[@]}" --format json \
      >"$work/kvmc.json" 2>/dev/null
  ) 2>>"$work/kvmc.times"
}

if [ "$limit" -gt 0 ]; then what="its first $limit requests"; else what="the whole trace, about 13 minutes"; fi
echo "replay-vs-vllm: vLLM's scheduler side over $(basename "$trace"), $what" >&2
"${pin_vllm[@]}" "$venv/bin/python" tests/conformance/vllm/scheduler_replay.py --trace "$trace" --limit "$limit" \
  --json-out "$work/vllm.json" >"$work/vllm.out" 2>"$work/vllm.err" &
vllm_pid=$!
# Whatever ends this script (an interrupt, a failed kvmc run) ends the vLLM run too.
trap 'kill "$vllm_pid" 2>/dev/null || true' EXIT
kvmc_failed() {
  echo "replay-vs-vllm: kvmc's replay failed; see $work/kvmc.json" >&2
  exit 1
}
if [ ${#pin_kvmc[@]} -gt 0 ]; then
  sleep 5
  while kill -0 "$vllm_pid" 2>/dev/null; do
    kvmc_once || kvmc_failed
    sleep 20
  done
fi
if ! wait "$vllm_pid"; then
  echo "replay-vs-vllm: the vLLM run failed; see $work/vllm.err" >&2
  exit 1
fi
if [ ${#pin_kvmc[@]} -eq 0 ]; then
  for _ in 1 2 3 4 5; do kvmc_once || kvmc_failed; done
fi

python3 - "$work" "$limit" "$release" <<'EOF'
import json, statistics, sys
work, limit, release = sys.argv[1], int(sys.argv[2]), sys.argv[3]
v = json.load(open(f"{work}/vllm.json"))
k = json.load(open(f"{work}/kvmc.json"))
if v["engine_steps"] != k["metrics"]["steps"]:
    print(f"replay-vs-vllm: engine steps differ: vLLM {v['engine_steps']}, kvmc {k['metrics']['steps']}", file=sys.stderr)
    sys.exit(1)
runs = [tuple(map(float, line.split())) for line in open(f"{work}/kvmc.times") if line.strip()]
cpu = sorted(u + s for _, u, s in runs)
wall = sorted(w for w, _, _ in runs)
med = statistics.median(cpu)
print(f"engine steps          {v['engine_steps']:,} on both sides")
# vLLM's CPU time without its imports (torch and vllm), which kvmc has no counterpart of.
vcpu = v["cpu_s"] - v["import_s"]
print(f"vLLM {release:<16} {v['cpu_s']:.1f} CPU s ({v['wall_s']:.1f} s wall), {vcpu:.1f} s past its imports")
print(f"kvmc replay           {len(runs)} run{'s' * (len(runs) != 1)}: CPU s median {med:.2f} (range {cpu[0]:.2f} to {cpu[-1]:.2f}), "
      f"wall median {statistics.median(wall):.2f} s; {k['checks']['evaluations']:,} invariant evaluations per run")
print(f"ratio                 {vcpu / med:.0f} (vLLM's CPU s past its imports / kvmc's median CPU s)")
if limit == 0:
    print(f"at the issue's scale  vLLM 400 s -> kvmc {400 * med / vcpu:.1f} s (the target, 8 s, is a ratio of 50)")
EOF
