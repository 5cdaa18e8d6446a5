#!/usr/bin/env bash
# Determinism under load: ROUNDS rounds of CONCURRENT builds of the sample release with the VLM
# engine, each in a fresh score cache (so every build runs inference), alternating --jobs 1 and
# --jobs 2, all at once on the same cores. Every release must be byte-identical to the first.
#
#   benches/stress.sh [ROUNDS] [CONCURRENT]      (defaults: 20 rounds of 4)
#
# Prints one line per round and a summary; exits non-zero if any build differs.
set -euo pipefail
rounds="${1:-20}"
concurrent="${2:-4}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/torch-env.sh
cargo build --locked --quiet --features vlm
work="$(mktemp -d "${TMPDIR:-/tmp}/bpals-stress.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# A copy: a later build in the same target dir (without the engine, say) must not swap it mid-run.
bin="$work/bpals-release"
cp "${CARGO_TARGET_DIR:-$root/target}/debug/bpals-release" "$bin"

# The digest of a whole release: every file's sha256, build.lock included (same binary, same commit).
digest() { (cd "$1" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16); }

reference=""
different=0
start=$(date +%s)
for round in $(seq 1 "$rounds"); do
    pids=()
    for k in $(seq 1 "$concurrent"); do
        jobs=$((k % 2 + 1))
        "$bin" build specs/s1a.yaml --out "$work/r$round-$k" --cache-dir "$work/cache-r$round-$k" \
            --no-progress --jobs "$jobs" >"$work/r$round-$k.log" 2>&1 &
        pids+=($!)
    done
    failed=0
    for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
    if [ "$failed" -gt 0 ]; then
        echo "round $round: $failed build(s) failed:" >&2
        cat "$work"/r"$round"-*.log >&2
        exit 1
    fi
    line="round $round:"
    for k in $(seq 1 "$concurrent"); do
        d="$(digest "$work/r$round-$k")"
        reference="${reference:-$d}"
        if [ "$d" != "$reference" ]; then different=$((different + 1)); d="$d DIFFERS"; fi
        line="$line $d(j$((k % 2 + 1)))"
    done
    echo "$line"
    rm -rf "$work"/r"$round"-* "$work"/cache-r"$round"-*
done
builds=$((rounds * concurrent))
echo "$builds builds in $rounds rounds of $concurrent concurrent, $(($(date +%s) - start)) s:" \
    "$((builds - different)) identical to the first, $different different"
[ "$different" -eq 0 ]
