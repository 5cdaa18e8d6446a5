#!/usr/bin/env bash
# What the vendor-independent CPU kernels cost: the engine under its pin (MKL_CBWR=COMPATIBLE,
# the branch Intel and AMD processors take alike) against the old Intel-only pin
# (MKL_CBWR=AVX2,STRICT, which AMD processors ignore), in the same run, alternating, best of
# two rounds each. Printed as ratios (pinned time / old time):
#   (a) the README's sample build (640 images, the tiny trained Qwen2-VL, --jobs 2);
#   (b) `bench scoring` of Qwen2.5-VL-7B's real widths cut to one layer (448x448, 8 questions,
#       2 threads): where matrix products dominate, as they do for a real model on a CPU.
#
#   benches/cpu-kernels.sh            # builds the engine (debug profile is enough: the work is libtorch's)
#   BENCH_BIN=PATH benches/cpu-kernels.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/torch-env.sh"
if [ -n "${BENCH_BIN:-}" ]; then
  bin="$BENCH_BIN"
else
  cargo build --locked --quiet --features vlm
  bin="${CARGO_TARGET_DIR:-$root/target}/debug/bpals-release"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

seconds() { # MKL_CBWR COMMAND...: wall seconds of one run
  local cbwr="$1" start end
  shift
  start=$(date +%s.%N)
  MKL_CBWR="$cbwr" "$@" >/dev/null 2>&1
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
sample() { rm -rf "$work/out" "$work/cache"; "$bin" build specs/s1a.yaml --out "$work/out" --cache-dir "$work/cache" --no-progress --jobs 2; }
scoring() {
  "$bin" bench scoring --config benches/configs/qwen2_5_vl_7b.config.json \
    --preprocessor benches/configs/qwen2_5_vl_7b.preprocessor.json --device cpu --layers 1 --size 448 --images 2 --questions 8
}
for case in sample scoring; do
  best_new=inf best_old=inf
  for round in 1 2; do
    new=$(seconds COMPATIBLE "$case")
    old=$(seconds AVX2,STRICT "$case")
    best_new=$(echo "if ($best_new == inf || $new < $best_new) $new else $best_new" | sed "s/inf/999999/g" | bc)
    best_old=$(echo "if ($best_old == inf || $old < $best_old) $old else $best_old" | sed "s/inf/999999/g" | bc)
  done
  printf '%-8s COMPATIBLE %6.1f s, AVX2,STRICT %6.1f s: ratio %.2f\n' "$case" "$best_new" "$best_old" "$(echo "$best_new / $best_old" | bc -l)"
done
