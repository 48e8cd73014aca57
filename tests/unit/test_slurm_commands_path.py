"""Slurm's commands on a bare job's PATH are gbatch's (gbatch/nodes/slurmbin): each an
executable script running the gbatch command of its name with the daemon's Python."""

from __future__ import annotations

import os
import subprocess
import sys

from gbatch.cli.commandlist import COMMANDS
from gbatch.nodes.local import SLURM_COMMANDS, with_slurm_commands


def test_each_is_an_executable_script_for_the_gbatch_command_of_its_name() -> None:
    names = sorted(p.name for p in SLURM_COMMANDS.iterdir())
    assert names == ["sacct", "sbatch", "scancel", "scontrol", "squeue", "srun"]
    for name in names:
        script = SLURM_COMMANDS / name
        assert os.access(script, os.X_OK), name
        assert name in COMMANDS
        assert f'-m gbatch {name} "$@"' in script.read_text()


def test_they_come_first_on_the_path_and_run_this_pythons_gbatch() -> None:
    env = {"PATH": "/usr/bin:/bin"}
    with_slurm_commands(env)
    assert env["PATH"] == f"{SLURM_COMMANDS}:/usr/bin:/bin"
    assert env["GBATCH_PYTHON"] == sys.executable
    done = subprocess.run(
        ["srun", "--help"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: gbatch srun"), done
    bare = {}
    with_slurm_commands(bare)
    assert bare["PATH"] == f"{SLURM_COMMANDS}:/usr/local/bin:/usr/bin:/bin"
