#!/usr/bin/env bash
# The image prefix held once against copied per question (`bench scoring --prefix-attention`:
# copied, shared, and fused, the prefix's part through libtorch's fused kernel; BENCH_PATHS picks),
# on the CPU, old beside new in the same run: the full-size architectures of benches/configs cut
# to two layers (every width real), random f32 weights, one 1024x1024 image (the prefix NIH's
# images make) and 57 questions of 24 tokens. For each: the best of BENCH_ROUNDS (default 2)
# device times per path, the rounds alternating the paths, their ratio to the first path, and
# each path's peak resident memory (GNU time's maximum RSS of the process).
#
#   benches/prefix-attention.sh                       # four Qwen models
#   BENCH_MODELS="gemma4_31b gemma4_26b_a4b" benches/prefix-attention.sh
#   BENCH_MODELS="qwen2_5_vl_7b" BENCH_SIZE=448 benches/prefix-attention.sh
#
# BENCH_BIN=PATH times a binary already built (the test build left in the cargo target dir).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/torch-env.sh"
if [ -n "${BENCH_BIN:-}" ]; then
  bin="$BENCH_BIN"
else
  cargo build --release --locked --quiet --features vlm
  bin="${CARGO_TARGET_DIR:-$root/target}/release/bpals-release"
fi
models="${BENCH_MODELS:-qwen2_5_vl_7b qwen3_vl_8b qwen3_5_9b qwen3_6_35b_a3b}"
size="${BENCH_SIZE:-1024}"
rounds="${BENCH_ROUNDS:-2}"
paths="${BENCH_PATHS:-copied shared fused}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for model in $models; do
  for round in $(seq "$rounds"); do
    for path in $paths; do
      /usr/bin/time -v -o "$work/$model-$path-$round.time" "$bin" bench scoring \
        --config "benches/configs/$model.config.json" --preprocessor "benches/configs/$model.preprocessor.json" \
        --device cpu --dtype f32 --layers 2 --images 1 --warmup 0 --size "$size" --questions 57 \
        --prefix-attention "$path" > "$work/$model-$path-$round.json"
    done
  done
  python3 - "$work" "$model" "$rounds" $paths <<'PY'
import json, re, sys
work, model, rounds, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def best(path):
    runs = [json.load(open(f"{work}/{model}-{path}-{k}.json")) for k in range(1, rounds + 1)]
    rss = [int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{work}/{model}-{path}-{k}.time").read()).group(1))
           for k in range(1, rounds + 1)]
    return min(r["device_ms_per_image"] for r in runs), max(rss) / 1024, runs[0]
measured = {path: best(path) for path in paths}
r = next(iter(measured.values()))[2]
print(f"{model}, {r['text_layers']} text layers, {r['image_tokens']} image tokens, {r['questions']} questions (CPU f32):")
base, base_mib, _ = measured[paths[0]]
for path, (ms, mib, _) in measured.items():
    print(f"  {path}: {ms / 1000:.2f} s per image (ratio {ms / base:.3f} to {paths[0]}), peak resident memory {mib:,.0f} MiB"
          f" ({base_mib - mib:,.0f} MiB less)")
PY
done
