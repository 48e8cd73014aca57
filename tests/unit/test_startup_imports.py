"""Start-up is a feature: the everyday commands never import the heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# paramiko stands for the whole SSH stack: it pulls cryptography, bcrypt, nacl and invoke.
HEAVY = ("textual", "paramiko", "yaml", "pynvml")
PROBE = """
import json, sys
from gbatch.cli._main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})))
"""


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--help"], set()),
        (["squeue"], set()),
        (["scancel", "1"], set()),
        (["sinfo"], set()),
        (["sacct"], set()),
        (["sshare"], set()),
        (["logs", "1"], set()),
        (["sbatch", "--help"], set()),
        # Registering `gbatch tui` costs the others nothing: textual loads only when it runs.
        (["tui", "--help"], set()),
    ],
)
def test_everyday_commands_import_no_heavy_library(
    tmp_path: object, argv: list[str], allowed: set[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=set(HEAVY)), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={"GBATCH_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert loaded <= allowed, f"gbatch {' '.join(argv)} imported {sorted(loaded)}"


def test_the_command_table_lists_every_command_with_its_modules_help() -> None:
    """`gbatch --help` lists the commands from COMMANDS without importing them: each
    entry must name a module under gbatch/cli/ and carry that module's HELP."""
    import importlib

    from gbatch.cli._main import COMMANDS

    for name, help_line in COMMANDS.items():
        module = importlib.import_module(f"gbatch.cli.{name}")
        assert help_line == module.HELP, name
