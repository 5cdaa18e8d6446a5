#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server, built from the source PyPI's llama-cpp-python 0.3.36
# sdist carries (scripts/fetch-llama-cpp-sdist.sh), once, into the same cache folder: about 5
# minutes on 2 cores. Installs cmake from Debian when absent (as root). Prints the llama-server
# binary's path. Honours BPALS_LLAMA_CPP_CACHE and BPALS_PYTHON.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$(bash "$root/scripts/fetch-llama-cpp-sdist.sh")"
build="$(dirname "$(dirname "$src")")/build"
server="$build/bin/llama-server"
# CPU only, no network client, no tests or examples: the server and what it links, tuned to this
# machine's CPU (GGML_NATIVE, the default). Optimised at -O1, not Release's -O3: the suite serves
# a tiny model, and -O1 compiles in 493 s of CPU against 699 (ggml's kernels are intrinsics,
# inlined at either level). The flags are stamped beside the build, which is redone when they change.
flags=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=-O1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON)
stamp="$build/.bpals-flags"
if [ ! -x "$server" ] || [ "$(cat "$stamp" 2>/dev/null)" != "${flags[*]}" ]; then
  if ! command -v cmake >/dev/null; then
    echo "installing cmake from Debian (to build llama.cpp)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >&2
  fi
  echo "building llama-server from $src (about 5 minutes on 2 cores, once)" >&2
  rm -rf "$build"
  cmake -S "$src" -B "$build" "${flags[@]}" >&2
  cmake --build "$build" --target llama-server -j "$(nproc)" >&2
  echo "${flags[*]}" >"$stamp"
fi
echo "$server"
