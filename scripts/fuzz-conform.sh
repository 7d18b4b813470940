#!/usr/bin/env bash
# Conformance fuzzing: random workloads recorded on real vLLM, each checked against the model.
#
#   scripts/fuzz-conform.sh --vllm VERSION [--seed S] [--count N] [--hash-seed H|random]
#                           [--kind any|offloading|simple-cpu|none|mooncake|stress|long|nixl] [--out DIR]
#
# 1. tests/conformance/vllm/gen_scenarios.py writes N random scenarios (seed S) to
#    DIR/scenarios/ (docs/conformance.md, "Conformance fuzzing", says what it draws);
# 2. record.py runs them on vLLM VERSION's real scheduler side (its venv: scripts/lib/vllm-venv.sh)
#    under PYTHONHASHSEED H into DIR/logs/, skipping what the release lacks (--vllm-skip);
# 3. `kvmc conform --profile vllm-X.Y` checks every log (DIR/conform.json is its JSON report),
#    and every whole run again with vLLM's own KV cache events (`--kv-events`, DIR/kvevents.txt).
#
# A scenario whose fault never applied as written (a load failure or a slow load on a request
# that never loaded, an abort after its request finished) is recorded whole but ends with the
# recorder's error: its log is kept as NAME.jsonl.partial (every step before the end check) and
# checked up to that point ("partial" below, with why the recorder stopped: a fault that never
# applied, a hang, an engine idle with requests left, or vLLM raising). Prints one summary line and, for each log that
# diverges (or that kvmc refuses as bad input), where. Exit 0 when every log conforms, 10 when
# one does not, 2 on a usage or setup error.
# KVMC names the kvmc binary (default: target/release/kvmc, built if missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CONF="$ROOT/tests/conformance"

version="" seed=1 count=50 hash_seed=0 kind=any out=""
usage() { sed -n '4,5p' "$0" | sed 's/^# *//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --vllm) version="${2:?}"; shift 2 ;;
    --seed) seed="${2:?}"; shift 2 ;;
    --count) count="${2:?}"; shift 2 ;;
    --hash-seed) hash_seed="${2:?}"; shift 2 ;;
    --kind) kind="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "fuzz-conform.sh: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$version" ] || { echo "fuzz-conform.sh: --vllm VERSION is required (0.24.0, 0.32.0, 0.33.0, 0.34.0)" >&2; exit 2; }
case "$version" in 0.24.0|0.32.0|0.33.0|0.34.0) ;; *) echo "fuzz-conform.sh: no profile for vLLM $version" >&2; exit 2 ;; esac
profile="vllm-${version%.*}"
out="${out:-/tmp/kvmc-fuzz-$version-$seed-$hash_seed}"

# shellcheck source=lib/vllm-venv.sh
. "$ROOT/scripts/lib/vllm-venv.sh"
VENV="$(vllm_venv "$version")"
vllm_venv_check "$VENV" "$version" || { echo "fuzz-conform.sh: scripts/record-fixtures.sh --vllm $version creates the venv" >&2; exit 2; }

KVMC="${KVMC:-$ROOT/target/release/kvmc}"
if [ ! -x "$KVMC" ]; then
  (cd "$ROOT" && cargo build --release --quiet) || exit 2
fi

rm -rf "$out/scenarios" "$out/logs"
mkdir -p "$out/scenarios" "$out/logs"
python3 "$CONF/vllm/gen_scenarios.py" --seed "$seed" --count "$count" --kind "$kind" --out-dir "$out/scenarios" || exit 2

