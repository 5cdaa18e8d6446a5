#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server, built from the source PyPI's llama-cpp-python 0.3.36
# sdist carries (scripts/fetch-llama-cpp-sdist.sh), once, into the same cache folder: 5 to 10
# minutes on 2 cores. Installs cmake from Debian when absent (as root). Prints the llama-server
# binary's path. Honours BPALS_LLAMA_CPP_CACHE, BPALS_PYTHON and BPALS_LLAMA_SERVER_OPT.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$(bash "$root/scripts/fetch-llama-cpp-sdist.sh")"
# The optimisation level: Release's own -O3 unless BPALS_LLAMA_SERVER_OPT says otherwise. The
# suite asks for -O1 (it serves a tiny model; 493 s of CPU to build against 699 at -O3, ggml's
# kernels being intrinsics inlined at either level); benches/servers.sh keeps -O3, since it times
# the server. Each level builds into a folder of its own.
opt="${BPALS_LLAMA_SERVER_OPT:--O3}"
case "$opt" in -O[0-3s]) ;; *) echo "error: BPALS_LLAMA_SERVER_OPT must be -O0, -O1, -O2, -O3 or -Os, not '$opt'" >&2; exit 1 ;; esac
build="$(dirname "$(dirname "$src")")/build"
[ "$opt" = -O3 ] || build="$build$opt"
server="$build/bin/llama-server"
if [ ! -x "$server" ]; then
  if ! command -v cmake >/dev/null; then
    echo "installing cmake from Debian (to build llama.cpp)" >&2
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >&2
  fi
  echo "building llama-server at $opt from $src (about 5 to 10 minutes on 2 cores, once)" >&2
  # CPU only, no network client, no tests or examples: the server and what it links, tuned to
  # this machine's CPU (GGML_NATIVE, the default), as a user's own build would be.
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS_RELEASE=$opt -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS_RELEASE=$opt -DNDEBUG" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON >&2
  cmake --build "$build" --target llama-server -j "$(nproc)" >&2
fi
echo "$server"
