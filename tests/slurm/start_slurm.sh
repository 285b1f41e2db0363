#!/usr/bin/env bash
# Start a throw-away single-node SLURM (munged + slurmctld + slurmd) whose every file lives under DIR.
#
#   tests/slurm/start_slurm.sh DIR      # then: source DIR/env; sbatch ...; tests/slurm/stop_slurm.sh DIR
#
# Needs root and the Debian packages slurmctld, slurmd, slurm-client and munge (nothing under /etc is
# used or changed). It writes a fresh munge key, a minimal slurm.conf for this host (one node, one
# partition "debug", free ports), starts the daemons (pid files in DIR), waits until the node is
# idle, and writes DIR/env (export SLURM_CONF=...) for the clients. On any failure it stops what it
# started and prints the daemon logs. Extra slurm.conf lines can be passed in SLURM_EXTRA_CONF.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
for b in munged slurmctld slurmd sinfo scontrol; do
  command -v "$b" >/dev/null || { echo "error: $b not found (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 3; }
done
[[ $(id -u) -eq 0 ]] || { echo "error: must run as root (slurmd launches jobs as their user)" >&2; exit 3; }

D=$(mkdir -p "$1" && cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$D/munge" "$D/state" "$D/spool" "$D/log"
chmod 700 "$D" "$D/munge"
trap 'echo "slurm start failed; logs:" >&2; tail -n 20 "$D"/log/*.log >&2 2>/dev/null || true; "$HERE/stop_slurm.sh" "$D" || true' ERR

head -c 1024 /dev/urandom > "$D/munge/munge.key"
chmod 400 "$D/munge/munge.key"
munged --force --key-file="$D/munge/munge.key" --socket="$D/munge/munge.socket" \
  --pid-file="$D/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge/munged.seed"

free_port() {  # a random port nobody listens on
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
  done
  return 1
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[[ $SLURMD_PORT != "$CTLD_PORT" ]] || SLURMD_PORT=$((CTLD_PORT + 1))
HOST=$(hostname -s)
CPUS=$(getconf _NPROCESSORS_ONLN)  # not nproc: it obeys OMP_NUM_THREADS
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 512 ))

cat > "$D/slurm.conf" <<CONF
ClusterName=introspect-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=1
KillWait=2
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=20
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
${SLURM_EXTRA_CONF:-}
CONF
printf 'export SLURM_CONF=%q\n' "$D/slurm.conf" > "$D/env"
export SLURM_CONF="$D/slurm.conf"

slurmctld -i -f "$D/slurm.conf"   # -i: ignore (absent) saved state
slurmd -f "$D/slurm.conf"
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %T 2>/dev/null | head -n 1 || true)
  [[ $state == idle ]] && { echo "slurm up: node $HOST ($CPUS cpus), SLURM_CONF=$D/slurm.conf"; exit 0; }
  sleep 0.5
done
echo "error: node never became idle (state: ${state:-none})" >&2
false
