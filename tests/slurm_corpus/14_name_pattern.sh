#!/bin/bash
#SBATCH --job-name=nightly-eval
#SBATCH --output=%x_%j.log

echo "evaluating as $SLURM_JOB_NAME"
echo "percent sign stays: 100%"
