"""Text and JSON renderings of jobs and nodes, in the shapes Slurm's users script against.

Each command's output is drawn here. Fronts call these; the head never does.
"""
