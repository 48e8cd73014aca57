#!/bin/bash
#SBATCH -J threads
#SBATCH -n 1
#SBATCH -c 2

export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "cpus_per_task=$SLURM_CPUS_PER_TASK"
echo "threads=$OMP_NUM_THREADS"
echo "ntasks=$SLURM_NTASKS"
