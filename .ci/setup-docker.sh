#!/usr/bin/env bash
# Give this machine a working docker engine for gbatch's docker tests, offline:
#   1. apt-get install docker.io (only when dockerd is missing), busybox-static, and
#      for the fleet tests' host image mmdebstrap and openssh-client (ssh-keygen);
#   2. a stand-in nvidia-container-runtime-hook in /opt/gbatch-test-hook/, so that
#      `docker run --gpus device=N` works on a machine without NVIDIA hardware (the
#      container then sees NVIDIA_VISIBLE_DEVICES=N and no GPU). TEST MACHINES ONLY;
#   3. dockerd in the background with that directory first on its PATH
#      (log: /var/log/gbatch-dockerd.log), unless an engine already answers;
#   4. the test image gbatch-test:latest (tests/images/build-test-image.sh), then the
#      simulated GPU host image gbatch-host:latest (tests/images/build-host-image.sh:
#      Debian from the apt mirror, about 30 s the first time), then the one-node Slurm
#      cluster image gbatch-slurm-host:latest (tests/images/build-slurm-host-image.sh:
#      Debian's slurmctld, slurmd and munge, for tests/integration/test_slurm_partition.py);
#   5. a check that --gpus reaches the container.
# Idempotent: every step is skipped when already done. Run as root. Under ./test.sh a
# dockerd it starts is noted (.ci/started.sh) and stopped when the run ends.
set -euo pipefail

HOOK_DIR=/opt/gbatch-test-hook
DOCKERD_LOG=/var/log/gbatch-dockerd.log
WAIT_SECONDS=60
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() {
    echo "setup-docker: error: $*" >&2
    exit 1
}
say() { echo "setup-docker: $*"; }
# shellcheck source=started.sh
source "$(dirname "${BASH_SOURCE[0]}")/started.sh"

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts dockerd)."

engine_answers() {
    timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# --- 1. packages ---------------------------------------------------------------------
packages=()
command -v dockerd >/dev/null 2>&1 || packages+=(docker.io)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' \
    || packages+=(busybox-static)
command -v mmdebstrap >/dev/null 2>&1 || packages+=(mmdebstrap)
command -v ssh-keygen >/dev/null 2>&1 || packages+=(openssh-client)
if [ "${#packages[@]}" -gt 0 ]; then
    say "installing ${packages[*]}"
    # Keep the package's own init script from starting a dockerd without the hook dir on
    # its PATH: that engine would answer, and --gpus would then fail in every test.
    policy=/usr/sbin/policy-rc.d
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 0755 "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends "${packages[@]}" \
        || die "apt-get install ${packages[*]} failed."
fi
command -v dockerd >/dev/null 2>&1 || die "dockerd is still missing after installing docker.io."

# --- 2. stand-in GPU hook --------------------------------------------------------------
# dockerd turns --gpus into an OCI prestart hook running `nvidia-container-runtime-hook
# prestart` (found on dockerd's PATH) and sets NVIDIA_VISIBLE_DEVICES. The stand-in
# consumes the container state runc writes on stdin and succeeds.
mkdir -p "$HOOK_DIR"
hook="$HOOK_DIR/nvidia-container-runtime-hook"
hook_text='#!/bin/sh
# gbatch TEST stand-in for the NVIDIA hook: exposes no GPU. Never install on a GPU host.
cat >/dev/null
exit 0'
if [ ! -x "$hook" ] || [ "$(cat "$hook")" != "$hook_text" ]; then
    printf '%s\n' "$hook_text" >"$hook"
    chmod 0755 "$hook"
    say "wrote $hook"
fi

# --- 3. engine -------------------------------------------------------------------------
if engine_answers; then
    say "docker engine already answers; not starting another"
else
    say "starting dockerd (log: $DOCKERD_LOG)"
    # setsid: the engine must outlive this script and the shell that ran it.
    PATH="$HOOK_DIR:$PATH" setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    waited=0
    until engine_answers; do
        if [ "$waited" -ge "$WAIT_SECONDS" ]; then
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            die "dockerd did not answer within ${WAIT_SECONDS}s; see $DOCKERD_LOG (tail above)."
        fi
        sleep 1
        waited=$((waited + 1))
    done
    say "dockerd answers after ~${waited}s"
    note_started dockerd /var/run/docker.pid
fi

# --- 4. test images ----------------------------------------------------------------------
"$REPO_ROOT/tests/images/build-test-image.sh" || die "building the test image failed."
"$REPO_ROOT/tests/images/build-host-image.sh" || die "building the host image failed."
"$REPO_ROOT/tests/images/build-slurm-host-image.sh" \
    || die "building the Slurm cluster host image failed."

# --- 5. --gpus reaches the container -------------------------------------------------------
seen="$(docker run --rm --network none --gpus device=0 gbatch-test:latest \
    sh -c 'echo "$NVIDIA_VISIBLE_DEVICES"' 2>&1)" || seen="failed: $seen"
if [ "$seen" != 0 ]; then
    die "docker run --gpus device=0 gave '$seen', not '0'. The running dockerd was probably
started without $HOOK_DIR first on its PATH: stop it and rerun this script."
fi
# The host containers publish sshd through the default bridge: make sure it works
# (a dockerd started by another engine's clean-up can be left without docker0).
bridge="$(docker run --rm gbatch-test:latest echo bridge-ok 2>&1)" || bridge="failed: $bridge"
if [ "$bridge" != bridge-ok ]; then
    die "a container on the default bridge network did not start: $bridge. Restart dockerd
(it recreates docker0), then rerun this script."
fi
say "ready: engine $(docker version --format '{{.Server.Version}}'), images gbatch-test:latest,"\
" gbatch-host:latest and gbatch-slurm-host:latest, --gpus works through the test hook"
