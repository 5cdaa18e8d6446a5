#!/usr/bin/env bash
# A one-node Slurm cluster for the tests, in a scratch folder, with no systemd and no cgroups:
# munged, slurmctld and slurmd as children of this machine, stopped by their pids.
#
#   tests/slurm/cluster.sh install          # slurm-wlm and munge from Debian, when absent (root)
#   tests/slurm/cluster.sh start DIR        # writes DIR/slurm.conf, starts the daemons, waits for the node
#   tests/slurm/cluster.sh stop DIR         # stops them, and checks none is left
#
# Clients find the cluster with SLURM_CONF=DIR/slurm.conf.
set -euo pipefail
cmd="${1:?usage: cluster.sh install | start DIR | stop DIR}"

install() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null && return
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
}

start() {
  local dir="$1" node
  mkdir -p "$dir"/{state,spool,log,munge}
  dir="$(cd "$dir" && pwd)"
  node="$(hostname -s)"
  # munge: a key of this cluster's own, and a socket in the scratch folder.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$dir/munge" "$dir/munge/munge.key" 2>/dev/null || true
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
  cat >"$dir/slurm.conf" <<CONF
ClusterName=bpals-test
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=3600
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
NodeName=$node CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=main Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qx idle; then return; fi
    sleep 0.5
  done
  echo "the Slurm node did not come up; logs in $dir/log" >&2
  exit 1
}

stop() {
  local dir="$1" pid
  for f in slurmd.pid slurmctld.pid munge/munged.pid; do
    [ -f "$dir/$f" ] || continue
    pid="$(cat "$dir/$f")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$f: pid $pid did not stop" >&2
      exit 1
    fi
  done
}

case "$cmd" in
  install) install ;;
  start) start "${2:?usage: cluster.sh start DIR}" ;;
  stop) stop "${2:?usage: cluster.sh stop DIR}" ;;
  *) echo "usage: cluster.sh install | start DIR | stop DIR" >&2; exit 2 ;;
esac
