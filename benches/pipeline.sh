#!/usr/bin/env bash
# Benchmark of the non-inference pipeline at full NIH scale, as a ratio to pyarrow in the same run.
#
#   benches/pipeline.sh [IMAGES] [JOBS]      (defaults: 112120 images, all CPUs)
#
# Generates synthetic NIH metadata (not timed), runs `bpals-release bench pipeline` (ingest, select,
# fixture scoring, signal, shards, hashing; timed stage by stage), then times pyarrow writing the
# same table with the same settings, and prints bpals_total / pyarrow_write. Both sides keep
# their best of three runs. Target: <= 1.5.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
images="${1:-112120}"
jobs="${2:-$(nproc)}"
venv="${BPALS_VENV:-$root/.venv}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$root"
cargo build --release --locked --quiet
bin="${CARGO_TARGET_DIR:-$root/target}/release/bpals-release"
[ -x "$venv/bin/python" ] || { python3 -m venv "$venv"; "$venv/bin/pip" install -q -r tests/python/requirements.txt; }

python3 fixtures/gen_sample.py --out "$work/nih" --images "$images" --metadata-only >/dev/null
# Best of three on both sides: pyarrow_reference.py also keeps its best of three.
for run in 1 2 3; do
  "$bin" bench pipeline specs/s1a.yaml --data-entry "$work/nih/Data_Entry_2017_v2020.csv" --out "$work/shards" --jobs "$jobs" > "$work/run$run.json"
done
"$venv/bin/python" - "$work" <<'PY'
import json, shutil, sys
runs = [json.load(open(f"{sys.argv[1]}/run{i}.json")) for i in (1, 2, 3)]
best = min(range(3), key=lambda i: runs[i]["total_seconds"])
shutil.copy(f"{sys.argv[1]}/run{best + 1}.json", f"{sys.argv[1]}/bench.json")
PY
"$venv/bin/python" benches/pyarrow_reference.py "$work/bench.json" > "$work/ref.json"
"$venv/bin/python" - "$work/bench.json" "$work/ref.json" <<'PY'
import json, sys
bench, ref = (json.load(open(p)) for p in sys.argv[1:3])
print(f"images {bench['images']}, rows {bench['rows']}, jobs {bench['jobs']}")
for stage, secs in bench["seconds"]:
    print(f"  {stage:<7} {secs:8.3f} s")
print(f"  {'total':<7} {bench['total_seconds']:8.3f} s")
print(f"pyarrow write of the same table: {ref['pyarrow_write_seconds']:.3f} s")
print(f"ratio bpals_total / pyarrow_write = {bench['total_seconds'] / ref['pyarrow_write_seconds']:.2f} (target <= 1.5)")
PY
