"""Job files and Slurm options -> a validated JobSpec: the YAML reader, the spec builder,
#SBATCH scripts and sweeps. Above core/, below every front and the head."""
