"""srun inside a container job (gbatch/nodes/containerbin/srun), run with /bin/sh here.

The job's script runs on every node with that node's variables, so this srun skips
Slurm's options and runs the command as THIS node's task(s) of the step, with their
ranks (docs/multinode.md, "Containers across hosts")."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import MappingProxyType

import pytest

from gbatch.nodes.base import CommandResult
from gbatch.nodes.docker import CONTAINER_SRUN
from gbatch.nodes.inventory import NodeConfig
from gbatch.nodes.remote import RemoteNode
from gbatch.site.config import Config, Paths

# Prints what a task is: its global rank, local rank, world size and step id.
SHOW = "echo rank=$RANK procid=$SLURM_PROCID local=$LOCAL_RANK/$SLURM_LOCALID world=$WORLD_SIZE"


def srun(
    tmp_path: Path, *args: str, node: int = 0, nodes: int = 2, per_node: str | None = None
) -> subprocess.CompletedProcess[str]:
    """srun ARGS as node `node` of a job of `nodes` nodes runs it (its run's variables)."""
    env = {
        "PATH": os.environ["PATH"],
        "TMPDIR": str(tmp_path),
        "SLURM_JOB_ID": "12",
        "SLURM_NODEID": str(node),
        "SLURM_NNODES": str(nodes),
        "SLURM_TASKS_PER_NODE": per_node or f"1(x{nodes})",
        "RANK": str(node),
        "LOCAL_RANK": "0",
    }
    return subprocess.run(
        ["/bin/sh", str(CONTAINER_SRUN), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return sorted(done.stdout.splitlines())


def test_the_script_is_posix_sh_and_executable() -> None:
    assert CONTAINER_SRUN.read_text().startswith("#!/bin/sh\n")
    assert os.access(CONTAINER_SRUN, os.X_OK)
    subprocess.run(["/bin/sh", "-n", str(CONTAINER_SRUN)], check=True, timeout=30)


def test_slurms_options_are_skipped_and_the_command_runs_as_this_nodes_task(
    tmp_path: Path,
) -> None:
    done = srun(
        tmp_path,
        *("-N", "2", "-n", "2", "--ntasks-per-node=1", "-l"),
        *("python3", "-c", "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'])"),
        node=1,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1: 1 2\n", "")


@pytest.mark.parametrize(
    "options",
    [
        ["-t", "10", "-c", "4", "-G", "1", "-J", "x", "-o", "o.txt", "-e", "e.txt"],
        ["-p", "gpu", "-w", "gpu01", "-x", "gpu02", "--gpus", "2", "--gpus-per-node", "1"],
        ["--time=10", "--cpus-per-task=4", "--mem", "4G", "--job-name", "x", "--partition=a"],
        ["-n2", "-N2", "--ntasks", "2", "--nodes=2", "--exclusive", "-K1", "--overlap"],
        ["--kill-on-bad-exit=1", "--mpi", "pmix", "--export", "ALL", "-u", "--"],
    ],
)
def test_every_form_of_an_option_and_its_value_is_skipped(
    tmp_path: Path, options: list[str]
) -> None:
    # The command's own options (-n of echo) are its, not srun's.
    done = srun(tmp_path, *options, "echo", "-n", "--ntasks", "3")
    assert (done.returncode, done.stdout, done.stderr) == (0, "--ntasks 3", "")


def test_the_jobs_layout_runs_this_nodes_tasks_with_their_ranks(tmp_path: Path) -> None:
    done = srun(tmp_path, "sh", "-c", SHOW, node=1, per_node="2(x2)")
    assert done.returncode == 0, done.stderr
    assert lines(done) == [
        "rank=2 procid=2 local=0/0 world=4",
        "rank=3 procid=3 local=1/1 world=4",
    ]


def test_ntasks_per_node_starts_that_many_copies_here(tmp_path: Path) -> None:
    done = srun(tmp_path, "--ntasks-per-node", "3", "sh", "-c", SHOW, node=1)
    assert lines(done) == [
        "rank=3 procid=3 local=0/0 world=6",
        "rank=4 procid=4 local=1/1 world=6",
        "rank=5 procid=5 local=2/2 world=6",
    ]


def test_ntasks_is_spread_over_the_nodes_the_first_taking_one_more(tmp_path: Path) -> None:
    first = srun(tmp_path, "-n", "5", "sh", "-c", SHOW, node=0)
    second = srun(tmp_path, "-n", "5", "sh", "-c", SHOW, node=1)
    assert [line.split()[0] for line in lines(first)] == ["rank=0", "rank=1", "rank=2"]
    assert lines(second) == [
        "rank=3 procid=3 local=0/0 world=5",
        "rank=4 procid=4 local=1/1 world=5",
    ]


def test_a_node_past_the_steps_nodes_runs_nothing(tmp_path: Path) -> None:
    assert srun(tmp_path, "-N", "1", "echo", "ran", node=1).stdout == ""
    assert srun(tmp_path, "-n", "1", "echo", "ran", node=1).stdout == ""
    assert srun(tmp_path, "-N", "1", "echo", "ran", node=0).stdout == "ran\n"


def test_label_prefixes_each_streams_lines_with_the_padded_rank(tmp_path: Path) -> None:
    done = srun(tmp_path, "-l", "-n", "12", "sh", "-c", "echo out; echo err >&2", node=0)
    assert sorted(done.stdout.splitlines()) == [f"{rank:2d}: out" for rank in range(6)]
    assert sorted(done.stderr.splitlines()) == [f"{rank:2d}: err" for rank in range(6)]
    labelled = srun(tmp_path, "sh", "-c", "echo hi", node=1)
    assert labelled.stdout == "hi\n"  # unlabelled without -l


def test_slurm_labelio_in_the_environment_labels_as_l_does(tmp_path: Path) -> None:
    env = {**os.environ, "SLURM_LABELIO": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2"}
    env["SLURM_TASKS_PER_NODE"] = "1(x2)"
    done = subprocess.run(
        ["/bin/sh", str(CONTAINER_SRUN), "echo", "hi"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.stdout == "1: hi\n"


def test_srun_exits_with_its_tasks_status_the_first_failing_one_by_rank(tmp_path: Path) -> None:
    assert srun(tmp_path, "sh", "-c", "exit 7").returncode == 7
    assert srun(tmp_path, "-l", "sh", "-c", "exit 7").returncode == 7
    several = srun(tmp_path, "--ntasks-per-node=3", "sh", "-c", "exit $((LOCAL_RANK + 4))")
    assert several.returncode == 4
    mixed = srun(tmp_path, "--ntasks-per-node=3", "sh", "-c", '[ "$LOCAL_RANK" != 1 ] || exit 9')
    assert mixed.returncode == 9


def test_each_srun_is_the_next_step(tmp_path: Path) -> None:
    steps = [srun(tmp_path, "sh", "-c", "echo $SLURM_STEP_ID").stdout for _ in range(3)]
    assert steps == ["0\n", "1\n", "2\n"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "srun: fatal: No command given to execute."),
        (["-n"], "srun: error: option -n requires an argument"),
        (["--ntasks"], "srun: error: option --ntasks requires an argument"),
        (["-n", "0", "true"], "srun: error: invalid -n/--ntasks value: 0."),
        (["-N", "x", "true"], "srun: error: invalid -N/--nodes value: x."),
        (["-N", "3", "true"], "srun: error: Unable to create step for job 12: -N/--nodes 3"),
        (["-N", "2", "-n", "1", "true"], "srun: error: -n/--ntasks 1 is fewer than the 2"),
    ],
)
def test_bad_options_are_refused_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = srun(tmp_path, *args)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


class FakeConnection:
    """The calls a RemoteNode makes to deliver srun: SFTP writes and commands."""

    def __init__(self) -> None:
        self.written: list[tuple[str, bytes, int]] = []
        self.commands: list[list[str]] = []

    def put_bytes(self, data: bytes, path: str, mode: int, *, timeout: float = 60.0) -> None:
        self.written.append((path, data, mode))

    def run(self, argv: list[str], *, timeout: float) -> CommandResult:
        self.commands.append(list(argv))
        return CommandResult(0, f"/home/gbatch/{argv[-1]}\n".encode(), b"")


def test_a_host_gets_srun_in_its_agent_dir_once_per_connection_by_its_absolute_path(
    tmp_path: Path,
) -> None:
    config = NodeConfig(
        name="gpu01",
        host="127.0.0.1",  # never reached: the connection is a fake
        port=22,
        user="gbatch",
        identity_file=None,
        known_hosts=tmp_path / "known_hosts",
        agent_python="python3",
        agent_dir="~/.gbatch",
        docker="docker",
        docker_options=(),
        connect_timeout=5.0,
        labels=MappingProxyType({}),
        simulation_file=None,
    )
    node = RemoteNode(config, Paths(tmp_path), Config(), lambda: None)
    fake = FakeConnection()
    node._conn = fake  # type: ignore[assignment]
    assert node._container_srun() == "/home/gbatch/.gbatch/bin/srun"
    assert fake.written == [(".gbatch/bin/srun", CONTAINER_SRUN.read_bytes(), 0o755)]
    assert fake.commands == [["realpath", "--", ".gbatch/bin/srun"]]
    node._container_srun()
    assert len(fake.written) == 1  # known on this connection
    node._generation += 1  # a new connection: the host may have been wiped since
    node._container_srun()
    assert len(fake.written) == 2
