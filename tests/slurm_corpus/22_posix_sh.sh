#!/bin/sh
# A comment before the options is fine.

#SBATCH --time=1
#SBATCH --ntasks-per-node=1
echo "name=$SLURM_JOB_NAME"
#SBATCH --job-name=ignored-after-first-command
echo "nnodes=$SLURM_NNODES"
