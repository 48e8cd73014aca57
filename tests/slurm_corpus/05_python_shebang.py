#!/usr/bin/env python3
#SBATCH --job-name=py-job
#SBATCH --time=5
#SBATCH --ntasks=1
"""A Python batch script: #SBATCH lines are comments to Python."""

import os
import sys

print("args:", " ".join(sys.argv[1:]))
print("name:", os.environ["SLURM_JOB_NAME"])
print("in submit dir:", os.getcwd() == os.environ["SLURM_SUBMIT_DIR"])
print("ntasks:", os.environ.get("SLURM_NTASKS"))
