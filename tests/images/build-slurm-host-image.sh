#!/usr/bin/env bash
# Build gbatch-slurm-host:latest, a one-node Slurm cluster in a container for the tests
# of a Slurm-backed partition (tests/integration/slurmhost.py), offline like
# build-host-image.sh (no registry, no pull): mmdebstrap writes a minimal Debian
# bookworm rootfs with openssh-server, slurmctld, slurmd, slurm-client and munge from
# the Debian mirror, and `docker import` turns it into an image.
#
# At start (/usr/local/sbin/gbatch-slurm-start) the container makes a munge key, writes
# slurm.conf for its own hostname (one node, partition `gpu`, SlurmUser root, no
# cgroups, no accounting database: finished jobs stay in squeue for MinJobAge), starts
# munged, slurmctld and slurmd, copies root's mounted authorized_keys to the login user
# `labsvc` (the "shared" identity a lab's service account is), and runs sshd -D -e.
# Host keys and authorized keys are bind-mounted by each test, as for gbatch-host.
#
# Usage: tests/images/build-slurm-host-image.sh   (root; needs mmdebstrap and a docker engine)
# Env:   GBATCH_SLURM_HOST_IMAGE (default gbatch-slurm-host:latest)
#        GBATCH_HOST_MIRROR (default http://deb.debian.org/debian)
set -euo pipefail

IMAGE="${GBATCH_SLURM_HOST_IMAGE:-gbatch-slurm-host:latest}"
MIRROR="${GBATCH_HOST_MIRROR:-http://deb.debian.org/debian}"
DOCKER="${DOCKER:-docker}"
SUITE=bookworm
PACKAGES=openssh-server,slurmctld,slurmd,slurm-client,munge

NAME=build-slurm-host-image
# shellcheck source=tests/images/lib.sh
. "$(dirname "$0")/lib.sh"
need_engine_and_no_image

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

write_sshd_config "$work/sshd_config" \
    "gbatch test Slurm login node: keys bind-mounted by the test, nothing else."

cat >"$work/gbatch-slurm-start" <<'EOF'
#!/bin/sh
# Start a one-node Slurm for this container's hostname, then sshd in the foreground.
# TEST MACHINES ONLY: SlurmUser root, no cgroups, no accounting database.
set -eu
host="$(hostname -s)"
cpus="$(nproc --all)"
mkdir -p /run/sshd /run/munge /var/log/munge /var/lib/munge /etc/munge \
    /var/log/slurm /var/spool/slurmctld /var/spool/slurmd /etc/slurm
[ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
chown munge:munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
chmod 0400 /etc/munge/munge.key
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=gbatchtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=3600
MailProg=/bin/true
ReturnToService=2
SlurmdTimeout=300
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=gpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
runuser -u munge -- munged --force
slurmctld -i
slurmd
# '*': no password, yet not locked ('!'), which sshd without PAM would refuse.
id labsvc >/dev/null 2>&1 || useradd -m -s /bin/sh -p '*' labsvc
mkdir -p /home/labsvc/.ssh
cp /root/.ssh/authorized_keys /home/labsvc/.ssh/authorized_keys 2>/dev/null || true
chown -R labsvc:labsvc /home/labsvc/.ssh
chmod 0700 /home/labsvc/.ssh
exec /usr/sbin/sshd -D -e
EOF
chmod 0755 "$work/gbatch-slurm-start"

started=$SECONDS
build_rootfs "$PACKAGES" "$work/rootfs.tar" "$work/sshd_config" \
    --customize-hook="upload $work/gbatch-slurm-start /usr/local/sbin/gbatch-slurm-start" \
    --customize-hook='chmod 0755 "$1/usr/local/sbin/gbatch-slurm-start"'
rootfs_s=$((SECONDS - started))

"$DOCKER" import \
    --change 'CMD ["/usr/local/sbin/gbatch-slurm-start"]' \
    --change 'EXPOSE 22/tcp' \
    --message "gbatch test Slurm login node: Debian $SUITE with $PACKAGES" \
    "$work/rootfs.tar" "$IMAGE" >/dev/null

# Prove it: sshd accepts its configuration and the cluster answers sbatch.
check_key="$work/ssh_host_ed25519_key"
ssh-keygen -q -t ed25519 -N '' -f "$check_key"
# Slurm's daemons need a network address beyond loopback to bind: the default bridge.
check_name="gbatch-slurm-check-$$"
if ! out="$(timeout 120 "$DOCKER" run --rm --name "$check_name" --hostname slurmcheck \
    -v "$check_key:/etc/ssh/ssh_host_ed25519_key:ro" --entrypoint /bin/sh \
    "$IMAGE" -c '(/usr/local/sbin/gbatch-slurm-start >/dev/null 2>&1 &) ; \
        for i in $(seq 1 100); do timeout 5 sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done; \
        /usr/sbin/sshd -t && sbatch --version && timeout 10 sinfo -h -o "%P %T"' 2>&1)"; then
    "$DOCKER" rm -f "$check_name" >/dev/null 2>&1 || true
    "$DOCKER" image rm -f "$IMAGE" >/dev/null 2>&1 || true
    die "the imported image fails its check: $out"
fi
size="$("$DOCKER" image inspect --format '{{.Size}}' "$IMAGE")"
say "built $IMAGE ($((size / 1024 / 1024)) MiB): rootfs ${rootfs_s}s, total" \
    "$((SECONDS - started))s; check: $(echo "$out" | tr '\n' ' ')"
