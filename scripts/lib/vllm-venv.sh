# shellcheck shell=bash
# Which Python venv runs vLLM VERSION: the one rule shared by scripts/record-fixtures.sh,
# scripts/record-seed-fixtures.sh and scripts/reproduce.sh (source this file).
#
#   vllm_venv VERSION        prints the venv directory for that release:
#     1. $VLLM_VENV, if set (one venv for the whole run, whatever the release; a script that
#        runs several releases checks it holds the one it needs: vllm_venv_check);
#     2. $VLLM_VENV_DIR/venv-vllm-VERSION (VLLM_VENV_DIR defaults to /work), if it exists;
#     3. for 0.33.0 only: $VLLM_VENV_DIR/venv-vllm, the historical name of the 0.33 venv;
#     4. otherwise $VLLM_VENV_DIR/venv-vllm-VERSION (record-fixtures.sh creates it there).
#   vllm_venv_check VENV VERSION
#                            exit status 0 if VENV's python exists and VENV has vllm VERSION
#                            installed (read from its dist-info, without importing vllm);
#                            otherwise prints why on stderr and returns 1.
#   vllm_venv_version VENV   prints the vllm version installed in VENV (empty if none).

vllm_venv() {
  local v="$1" dir="${VLLM_VENV_DIR:-/work}"
  if [ -n "${VLLM_VENV:-}" ]; then echo "$VLLM_VENV"
  elif [ -x "$dir/venv-vllm-$v/bin/python" ]; then echo "$dir/venv-vllm-$v"
  elif [ "$v" = 0.33.0 ] && [ -x "$dir/venv-vllm/bin/python" ]; then echo "$dir/venv-vllm"
  else echo "$dir/venv-vllm-$v"; fi
}

vllm_venv_version() {
  local d
  for d in "$1"/lib/python3*/site-packages/vllm-*.dist-info; do
    [ -d "$d" ] || continue
    d="${d##*/vllm-}"; echo "${d%.dist-info}"; return 0
  done
}

vllm_venv_check() {
  local venv="$1" v="$2" have
  if [ ! -x "$venv/bin/python" ]; then
    echo "no venv at $venv (vLLM $v; scripts/record-fixtures.sh --vllm $v creates it)" >&2; return 1
  fi
  have="$(vllm_venv_version "$venv")"
  if [ "$have" != "$v" ]; then
    echo "$venv has vllm ${have:-(none)}, not $v${VLLM_VENV:+ (VLLM_VENV is set)}" >&2; return 1
  fi
}
