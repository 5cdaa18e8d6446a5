#!/usr/bin/env bash
# Benchmark of the native VLM engine, printed as ratios measured in the same run:
#   (a) this engine against transformers scoring one question on the same "mid" random Qwen2-VL
#       (text 512 x 8, vision 512 x 8, a 448x448 image, 2 CPU threads); target <= 1.0;
#   (b) 45 questions on one image against 1 question (the image prefix runs once); target <= 2.5;
#   (c) 32 sequences of 64 new tokens decoded as one batch against one at a time; target <= 0.3.
# Each side keeps its best of three. Needs the venv of fixtures/vlm/requirements.txt:
#
#   VLM_VENV=/path/to/venv benches/vlm.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${VLM_VENV:-${BPALS_VENV:-$root/.venv}}"
work="${VLM_BENCH_DIR:-${TMPDIR:-/tmp}/bpals-vlm-bench}"
cd "$root"
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" LIBTORCH_USE_PYTORCH=1
# The engine pins libtorch's CPU kernels to AVX2 for reproducible bytes (src/vlm/cpu_kernels.rs);
# transformers runs on the same kernels, so the ratio compares like with like.
export ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-avx2}" MKL_CBWR="${MKL_CBWR:-AVX2,STRICT}" ONEDNN_MAX_CPU_ISA="${ONEDNN_MAX_CPU_ISA:-AVX2}"
# BENCH_PROFILE=debug reuses the test build (the heavy work is in libtorch either way).
profile="${BENCH_PROFILE:-release}"
if [ "$profile" = release ]; then cargo build --release --locked --quiet --features vlm; else cargo build --locked --quiet --features vlm; fi
bin="${CARGO_TARGET_DIR:-$root/target}/$profile/bpals-release"

reference="$("$venv/bin/python" benches/vlm_reference.py "$work")"
questions=()
for i in $(seq 1 45); do questions+=(--question "Question number $i: is there a finding of kind $i in this chest X-ray?"); done
best() { # best total of preprocess + vision + text over three runs
  local best=""
  for run in 1 2 3; do
    local ms
    ms="$("$bin" probe --model "$work" --image "$work/image-448.png" --device cpu "$@" | "$venv/bin/python" -c 'import json,sys; t=json.load(sys.stdin)["timing_ms"]; print(t["preprocess"]+t["vision"]+t["text"])')"
    best="$("$venv/bin/python" -c "print(min(float('$ms'), float('${best:-inf}')))")"
  done
  echo "$best"
}
one="$(best --question "Is there a pleural effusion in this chest X-ray?")"
many="$(best "${questions[@]}")"
"$venv/bin/python" - "$reference" "$one" "$many" <<'PY'
import json, sys
ref = json.loads(sys.argv[1]); one = float(sys.argv[2]); many = float(sys.argv[3])
t = ref["transformers_one_question_ms"]
print(f"mid Qwen2-VL, {ref['parameters']:,} parameters, 448x448 image, 2 threads, best of 3")
print(f"  transformers, 1 question: {t:8.1f} ms")
print(f"  this engine,  1 question: {one:8.1f} ms   ratio {one / t:.2f} (target <= 1.0)")
print(f"  this engine, 45 questions: {many:8.1f} ms   ratio to 1 question {many / one:.2f} (target <= 2.5)")
PY
# (c) greedy decoding, batched against one at a time, both in this binary on 2 threads.
generation="$("$bin" bench-generation --model "$work" --image "$work/image-448.png" --device cpu --sequences 32 --new-tokens 64 --runs 2)"
"$venv/bin/python" - "$generation" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"  decoding {r['sequences']} sequences x {r['new_tokens']} new tokens: batched {r['batched_ms']:.0f} ms, one at a time {r['one_at_a_time_ms']:.0f} ms")
print(f"  ratio {r['ratio']:.3f} (target <= 0.3); same tokens: {r['same_tokens']}")
PY
