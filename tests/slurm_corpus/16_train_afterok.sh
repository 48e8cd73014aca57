#!/bin/bash
#SBATCH --job-name=train-after
#SBATCH --gres=gpu:1

# Step two: submitted by the driver as `sbatch --dependency=afterok:$PRE 16_train_afterok.sh`.
echo "found $(cat prepared.txt)"
