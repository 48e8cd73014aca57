#!/bin/bash
#SBATCH --job-name=will-fail
#SBATCH --time=1

echo "starting"
echo "input missing, giving up" >&2
exit 3
