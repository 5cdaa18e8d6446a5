#!/usr/bin/env bash
# The native engine against llama.cpp's server on the CPU, in one run: seconds per image to
# answer the same 57 yes/no questions about the same image with the same model (the trained tiny
# Qwen2-VL, converted to GGUF f32 with its vision projector by llama.cpp's own converter).
# llama.cpp is the CPU runtime users know; the ratio is what the engine's CPU path is held to.
# Each side keeps its best of three passes over the questions (the first pays warm-up); the
# server answers one request at a time (one client), reusing the image's cached prefix as the
# engine does. Builds llama-server once (scripts/build-llama-server.sh, about 10 minutes).
#
#   benches/llama-server.sh            # BENCH_BIN=PATH times an engine binary already built
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/torch-env.sh"
export BPALS_PYTHON="$venv/bin/python"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
server="$(bash scripts/build-llama-server.sh)"
src="$(bash scripts/fetch-llama-cpp-sdist.sh)"
if [ -n "${BENCH_BIN:-}" ]; then
  bin="$BENCH_BIN"
else
  cargo build --release --locked --quiet --features vlm
  bin="${CARGO_TARGET_DIR:-$root/target}/release/bpals-release"
fi
exec "$venv/bin/python" benches/llama_server.py "$bin" "$server" "$src"
