#!/bin/bash
#SBATCH --job-name=template
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=1G
#SBATCH --time=00:15:00
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=someone@example.org
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err
#SBATCH --comment="corpus template"
#SBATCH --requeue

# The university template: every header line filled in, as copied from the wiki.
echo "name=$SLURM_JOB_NAME cpus=$SLURM_CPUS_PER_TASK ntasks=$SLURM_NTASKS"
echo "partition=$SLURM_JOB_PARTITION"
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK
echo "omp=$OMP_NUM_THREADS"
echo "a warning for stderr" >&2
