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

NAME=build-host-image
# shellcheck source=tests/images/lib.sh
. "$(dirname "$0")/lib.sh"
need_engine_and_no_image
client="${GBATCH_HOST_DOCKER_CLIENT:-$(command -v docker || true)}"
[ -n "$client" ] && [ -x "$client" ] \
    || die "no docker client to mount into the host. Set GBATCH_HOST_DOCKER_CLIENT."
client="$(readlink -f "$client")"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

write_sshd_config "$work/sshd_config" \
    "gbatch test host: root logs in with the key bind-mounted by the test, nothing else."

# /run/sshd, sshd's privilege-separation directory, cannot live in the rootfs: the
# chroot's /run is a mount while mmdebstrap runs, so it is made at start.
START_SSHD='mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e'
started=$SECONDS
build_rootfs "$PACKAGES" "$work/rootfs.tar" "$work/sshd_config"
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
