#!/usr/bin/env bash
# The image prefix held once against copied per question (`bench scoring --prefix-attention`:
# copied, shared, and fused, the prefix's part through libtorch's fused kernel; BENCH_PATHS picks),
# on the CPU, old beside new in the same run: the full-size architectures of benches/configs cut
# to two layers (every width real), random f32 weights, one 1024x1024 image (the prefix NIH's
# images make) and 57 questions of BENCH_QUESTION_TOKENS (default 24; MIN-MAX spreads them as a
# release's vary). For each: the best of BENCH_ROUNDS (default 2) device times per path, the
# rounds alternating the paths, their ratio to the first path, the questions' stage alone, and
# each path's peak resident memory (GNU time's maximum RSS of the process). A path PATH/ROWS also
# says how the questions' rows go between the layers (`--suffix-rows padded`, `packed` or
# `deduplicated`, the default).
#
#   benches/prefix-attention.sh                       # four Qwen models
#   BENCH_MODELS="gemma4_31b gemma4_26b_a4b" benches/prefix-attention.sh
#   BENCH_MODELS="qwen2_5_vl_7b" BENCH_SIZE=448 benches/prefix-attention.sh
#   BENCH_PATHS="shared/padded shared/packed" BENCH_QUESTION_TOKENS=16-28 benches/prefix-attention.sh
#   BENCH_PATHS="shared/packed shared/deduplicated" BENCH_QUESTION_TOKENS=16-28 benches/prefix-attention.sh
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
question_tokens="${BENCH_QUESTION_TOKENS:-24}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for model in $models; do
  for round in $(seq "$rounds"); do
    for path in $paths; do
      rows=()
      [ "${path#*/}" = "$path" ] || rows=(--suffix-rows "${path#*/}")
      /usr/bin/time -v -o "$work/$model-${path/\//-}-$round.time" "$bin" bench scoring \
        --config "benches/configs/$model.config.json" --preprocessor "benches/configs/$model.preprocessor.json" \
        --device cpu --dtype f32 --layers 2 --images 1 --warmup 0 --size "$size" --questions 57 \
        --question-tokens "$question_tokens" --prefix-attention "${path%/*}" "${rows[@]}" > "$work/$model-${path/\//-}-$round.json"
    done
  done
  python3 - "$work" "$model" "$rounds" $paths <<'PY'
import json, re, sys
work, model, rounds, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
def best(path):
    name = path.replace("/", "-")
    runs = [json.load(open(f"{work}/{model}-{name}-{k}.json")) for k in range(1, rounds + 1)]
    rss = [int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{work}/{model}-{name}-{k}.time").read()).group(1))
           for k in range(1, rounds + 1)]
    questions = min(next(s["ms_per_image"] for s in r["stages"] if s["stage"] == "questions") for r in runs)
    return min(r["device_ms_per_image"] for r in runs), questions, max(rss) / 1024, runs[0]
measured = {path: best(path) for path in paths}
r = next(iter(measured.values()))[3]
shortest, longest = r["question_tokens"]
print(f"{model}, {r['text_layers']} text layers, {r['image_tokens']} image tokens, {r['questions']} questions of "
      f"{shortest}-{longest} tokens (CPU f32):")
base, base_questions, base_mib, _ = measured[paths[0]]
for path, (ms, questions, mib, _) in measured.items():
    print(f"  {path}: {ms / 1000:.2f} s per image (ratio {ms / base:.3f} to {paths[0]}; the questions' stage "
          f"{questions / 1000:.2f} s, ratio {questions / base_questions:.3f}), peak resident memory {mib:,.0f} MiB"
          f" ({mib - base_mib:+,.0f} MiB against {paths[0]})")
PY
done