export HF_HUB_OFFLINE=1
unset VLLM_USE_V2_MODEL_RUNNER
set +e
"$VENV/bin/python" "$CONF/vllm/record.py" "$out/scenarios"/*.toml --out-dir "$out/logs" \
  --hash-seed "$hash_seed" --vllm-skip -q > "$out/record.txt" 2>&1
set -e
skipped=$( [ -f "$out/logs/skipped.txt" ] && wc -l < "$out/logs/skipped.txt" || echo 0)

shopt -s nullglob
logs=("$out/logs"/*.jsonl "$out/logs"/*.jsonl.partial)
shopt -u nullglob
if [ ${#logs[@]} -eq 0 ]; then
  echo "fuzz-conform.sh: vLLM $version recorded no log (see $out/record.txt)" >&2
  exit 2
fi
set +e
"$KVMC" conform --quiet --profile "$profile" --format json "${logs[@]}" > "$out/conform.json"
status=$?
set -e
: > "$out/unreadable.txt"
if [ $status -eq 2 ]; then
  # A log kvmc refuses as bad input (exit 2) is listed, with kvmc's message, and left out.
  readable=()
  for f in "${logs[@]}"; do
    if "$KVMC" conform --quiet --profile "$profile" "$f" > /dev/null 2> "$out/err.txt" || [ $? -ne 2 ]; then
      readable+=("$f")
    else
      echo "$f: $(head -1 "$out/err.txt")" >> "$out/unreadable.txt"
    fi
  done
  rm -f "$out/err.txt"
  set +e
  "$KVMC" conform --quiet --profile "$profile" --format json "${readable[@]}" > "$out/conform.json"
  status=$?
  set -e
fi
case $status in
  0|10|13) ;;
  *) echo "fuzz-conform.sh: kvmc conform exited $status (see $out/conform.json)" >&2; exit 2 ;;
esac
# vLLM's own KV cache events of each whole run, against the log and the model.
: > "$out/kvevents.txt"
for f in "$out/logs"/*.jsonl; do
  [ -f "${f%.jsonl}.kvevents" ] || continue
  set +e
  "$KVMC" conform --quiet --profile "$profile" "$f" --kv-events "${f%.jsonl}.kvevents" > /dev/null 2>&1
  rc=$?
  set -e
  echo "$rc $f" >> "$out/kvevents.txt"
done
python3 - "$out/conform.json" "$version" "$seed" "$count" "$hash_seed" "$skipped" "$profile" "$out/kvevents.txt" "$out/unreadable.txt" <<'PY'
import json, sys
path, version, seed, count, hseed, skipped, profile, kv, unreadable = sys.argv[1:]
unread = open(unreadable).read().splitlines()
rep = json.load(open(path))
logs = rep.get("logs", [])
verdicts = [l.get("verdict") for l in logs]
bad = [l for l in logs if l.get("verdict") not in ("conforms", "partial")]


def why_partial(logs):
    """Why the recorder stopped, counted: a fault that never applied, a run that never ended
    (the engine kept stepping: a hang), an engine that went idle with requests left, or vLLM
    raising."""
    kinds = {"a fault never applied": 0, "a hang": 0, "idle with requests left": 0, "vLLM raised": 0}
    for l in logs:
        if l.get("verdict") != "partial":
            continue
        e = (l.get("partial") or {}).get("error", "")
        if "never applied" in e:
            kinds["a fault never applied"] += 1
        elif "did not finish in" in e:
            kinds["a hang"] += 1
        elif "went idle" in e:
            kinds["idle with requests left"] += 1
        else:
            kinds["vLLM raised"] += 1
    parts = [f"{n} {k}" for k, n in kinds.items() if n]
    return ": " + ", ".join(parts) if parts else ""
failed = int(count) - len(logs) - len(unread) - int(skipped)
print(f"vLLM {version}, seed {seed}, hash seed {hseed}: {count} scenarios, {len(logs) + len(unread)} logs "
      f"({skipped} skipped by the release, {failed} the recorder could not run: see record.txt): "
      f"{verdicts.count('conforms')} conform, "
      f"{verdicts.count('partial')} partial (the steps recorded conform{why_partial(logs)}), "
      f"{len(bad)} diverge" + (f", {len(unread)} refused by kvmc" if unread else ""))
for u in unread:
    print(f"  kvmc refuses it as bad input: {u}")
for l in bad:
    d = l.get("divergence") or {}
    print(f"  {l.get('log')}:{d.get('line')}: {l.get('verdict')} ({d.get('kind')}); "
          f"kvmc conform --profile {profile} {l.get('log')}")
diverged = {l.get("log") for l in bad} | {u.split(": ", 1)[0] for u in unread}
kv_runs = [line.split(" ", 1) for line in open(kv).read().splitlines()]
kv_bad = [f for rc, f in kv_runs if rc != "0" and f not in diverged]
print(f"  KV events: {len(kv_runs)} whole runs checked with vLLM's published events, "
      f"{len(kv_runs) - len(kv_bad) - sum(1 for _, f in kv_runs if f in diverged)} agree"
      + (f", {len(kv_bad)} do not" if kv_bad else ""))
for f in kv_bad:
    print(f"  {f}: kvmc conform --profile {profile} {f} --kv-events {f[:-6]}.kvevents")
sys.exit(10 if bad or kv_bad or unread else 0)
PY
