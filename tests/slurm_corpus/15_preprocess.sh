#!/bin/bash
#SBATCH --job-name=preprocess
#SBATCH --time=00:05:00

# Step one of a pipeline: the next step (16, 17) is submitted with --dependency.
sleep 1
printf 'rows=3\n' > prepared.txt
echo "prepared"
