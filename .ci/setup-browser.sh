#!/usr/bin/env bash
# Give this machine a headless browser for tests/integration/test_web_ui.py: Debian's
# chromium and chromium-driver (chromedriver), driven through selenium (a test extra),
# only when either is missing. Starts nothing. Idempotent. Run as root.
set -euo pipefail

die() {
    echo "setup-browser: error: $*" >&2
    exit 1
}
say() { echo "setup-browser: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages)."

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    say "installing chromium and chromium-driver"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends chromium chromium-driver ||
        die "apt-get install chromium chromium-driver failed."
fi
command -v chromium >/dev/null 2>&1 || die "chromium is still missing after installing it."
command -v chromedriver >/dev/null 2>&1 || die "chromedriver is still missing after installing it."
say "ready: $(chromium --version 2>/dev/null | head -n 1); $(chromedriver --version | head -n 1)"
