#!/usr/bin/env bash
# Give this machine tmux, the real terminal that tests/tui/test_tui_tmux.py runs
# `gbatch tui` in: apt-get install tmux, only when it is missing. Starts no tmux server
# (each test starts its own on a socket in a temp dir). Idempotent. Run as root.
set -euo pipefail

die() {
    echo "setup-terminal: error: $*" >&2
    exit 1
}
say() { echo "setup-terminal: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs a package)."

if ! command -v tmux >/dev/null 2>&1; then
    say "installing tmux"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends tmux || die "apt-get install tmux failed."
fi
command -v tmux >/dev/null 2>&1 || die "tmux is still missing after installing it."
say "ready: $(tmux -V)"
