#!/usr/bin/env bash
# Everything the engine's own CUDA kernels wait on, measured in one call on a GPU machine that has
# this checkout and a GPU bundle built elsewhere (scripts/gpu-bundle) but no Rust and no network:
# a lent machine, or a cluster's GPU node. Each step runs under its own time limit, so a step
# that hangs or fails costs only itself, and writes its log to OUT; the call ends within its
# budget (default 540 s) with a line a step in OUT/summary.txt.
#
#   1. benches/attention_gpu.py, kernels_gpu.py, delta_rule_gpu.py: each kernel alone beside the
#      libtorch form it replaces, at passes of 8 and 16 images (PyTorch only);
#   2. the bundle's runner, parity with the kernels (`run --kernels --steps parity`);
#   3. the runner's throughput step, each model with the questions' rows padded (the old
#      layout), then their real tokens each question's own, then as releases score them (what
#      the questions begin alike with once), by libtorch's forms, then with the kernels
#      (`--ways fused/padded:8,fused/packed:8,fused:8,fused+kernels:8`): Qwen3.6-35B-A3B, Qwen3-VL-30B-A3B,
#      Qwen3-VL-8B, then Gemma 4 31B (whose questions' attention to the prefix was the largest on
#      the last H100 run; last, since the runner keeps each run's results as it goes, so a step
#      stopped at its limit loses only what it had not reached).
#
#   benches/gpu-call.sh BUNDLE.tar.xz OUT [--budget SECONDS] [--dry-run]
#
# --dry-run prints each step's command and time limit and runs none (no GPU needed).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: benches/gpu-call.sh BUNDLE.tar.xz OUT [--budget SECONDS] [--dry-run]"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
archive="$1" out="$2"
shift 2
budget=540 dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget) budget="${2:?--budget takes seconds}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
[ -f "$archive" ] || { echo "error: $archive: no such bundle (build one with scripts/gpu-bundle)" >&2; exit 2; }
case "$budget" in '' | *[!0-9]*) echo "error: --budget takes whole seconds, not '$budget'" >&2; exit 2 ;; esac
mkdir -p "$out" || exit 2
python="${PYTHON:-python3}"

node="$out/node"
runner='RUNNER'
if [ "$dry_run" = 0 ]; then
  # Python's tarfile unpacks it, so the machine needs no xz of its own.
  rm -rf "$node" && mkdir -p "$node" &&
    "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$archive" "$node" ||
    { echo "error: $archive: not a bundle archive" >&2; exit 2; }
  runner="$(ls -d "$node"/bpals-release-gpu-torch*/run 2>/dev/null | head -n 1)"
  [ -n "$runner" ] || { echo "error: $archive holds no runner (bpals-release-gpu-torch*/run)" >&2; exit 2; }
fi

start=$SECONDS
summary="$out/summary.txt"
: > "$summary"
# step NAME SECONDS COMMAND...: runs COMMAND for at most SECONDS (and never past the budget),
# its output in OUT/NAME.log, and says how it ended.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - (SECONDS - start)))
  [ "$limit" -le "$left" ] || limit="$left"
  if [ "$dry_run" = 1 ]; then
    echo "$name (at most ${limit} s): $*"
    return
  fi
  if [ "$limit" -le 10 ]; then
    echo "$name: not run (the budget is spent)" | tee -a "$summary"
    return
  fi
  local began=$SECONDS
  timeout --signal=INT --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  local how="exit $rc"
  [ "$rc" = 124 ] && how="stopped at its limit of ${limit} s"
  echo "$name: $how after $((SECONDS - began)) s" | tee -a "$summary"
}

step attention 60 "$python" "$root/benches/attention_gpu.py" --images 8,16
step kernels 60 "$python" "$root/benches/kernels_gpu.py" --images 8,16
step delta_rule 60 "$python" "$root/benches/delta_rule_gpu.py" --images 8,16
step parity 90 "$python" "$runner" --device cuda --kernels --steps parity --out "$out/parity"
step throughput 600 "$python" "$runner" --device cuda --steps throughput --out "$out/throughput" \
  --configs qwen3_6_35b_a3b,qwen3_vl_30b_a3b,qwen3_vl_8b,gemma4_31b --ways fused/padded:8,fused/packed:8,fused:8,fused+kernels:8
[ "$dry_run" = 1 ] || rm -rf "$node"
