#!/usr/bin/env bash
# Give this machine the command-line tools the docs' examples use and the tests run:
# curl and jq (examples/ci/submit-and-wait.sh, tests/integration/test_ci_example.py),
# only when either is missing. Idempotent. Run as root.
set -euo pipefail

die() {
    echo "setup-tools: error: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || die "must run as root (it installs packages)."
if ! command -v curl >/dev/null 2>&1 || ! command -v jq >/dev/null 2>&1; then
    echo "setup-tools: installing curl and jq"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q || die "apt-get update failed (are the Debian mirrors reachable?)."
    apt-get install -y -q --no-install-recommends curl jq || die "apt-get install curl jq failed."
fi
command -v curl >/dev/null 2>&1 && command -v jq >/dev/null 2>&1 ||
    die "curl or jq is still missing after installing them."
echo "setup-tools: ready: $(curl --version | head -n 1 | cut -d' ' -f1-2), $(jq --version)"
