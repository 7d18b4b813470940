#!/usr/bin/env bash
# Re-record every conformance fixture from real vLLM (scheduler side, CPU only); 0.33.0 by
# default, or another release with --vllm.
#
#   scripts/record-fixtures.sh            # re-record tests/conformance/fixtures/NAME.jsonl,
#                                         # NAME.kvevents and NAME.kvevents.steps.json
#   scripts/record-fixtures.sh --check    # record into a temp dir and diff against the
#                                         # committed fixtures (exit 1 on any difference)
#   scripts/record-fixtures.sh main.toml  # only the named scenarios
#   scripts/record-fixtures.sh --vllm 0.34.0
#                                         # another release: 0.24.0, 0.32.0, 0.33.0 (default)
#                                         # or 0.34.0; its venv is VLLM_VENV_DIR/venv-vllm-VERSION
#                                         # (default /work; 0.33.0: venv-vllm; VLLM_VENV
#                                         # overrides: scripts/lib/vllm-venv.sh) and
#                                         # its fixtures tests/conformance/fixtures/vllm-X.Y/
#                                         # (0.33's stay in fixtures/). Scenarios the release
#                                         # lacks a feature for are skipped, with the reason
#                                         # (record.py --vllm-skip); known-divergences/ is
#                                         # 0.33 only
#   scripts/record-fixtures.sh --hash-seed 3 --check
#                                         # Python's hash seed (PYTHONHASHSEED) for the run:
#                                         # an integer in [0, 4294967295] or 'random'; default
#                                         # 0, the fixtures' seed. Under another seed the
#                                         # header says "hash_seed" and the .kvevents differ
#                                         # (tests/conformance/README.md, Determinism)
#
# A scenario that fails leaves its log up to the failing step in NAME.jsonl.partial, ending
# with a "partial" marker line (`kvmc conform` says it is partial); the committed NAME.jsonl
# is kept.
#
# Without scenario arguments it also re-records (or checks) the logs of
# tests/conformance/known-divergences/ (scenarios the model does not reproduce yet; kept
# beside their TOML, never in fixtures/).
#
# The venv lives outside the repository (chosen by scripts/lib/vllm-venv.sh, see above); it
# is created and vllm==VERSION is installed (about 9 GB with torch) if it is missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CONF="$ROOT/tests/conformance"

check=0
seed=0
version=0.33.0
scenarios=()
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --vllm) [ $# -ge 2 ] || { echo "--vllm needs a version" >&2; exit 2; }; version="$2"; shift ;;
    --vllm=*) version="${1#--vllm=}" ;;
    --hash-seed) [ $# -ge 2 ] || { echo "--hash-seed needs a value" >&2; exit 2; }; seed="$2"; shift ;;
    --hash-seed=*) seed="${1#--hash-seed=}" ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) scenarios+=("$CONF/scenarios/$(basename "$1")") ;;
  esac
  shift
done
case "$version" in
  0.24.0|0.32.0|0.34.0) fixdir="fixtures/vllm-${version%.0}" ;;
  0.33.0) fixdir="fixtures" ;;
  *) echo "--vllm $version: one of 0.24.0, 0.32.0, 0.33.0, 0.34.0" >&2; exit 2 ;;
