#!/bin/bash
#SBATCH --job-name=a100-only
#SBATCH --gres=gpu:a100:1
#SBATCH --time=5

# A lab with several GPU models: the script names the one it needs (gres.conf Type=).
echo "gpus on node: $SLURM_GPUS_ON_NODE"
if [ -n "$CUDA_VISIBLE_DEVICES" ]; then echo "cuda visible: set"; else echo "cuda visible: unset"; fi
echo "on an a100"
