#!/usr/bin/env bash
# Benchmark of the native VLM engine, printed as ratios measured in the same run, for "mid"
# random Qwen2-VL, Qwen3-VL, Qwen3.5, Qwen3-VL-MoE, Qwen3.5-MoE and Gemma 4 models (text 512 x 8, vision
# 512 x 8, a 448x448 image, 2 CPU threads; Qwen3.5's linear layers run torch code on both sides;
# the MoE mids have the dense mids' active MLP size, see vlm_reference.py):
#   (a) this engine against transformers scoring one question; target <= 1.0;
#   (b) this engine against transformers scoring 45 questions on one image (the engine runs the
#       image prefix once, transformers a padded batch of 45); target <= 1.0; and the engine's
#       45 questions against its 1 question; target <= 2.5;
#   (c) 32 sequences of 64 new tokens decoded as one batch against one at a time; target <= 0.3;
#   (d) the full-size architectures of benches/configs cut to two layers each, real widths, on
#       the CPU: one 1024x1024 image, 57 questions (numbers, no target: the shapes run here).
#   (e) each MoE mid against its dense mid of the same active size, 45 questions, this engine;
#       target <= 1.5.
#   (f) each mid at 57 questions of 16 to 28 tokens (its architecture, random weights, a 448x448
#       image), the questions as releases score them (the image prefix held once, their real
#       tokens only, what they begin alike with once, the last layers on their last tokens,
#       each real token meeting the prefix once)
#       against the old path (the prefix copied per question, every row padded through every
#       layer: `bench scoring --prefix-attention copied`), the two alternating, best of two each:
#       the scoring time's ratio, target <= 0.6.
# Each side keeps its best of three runs in one process (the first run of a process pays libtorch's
# warm-up on both sides). Needs the venv of fixtures/vlm/requirements.txt:
#
#   VLM_VENV=/path/to/venv benches/vlm.sh
#
# BENCH_FAMILIES="qwen3_5" runs (a) and (b) for those families only, and skips (c) and (d).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLM_VENV:-${BPALS_VENV:-$root/.venv}}"
work="${VLM_BENCH_DIR:-${TMPDIR:-/tmp}/bpals-vlm-bench}"
cd "$root"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" LIBTORCH_USE_PYTORCH=1
# The engine pins libtorch's CPU kernels (AVX2, MKL's COMPATIBLE branch) for reproducible bytes (crates/vlm/src/cpu_kernels.rs);
# transformers runs on the same kernels, so the ratio compares like with like.
export ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-avx2}" MKL_CBWR="${MKL_CBWR:-COMPATIBLE}" ONEDNN_MAX_CPU_ISA="${ONEDNN_MAX_CPU_ISA:-AVX2}"
# BENCH_PROFILE=debug reuses the test build (the heavy work is in libtorch either way).
# BENCH_BIN=PATH times a binary already built (for example the one `scripts/test` left in the
# cargo target dir) instead of building one.
profile="${BENCH_PROFILE:-release}"
if [ -n "${BENCH_BIN:-}" ]; then
  bin="$BENCH_BIN"
else
  if [ "$profile" = release ]; then cargo build --release --locked --quiet --features vlm; else cargo build --locked --quiet --features vlm; fi
  bin="${CARGO_TARGET_DIR:-$root/target}/$profile/bpals-release"
fi

questions=()
for i in $(seq 1 45); do questions+=(--question "Question number $i: is there a finding of kind $i in this chest X-ray?"); done
best() { # MODEL ARGS...: best total of preprocess + vision + text over three runs in one process,
  # as vlm_reference.py times transformers (three calls in one Python session, best kept)
  local model="$1"
  shift
  "$bin" probe --model "$model" --image "$model/image-448.png" --device cpu --repeat 3 "$@" \
    | "$venv/bin/python" -c 'import json,sys; t=json.load(sys.stdin)["timing_ms"]; print(t["preprocess"]+t["vision"]+t["text"])'
}
declare -A engine_45
for family in ${BENCH_FAMILIES:-qwen2_vl qwen3_vl qwen3_5 qwen3_vl_moe qwen3_5_moe gemma4}; do
  reference="$("$venv/bin/python" benches/vlm_reference.py "$work/$family" "$family")"
  one="$(best "$work/$family" --question "Is there a pleural effusion in this chest X-ray?")"
  many="$(best "$work/$family" "${questions[@]}")"
  engine_45[$family]="$many"
  "$venv/bin/python" - "$family" "$reference" "$one" "$many" <<'PY'
