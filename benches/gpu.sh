#!/usr/bin/env bash
# GPU readiness, on a machine with a CUDA device (nothing here downloads anything):
#   1. the CUDA parity test: the fixture models on the GPU (f32 and bf16) against the CPU (f32);
#   2. scoring throughput of full-size Qwen2.5-VL-7B and Qwen3-VL-8B (benches/configs: the real
#      architectures, random bf16 weights made on the device), 1024x1024 images, 57 questions
#      each: images per second, prefill tokens per second, and MFU against the GPU's dense bf16
#      peak; then the 4,628-image baseline's projected time against its compute roofline.
# Targets: prefill MFU >= 40%; the baseline within 2x of the roofline (about 4 minutes on an H100).
#
#   benches/gpu.sh [IMAGES]            (default 16 timed images, after one warm-up)
#   GPU_PEAK_TFLOPS=989 benches/gpu.sh (the peak, when nvidia-smi names a GPU this script does not know)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
images="${1:-16}"
source "$root/scripts/torch-env.sh"

name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || true)"
if [ -z "${GPU_PEAK_TFLOPS:-}" ]; then
  case "$name" in
    *H100*|*H200*|*GH200*) GPU_PEAK_TFLOPS=989 ;;   # SXM dense bf16 (the PCIe H100 is 756)
    *A100*) GPU_PEAK_TFLOPS=312 ;;
    *L40S*) GPU_PEAK_TFLOPS=362 ;;
    *) echo "unknown GPU '$name': set GPU_PEAK_TFLOPS to its dense bf16 peak" >&2; exit 2 ;;
  esac
  case "$name" in *PCIe*) [ "$GPU_PEAK_TFLOPS" = 989 ] && GPU_PEAK_TFLOPS=756 ;; esac
fi
echo "GPU: $name (dense bf16 peak taken as $GPU_PEAK_TFLOPS TFLOP/s)"

echo "== CUDA parity (fixture models, GPU f32 and bf16 against CPU f32)"
cargo test --release --locked --features vlm --test vlm_cuda -- --ignored --nocapture 2>&1 | grep -E "vs cpu|test result|panicked"

cargo build --release --locked --quiet --features vlm
bin="${CARGO_TARGET_DIR:-$root/target}/release/bpals-release"
for model in qwen2_5_vl_7b qwen3_vl_8b qwen3_5_9b; do
echo "== $model scoring throughput (random weights, 1024x1024, 57 questions)"
report="$("$bin" bench scoring --config "benches/configs/$model.config.json" \
  --preprocessor "benches/configs/$model.preprocessor.json" --device cuda --dtype bf16 \
  --images "$images" --size 1024 --questions 57 --peak-tflops "$GPU_PEAK_TFLOPS")"
[ -n "${GPU_BENCH_DIR:-}" ] && echo "$report" > "$GPU_BENCH_DIR/$model.json"
python3 - "$report" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"  {r['parameters']/1e9:.2f}B parameters, {r['dtype']}, image {r['image_size']}px -> {r['image_tokens']} image tokens, {r['questions']} questions")
print(f"  {r['prefill_tokens_per_image']} prefill tokens and {r['tflop_per_image']:.1f} TFLOP per image")
print(f"  images/s {r['images_per_second']:.2f}   prefill tokens/s {r['prefill_tokens_per_second']:,.0f}   achieved {r['achieved_tflops']:.0f} TFLOP/s")
print(f"  MFU {r['mfu']:.1%} (target >= 40%)")
print(f"  preprocessing {r['preprocess_ms_per_image']:.0f} ms per image on one CPU thread, device {r['device_ms_per_image']:.0f} ms per image")
ratio = r['projected_seconds'] / r['roofline_seconds']
print(f"  baseline of {r['project_images']} images: {r['projected_seconds']/60:.1f} min projected, roofline {r['roofline_seconds']/60:.1f} min, ratio {ratio:.2f} (target <= 2)")
PY
done
