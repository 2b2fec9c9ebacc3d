#!/usr/bin/env bash
# Start a single-node SLURM cluster on this machine (Debian's slurm-wlm + munge, as root, no
# systemd): munged, slurmctld and slurmd, with two fake GPUs so --gpus-per-node schedules.
# Records the pids it started in $STATE/started.pids so slurm-down.sh stops exactly those
# ($PROTOBENCH_SLURM_STATE, default /run/protobench-slurm; give each starter its own).
# Usage: slurm/slurm-up.sh            (needs: apt-get install -y slurm-wlm munge)
set -euo pipefail
STATE=${PROTOBENCH_SLURM_STATE:-/run/protobench-slurm}

for bin in munged slurmctld slurmd sinfo; do
  command -v "$bin" >/dev/null || [[ -x /usr/sbin/$bin ]] || {
    echo "slurm-up: $bin not found; install the packages: apt-get install -y slurm-wlm munge" >&2; exit 1; }
done
# A cluster that already answers is left alone, and so is the pid record of whoever started it.
if sinfo -h >/dev/null 2>&1; then echo "slurm-up: a cluster already answers; leaving it alone"; exit 0; fi
[[ $(id -u) -eq 0 ]] || { echo "slurm-up: must run as root (writes /etc/slurm, starts daemons)" >&2; exit 1; }

mkdir -p "$STATE" /run/munge /run/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /etc/slurm
: > "$STATE/started.pids"

ncpu=$(nproc)
mem_mb=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 * 8 / 10 ))

# munge: one key, daemon as the munge user
chown munge:munge /run/munge && chmod 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  rm -f /run/munge/munged.pid  # stale: no munged answers
  su -s /bin/sh munge -c /usr/sbin/munged
  for _ in $(seq 50); do [[ -s /run/munge/munged.pid ]] && break; sleep 0.1; done
  cat /run/munge/munged.pid >> "$STATE/started.pids"
fi

# fake GPUs: character devices that gres can hand out
mkdir -p /run/fakegpu
for i in 0 1; do [[ -e /run/fakegpu/nvidia$i ]] || mknod /run/fakegpu/nvidia$i c 1 3; done
echo 'NodeName=localhost Name=gpu File=/run/fakegpu/nvidia[0-1]' > /etc/slurm/gres.conf

# Settings for fast tests: short credential expiry, 1 s backfill, short kill wait, jobs
# remembered for an hour (so scontrol can answer for them without accounting).
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=protobench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=5
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
KillWait=5
MinJobAge=3600
GresTypes=gpu
NodeName=localhost NodeHostname=localhost CPUs=${ncpu} Sockets=1 CoresPerSocket=${ncpu} ThreadsPerCore=1 RealMemory=${mem_mb} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF

# No cluster answers, so whatever the spool holds belongs to a cluster that is gone: a cold start.
# -c: slurmctld does not recover the jobs of its last state save (a job "running" there would keep
# the node mixed or allocated, and the tests would queue behind it), slurmd cleans its shared memory.
rm -f /run/slurm/slurmctld.pid /run/slurm/slurmd.pid
rm -rf /var/spool/slurmd/*
/usr/sbin/slurmctld -c
/usr/sbin/slurmd -c
for _ in $(seq 50); do [[ -s /run/slurm/slurmctld.pid && -s /run/slurm/slurmd.pid ]] && break; sleep 0.1; done
cat /run/slurm/slurmctld.pid /run/slurm/slurmd.pid >> "$STATE/started.pids"

# Wait (deadline 60 s: a busy machine registers slowly) for the node to be idle.
node_state() { sinfo -h -n localhost -o %T 2>/dev/null; }
deadline=$(( SECONDS + 60 ))
until [[ $(node_state) == idle ]] || (( SECONDS >= deadline )); do sleep 0.2; done
if [[ $(node_state) != idle ]]; then
  {
    echo "slurm-up: the node is '$(node_state)', not idle, 60 s after start; what SLURM says:"
    sinfo -R 2>&1; squeue 2>&1 | head -20
    for log in slurmctld slurmd; do echo "--- last lines of /var/log/slurm/$log.log"; tail -n 15 "/var/log/slurm/$log.log" 2>&1; done
  } >&2
  exit 1
fi
sinfo
