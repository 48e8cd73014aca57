#!/usr/bin/env python3
#SBATCH --job-name=py-fail
import sys

print("checking inputs", flush=True)
sys.exit(5)
