#!/usr/bin/env bash
# A real single-node Slurm for the tests: munged, slurmctld and slurmd from Debian's packages, with
# every file (keys, configuration, state, logs, sockets) under DIR and ports of their own, so nothing
# of the machine's own configuration is read or changed. The node offers 8 CPUs whatever the machine
# has (config_overrides), so the demo's 8 ranks fit on a 2-core CI machine.
#
# usage: tests/slurm/slurm_cluster.sh up DIR     start it; prints the SLURM_CONF to use
#        tests/slurm/slurm_cluster.sh down DIR   stop it
#        tests/slurm/slurm_cluster.sh check DIR  exit 0 when it answers, 77 when it is not there
# Exits 77 (skipped, to CTest) where Slurm or munge is not installed or cannot run as this user.
set -euo pipefail

dir=${2:?usage: $0 up|down|check DIR}
conf=$dir/slurm.conf

down() {
  local pidfile
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    for _ in $(seq 50); do
      [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$pidfile"
  done
}

up() {
  for tool in munged mungekey slurmctld slurmd sinfo srun; do
    command -v "$tool" > /dev/null || { echo "slurm_cluster: $tool is not installed (packaging/install_deps.sh)" >&2; exit 77; }
  done
  [[ $(id -u) == 0 ]] || { echo "slurm_cluster: the test Slurm runs its daemons as root" >&2; exit 77; }
  down
  rm -rf "$dir"
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
  chmod 700 "$dir/munge"
  mungekey --create --keyfile="$dir/munge/munge.key" --force
  munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge/munged.seed" --force
  local host
  host=$(hostname -s)
  cat > "$conf" <<CONF
ClusterName=meshbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  slurmctld -f "$conf"
  slurmd -f "$conf"
  # Ready once the node is idle.
  for _ in $(seq 100); do
    if SLURM_CONF=$conf sinfo -h -o %t 2> /dev/null | grep -q idle; then
      echo "slurm_cluster: up, SLURM_CONF=$conf"
      return
    fi
    sleep 0.2
  done
  echo "slurm_cluster: the node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
  exit 1
}

case $1 in
  up) up ;;
  down) down ;;
  check) [[ -f $conf ]] && SLURM_CONF=$conf sinfo -h > /dev/null 2>&1 || exit 77 ;;
  *) echo "usage: $0 up|down|check DIR" >&2; exit 2 ;;
esac
