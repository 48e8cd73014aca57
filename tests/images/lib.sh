# shellcheck shell=bash
# Shared by the test host image builders (build-host-image.sh, build-slurm-host-image.sh):
# sourced, not run. Each builder sets NAME (for its messages), DOCKER, IMAGE, MIRROR and
# SUITE before sourcing it.

die() {
    echo "$NAME: error: $*" >&2
    exit 1
}
say() { echo "$NAME: $*"; }

# Stop unless the engine answers; exit 0 (nothing to do) when the image exists.
need_engine_and_no_image() {
    "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
        || die "the docker engine does not answer. Start it (as root: .ci/setup-docker.sh)."
    if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
        say "$IMAGE already exists; nothing to do"
        exit 0
    fi
    command -v mmdebstrap >/dev/null 2>&1 \
        || die "mmdebstrap is missing. Install it: apt-get install -y mmdebstrap."
}

# The whole sshd configuration of a test host, written to $1 with the comment $2: the
# image's own Debian one would want PAM and the sftp-server binary, and list host keys
# the tests do not mount.
write_sshd_config() {
    cat >"$1" <<EOF
# $2
Port 22
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
# The mounted key files belong to whoever ran the tests on the machine outside.
StrictModes no
UsePAM no
UseDNS no
PrintMotd no
PidFile none
Subsystem sftp internal-sftp
EOF
}

# mmdebstrap a minimal $SUITE rootfs holding $1 (packages, comma-separated) into $2 (a
# tar), with the sshd configuration $3 and any further mmdebstrap options after them.
# Host keys are left out (each test mounts its own); root's .ssh is made.
build_rootfs() {
    local packages="$1" out="$2" sshd_config="$3"
    shift 3
    # The merged-usr hook sets /usr up as bookworm wants without the usrmerge package,
    # which would pull in perl (about 45 MiB). dpkg path-excludes keep docs, man pages
    # and translations out; mmdebstrap already leaves Recommends out and removes apt's
    # lists.
    mmdebstrap --quiet --variant=minbase --include="$packages" \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
        --customize-hook="upload $sshd_config /etc/ssh/sshd_config" \
        --customize-hook='mkdir -p "$1/root/.ssh" && chmod 0700 "$1/root/.ssh"' \
        "$@" \
        "$SUITE" "$out" "$MIRROR" >"$out.log" 2>&1 \
        || die "mmdebstrap failed (is $MIRROR reachable?); its output:
$(tail -n 40 "$out.log")"
}
