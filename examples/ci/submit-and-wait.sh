#!/bin/sh
# Submit a job file (YAML, JSON or a #SBATCH script) to gbatch's HTTP API, wait for the
# job to end, print its log, and exit 1 unless it COMPLETED. Needs curl and jq.
#   GBATCH_URL    the API, e.g. https://gbatch.lab.example/api/v1
#   GBATCH_TOKEN  a CI secret: gbatch token --scope submit,read --lifespan 90d --user ci-bot
set -eu
call() {  # call PATH [CURL ARGS...]: the reply's JSON; on an error, show it and exit 1
    path=$1
    shift
    reply=$(curl -sS --fail-with-body -H "Authorization: Bearer $GBATCH_TOKEN" "$@" \
        "$GBATCH_URL$path") || { printf 'gbatch API: %s\n' "$reply" >&2; exit 1; }
    printf '%s' "$reply"
}
submitted=$(call /jobs -H 'Content-Type: application/yaml' --data-binary "@$1")
id=$(printf '%s' "$submitted" | jq -r .job_id)
echo "submitted job $id"
while :; do
    shown=$(call "/jobs/$id")  # not in a pipe: a refusal must end the script
    state=$(printf '%s' "$shown" | jq -r .job.state)
    case $state in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;;
    esac
    sleep "${GBATCH_POLL_SECONDS:-10}"
done
offset=0
while :; do  # the log, chunk by chunk
    chunk=$(call "/jobs/$id/logs?offset=$offset")
    printf '%s' "$chunk" | jq -j .data
    next=$(printf '%s' "$chunk" | jq -r .offset)
    [ "$next" = "$offset" ] && break
    offset=$next
done
echo "job $id ended $state"
[ "$state" = COMPLETED ]
