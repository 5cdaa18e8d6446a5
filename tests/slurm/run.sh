#!/usr/bin/env bash
# What deploy/slurm/ tells a user to run, on a real one-node Slurm cluster (tests/slurm/cluster.sh):
#
# 1. submit.sh queues a 3-task inference array and the merge build; the release equals a
#    one-process build's, byte for byte;
# 2. a task killed mid-run runs again inside its job, resumes from the cache, and the merge waits
#    for it; the bytes are the same;
# 3. scancel of the array (and its merge) leaves a cache that a second submit.sh completes.
#
# Then the daemons are stopped and no Slurm process may be left. Needs root (it installs
# slurm-wlm and munge when absent). BPALS_BIN names the bpals-release binary to test.
#
#   BPALS_BIN=target/debug/bpals-release tests/slurm/run.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="$(realpath "${BPALS_BIN:-$root/target/debug/bpals-release}")"
spec="$root/tests/specs/s1a-fixture-scorer.yaml"
cluster="$root/tests/slurm/cluster.sh"
work="$(mktemp -d)"
export SLURM_CONF="$work/cluster/slurm.conf"
passed=0
failed=0
started=$SECONDS

cleanup() {
  "$cluster" stop "$work/cluster" || true
  rm -rf "$work"
}
trap cleanup EXIT

check() { # NAME COMMAND...: one named check
  if "${@:2}"; then
    echo "ok: $1"
    passed=$((passed + 1))
  else
    echo "FAILED: $1"
    failed=$((failed + 1))
  fi
}

# Waits for a job to leave the queue; prints its final state.
wait_job() {
  local job="$1" state
  for _ in $(seq 600); do
    state="$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort -u | tr '\n' ' ')"
    case "$state" in
      *PENDING* | *RUNNING* | *CONFIGURING* | *COMPLETING* | "") sleep 0.5 ;;
      *) echo "$state"; return ;;
    esac
  done
  echo "TIMEOUT"
}

same_release() { # A B: byte-identical trees
  diff -r "$1" "$2" >/dev/null
}

"$cluster" install
"$cluster" start "$work/cluster"
echo "a one-node Slurm cluster is up ($(sinfo -h -o '%N, %c CPUs') ; $((SECONDS - started)) s)"

# The tasks run `bpals-release` from PATH: a wrapper that can inject faults, then the binary.
mkdir -p "$work/bin"
cat >"$work/bin/bpals-release" <<WRAP
#!/usr/bin/env bash
# Fault injection for tests/slurm/run.sh. BPALS_FAULT=kill-task-1: the first run of task 1 is
# killed (SIGKILL) once it has scored some images; the other tasks start scoring only after that,
# so the entries counted are task 1's own (on a loaded machine task 1 may start last).
# BPALS_FAULT=stall: each task scores, then hangs (to be cancelled).
set -u
marker="$work/killed-once"
killed="$work/killed-done"
if [ "\${BPALS_FAULT:-}" = kill-task-1 ] && [ "\${SLURM_ARRAY_TASK_ID:-}" = 1 ] && [ ! -e "\$marker" ]; then
  touch "\$marker"
  "$bin" "\$@" & pid=\$!
  for _ in \$(seq 3000); do
    [ "\$(find "\$BPALS_CACHE_DIR" -name '*.json' 2>/dev/null | wc -l)" -ge 5 ] && break
    kill -0 \$pid 2>/dev/null || break
    sleep 0.01
  done
  kill -9 \$pid 2>/dev/null
  wait \$pid
  touch "\$killed"
  exit 137
fi
if [ "\${BPALS_FAULT:-}" = kill-task-1 ] && [ -n "\${SLURM_ARRAY_TASK_ID:-}" ] && [ "\${1:-}" = infer ]; then
  for _ in \$(seq 6000); do [ -e "\$killed" ] && break; sleep 0.01; done
fi
if [ "\${BPALS_FAULT:-}" = stall ] && [ "\${1:-}" = infer ]; then
  "$bin" "\$@" || exit
  exec sleep 600
fi
exec "$bin" "\$@"
WRAP
chmod +x "$work/bin/bpals-release"
export PATH="$work/bin:$PATH"
# This node has no GPU and two CPUs: override the scripts' #SBATCH resource lines.
export BPALS_SBATCH_ARGS="--gres=none --cpus-per-task=1"

"$bin" build "$spec" --out "$work/one-process" --cache-dir "$work/cache-one" --no-progress 2>/dev/null

cd "$work"
# 1. The array and the merge, as submit.sh queues them.
export BPALS_CACHE_DIR="$work/cache-array"
read -r array merge < <("$root/deploy/slurm/submit.sh" "$spec" 3 "$work/array-release" | tail -1)
check "the merge build completes after the array" [ "$(wait_job "$merge")" = "COMPLETED " ]
check "every task of the array completed" [ "$(wait_job "$array")" = "COMPLETED " ]
check "the merged release is byte-identical to a one-process build" same_release "$work/one-process" "$work/array-release"
check "the merge build scored nothing itself" grep -q ", 0 scored" "$work/bpals-merge-$merge.log"

# 2. Task 1 killed mid-run: it runs again in its job, from the cache; the merge waits for it.
export BPALS_CACHE_DIR="$work/cache-fault" BPALS_FAULT=kill-task-1
read -r array merge < <("$root/deploy/slurm/submit.sh" "$spec" 3 "$work/fault-release" | tail -1)
check "the merge completes despite the killed task" [ "$(wait_job "$merge")" = "COMPLETED " ]
log="$work/bpals-infer-${array}_1.log"
check "the killed task said so and ran again" grep -q "attempt 1 of 3 failed (exit 137)" "$log"
check "the second attempt resumed from the cache" grep -Eq "[1-9][0-9]* already cached" "$log"
check "the release is still byte-identical" same_release "$work/one-process" "$work/fault-release"
unset BPALS_FAULT

# 3. scancel mid-array, then submit again: the cache the cancelled tasks left is used.
export BPALS_CACHE_DIR="$work/cache-cancel" BPALS_FAULT=stall
read -r array merge < <("$root/deploy/slurm/submit.sh" "$spec" 3 "$work/cancel-release" | tail -1)
for _ in $(seq 200); do
  [ "$(find "$BPALS_CACHE_DIR" -name '*.json' 2>/dev/null | wc -l)" -gt 0 ] && [ -z "$(squeue -h -j "$array" -t PENDING)" ] && break
  sleep 0.1
done
sleep 1
scancel "$array" "$merge"
check "the cancelled array ends cancelled" grep -q CANCELLED <<<"$(wait_job "$array")"
check "no release appears from a cancelled array" [ ! -e "$work/cancel-release" ]
cached="$(find "$BPALS_CACHE_DIR" -name '*.json' | wc -l)"
unset BPALS_FAULT
read -r array merge < <("$root/deploy/slurm/submit.sh" "$spec" 3 "$work/cancel-release" | tail -1)
check "a second submit completes" [ "$(wait_job "$merge")" = "COMPLETED " ]
check "its tasks found the cancelled run's $cached entries" grep -q "already cached" "$work/bpals-infer-${array}_0.log"
check "and the release is byte-identical" same_release "$work/one-process" "$work/cancel-release"

cd "$root"
"$cluster" stop "$work/cluster"
check "no Slurm or munge process is left" [ -z "$(pgrep -f "$work" || true)" ]
check "no job step is left" [ -z "$(pgrep -x slurmstepd || true)" ]
trap 'rm -rf "$work"' EXIT
echo "slurm: $((SECONDS - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
