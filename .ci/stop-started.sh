#!/usr/bin/env bash
# Stop the daemons a test run started, and only those: ./test.sh runs this when it ends.
#   .ci/stop-started.sh FILE
# FILE holds one line per daemon a setup script started for the run ("NAME PID", written
# by note_started in .ci/setup-*.sh while GBATCH_CI_STARTED names the file). Each is sent
# SIGTERM, last started first, and waited for (SIGKILL after a while); a line whose pid is
# gone, or is now another program (comm differs from NAME), is skipped. A daemon that was
# already running before the run is not in FILE, so a Slurm or docker engine the
# machine's owner runs stays up. FILE is removed. Never fails the run: it only reports.
set -uo pipefail

STOP_WAIT_S="${GBATCH_STOP_WAIT_S:-60}"  # dockerd stops its containers first
file="${1:?usage: stop-started.sh FILE}"
[ -f "$file" ] || exit 0

say() { echo "stop-started: $*"; }

is_named() {  # PID NAME: the pid runs the program NAME and is not a zombie
    local stat
    [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    read -r state _ <<<"${stat##*) }"
    [ "$state" != Z ]
}

mapfile -t lines < <(tac "$file")
for line in "${lines[@]}"; do
    read -r name pid _ <<<"$line"
    [[ "$pid" =~ ^[0-9]+$ ]] || continue
    is_named "$pid" "$name" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    waited=0
    while is_named "$pid" "$name" && [ "$waited" -lt $((STOP_WAIT_S * 10)) ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if is_named "$pid" "$name"; then
        say "$name ($pid) outlived SIGTERM by ${STOP_WAIT_S}s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
    else
        say "stopped $name ($pid), which this run started"
    fi
done
rm -f "$file"
