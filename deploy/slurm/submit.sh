#!/usr/bin/env bash
# Queues an N-task inference array and the merge build that waits for all of it.
#
#   BPALS_CACHE_DIR=/shared/bpals-cache deploy/slurm/submit.sh specs/s1b.yaml 8 [OUT]
#
# BPALS_SBATCH_ARGS adds sbatch options to both jobs (a partition, an account, or
# "--gres=none --cpus-per-task=1" on a node without GPUs); they override the scripts' #SBATCH
# lines. Prints the two job ids on its last line, for scripts: ARRAY_ID MERGE_ID.
set -euo pipefail
spec="${1:?usage: deploy/slurm/submit.sh SPEC TASKS [OUT]}"
tasks="${2:?usage: deploy/slurm/submit.sh SPEC TASKS [OUT]}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${BPALS_CACHE_DIR:?set BPALS_CACHE_DIR to a score cache folder every node can read and write}"
export BPALS_CACHE_DIR
read -r -a extra <<<"${BPALS_SBATCH_ARGS:-}"
array=$(sbatch --parsable --export=ALL "${extra[@]}" --array="0-$((tasks - 1))" "$here/infer-array.sbatch" "$spec")
array="${array%%;*}"
merge=$(sbatch --parsable --export=ALL "${extra[@]}" --dependency="afterok:$array" "$here/merge-build.sbatch" "$spec" ${3:+"$3"})
echo "inference array: job $array ($tasks tasks); merge build: job $merge (runs when every task succeeded)" >&2
echo "$array $merge"
