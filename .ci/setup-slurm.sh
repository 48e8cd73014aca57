#!/usr/bin/env bash
# A real one-node Slurm on this machine, for the differential test
# (tests/integration/test_slurm_differential.py: the corpus through real sbatch and gbatch):
#   1. apt-get install slurm-wlm munge (only when missing), the packages' own service
#      starts blocked (this script starts the daemons itself, with its own config);
#   2. a munge key and munged;
#   3. /etc/slurm/slurm.conf and gres.conf: one node (this host, its CPUs, 2 fake GPUs
#      whose device files are /dev/null and /dev/zero), partition $SLURM_PARTITION
#      (default: gpu, the same name as gbatch's embedded partition) as the default,
#      SlurmUser root, no cgroups (proctrack/linuxproc, task/none), no accounting
#      database: finished jobs stay in `scontrol show job` for MinJobAge (1 h) and in the
#      job completion file /var/log/slurm/jobcomp.txt (sacct needs slurmdbd, too heavy);
#   4. slurmctld and slurmd in the background, then a wait until `sinfo` shows the node idle.
# Idempotent: a running, answering Slurm with this config is left alone. Run as root.
# Under ./test.sh the daemons it starts are noted (.ci/started.sh) and stopped when the
# run ends; run by hand, they keep running.
# SLURM_PACKAGES_ONLY=1 stops after step 2 (packages and munged; no config, no daemons):
# bench/slurm_side_by_side.py starts its own 8-GPU cluster beside this one.
set -euo pipefail

PARTITION="${SLURM_PARTITION:-gpu}"
WAIT_SECONDS=60
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
# Stand-in GPUs: gres.conf needs one device file per GPU, and Slurm (with task/none, no
# cgroup device constraint) only checks that it exists; two character devices every
# machine has serve, and no mknod (CAP_MKNOD) is needed. TEST MACHINES ONLY.
FAKE_GPUS=(/dev/null /dev/zero)
# Their model, as Slurm's gres.conf Type=: the corpus asks for it (--gres=gpu:a100:1), and
# gbatch's side simulates two A100s (tests/integration/corpus.py, CORPUS_GPUS).
GPU_TYPE=a100

die() {
    echo "setup-slurm: error: $*" >&2
    exit 1
}
say() { echo "setup-slurm: $*"; }
# shellcheck source=started.sh
source "$(dirname "${BASH_SOURCE[0]}")/started.sh"

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts slurmctld)."

# --- 1. packages ---------------------------------------------------------------------
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1 \
    || ! command -v sbatch >/dev/null 2>&1; then
    say "installing slurm-wlm munge"
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends slurm-wlm slurm-client munge \
        || die "apt-get install slurm-wlm munge failed."
fi

# --- 2. munge --------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "starting munged"
    # -f: the key's directory may be group-writable inside a container image.
    setsid runuser -u munge -- munged --force </dev/null >/dev/null 2>&1 || true
    for _ in $(seq 1 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.2
    done
    munge -n | unmunge >/dev/null || die "munged does not answer (see /var/log/munge/munged.log)."
    note_started munged /run/munge/munged.pid
fi

if [ "${SLURM_PACKAGES_ONLY:-}" = 1 ]; then
    say "ready: $(sbatch --version) installed, munged answers (no cluster started)"
    exit 0
fi

# --- 3. configuration ------------------------------------------------------------------
host="$(hostname -s)"
cpus="$(nproc --all)"
mem_mb="$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
for dev in "${FAKE_GPUS[@]}"; do
    [ -c "$dev" ] || die "$dev is missing: it stands in for a GPU in gres.conf."
done
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
conf="$(
    cat <<EOF
# Written by gbatch's .ci/setup-slurm.sh: a one-node test cluster. TEST MACHINES ONLY.
ClusterName=gbatchtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.txt
MinJobAge=3600
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=300
NodeName=$host CPUs=$cpus RealMemory=$mem_mb Gres=gpu:$GPU_TYPE:${#FAKE_GPUS[@]} State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
)"
gres="NodeName=$host Name=gpu Type=$GPU_TYPE File=${FAKE_GPUS[0]}"
for dev in "${FAKE_GPUS[@]:1}"; do gres="$gres
NodeName=$host Name=gpu Type=$GPU_TYPE File=$dev"; done
changed=""
if [ "$(cat "$CONF_DIR/slurm.conf" 2>/dev/null)" != "$conf" ]; then
    printf '%s\n' "$conf" >"$CONF_DIR/slurm.conf"
    changed=yes
fi
if [ "$(cat "$CONF_DIR/gres.conf" 2>/dev/null)" != "$gres" ]; then
    printf '%s\n' "$gres" >"$CONF_DIR/gres.conf"
    changed=yes
fi

# --- 4. daemons --------------------------------------------------------------------------
node_idle() {
    timeout 10 sinfo -h -N -n "$host" -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'
}
# A daemon restarted for a new config was running before: it is not this run's to stop.
ctld_was_up="" slurmd_was_up=""
[ -s /run/slurmctld.pid ] && kill -0 "$(cat /run/slurmctld.pid)" 2>/dev/null && ctld_was_up=yes
[ -s /run/slurmd.pid ] && kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null && slurmd_was_up=yes
if [ -n "$changed" ]; then
    say "configuration (re)written; restarting the Slurm daemons"
    for pidfile in /run/slurmctld.pid /run/slurmd.pid; do
        [ -s "$pidfile" ] || continue
        pid="$(cat "$pidfile")"
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    done
fi
started=()
if ! timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
    [ -n "$changed" ] && [ -n "$ctld_was_up" ] || started+=("slurmctld /run/slurmctld.pid")
    say "starting slurmctld (log: $LOG_DIR/slurmctld.log)"
    setsid slurmctld -i </dev/null >>"$LOG_DIR/slurmctld.out" 2>&1 \
        || die "slurmctld did not start; see $LOG_DIR/slurmctld.log."
fi
if ! { [ -s /run/slurmd.pid ] && kill -0 "$(cat /run/slurmd.pid)" 2>/dev/null; }; then
    [ -n "$changed" ] && [ -n "$slurmd_was_up" ] || started+=("slurmd /run/slurmd.pid")
    say "starting slurmd (log: $LOG_DIR/slurmd.log)"
    setsid slurmd </dev/null >>"$LOG_DIR/slurmd.out" 2>&1 \
        || die "slurmd did not start; see $LOG_DIR/slurmd.log."
fi
waited=0
until node_idle; do
    if [ "$waited" -ge "$WAIT_SECONDS" ]; then
        tail -n 20 "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" >&2 || true
        die "node $host is not idle after ${WAIT_SECONDS}s ($(sinfo -h -N -o '%T %E' 2>&1))."
    fi
    # A node that was down for a config change comes back with an explicit resume.
    scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 1
    waited=$((waited + 1))
done
for daemon in "${started[@]}"; do
    # shellcheck disable=SC2086 # "NAME PIDFILE"
    note_started $daemon
done
say "ready: $(sbatch --version), node $host idle in partition $PARTITION" \
    "($cpus CPUs, ${#FAKE_GPUS[@]} fake GPUs)"
