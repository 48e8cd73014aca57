"""Text and JSON renderings of jobs and nodes for each command's output, in the shapes
Slurm's users script against. Fronts call these; the head never does."""
