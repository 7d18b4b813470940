#!/usr/bin/env bash
# Build kvmc with profile-guided optimization: target/pgo/use/release/kvmc.
#
#   scripts/build-pgo.sh          # about 6 minutes on 2 cores; prints the binary's path
#
# The same code as `cargo build --release`, laid out and inlined after a profile of its own
# runs (docs/benchmarks.md, "Round 4"): about 10% fewer instructions in trace replay.
# Steps:
#   1. an instrumented release build (every crate, build scripts included: their profiles
#      are merged too, which keeps LLVM's profile summary the same in every module that fat
#      LTO links together; without them the link failed or lost the profile's inlining);
#   2. a training run that is not the benchmark: the synthetic trace, the first 3,000
#      requests of the conversation trace, and the CI gate's explorations;
#   3. `llvm-profdata merge`, then a release build with -Cprofile-use.
# Needs rustup's llvm-tools component of the toolchain that builds kvmc (installed here if
# missing). Traces come from ../shared/traces unless KVMC_TRACES names another directory.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
traces=${KVMC_TRACES:-$root/../shared/traces}
work=$root/target/pgo
for t in synthetic_trace.jsonl conversation_trace.jsonl; do
  if [ ! -f "$traces/$t" ]; then
    echo "build-pgo: $traces/$t not found (set KVMC_TRACES to the traces directory)" >&2
    exit 2
  fi
done

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$sysroot/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  rustup component add llvm-tools-preview
fi

rm -rf "$work/raw" "$work/kvmc.profdata"
mkdir -p "$work/raw"
echo "build-pgo: 1/3 instrumented build" >&2
RUSTFLAGS="-Cprofile-generate=$work/raw" CARGO_TARGET_DIR="$work/gen" cargo build --release --locked
gen="$work/gen/release/kvmc"

echo "build-pgo: 2/3 training" >&2
"$gen" replay "$traces/synthetic_trace.jsonl" --model models/replay-mooncake.toml --quiet >/dev/null
"$gen" replay "$traces/conversation_trace.jsonl" --model models/replay-mooncake.toml --limit 3000 --quiet >/dev/null
"$gen" check --jobs 1 >/dev/null
"$profdata" merge -o "$work/kvmc.profdata" "$work/raw"

echo "build-pgo: 3/3 optimized build" >&2
RUSTFLAGS="-Cprofile-use=$work/kvmc.profdata" CARGO_TARGET_DIR="$work/use" cargo build --release --locked
echo "$work/use/release/kvmc"
