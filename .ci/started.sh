# Sourced by the .ci/setup-*.sh scripts that start a daemon. Under ./test.sh,
# GBATCH_CI_STARTED names a file of the daemons this run started ("NAME PID" lines); the
# run stops those when it ends (.ci/stop-started.sh). A daemon found running is never
# noted, so one the machine's owner started stays up. Without the variable (a setup
# script run by hand) nothing is noted and what it starts keeps running.
note_started() {  # NAME PIDFILE
    [ -n "${GBATCH_CI_STARTED:-}" ] && [ -s "$2" ] || return 0
    echo "$1 $(cat "$2")" >>"$GBATCH_CI_STARTED"
}
