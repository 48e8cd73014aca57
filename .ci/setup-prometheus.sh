#!/usr/bin/env bash
# Give this machine Prometheus and promtool, with which
# tests/integration/test_metrics_scrape.py scrapes gbatch's /metrics: apt-get install
# prometheus (Debian's package), only when either is missing. Starts no server (the test starts its own on 127.0.0.1, with
# its config and data in a temp dir). Idempotent. Run as root.
set -euo pipefail

die() {
    echo "setup-prometheus: error: $*" >&2
    exit 1
}
say() { echo "setup-prometheus: $*"; }

[ "$(id -u)" = 0 ] || die "must run as root (it installs a package)."

if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    say "installing prometheus"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends prometheus ||
        die "apt-get install prometheus failed."
    # The package enables a server on :9090 where systemd runs; the tests need none.
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus; then
        systemctl disable --now prometheus || say "could not stop the prometheus service"
    fi
fi
command -v promtool >/dev/null 2>&1 || die "promtool is still missing after installing it."
command -v prometheus >/dev/null 2>&1 || die "prometheus is still missing after installing it."
say "ready: $(prometheus --version 2>&1 | head -n 1)"
