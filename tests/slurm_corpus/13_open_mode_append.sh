#!/bin/bash
#SBATCH -J appender
#SBATCH --output=history.log
#SBATCH --open-mode=append

echo "appended by $SLURM_JOB_NAME"