import json, sys
family, ref, one, many = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
t1, t45 = ref["transformers_one_question_ms"], ref["transformers_45_questions_ms"]
print(f"mid {family}, {ref['parameters']:,} parameters, 448x448 image, 2 threads, best of 3")
print(f"  1 question:   transformers {t1:8.1f} ms, this engine {one:8.1f} ms   ratio {one / t1:.2f} (target <= 1.0)")
print(f"  45 questions: transformers {t45:8.1f} ms, this engine {many:8.1f} ms   ratio {many / t45:.2f} (target <= 1.0)")
print(f"  this engine, 45 questions against 1: {many / one:.2f} (target <= 2.5)")
PY
done
# (e) a mixture of experts against the dense model of its active size.
for moe in qwen3_vl_moe qwen3_5_moe; do
  dense="${moe%_moe}"
  if [ -n "${engine_45[$moe]:-}" ] && [ -n "${engine_45[$dense]:-}" ]; then
    "$venv/bin/python" -c 'import sys; m, d = map(float, sys.argv[3:]); print(f"{sys.argv[1]} against {sys.argv[2]} at equal active size, 45 questions, this engine: {m:.1f} ms / {d:.1f} ms, ratio {m / d:.2f} (target <= 1.5)")' \
      "$moe" "$dense" "${engine_45[$moe]}" "${engine_45[$dense]}"
  fi
done
# (f) each mid at 57 questions as releases score them, against the old path.
preprocessor() { # a model folder's image settings: Gemma 4 keeps them in processor_config.json
  if [ -f "$1/preprocessor_config.json" ]; then echo "$1/preprocessor_config.json"; else echo "$1/processor_config.json"; fi
}
for family in ${BENCH_FAMILIES:-qwen2_vl qwen3_vl qwen3_5 qwen3_vl_moe qwen3_5_moe gemma4}; do
  for round in 1 2; do
    for path in copied shared; do
      "$bin" bench scoring --config "$work/$family/config.json" --preprocessor "$(preprocessor "$work/$family")" \
        --device cpu --images 2 --warmup 1 --size 448 --questions 57 --question-tokens "${BENCH_QUESTION_TOKENS:-16-28}" \
        --prefix-attention "$path" > "$work/$family/scoring-$path-$round.json"
    done
  done
  "$venv/bin/python" - "$family" "$work/$family" <<'PY'
import json, sys
family, folder = sys.argv[1], sys.argv[2]
def best(path):
    runs = [json.load(open(f"{folder}/scoring-{path}-{r}.json")) for r in (1, 2)]
    return min(runs, key=lambda r: r["device_ms_per_image"])
def stage(r, name):
    return next(s["ms_per_image"] for s in r["stages"] if s["stage"] == name)
copied, shared = best("copied"), best("shared")
c, s = copied["device_ms_per_image"], shared["device_ms_per_image"]
print(f"mid {family}, 57 questions, {shared['image_tokens']} image tokens: old path {c:.0f} ms, as releases score {s:.0f} ms an image, ratio {s / c:.2f} (target <= 0.6)")
print(f"  questions alone: old path {stage(copied, 'questions'):.0f} ms, as releases score {stage(shared, 'questions'):.0f} ms, ratio {stage(shared, 'questions') / stage(copied, 'questions'):.2f}")
PY
done
[ -n "${BENCH_FAMILIES:-}" ] && exit 0
# (c) greedy decoding, batched against one at a time, both in this binary on 2 threads.
generation="$("$bin" bench generation --model "$work/qwen2_vl" --image "$work/qwen2_vl/image-448.png" --device cpu --sequences 32 --new-tokens 64 --runs 2)"
"$venv/bin/python" - "$generation" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"  decoding {r['sequences']} sequences x {r['new_tokens']} new tokens: batched {r['batched_ms']:.0f} ms, one at a time {r['one_at_a_time_ms']:.0f} ms")
print(f"  ratio {r['ratio']:.3f} (target <= 0.3); same tokens: {r['same_tokens']}")
PY
# (d) the full-size architectures, two layers each, real widths, on the CPU.
for model in qwen2_5_vl_7b qwen3_vl_8b qwen3_5_9b qwen3_vl_30b_a3b qwen3_6_35b_a3b gemma4_e4b gemma4_26b_a4b gemma4_31b; do
  report="$("$bin" bench scoring --config "benches/configs/$model.config.json" --preprocessor "benches/configs/$model.preprocessor.json" \
    --device cpu --layers 2 --images 1 --warmup 0 --size 1024 --questions 57)"
  "$venv/bin/python" - "$model" "$report" <<'PY'
import json, sys
name, r = sys.argv[1], json.loads(sys.argv[2])
print(f"{name} cut to {r['text_layers']} text layers and {r['vision_blocks']} vision blocks ({r['parameters']/1e9:.2f}B parameters, {r['active_parameters']/1e9:.2f}B active), CPU f32:")
print(f"  {r['image_tokens']} image tokens, {r['tflop_per_image']:.2f} TFLOP per image, {r['device_ms_per_image']/1000:.1f} s per image, {r['achieved_tflops']*1000:.0f} GFLOP/s")
PY
done
