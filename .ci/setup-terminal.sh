#!/usr/bin/env bash
# Give this machine what the terminal-side tests run: tmux, the real terminal that
# tests/tui/test_tui_tmux.py runs `gbatch tui` in; zsh and fish, whose completion of
# gbatch tests/unit/test_shell_completion.py drives (bash is there already); man-db,
# whose `man` reads the installed pages (tests/integration/test_shell_help.py).
# apt-get installs only what is missing. Starts no tmux server (each test starts its
# own on a socket in a temp dir). Idempotent. Run as root.
set -euo pipefail

die() {
    echo "setup-terminal: error: $*" >&2
    exit 1
}
say() { echo "setup-terminal: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages)."

# command -> the Debian package that provides it
declare -A PACKAGE=([tmux]=tmux [zsh]=zsh [fish]=fish [man]=man-db)
missing=()
for command in "${!PACKAGE[@]}"; do
    command -v "$command" >/dev/null 2>&1 || missing+=("${PACKAGE[$command]}")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends "${missing[@]}" ||
        die "apt-get install ${missing[*]} failed."
fi
for command in "${!PACKAGE[@]}"; do
    command -v "$command" >/dev/null 2>&1 || die "$command is still missing after installing it."
done
say "ready: $(tmux -V), zsh $(zsh --version | cut -d' ' -f2), $(fish --version), $(man --version)"
