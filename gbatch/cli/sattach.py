"""gbatch sattach: Slurm's name for `gbatch shell`, a shell in your running job.

Slurm's sattach attaches to a step's input and output; gbatch's opens a new shell step
instead, which is what people reach for it to do (both commands are
gbatch/cli/stepclient.py's `add_shell_parser`). `N.M` is refused with where to look.
"""

from __future__ import annotations

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.stepclient import add_shell_parser

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["sattach"]


def add_parser(commands: Any) -> None:
    """The `sattach` sub-command: `shell`'s parser under Slurm's name."""
    add_shell_parser(commands, "sattach", HELP)
