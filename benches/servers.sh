#!/usr/bin/env bash
# The native engine against the two servers a publisher would put behind the openai backend, on
# the CPU, in one run: llama.cpp's server and vLLM's CPU build, each answering the same 57 yes/no
# questions about the same image with the same model (the trained tiny Qwen2-VL, f32), at the
# backend's default concurrency and at the server's best (benches/servers.py says how). Prints
# seconds per image and the ratios (target: the engine at or under 1.0 against each). Builds
# llama-server once (at -O3, about 10 minutes) and installs vLLM's CPU build once (about 3 minutes).
#
#   benches/servers.sh            # BENCH_BIN=PATH times an engine binary already built
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/torch-env.sh"
export BPALS_PYTHON="$venv/bin/python"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
server="$(bash scripts/build-llama-server.sh)"
src="$(bash scripts/fetch-llama-cpp-sdist.sh)"
vllm_python="$(bash scripts/install-vllm.sh)"
if [ -n "${BENCH_BIN:-}" ]; then
  bin="$BENCH_BIN"
else
  cargo build --release --locked --quiet --features vlm
  bin="${CARGO_TARGET_DIR:-$root/target}/release/bpals-release"
fi
exec "$venv/bin/python" benches/servers.py "$bin" "$server" "$src" "$vllm_python"
