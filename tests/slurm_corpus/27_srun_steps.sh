#!/bin/bash
#SBATCH --job-name=with-steps
#SBATCH --gres=gpu:1
#SBATCH --time=5

# The usual shape of a Slurm batch script: its work in `srun` lines, each a step.
srun sh -c 'echo "step $SLURM_STEP_ID of $SLURM_JOB_NAME: tasks=$SLURM_NTASKS procid=$SLURM_PROCID"'
# srun's own complaint goes to its stderr, kept apart: in one file its place among the
# step's lines is a race, under Slurm too.
srun sh -c 'echo "step $SLURM_STEP_ID"; exit 3' 2> srun-1.txt
echo "srun said $?"
srun true && echo "all done"
