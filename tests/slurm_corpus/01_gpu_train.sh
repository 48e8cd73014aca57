#!/bin/bash
#SBATCH --job-name=train-resnet
#SBATCH --gres=gpu:1
#SBATCH -t 00:05:00
#SBATCH --nodes=1
#SBATCH --ntasks=1

# Typical "first GPU job" from a cluster's docs: load nothing, show what we got.
echo "job name: $SLURM_JOB_NAME"
echo "gpus on node: $SLURM_GPUS_ON_NODE"
echo "nodes: $SLURM_JOB_NUM_NODES tasks: $SLURM_NTASKS"
if [ -n "$CUDA_VISIBLE_DEVICES" ]; then echo "cuda visible: set"; else echo "cuda visible: unset"; fi
echo "training done"
