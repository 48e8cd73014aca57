#!/bin/bash
#SBATCH -J chdir
#SBATCH -D run

# -D relative to where sbatch ran; the default output file lands in the working dir.
echo "pwd=$(pwd)"
echo "submit_dir=$SLURM_SUBMIT_DIR"
ls input.txt
