"""gbatch's commands in `gbatch --help`'s order, each with its one-line help.

The one source of a command's help line: `gbatch --help` lists the commands from here
without importing their modules (gbatch.cli.<name>, each large), and each module's own
sub-parser reads its HELP from here. A leaf: it imports nothing.
"""

COMMANDS: dict[str, str] = {
    "sbatch": "queue a job (a job file, a batch script, options, or --wrap)",
    "srun": "run a command in an allocation, attached to this terminal, as Slurm's srun",
    "salloc": "get an allocation and a shell in it; srun there runs steps in it",
    "shell": "open a shell (or run a command) in your running job, beside it",
    "sattach": "Slurm's name for `gbatch shell`: a shell in your running job",
    "port-forward": "reach a port inside your running job at a local port (Jupyter, VS Code)",
    "squeue": "show queued and running jobs",
    "scancel": "cancel or signal jobs and steps",
    "sinfo": "show partitions and their nodes, grouped by state, as Slurm's sinfo does",
    "sacct": "show accounting data for jobs, finished ones included",
    "sshare": "show fair-share usage, what your jobs hold, and your limits",
    "sprio": "show pending jobs' priority and the factors that order them",
    "seff": "show a job's efficiency: wall-clock time against its limit, GPUs",
    "sreport": "report GPU-hours per user (or Unix group) over a period",
    "scontrol": "show a job, node or partition; hold, release, requeue or update jobs",
    "logs": "print a job's output; -f follows it until the job ends",
    "tui": "full-screen live view of jobs, nodes and logs (cancel, hold, release)",
    "node": "list nodes; install the agent; trust a host's SSH key; drain or resume a node "
    "(admins)",
    "daemon": "start, stop or inspect the head daemon (gbatchd)",
    "api": "serve the HTTP API (tokens from `gbatch token`); print its OpenAPI document",
    "token": "print an API token for the HTTP API; list, revoke, rotate the signing key",
    "cluster": "link your own login on a Slurm cluster partition; unlink it; show its state",
    "mcp": "serve gbatch's tools to a coding agent (Model Context Protocol over stdio)",
    "completion": "print a shell completion script (bash, zsh or fish) for gbatch's commands",
}
