#!/bin/bash
#SBATCH -J exported
#SBATCH --export=ALL,CORPUS_MODE=fast

echo "mode=$CORPUS_MODE"
echo "from shell=$CORPUS_FROM_SHELL"
