#!/usr/bin/env bash
# GPU readiness through the GPU-node bundle, on a machine that has both Rust and a CUDA device
# (a cluster's login node has Rust and no GPU; its GPU nodes the reverse: see
# docs/src/publisher/gpu-nodes.md for that split). Builds the bundle for this machine's PyTorch
# (scripts/gpu-bundle), unpacks it, and runs its runner with --device cuda: parity of every
# family in f32 and bf16 against the CPU, the S1a demo build on the GPU against the CPU's,
# scoring throughput and MFU of the full-size architectures (random bf16 weights), and image
# preparation on 1, 4 and all CPU threads. Targets: prefill MFU >= 40%; the 4,628-image
# baseline within 2x of its compute roofline.
#
#   benches/gpu.sh [--torch VERSION] [RUNNER ARGS...]    e.g. --images 32, --peak-tflops 989
#
# The report is written to $GPU_BENCH_DIR (default ./gpu-bench)/report.json.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch=2.13.0
if [ "${1:-}" = --torch ]; then
  torch="$2"
  shift 2
fi
out="${GPU_BENCH_DIR:-$PWD/gpu-bench}"
mkdir -p "$out"
archive="$("$root/scripts/gpu-bundle" --torch "$torch" --out "$out/bundle")"
rm -rf "$out/node" && mkdir -p "$out/node"
tar -xJf "$archive" -C "$out/node"
if [ "$torch" = 2.13.0 ]; then
  source "$root/scripts/torch-env.sh"
  python="$venv/bin/python"
else
  python="${BPALS_CI_CACHE:-$HOME/.cache/bpals}/venv-torch$torch/bin/python"
fi
exec "$python" "$out/node/bpals-release-gpu-torch$torch/run" --device cuda --out "$out" "$@"
