#!/bin/bash
#SBATCH -J with-args

# Scripts that take their input file as $1 (sbatch job.sh data.csv).
echo "count=$#"
echo "first=$1"
echo "second=$2"
echo "lines in $1: $(wc -l < "$1")"
