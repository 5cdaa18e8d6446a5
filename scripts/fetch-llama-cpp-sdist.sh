#!/usr/bin/env bash
# llama.cpp's source as PyPI carries it: the llama-cpp-python 0.3.36 source distribution (its
# vendored llama.cpp holds the published chat templates the conformance tests render, under
# models/templates/). Downloaded once with pip into a cache folder, its sha256 checked, unpacked
# beside it; prints the unpacked vendor/llama.cpp folder. Honours BPALS_LLAMA_CPP_CACHE and
# BPALS_PYTHON (the interpreter whose pip downloads it).
set -euo pipefail
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache="${BPALS_LLAMA_CPP_CACHE:-$HOME/.cache/bpals/llama-cpp-python}"
python="${BPALS_PYTHON:-python3}"
archive="$cache/llama_cpp_python-$version.tar.gz"
unpacked="$cache/llama_cpp_python-$version"
mkdir -p "$cache"
if [ ! -f "$unpacked/.bpals-checked" ]; then
  if ! echo "$sha256  $archive" | sha256sum -c --status 2>/dev/null; then
    rm -f "$archive"
    # --no-binary for this package only: with :all: pip also builds its build tools from source.
    echo "downloading llama-cpp-python $version's source distribution from PyPI (77 MB, once)" >&2
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$cache" >&2
  fi
  if ! echo "$sha256  $archive" | sha256sum -c --status; then
    echo "error: $archive does not have the pinned sha256 $sha256" >&2
    exit 1
  fi
  rm -rf "$unpacked"
  tar -xzf "$archive" -C "$cache"
  touch "$unpacked/.bpals-checked"
fi
echo "$unpacked/vendor/llama.cpp"
