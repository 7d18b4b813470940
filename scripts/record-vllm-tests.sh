#!/usr/bin/env bash
# Run vLLM's own unit tests for the code kvmc models against an installed vLLM, with the
# recorder attached to every Scheduler they build (tests/conformance/vllm/vllm_tests_plugin.py),
# then `kvmc conform` every log they yield (docs/conformance.md, "vLLM's own tests").
#
#   scripts/record-vllm-tests.sh --vllm 0.34.0 [--out DIR] [--sdist FILE] [TEST_FILE...]
#
# --vllm      0.24.0, 0.32.0, 0.33.0 (default) or 0.34.0; the venv is /work/venv-vllm-VERSION
#             (0.33.0: /work/venv-vllm if it exists; VLLM_VENV overrides)
# --sdist     vLLM's sdist of that version (default /tmp/vllm-VERSION.tar.gz; PyPI's sdists
#             carry tests/); unpacked under /tmp/kvmc-vllm-tests-VERSION, never in the repo
# --out       where the logs, summary.json, tests.jsonl (one line per test) and conform.txt
#             go (default /tmp/kvmc-vllm-tests-VERSION/logs; emptied first); the per-file
#             table: scripts/vllm-tests-table.py OUT
# --conform-only   skip pytest: conform the logs already in OUT again
# TEST_FILE   paths under the sdist's tests/ (default: the list below)
#
# pytest (with tblib and pytest-asyncio, which vLLM's conftest imports) is installed into
# /tmp/kvmc-vllm-tests-pylib with the venv's pip if missing; the venv itself is not changed.
# The tests run with VLLM_TARGET_DEVICE=cpu (the wheel is a CUDA build) and offline: the one
# hub model the scheduler tests name, facebook/opt-125m, is given as a local directory
# holding only its config.json (tests/conformance/vllm/opt-125m/; no weights, no tokenizer:
# the scheduler side reads max_model_len from it; it is put at facebook/opt-125m/ under the
# unpacked sdist, the tests' working directory, which ModelConfig reads as a local model
# directory). Tests that need a GPU, Triton or another
# download fail here and are counted as "did not run".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VDIR="$ROOT/tests/conformance/vllm"
version=0.33.0
out=""
sdist=""
files=()
conform_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --vllm) version="$2"; shift ;;
    --vllm=*) version="${1#--vllm=}" ;;
    --out) out="$2"; shift ;;
    --sdist) sdist="$2"; shift ;;
    --conform-only) conform_only=1 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done
case "$version" in
  0.24.0|0.32.0|0.34.0) VENV="${VLLM_VENV:-/work/venv-vllm-$version}" ;;
  0.33.0) VENV="${VLLM_VENV:-/work/venv-vllm}"
          [ -n "${VLLM_VENV:-}" ] || [ -x "$VENV/bin/python" ] || VENV=/work/venv-vllm-$version ;;
  *) echo "--vllm $version: one of 0.24.0, 0.32.0, 0.33.0, 0.34.0" >&2; exit 2 ;;
esac
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "no venv at $VENV (scripts/record-fixtures.sh --vllm $version makes it)" >&2; exit 2; }
work="${KVMC_VLLM_TESTS_WORK:-/tmp/kvmc-vllm-tests-$version}"
sdist="${sdist:-/tmp/vllm-$version.tar.gz}"
out="${out:-$work/logs}"
src="$work/vllm-$version"
if [ ! -d "$src/tests" ]; then
  [ -f "$sdist" ] || { echo "no sdist at $sdist (download vllm-$version.tar.gz from PyPI)" >&2; exit 2; }
  mkdir -p "$work"
  tar xzf "$sdist" -C "$work" "vllm-$version/tests"
