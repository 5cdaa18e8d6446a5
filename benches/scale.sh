#!/usr/bin/env bash
# Scale benchmark (not a timed test): the whole collection as an array job on one machine.
#
#   benches/scale.sh [IMAGES] [TASKS]      (defaults: 112120 images, 8 tasks)
#
# Generates NIH-format metadata for IMAGES images with a flat 16x16 PNG each (fixtures/gen_sample.py;
# not timed), then builds the release with the fixture scorer twice:
#   1. one process (`build --jobs $(nproc)`), in its own cache;
#   2. TASKS concurrent `infer --shard-count TASKS` processes, each given its index only through
#      JOB_COMPLETION_INDEX, into one shared cache, then the merge `build`.
# Prints the wall time of each, the cache's size and the release's, and whether the two
# releases are byte-identical (they must be; the script exits non-zero otherwise). Then signs
# the release with a test key (fixtures/keys) and checks the signature, against sha256sum of the
# same files in the same run.
set -euo pipefail
images="${1:-112120}"
tasks="${2:-8}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# BENCH_PROFILE=release builds an optimized binary (a long first compile on two cores);
# BENCH_BIN=PATH times a binary already built (the one `scripts/test` leaves, for example).
profile="${BENCH_PROFILE:-debug}"
work="$(mktemp -d "${TMPDIR:-/tmp}/bpals-scale.XXXXXX")"
trap 'rm -rf "$work"' EXIT
bin="$work/bpals-release"
if [ -n "${BENCH_BIN:-}" ]; then
  cp "$BENCH_BIN" "$bin"
else
  if [ "$profile" = release ]; then cargo build --release --locked --quiet; else cargo build --locked --quiet; fi
  cp "${CARGO_TARGET_DIR:-$root/target}/$profile/bpals-release" "$bin"
fi

python3 fixtures/gen_sample.py --out "$work/nih" --images "$images" --placeholder-images >/dev/null
# One row per label NIH asserts ("No Finding" included), as the spec's row policy takes them.
expected_rows=$(python3 -c "import csv,sys; r=csv.reader(open(sys.argv[1])); next(r); print(sum(len(row[1].split('|')) for row in r))" \
    "$work/nih/Data_Entry_2017_v2020.csv")
cat >"$work/scale.yaml" <<EOF
extends: $root/tests/specs/s1b-fixture-scorer.yaml
source:
  root: $work/nih
selection:
  curated_images: $images
  expected_rows: $expected_rows
EOF

seconds() { python3 -c "import time; print(f'{time.time():.3f}')"; }
elapsed() { python3 -c "print(f'{$2 - $1:.1f}')"; }
digest() { (cd "$1" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16); }

t0=$(seconds)
"$bin" build "$work/scale.yaml" --out "$work/single" --cache-dir "$work/cache-single" --no-progress >"$work/single.log" 2>&1 \
    || { cat "$work/single.log" >&2; exit 1; }
t1=$(seconds)
pids=()
for k in $(seq 0 $((tasks - 1))); do
    JOB_COMPLETION_INDEX=$k "$bin" infer "$work/scale.yaml" --shard-count "$tasks" --jobs 1 --no-progress \
        --cache-dir "$work/cache-array" >"$work/task$k.log" 2>&1 &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || { cat "$work"/task*.log >&2; exit 1; }; done
t2=$(seconds)
"$bin" build "$work/scale.yaml" --out "$work/merged" --cache-dir "$work/cache-array" --no-progress >"$work/merged.log" 2>&1 \
    || { cat "$work/merged.log" >&2; exit 1; }
t3=$(seconds)

rows=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(f.get('rows', 0) for f in m['files'] if f['path'].startswith('data/full-')))" "$work/single/manifest.json")
echo "$images images, $rows (image, label) rows in the full split, $(nproc) cores, $profile build"
echo "  one process:          $(elapsed "$t0" "$t1") s"
echo "  $tasks array tasks:        $(elapsed "$t1" "$t2") s, then the merge build $(elapsed "$t2" "$t3") s"
echo "  score cache:          $(du -sh "$work/cache-array" | cut -f1) in $(find "$work/cache-array" -type f | wc -l) files"
echo "  release:              $(du -sh "$work/merged" | cut -f1); build.lock $(stat -c %s "$work/merged/build.lock") bytes," \
    "images.sha256 $(stat -c %s "$work/merged/images.sha256") bytes, manifest.json $(stat -c %s "$work/merged/manifest.json") bytes"
a="$(digest "$work/single")"
b="$(digest "$work/merged")"
if [ "$a" = "$b" ]; then
    echo "  byte-identical: yes ($a)"
else
    echo "  byte-identical: NO ($a vs $b)"
    exit 1
fi
t4=$(seconds)
(cd "$work/merged" && find . -type f -print0 | xargs -0 sha256sum >/dev/null)
t5=$(seconds)
"$bin" sign "$work/merged" --key fixtures/keys/p256.pem >/dev/null
t6=$(seconds)
"$bin" verify "$work/merged" --public-key fixtures/keys/p256.pub.pem --require-signature >/dev/null
t7=$(seconds)
ratio() { python3 -c "print(f'{($2 - $1) / max($4 - $3, 1e-3):.1f}')"; }
echo "  sign:                 $(elapsed "$t5" "$t6") s ($(ratio "$t5" "$t6" "$t4" "$t5")x sha256sum of the release's files); verify --public-key $(elapsed "$t6" "$t7") s"
