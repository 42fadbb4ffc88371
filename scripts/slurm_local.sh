#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A one-node Slurm on this host, for tests and local trials of `llmsim profile submit`.
#
#   scripts/slurm_local.sh start [DIR]   # writes DIR/slurm.conf, starts munged (if none runs),
#                                        # slurmctld and slurmd, waits for the node to be idle
#   scripts/slurm_local.sh stop [DIR]    # stops what start started, by pid
#   export SLURM_CONF=DIR/slurm.conf     # then sbatch/squeue/sinfo talk to it
#
# Needs root and Debian's slurm-wlm + munge. DIR defaults to /tmp/llmsim-slurm. No accounting
# (squeue/scontrol only), proctrack/linuxproc (no cgroups), select/cons_tres, partition "debug".
set -euo pipefail

cmd="${1:-}"
dir="${2:-/tmp/llmsim-slurm}"
port_base="${LLMSIM_SLURM_PORT:-6817}"

die() { echo "slurm_local: $*" >&2; exit 1; }

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  for exe in slurmctld slurmd munged sinfo; do
    command -v "$exe" >/dev/null || [[ -x "/usr/sbin/$exe" ]] || die "$exe not installed"
  done
  [[ "$(id -u)" == 0 ]] || die "must run as root"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log"
  host="$(hostname -s)"
  node="$(slurmd -C | head -n1)"  # NodeName=<host> CPUs=.. RealMemory=.. (this machine)
  cat >"$dir/slurm.conf" <<CONF
ClusterName=llmsim
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port_base
SlurmdPort=$((port_base + 1))
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
MinJobAge=600
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
$node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  if ! alive /run/munge/munged.pid; then
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do alive /run/munge/munged.pid && break; sleep 0.1; done
    alive /run/munge/munged.pid || die "munged did not start"
    cp /run/munge/munged.pid "$dir/munged.pid"  # ours to stop
  fi
  export SLURM_CONF="$dir/slurm.conf"
  alive "$dir/slurmctld.pid" || slurmctld -c -f "$SLURM_CONF"
  alive "$dir/slurmd.pid" || slurmd -f "$SLURM_CONF"
  for _ in $(seq 100); do
    state="$(sinfo -h -N -o %T 2>/dev/null | head -n1 || true)"
    [[ "$state" == idle* ]] && { echo "export SLURM_CONF=$SLURM_CONF"; return 0; }
    sleep 0.3
  done
  die "node not idle after 30 s (state: ${state:-none}); logs in $dir/log"
}

stop() {
  for name in slurmd slurmctld munged; do
    pidfile="$dir/$name.pid"
    [[ "$name" == munged && ! -f "$dir/munged.pid" ]] && continue
    if alive "$pidfile"; then
      pid="$(cat "$pidfile")"
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$pidfile"
  done
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop [DIR]" ;;
esac
