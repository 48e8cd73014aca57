#!/bin/bash
#SBATCH --partition=gpu
#SBATCH --job-name=nlp-finetune
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=1
#SBATCH --mem-per-gpu=2G
#SBATCH --time=0-00:20:00
#SBATCH --output=%x.%j.out
#SBATCH --open-mode=truncate
#SBATCH --mail-type=ALL
#SBATCH --mail-user=student@example.org

echo "name=$SLURM_JOB_NAME partition=$SLURM_JOB_PARTITION"
echo "cpus=$SLURM_CPUS_PER_TASK gpus=$SLURM_GPUS_ON_NODE"
echo "data=$1"
