#!/bin/sh
#SBATCH --job-name=cleanup

# Runs whatever happened before it (afterany), e.g. after a failing step.
echo "cleanup ran"
