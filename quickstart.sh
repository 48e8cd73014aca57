#!/usr/bin/env bash
# One command from a fresh clone to jobs queueing and finishing on this machine:
# a virtualenv with gbatch, a head daemon on the embedded local node with 2 simulated
# GPUs (no GPU, no docker needed), and a few jobs that run, retry, time out and get
# cancelled. State lives in ./.demo (GBATCH_HOME); the daemon keeps running after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [ ! -x .venv/bin/gbatch ]; then
    echo "==> creating .venv and installing gbatch (once)"
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet -e .
fi
export GBATCH_HOME="${GBATCH_HOME:-$PWD/.demo}"
export GBATCH_SIMULATE_GPUS="${GBATCH_SIMULATE_GPUS:-2}"
gbatch() { .venv/bin/gbatch "$@"; }
run() { echo "\$ gbatch $*"; gbatch "$@"; }

mkdir -p -m 700 "$GBATCH_HOME"  # the daemon refuses a home others may list
[ -e "$GBATCH_HOME/config.yaml" ] || printf 'kill_grace_seconds: 2\n' >"$GBATCH_HOME/config.yaml"
echo "==> head daemon (GBATCH_HOME=$GBATCH_HOME, $GBATCH_SIMULATE_GPUS simulated GPUs)"
run daemon start
run sinfo

echo "==> queueing: 4 x hello (1 GPU each) on 2 GPUs, a flaky job, a job too slow for its limit"
for _ in 1 2 3 4; do run sbatch examples/hello.yaml; done
echo "\$ gbatch sbatch examples/demo/flaky.yaml"
flaky=$(gbatch sbatch --parsable examples/demo/flaky.yaml)
echo "Submitted batch job $flaky"
run sbatch examples/demo/too-slow.yaml
victim=$(gbatch sbatch --parsable -J doomed --gpus 1 --wrap 'sleep 600')
echo "Submitted batch job $victim (to be cancelled)"
sleep 1
run squeue
run scancel "$victim"

echo "==> watching the queue until it drains"
while [ -n "$(gbatch squeue -h -u "$(id -un)" -o %i)" ]; do
    sleep 2
    gbatch squeue
done

echo "==> accounting: the cancelled job, the one past its limit, and flaky, which ended well"
run sacct
echo "==> flaky failed once and was retried: its log holds both attempts, its events the retry"
run logs "$flaky"
run scontrol show job "$flaky"
cat <<MSG

Done. The daemon is still running; try:
  export GBATCH_HOME=$GBATCH_HOME
  .venv/bin/gbatch sbatch examples/hello.yaml
  .venv/bin/gbatch sbatch --gpus 1 --wrap 'nvidia-smi || echo no GPU here'
  .venv/bin/gbatch daemon stop
(examples/train.yaml is the reference of every job-file key, for a site with docker and
mounts: this demo has neither, and refuses it.)
MSG
