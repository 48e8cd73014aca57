#!/usr/bin/env python3
#SBATCH --job-name=py-array
#SBATCH --array=0-2
#SBATCH --output=py-array-%a.out
import os

task = int(os.environ["SLURM_ARRAY_TASK_ID"])
shards = ["alpha", "beta", "gamma"]
print(f"task {task} takes shard {shards[task]}")
print(f"array job {'set' if os.environ.get('SLURM_ARRAY_JOB_ID') else 'unset'}")
