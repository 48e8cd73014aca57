#!/bin/bash
#SBATCH -p gpu
#SBATCH --gres=gpu:1
#SBATCH -t 10
#SBATCH -J on-partition

echo "partition=$SLURM_JOB_PARTITION"
echo "gpus=$SLURM_GPUS_ON_NODE"
