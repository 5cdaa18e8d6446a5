#!/usr/bin/env bash
# The bytes of the sample releases, for proving that a change leaves them alone:
#
#   scripts/release-bytes.sh BIN OUT > before.txt   (BIN: a bpals-release built with --features vlm)
#   ... change the code, rebuild ...
#   scripts/release-bytes.sh BIN OUT > after.txt && diff before.txt after.txt
#
# Builds s1a and s1b with the engine (the tiny random-weight model) and with the fixture scorer,
# and s1b again with a calibration file and a gold file (what resolves through `inputs`), then
# prints the sha256 of every file of each release. build.lock's `tool` (version and commit) is
# left out, and so is build.lock's line in manifest.json: they are meant to change.
set -euo pipefail
bin="$(realpath "$1")"
out="$(realpath -m "$2")"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rm -rf "$out"
mkdir -p "$out"

build() { # NAME SPEC
    "$bin" build "$2" --out "$out/$1" --cache-dir "$out/cache" --no-progress --jobs 2 >"$out/$1.log" 2>&1 \
        || { cat "$out/$1.log" >&2; exit 1; }
}
build s1a specs/s1a.yaml
build s1b specs/s1b.yaml
build s1a-fixture tests/specs/s1a-fixture-scorer.yaml
build s1b-fixture tests/specs/s1b-fixture-scorer.yaml

# Gold labels from the sample's own metadata: Effusion and Cardiomegaly as NIH states them.
awk -F, 'NR > 1 && NR <= 301 {
    print $1 ",Effusion," ($2 ~ /Effusion/ ? 1 : 0)
    print $1 ",Cardiomegaly," ($2 ~ /Cardiomegaly/ ? 1 : 0)
}' fixtures/sample/Data_Entry_2017.csv | { echo "image_index,label,value"; cat; } >"$out/gold.csv"
"$bin" calibrate "$out/s1b-fixture" --gold "$out/gold.csv" --out "$out/calibration.json" >/dev/null
cat >"$out/calibrated.yaml" <<EOF
extends: $root/tests/specs/s1b-fixture-scorer.yaml
signal:
  calibration: calibration.json
evaluation:
  gold: gold.csv
EOF
build s1b-calibrated "$out/calibrated.yaml"

for release in s1a s1b s1a-fixture s1b-fixture s1b-calibrated; do
    (cd "$out/$release" && find . -type f ! -name build.lock ! -name manifest.json | sort | xargs sha256sum | sed "s|  \./|  $release/|")
    python3 - "$out/$release" "$release" <<'PY'
import hashlib, json, sys
dir, name = sys.argv[1], sys.argv[2]
digest = lambda value: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
lock = json.load(open(f"{dir}/build.lock"))
lock.pop("tool")
print(f"{digest(lock)}  {name}/build.lock (without tool)")
manifest = json.load(open(f"{dir}/manifest.json"))
manifest["files"] = [f for f in manifest["files"] if f["path"] != "build.lock"]
print(f"{digest(manifest)}  {name}/manifest.json (without build.lock)")
PY
done
