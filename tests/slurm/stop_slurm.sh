#!/usr/bin/env bash
# Stop the daemons tests/slurm/start_slurm.sh started under DIR (by their pid files only), then
# wait until they are gone. Safe to call twice, or after a failed start.
set -uo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
D=$1
[[ -d $D ]] || exit 0
if [[ -f $D/slurm.conf ]] && [[ -f $D/slurmctld.pid ]]; then
  export SLURM_CONF=$D/slurm.conf
  timeout 10 scancel --quiet --user="$(id -un)" 2>/dev/null || true
  for _ in $(seq 40); do  # let slurmd end the job steps before it goes
    [[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.25
  done
fi
pids=()
for name in slurmd slurmctld munged; do
  f=$D/$name.pid
  [[ -f $f ]] || continue
  pid=$(cat "$f")
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  fi
done
for _ in $(seq 50); do
  alive=0
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
  [[ $alive -eq 0 ]] && break
  sleep 0.2
done
for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null; done
rm -f "$D"/slurmd.pid "$D"/slurmctld.pid "$D"/munged.pid
exit 0
