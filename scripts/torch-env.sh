# Sourced by scripts/test and scripts/bpals-release: the Python virtual environment whose
# PyTorch 2.13 wheel provides libtorch for the `vlm` feature, created on first use. torch-sys
# finds libtorch through the venv's python (LIBTORCH_USE_PYTORCH); build.rs gives the binaries
# an rpath to it, so nothing needs LD_LIBRARY_PATH. Honours BPALS_VENV (CI keeps it cached).
# With BPALS_TORCH_DEFER=1 it only defines make_venv, torch_ready and install_torch, and the caller
# installs PyTorch when it likes (scripts/bpals-release does it while the tool compiles).
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${BPALS_VENV:-$root/.venv}"
# pip takes seconds even when all is installed: a stamp of the requirements it last satisfied
# lets later runs skip it.
stamp="$venv/.bpals-requirements-torch"
torch_ready() {
  [ -x "$venv/bin/python" ] && cmp -s "$root/scripts/requirements-torch.txt" "$stamp"
}
make_venv() {
  if [ ! -x "$venv/bin/python" ]; then
    echo "creating the Python environment $venv" >&2
    python3 -m venv "$venv"
  fi
}
install_torch() {
  make_venv
  echo "installing PyTorch 2.13 into $venv (about 4.6 GB, once; libtorch for the VLM engine)" >&2
  # --no-compile: byte-compiling torch's thousands of modules costs half a minute of CPU that
  # the first run's compile wants; Python compiles what it imports when it imports it.
  "$venv/bin/python" -m pip install --quiet --no-compile --disable-pip-version-check -r "$root/scripts/requirements-torch.txt"
  cp "$root/scripts/requirements-torch.txt" "$stamp"
}
if [ -z "${BPALS_TORCH_DEFER:-}" ] && ! torch_ready; then
  install_torch
fi
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" LIBTORCH_USE_PYTORCH=1
