#!/bin/bash
#SBATCH --job-name=two-a100
#SBATCH --gpus=a100:2
#SBATCH --time=00:05:00
#SBATCH --output=two-%j.log

# --gpus=TYPE:N, the newer spelling; both of the node's A100s.
echo "gpus on node: $SLURM_GPUS_ON_NODE"
echo "devices: $(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | wc -l)"
