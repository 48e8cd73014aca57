"""Job files and Slurm options turned into a validated JobSpec.

The YAML reader, the spec builder, #SBATCH scripts and sweeps. Above core/, below every
front and the head.
"""
