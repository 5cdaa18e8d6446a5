#!/usr/bin/env bash
# The GPU-node path proven on this machine as a node sees it (no GPU needed):
#   1. scripts/gpu-bundle --torch VERSION builds the bundle (the release engine linked against
#      that PyTorch: tch 0.24 for 2.11.0, tch 0.26 for 2.13.0) and checks its archive's size;
#   2. the archive is unpacked into a fresh folder;
#   3. a fresh virtual environment gets torch==VERSION from PyPI, and nothing else;
#   4. the runner runs there with --device cpu --quick, with an empty environment: nothing Rust
#      on PATH, no BPALS_ or HF_ variables, writing only under its folder and --out;
#   5. it is refused in one line with the project's PyTorch when that is another version, and
#      with --device cuda (no GPU here).
#
#   benches/gpu-node-cpu.sh [VERSION]        (default 2.11.0, what the GPU nodes we can use have)
#
# Not in the suite: the first run builds a second release binary (11 to 28 minutes on 2 cores)
# and installs PyTorch twice (4.6 GB each); later runs reuse the build (~/.cache/bpals).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
torch="${1:-2.11.0}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { echo "== $*"; }

step "1. the bundle for PyTorch $torch"
start=$(date +%s)
archive="$("$root/scripts/gpu-bundle" --torch "$torch" --out "$work/bundles")"
echo "$archive: $(stat -c %s "$archive") bytes ($(( $(date +%s) - start )) s)"

step "2. unpacked in a fresh folder"
node="$work/node"
mkdir -p "$node"
tar -xJf "$archive" -C "$node"
bundle="$node/bpals-release-gpu-torch$torch"
du -sh "$bundle" "$bundle"/*

step "3. a fresh virtual environment with torch==$torch from PyPI only"
python3 -m venv "$node/venv"
"$node/venv/bin/python" -m pip install --quiet --disable-pip-version-check "torch==$torch"
"$node/venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null | grep -iE "^torch " 

step "4. the runner, --device cpu --quick, in an empty environment"
bare=(env -i HOME="$node/home" PATH=/usr/local/bin:/usr/bin:/bin)
if "${bare[@]}" sh -c 'command -v cargo rustc' >/dev/null; then
  echo "error: cargo or rustc is on the bare PATH" >&2
  exit 1
fi
mkdir -p "$node/home"
before="$(find "$bundle" -type f | sort | xargs sha256sum | sha256sum)"
start=$(date +%s)
"${bare[@]}" "$node/venv/bin/python" "$bundle/run" --device cpu --out "$node/out" --quick
echo "runner: $(( $(date +%s) - start )) s; report: $node/out/report.json"
[ "$before" = "$(find "$bundle" -type f | sort | xargs sha256sum | sha256sum)" ] || { echo "error: the runner changed its own folder" >&2; exit 1; }

step "5. refusals"
other="$(python3 - "$bundle/bundle.json" <<'PY'
import json, sys
print("2.13.0" if json.load(open(sys.argv[1]))["torch"] != "2.13.0" else "none", end="")
PY
)"
if [ "$other" = 2.13.0 ] && [ -x "${BPALS_VENV:-$HOME/.cache/bpals/venv}/bin/python" ]; then
  if "${bare[@]}" "${BPALS_VENV:-$HOME/.cache/bpals/venv}/bin/python" "$bundle/run" --device cpu --out "$node/out2" 2>"$node/err"; then
    echo "error: a mismatched PyTorch was not refused" >&2
    exit 1
  fi
  echo "mismatched PyTorch: $(cat "$node/err")"
fi
if "${bare[@]}" "$node/venv/bin/python" "$bundle/run" --device cuda --out "$node/out3" 2>"$node/err"; then
  echo "note: this machine has a CUDA device; --device cuda ran"
else
  echo "no CUDA device: $(cat "$node/err")"
fi
echo "ok: the bundle for PyTorch $torch runs on a bare machine with only torch==$torch"
