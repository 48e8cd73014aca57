#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=1-4
#SBATCH --time=0:10:00

# One learning rate per array task, picked by $SLURM_ARRAY_TASK_ID.
RATES=(none 0.1 0.01 0.001 0.0001)
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT (min $SLURM_ARRAY_TASK_MIN max $SLURM_ARRAY_TASK_MAX)"
echo "lr=${RATES[$SLURM_ARRAY_TASK_ID]}"
echo "name=$SLURM_JOB_NAME"
