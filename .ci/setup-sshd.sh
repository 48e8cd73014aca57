#!/usr/bin/env bash
# Give this machine an sshd binary for gbatch's SSH tests (tests/integration/sshd.py),
# offline:
#   1. apt-get install openssh-server (only when /usr/sbin/sshd is missing), with the
#      package's own service start blocked: the tests start their own sshd per test, on a
#      free 127.0.0.1 port with keys in a temp dir, and a system sshd on port 22 is
#      nothing they need;
#   2. /run/sshd, the privilege-separation directory sshd refuses to start without;
#   3. a check that `sshd -t` accepts a minimal test configuration.
# Leaves no sshd running. Idempotent: every step is skipped when already done. Run as root.
set -euo pipefail

die() {
    echo "setup-sshd: error: $*" >&2
    exit 1
}
say() { echo "setup-sshd: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs a package)."

SSHD=/usr/sbin/sshd
POLICY=/usr/sbin/policy-rc.d
created_policy=""
check_dir=""
cleanup() {
    # Remove only what this script made: a policy-rc.d found in place stays.
    [ -z "$created_policy" ] || rm -f "$created_policy"
    [ -z "$check_dir" ] || rm -rf "$check_dir"
}
trap cleanup EXIT

# --- 1. package ----------------------------------------------------------------------
if [ ! -x "$SSHD" ]; then
    say "installing openssh-server"
    # Keep the package's init script from starting a system sshd: nothing here needs
    # one, and a stray sshd on port 22 would outlive the tests.
    if [ ! -e "$POLICY" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$POLICY"
        chmod 0755 "$POLICY"
        created_policy="$POLICY"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends openssh-server \
        || die "apt-get install openssh-server failed."
fi
[ -x "$SSHD" ] || die "$SSHD is still missing after installing openssh-server."
command -v ssh-keygen >/dev/null 2>&1 || die "ssh-keygen is missing (package openssh-client)."

# --- 2. privilege-separation directory -----------------------------------------------
mkdir -p /run/sshd
chmod 0755 /run/sshd

# --- 3. a test configuration parses ------------------------------------------------------
check_dir="$(mktemp -d)"
ssh-keygen -q -t ed25519 -N '' -f "$check_dir/host_key" >/dev/null
cat >"$check_dir/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port 2222
HostKey $check_dir/host_key
PidFile none
UsePAM no
PasswordAuthentication no
StrictModes no
EOF
"$SSHD" -t -f "$check_dir/sshd_config" || die "sshd -t rejects a minimal test configuration."

say "ready: $("$SSHD" -V 2>&1 | head -n 1)"
