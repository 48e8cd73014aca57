"""gbatch shell: a shell (or a command) as a new step of your own running job.

For looking at a live run: the shell starts in the job's working directory, on its
node, with its GPUs visible and its SLURM_* variables, in its container for a
container job; leaving it ends that step only, never the job. `gbatch sattach` is
the same, under Slurm's name. Both are gbatch/cli/stepclient.py's `add_shell_parser`,
over srun's transport.
"""

from __future__ import annotations

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.stepclient import add_shell_parser

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["shell"]


def add_parser(commands: Any) -> None:
    """The `shell` sub-command."""
    add_shell_parser(commands, "shell", HELP)
