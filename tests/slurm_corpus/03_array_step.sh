#!/bin/bash
#SBATCH -J stepped
#SBATCH --array=1-10:2
#SBATCH -o stepped-%A_%a.out

echo "task=$SLURM_ARRAY_TASK_ID step=$SLURM_ARRAY_TASK_STEP count=$SLURM_ARRAY_TASK_COUNT"
echo "min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX"