fi
if [ ${#files[@]} -eq 0 ]; then
  files=(
    tests/v1/core/test_scheduler.py
    tests/v1/core/test_prefix_caching.py
    tests/v1/core/test_async_scheduler.py
    tests/v1/core/test_deferred_block_free.py
    tests/v1/core/test_worker_slot_overflow.py
    tests/v1/core/test_priority_preemption_bug.py
    tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py
    tests/v1/kv_connector/unit/test_simple_cpu_offload_connector.py
    tests/v1/kv_connector/unit/test_kv_load_failure_recovery.py
    tests/v1/kv_connector/unit/test_invalid_blocks_correctness.py
    tests/v1/kv_connector/unit/test_error_propagation.py
    tests/v1/kv_connector/unit/test_cache_pollution_prevention.py
    tests/v1/simple_kv_offload/test_scheduler.py
    tests/v1/kv_offload/cpu/test_manager.py
  )
fi
present=()
for f in "${files[@]}"; do
  if [ -f "$src/$f" ]; then present+=("$f"); else echo "not in vLLM $version: $f" >&2; fi
done

PYLIB="${KVMC_VLLM_TESTS_PYLIB:-/tmp/kvmc-vllm-tests-pylib}"
if [ ! -d "$PYLIB/pytest" ]; then
  "$PY" -m pip install -q --target "$PYLIB" pytest tblib pytest-asyncio
fi
# The tests run in the unpacked sdist, so "facebook/opt-125m" names this local directory
# (ModelConfig takes an existing path as a local model: no hub call, no retry delays).
HF="$work/hf"
mkdir -p "$src/facebook/opt-125m" "$HF"
cp "$VDIR/opt-125m/config.json" "$src/facebook/opt-125m/"

if [ "$conform_only" = 0 ]; then
rm -rf "$out"; mkdir -p "$out"
cd "$src"
set +e
env HF_HOME="$HF" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_TARGET_DEVICE=cpu \
    PYTHONHASHSEED=0 KVMC_VLLM_TESTS_OUT="$out" \
    PYTHONPATH="$VDIR:$PYLIB${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m pytest -q --durations=20 -p vllm_tests_plugin -p no:cacheprovider "${present[@]}" \
    > "$out/pytest.txt" 2>&1
echo "pytest exit $? (log: $out/pytest.txt)" >&2
set -e
tail -n 3 "$out/pytest.txt" >&2
fi

KVMC="${KVMC:-$ROOT/target/dev-fast/kvmc}"
shopt -s nullglob
logs=()
for log in "$out"/*.jsonl; do   # tests.jsonl is the plugin's per-test record, not a log
  [ "$(basename "$log")" = tests.jsonl ] || logs+=("$log")
done
# Logs of schedulers with 0.34's cache_aware_admission_window > 0 (header fields
# cache_aware_admission_window / _threshold) are kept apart in OUT/cache-aware-window/ and
# counted apart; they are conformed too (the 0.34 profile models the window).
win=("$out"/cache-aware-window/*.jsonl)
: > "$out/conform.txt"
pass=0
wpass=0
for log in "${logs[@]}" "${win[@]}"; do
  case "$log" in */cache-aware-window/*) name="cache-aware-window/$(basename "$log")" ;; *) name="$(basename "$log")" ;; esac
  if "$KVMC" conform --profile "vllm-${version%.0}" "$log" > "$out/conform.tmp" 2>&1; then
    case "$name" in cache-aware-window/*) wpass=$((wpass + 1)) ;; *) pass=$((pass + 1)) ;; esac
    echo "conforms: $name" >> "$out/conform.txt"
  else
    echo "FAILS ($?): $name" >> "$out/conform.txt"
    sed 's/^/    /' "$out/conform.tmp" | head -n 20 >> "$out/conform.txt"
  fi
done
rm -f "$out/conform.tmp"
echo "vLLM $version: ${#logs[@]} logs, $pass conform (details: $out/conform.txt, counts: $out/summary.json)" >&2
if [ ${#win[@]} -gt 0 ]; then
  echo "and ${#win[@]} logs with cache_aware_admission_window, $wpass conform" >&2
fi
