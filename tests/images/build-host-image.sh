#!/usr/bin/env bash
# Build gbatch-host:latest, the image of a simulated GPU host for the fleet tests
# (tests/integration/hosts.py), offline (no registry, no pull): mmdebstrap writes a
# minimal Debian bookworm rootfs holding openssh-server and python3 (enough for the
# gbatch agent with a simulation file) from the Debian mirror, and `docker import`
# turns it into an image whose command is `sshd -D -e`. Skips the work when the image
# already exists.
#
# What the image does NOT hold, by design:
#   - host keys and authorized keys: each test makes fresh ones and bind-mounts them at
#     /etc/ssh/ssh_host_ed25519_key and /root/.ssh/authorized_keys;
#   - a docker client: hosts.py bind-mounts this machine's client (and the engine's
#     socket) at run time, which keeps the image small and client and engine in step.
#     The client must run inside bookworm: a static binary does anywhere; a dynamic one
#     only if it needs no newer glibc than bookworm's. The check at the end proves it.
#
# Usage: tests/images/build-host-image.sh     (root; needs mmdebstrap and a docker engine)
# Env:   GBATCH_HOST_IMAGE (default gbatch-host:latest)
#        GBATCH_HOST_MIRROR (default http://deb.debian.org/debian)
#        GBATCH_HOST_DOCKER_CLIENT (default: the `docker` on PATH) - the client the check
#        mounts, as hosts.py does.
set -euo pipefail

IMAGE="${GBATCH_HOST_IMAGE:-gbatch-host:latest}"
MIRROR="${GBATCH_HOST_MIRROR:-http://deb.debian.org/debian}"
DOCKER="${DOCKER:-docker}"
SUITE=bookworm
PACKAGES=openssh-server,python3

die() {
    echo "build-host-image: error: $*" >&2
    exit 1
}
say() { echo "build-host-image: $*"; }

"$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1 \
    || die "the docker engine does not answer. Start it (as root: .ci/setup-docker.sh)."

if "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE already exists; nothing to do"
    exit 0
fi

command -v mmdebstrap >/dev/null 2>&1 \
    || die "mmdebstrap is missing. Install it: apt-get install -y mmdebstrap."
client="${GBATCH_HOST_DOCKER_CLIENT:-$(command -v docker || true)}"
[ -n "$client" ] && [ -x "$client" ] \
    || die "no docker client to mount into the host. Set GBATCH_HOST_DOCKER_CLIENT."
client="$(readlink -f "$client")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The whole sshd configuration: the image's own Debian one would want PAM and the
# sftp-server binary, and list host keys the tests do not mount.
cat >"$work/sshd_config" <<'EOF'
# gbatch test host: root logs in with the key bind-mounted by the test, nothing else.
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

# /run/sshd, sshd's privilege-separation directory, cannot live in the rootfs: the
# chroot's /run is a mount while mmdebstrap runs, so it is made at start.
START_SSHD='mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e'
started=$SECONDS
# The merged-usr hook sets /usr up as bookworm wants without the usrmerge package,
# which would pull in perl (about 45 MiB). dpkg path-excludes keep docs, man pages and
# translations out; mmdebstrap already leaves Recommends out and removes apt's lists.
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
    --customize-hook="upload $work/sshd_config /etc/ssh/sshd_config" \
    --customize-hook='mkdir -p "$1/root/.ssh" && chmod 0700 "$1/root/.ssh"' \
    "$SUITE" "$work/rootfs.tar" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 \
    || die "mmdebstrap failed (is $MIRROR reachable?); its output:
$(tail -n 40 "$work/mmdebstrap.log")"
rootfs_s=$((SECONDS - started))

"$DOCKER" import \
    --change "CMD [\"/bin/sh\", \"-c\", \"$START_SSHD\"]" \
    --change 'EXPOSE 22/tcp' \
    --message "gbatch test host: Debian $SUITE with $PACKAGES" \
    "$work/rootfs.tar" "$IMAGE" >/dev/null
import_s=$((SECONDS - started - rootfs_s))

# Prove the parts a fleet test relies on, with the client and socket mounted as
# hosts.py mounts them: sshd accepts its configuration, python3 is new enough for the
# agent, and the mounted client reaches the engine.
check_key="$work/ssh_host_ed25519_key"
ssh-keygen -q -t ed25519 -N '' -f "$check_key"
if ! out="$("$DOCKER" run --rm --network none \
    -v "$check_key:/etc/ssh/ssh_host_ed25519_key:ro" \
    -v /var/run/docker.sock:/var/run/docker.sock \
    -v "$client:/usr/local/bin/docker:ro" \
    "$IMAGE" sh -c 'mkdir -p /run/sshd && /usr/sbin/sshd -t \
        && python3 -c "import sys; assert sys.version_info >= (3, 9), sys.version" \
        && docker version --format "{{.Server.Version}}"' 2>&1)"; then
    "$DOCKER" image rm -f "$IMAGE" >/dev/null 2>&1 || true
    die "the imported image fails its check: $out
If the docker client cannot run inside the image ($(file -b "$client" | cut -d, -f1-2)),
point GBATCH_HOST_DOCKER_CLIENT at a statically linked one."
fi
size="$("$DOCKER" image inspect --format '{{.Size}}' "$IMAGE")"
say "built $IMAGE ($((size / 1024 / 1024)) MiB): rootfs ${rootfs_s}s, import ${import_s}s," \
    "total $((SECONDS - started))s; engine $out answers the mounted client $client"
