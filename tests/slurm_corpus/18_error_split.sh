#!/bin/bash
#SBATCH -J split
#SBATCH -o out.txt
#SBATCH -e err.txt

echo "to stdout"
echo "to stderr" >&2
echo "stdout again"
