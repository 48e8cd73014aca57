#!/usr/bin/env bash
# The one command that runs gbatch's checks: lint, types, the docs site, and every test tier.
#   ./test.sh                  # everything (as root it also sets up a docker engine)
#   ./test.sh tests/unit       # any pytest arguments narrow the run
#   ./test.sh --fast tests/unit/test_spec.py::test_x   # rerun: pytest alone (no pip,
#                              # setup scripts, ruff or mypy); needs .venv from a full run
# The daemons the setup starts for the run (munged, slurmctld, slurmd, dockerd) are
# stopped when it ends; one that was already running before is left running.
# Without root, sshd or a docker engine, the SSH and docker tests are skipped locally;
# with CI=true a missing component fails them instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# A run starts thousands of `python -m gbatch` processes: let them, and pytest's
# rewritten test modules, keep their bytecode even where the environment says not to
# write any (it would compile gbatch again in every one of them).
unset PYTHONDONTWRITEBYTECODE

# The setup scripts (and tests that run one, such as the Slurm tests' ensure_slurm) list
# here each daemon they start; it is stopped on the way out, whatever the outcome.
GBATCH_CI_STARTED="$(mktemp -t gbatch-started.XXXXXX)"
export GBATCH_CI_STARTED
stop_started() {
    if [ -s "$GBATCH_CI_STARTED" ]; then bash .ci/stop-started.sh "$GBATCH_CI_STARTED"; fi
    rm -f "$GBATCH_CI_STARTED"
}
trap stop_started EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ "${1:-}" = --fast ]; then
    shift
    if [ ! -x .venv/bin/pytest ]; then
        echo "test.sh --fast: error: no .venv/bin/pytest. Run ./test.sh once first" >&2
        exit 2
    fi
    .venv/bin/pytest "$@"
    exit
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e '.[test]'

if [ "$(id -u)" = 0 ]; then
    bash .ci/setup-sshd.sh   # openssh-server for the SSH tests (each starts its own sshd)
    bash .ci/setup-terminal.sh   # tmux (the TUI's real-terminal test), zsh, fish, man-db
    bash .ci/setup-slurm.sh   # a one-node real Slurm for the differential test
    bash .ci/setup-prometheus.sh   # prometheus and promtool scrape /metrics (test_metrics)
    bash .ci/setup-browser.sh   # chromium + chromedriver drive the web page (test_web_ui)
    bash .ci/setup-tools.sh   # curl and jq run docs/http-api.md's CI script (test_ci_example)
    [ "${GBATCH_TEST_DOCKER:-1}" = 0 ] || bash .ci/setup-docker.sh
fi

echo "==> ruff"; .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "==> mypy"; .venv/bin/mypy
echo "==> mkdocs"; site=$(mktemp -d)   # the docs site, built strict: a broken link fails
.venv/bin/mkdocs build --strict --site-dir "$site" || { rm -rf "$site"; exit 1; }
rm -rf "$site"
# The tests run on six pytest-xdist workers (GBATCH_TEST_WORKERS, 0 for one process):
# most tests wait on daemons they started, so more workers than cores pay off, and
# tests/conftest.py keeps the tests that share the docker engine, Slurm or a module's
# fixture on one worker.
echo "==> pytest"
.venv/bin/pytest -n "${GBATCH_TEST_WORKERS:-6}" --dist loadgroup "$@"
