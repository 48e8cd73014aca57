#!/bin/bash
#SBATCH --job-name=where

# Results written next to where the user ran sbatch.
cd "$SLURM_SUBMIT_DIR"
echo "result from $SLURM_JOB_NAME" > result.txt
if [ "$(pwd)" = "$SLURM_SUBMIT_DIR" ]; then echo "cwd is submit dir"; fi
echo "submit_dir=$SLURM_SUBMIT_DIR"
