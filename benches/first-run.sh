#!/usr/bin/env bash
# The README's first command on a fresh clone, timed against a reference commit in the same run.
#
#   benches/first-run.sh BASE [ROUNDS]      (BASE: a commit to compare with; ROUNDS: default 2)
#
# Each round clones this repository twice (BASE, then HEAD), each into a new folder with no venv
# and no target dir, and runs `scripts/bpals-release build specs/s1a.yaml` in it: PyTorch is
# downloaded (pip's cache off), every crate compiled, the demo built. Only cargo's download cache
# (~/.cargo/registry) is shared, as on any machine that has built a Rust project before; the two
# lock files' crates are fetched first, untimed. Prints each run's wall and CPU time and the
# ratio HEAD / BASE per round. The machine is shared and its speed drifts from hour to hour,
# so only the ratio within a round compares two commits. Takes about 10 minutes a round here.
set -euo pipefail
base="${1:?usage: benches/first-run.sh BASE [ROUNDS]}"
rounds="${2:-2}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
head="$(git -C "$root" rev-parse HEAD)"
base="$(git -C "$root" rev-parse "$base")"
work="$(mktemp -d "${TMPDIR:-/tmp}/bpals-first-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT

clone() { # COMMIT DIR
  git clone --quiet "$root" "$2"
  git -C "$2" checkout --quiet "$1"
}
for commit in "$base" "$head"; do
  clone "$commit" "$work/fetch"
  cargo fetch --locked --quiet --manifest-path "$work/fetch/Cargo.toml"
  rm -rf "$work/fetch"
done

run() { # COMMIT -> "$work/result": "WALL CPU" in seconds
  local dir="$work/clone"
  clone "$1" "$dir"
  (
    cd "$dir"
    # A fresh clone's first run: nothing of ours around it.
    env -u CARGO_TARGET_DIR -u BPALS_VENV -u VIRTUAL_ENV PIP_NO_CACHE_DIR=1 \
      /usr/bin/time -f "%e %U %S" -o "$work/time" scripts/bpals-release build specs/s1a.yaml \
      >"$work/out.log" 2>&1 || { cat "$work/out.log" >&2; exit 1; }
  )
  rm -rf "$dir"
  awk '{ printf "%.1f %.1f\n", $1, $2 + $3 }' "$work/time" >"$work/result"
}
printf "%-6s %-10s %10s %10s\n" round commit "wall (s)" "CPU (s)"
for round in $(seq "$rounds"); do
  run "$base"
  read -r base_wall base_cpu <"$work/result"
  printf "%-6s %-10s %10s %10s\n" "$round" "${base:0:10}" "$base_wall" "$base_cpu"
  run "$head"
  read -r head_wall head_cpu <"$work/result"
  awk -v r="$round" -v c="${head:0:10}" -v w="$head_wall" -v u="$head_cpu" -v b="$base_wall" \
    'BEGIN { printf "%-6s %-10s %10s %10s   HEAD/BASE wall %.2fx\n", r, c, w, u, w / b }'
done
