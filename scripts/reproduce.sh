#!/usr/bin/env bash
# Record checker counterexamples on real vLLM and show the same property violated there.
#
#   scripts/reproduce.sh                      # every tests/conformance/reproduced/*.toml
#   scripts/reproduce.sh --gate               # first regenerate them from the gate
#                                             # (kvmc reproduce --gate), then record
#   scripts/reproduce.sh NAME.toml ...        # only these scenarios
#   scripts/reproduce.sh --out-dir DIR ...    # logs into DIR (default:
#                                             # tests/conformance/fixtures/reproduced/)
#   scripts/reproduce.sh --connector-class MODULE:CLASS ...
#                                             # record with that KVConnectorBase_V1 class
#                                             # (record.py --connector-class) instead of
#                                             # vLLM's built-in connector the scenario names
#
# Each scenario (written by `kvmc reproduce`) names in its header the vLLM release to run
# (`# vllm-version: 0.33.0`) and the properties the counterexample violates
# (`# expect-violated: P ...`). The scenarios of one release are recorded in one process with
# tests/conformance/vllm/record.py from that release's venv (scripts/lib/vllm-venv.sh:
# VLLM_VENV, else VLLM_VENV_DIR/venv-vllm-VERSION, VLLM_VENV_DIR defaulting to /work; 0.33.0
# falls back to venv-vllm; a venv without that release is refused). Then
# `kvmc conform --strict --profile vllm-X.Y LOG` must conform and report every expected
# property violated. A counterexample whose property kills the engine (queue-sound, tokens-positive,
# connector-assert, rows-present) is reproduced when vLLM dies: the recorder's partial log must
# conform up to the step that raised. A hang (requests-finish; `# expect-unfinished: R ...`) is
# reproduced when the recorder stops at its step bound or vLLM goes idle with requests
# unfinished, every recorded step conforms and the named requests never finish. A log that diverges, or lacks a property, is a failure (exit 1); a
# release whose venv is missing or whose recorder fails is reported and counted as failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF="$ROOT/tests/conformance"
KVMC="${KVMC:-$ROOT/target/dev-fast/kvmc}"
# shellcheck source=lib/vllm-venv.sh
. "$ROOT/scripts/lib/vllm-venv.sh"
out="$CONF/fixtures/reproduced"
gate=0
scenarios=()
record_args=()
# The recorder runs in tests/conformance/vllm: paths given relative to here are made absolute.
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gate) gate=1 ;;
    --out-dir) [ $# -ge 2 ] || { echo "--out-dir needs a value" >&2; exit 2; }; out="$2"; shift ;;
    --connector-class) [ $# -ge 2 ] || { echo "--connector-class needs MODULE:CLASS" >&2; exit 2; }; record_args+=(--connector-class "$2"); shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) case "$1" in */*) scenarios+=("$(abs "$1")") ;; *) scenarios+=("$CONF/reproduced/$1") ;; esac ;;
  esac
  shift
done
[ -x "$KVMC" ] || { echo "no kvmc at $KVMC (cargo build --profile dev-fast, or set KVMC)" >&2; exit 2; }
if [ $gate -eq 1 ]; then
  (cd "$ROOT" && "$KVMC" reproduce --gate --out-dir "$CONF/reproduced") || exit 2
fi
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=("$CONF"/reproduced/*.toml)
fi
mkdir -p "$out"
out="$(abs "$out")"

header() { sed -n "s/^# $2: //p" "$1" | head -1; }
# The properties scenario $1 expects violated that conform's report $2 does not show.
not_shown() {
  local p
  for p in $(header "$1" expect-violated); do
    grep -q "invariant $p is violated" <<<"$2" || printf '%s ' "$p"
  done
}
# The properties conform's report $1 shows violated, as "name @step ...".
shown() {
  grep -o 'invariant [a-z0-9-]* is violated from step [0-9]*' <<<"$1" | sed 's/invariant //; s/ is violated from step / @/' | paste -sd' '
}

declare -A by_version=()
for s in "${scenarios[@]}"; do
  [ -f "$s" ] || { echo "$s: no such scenario" >&2; exit 2; }
  v="$(header "$s" vllm-version)"
  [ -n "$v" ] || { echo "$s:1: no '# vllm-version:' header (write it with kvmc reproduce)" >&2; exit 2; }
  by_version[$v]+="$s "
done

export HF_HUB_OFFLINE=1 PYTHONHASHSEED=0
fail=0
for v in $(printf '%s\n' "${!by_version[@]}" | sort); do
  venv="$(vllm_venv "$v")"
  read -r -a list <<<"${by_version[$v]}"
  echo "== vLLM $v ($venv): ${#list[@]} scenario(s)"
  if ! why="$(vllm_venv_check "$venv" "$v" 2>&1)"; then
    echo "   $why: not recorded"; fail=$((fail + ${#list[@]})); continue
  fi
  rec_log="$(mktemp "${TMPDIR:-/tmp}/reproduce-record-$v.XXXXXX")"
  if (cd "$CONF/vllm" && "$venv/bin/python" record.py -q ${record_args[@]+"${record_args[@]}"} "${list[@]}" --out-dir "$out") >"$rec_log" 2>&1; then
    rm -f "$rec_log"
  else
    echo "   the recorder failed for some scenario (its output: $rec_log)"
  fi
  profile="vllm-${v%.*}"
  for s in "${list[@]}"; do
    name="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$s" | head -1)"
    log="$out/$name.jsonl"
    unfinished="$(header "$s" expect-unfinished)"
    if [ -n "$unfinished" ]; then
      # A hang (requests-finish): the recorder runs into its step bound, its partial log must
      # conform to the end, and the requests the checker starves must never finish in it.
      rm -f "$log"
      # Two ways vLLM hangs: it steps on to the recorder's bound, or it goes idle (no step
      # scheduled, the engine reports no unfinished request) while a request is unfinished.
      hung="$(tail -1 "$log.partial" 2>/dev/null | grep -o 'did not finish in [0-9]* steps\|the engine went idle with unfinished requests: [^"]*')"
      if [ -z "$hung" ]; then
        echo "   FAIL $name: vLLM did not hang (no partial log ending at the recorder's step bound or idle)"; fail=$((fail + 1)); continue
      fi
      res="$("$KVMC" conform --strict --profile "$profile" "$log.partial" 2>&1)"
      done_early=()
      for r in $unfinished; do
        grep -q "\"ev\":\"finish\",\"step\":[0-9]*,\"req\":\"$r\"" "$log.partial" && done_early+=("$r")
      done
      read -r -a missing <<<"$(not_shown "$s" "$res")"
      if grep -q "PARTIAL log: the [0-9]* steps recorded conform" <<<"$res" && [ ${#done_early[@]} -eq 0 ] && [ ${#missing[@]} -eq 0 ]; then
        echo "   ok   $name: $unfinished never finish; $hung"
      else
        fail=$((fail + 1))
        echo "   FAIL $name: ${done_early[*]:+finished: ${done_early[*]}; }${missing[*]:+not violated: ${missing[*]}; }$(head -1 <<<"$res")"
      fi
      continue
    fi
    if [ ! -f "$log" ]; then
      # A counterexample whose property kills the engine (queue-sound, connector-assert,
      # rows-present) is reproduced by vLLM dying: a partial log whose recorded steps conform.
      row_prop="${name##*__}"
      case "$row_prop" in queue-sound|connector-assert|rows-present|tokens-positive) dies=1 ;; *) dies=0 ;; esac
      if [ $dies -eq 1 ] && [ -f "$log.partial" ]; then
        res="$("$KVMC" conform --profile "$profile" "$log.partial" 2>&1)"
        died="$(grep -o 'the recorder stopped in step [0-9]*: .*(that step' <<<"$res" | sed 's/the recorder stopped in //; s/ (that step$//')"
        if grep -q "PARTIAL log: the [0-9]* steps recorded conform" <<<"$res" && [ -n "$died" ]; then
          echo "   ok   $name: vLLM died in $died ($row_prop); the steps before conform"
          continue
        fi
      fi
      # A safety property shown before vLLM hangs (the run never ends, so the recorder stops at
      # its step bound): reproduced when the recorded steps conform and show every property.
      if [ $dies -eq 0 ] && [ -f "$log.partial" ] && tail -1 "$log.partial" | grep -q 'did not finish in [0-9]* steps\|the engine went idle'; then
        res="$("$KVMC" conform --strict --profile "$profile" "$log.partial" 2>&1)"
        read -r -a missing <<<"$(not_shown "$s" "$res")"
        if grep -q "PARTIAL log: the [0-9]* steps recorded conform" <<<"$res" && [ ${#missing[@]} -eq 0 ]; then
          echo "   ok   $name: $(shown "$res"); then vLLM hangs"
          continue
        fi
      fi
      echo "   FAIL $name: no log (recorder error; a partial log may be at $log.partial)"; fail=$((fail + 1)); continue
    fi
    res="$("$KVMC" conform --strict --profile "$profile" "$log" 2>&1)"
    read -r -a missing <<<"$(not_shown "$s" "$res")"
    if grep -q ": conforms" <<<"$res" && [ ${#missing[@]} -eq 0 ]; then
      echo "   ok   $name: $(shown "$res")"
    else
      fail=$((fail + 1))
      echo "   FAIL $name: ${missing[*]:+not violated: ${missing[*]}; }$(head -1 <<<"$res")"
    fi
  done
done
[ $fail -eq 0 ] || { echo "$fail scenario(s) not reproduced" >&2; exit 1; }
