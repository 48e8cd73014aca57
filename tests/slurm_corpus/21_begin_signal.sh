#!/bin/bash
#SBATCH --job-name=polite
#SBATCH --begin=now
#SBATCH --time=00:05:00
#SBATCH --signal=B:USR1@60

# Checkpoint on SIGUSR1 before the limit (never reached here: the job is short).
trap 'echo "checkpointing"; exit 0' USR1
echo "begun"