esac
# shellcheck source=lib/vllm-venv.sh
. "$ROOT/scripts/lib/vllm-venv.sh"
VENV="$(vllm_venv "$version")"
PY="$VENV/bin/python"
case "$seed" in
  random) ;;
  ''|*[!0-9]*) echo "--hash-seed $seed: an integer in [0, 4294967295] or 'random'" >&2; exit 2 ;;
  *) if [ ${#seed} -gt 10 ] || [ "$seed" -gt 4294967295 ]; then
       echo "--hash-seed $seed: an integer in [0, 4294967295] or 'random'" >&2; exit 2
     fi
     seed=$((10#$seed)) ;;
esac
known=()
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=("$CONF"/scenarios/*.toml)
  if [ "$version" = 0.33.0 ]; then   # the known divergences are 0.33 recordings
    shopt -s nullglob
    known=("$CONF"/known-divergences/*.toml)
    shopt -u nullglob
  fi
fi

if [ ! -x "$PY" ]; then
  echo "creating $VENV" >&2
  python3 -m venv "$VENV"
fi
if ! "$PY" -c "import vllm, sys; sys.exit(vllm.__version__ != '$version')" 2>/dev/null; then
  echo "installing vllm==$version into $VENV" >&2
  "$VENV/bin/pip" install --upgrade pip >&2
  # 0.34.0 pins flashinfer-python==0.7.3, which the index lacks: install its other
  # dependencies with 0.7.4 (unused on the CPU scheduler path), then the wheel without deps.
  if [ "$version" = 0.34.0 ]; then
    "$VENV/bin/pip" install "flashinfer-python==0.7.4" >&2
    "$VENV/bin/pip" download --no-deps -d "$VENV/wheels" "vllm==$version" >&2
    "$VENV/bin/python" - "$VENV/wheels"/vllm-*.whl >&2 <<'PYEOF'
import subprocess, sys, zipfile
w = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in w.namelist() if n.endswith(".dist-info/METADATA"))
reqs = [l.split(":", 1)[1].strip() for l in w.read(meta).decode().splitlines()
        if l.startswith("Requires-Dist:") and "extra ==" not in l
        and not l.split(":", 1)[1].strip().startswith("flashinfer-python")]
subprocess.check_call([sys.executable, "-m", "pip", "install", *reqs])
PYEOF
    "$VENV/bin/pip" install --no-deps "$VENV/wheels"/vllm-*.whl >&2
  else
    "$VENV/bin/pip" install "vllm==$version" >&2
  fi
fi

export HF_HUB_OFFLINE=1
export PYTHONHASHSEED="$seed"
unset VLLM_USE_V2_MODEL_RUNNER   # record.py pins the 0.33 default (V2)

if [ $check -eq 1 ]; then
  out="$(mktemp -d)"
  out_known="$out/known"
  mkdir -p "$out_known"
  # A failed scenario's partial log is kept: the temp dir stays if it holds one.
  trap 'if compgen -G "$out/*.partial" >/dev/null || compgen -G "$out_known/*.partial" >/dev/null; then
          echo "partial logs kept in $out" >&2; else rm -rf "$out"; fi' EXIT
else
  out="$CONF/$fixdir"
  out_known="$CONF/known-divergences"
  mkdir -p "$out"
fi

start=$(date +%s)
"$PY" "$CONF/vllm/record.py" "${scenarios[@]}" --out-dir "$out" --hash-seed "$seed" --vllm-skip 2> >(grep -v \
  -e 'is deprecated' -e 'FlashInfer kernels' -e 'vllm._C' -e 'Initializing KVConnectorBase' >&2)
if [ ${#known[@]} -gt 0 ]; then
  "$PY" "$CONF/vllm/record.py" "${known[@]}" --out-dir "$out_known" --hash-seed "$seed" 2> >(grep -v \
    -e 'is deprecated' -e 'FlashInfer kernels' -e 'vllm._C' -e 'Initializing KVConnectorBase' >&2)
fi
echo "recorded $(( ${#scenarios[@]} + ${#known[@]} )) scenario(s) in $(( $(date +%s) - start )) s" >&2

if [ $check -eq 1 ]; then
  status=0
  for s in "${scenarios[@]}"; do
    name="$(basename "$s" .toml)"
    for f in "$name.jsonl" "$name.kvevents" "$name.kvevents.steps.json"; do
      [ -e "$CONF/$fixdir/$f" ] || [ -e "$out/$f" ] || continue   # skipped on this release
      if ! cmp -s "$out/$f" "$CONF/$fixdir/$f"; then
        echo "DIFFERS: $fixdir/$f" >&2
        status=1
      fi
    done
  done
  for s in "${known[@]}"; do
    name="$(basename "$s" .toml)"
    for f in "$name.jsonl" "$name.kvevents" "$name.kvevents.steps.json"; do
      if ! cmp -s "$out_known/$f" "$CONF/known-divergences/$f"; then
        echo "DIFFERS: known-divergences/$f" >&2
        status=1
      fi
    done
  done
  [ $status -eq 0 ] && echo "all fixtures reproduced byte for byte" >&2
  exit $status
fi
