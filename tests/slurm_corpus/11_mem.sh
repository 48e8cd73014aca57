#!/bin/bash
#SBATCH --job-name=small-mem
#SBATCH --mem=512M
#SBATCH --time=00:02:00

# Unset vars print empty: -c was not given, so Slurm sets no SLURM_CPUS_PER_TASK.
echo "cpus_per_task=[$SLURM_CPUS_PER_TASK]"
echo "ntasks=[$SLURM_NTASKS]"
echo "nodes=$SLURM_JOB_NUM_NODES"
