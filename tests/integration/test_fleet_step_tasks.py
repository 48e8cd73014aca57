"""srun across a job's nodes on two GPU hosts (issue 32): one step, a task per node.

A job of `nodes: 2` holds a container on each host (every container job across nodes runs
its command on each); `gbatch srun --jobid N` then starts one task per node, each a
`docker exec` in its node's container relayed by the head, as ONE step: its tasks
rendezvous at MASTER_ADDR:MASTER_PORT and sum their ranks over TCP, -l labels their
lines, a failing task stops the other, scancel of the step stops every task.

Needs the planner's placement across nodes, the job file's `nodes:` and containers on
every node (issue 32's other parts): skipped, saying so, where they are missing.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import FAST_CONFIG, TMP_MOUNTS_CONFIG, Head, wait_for
from fleet import Fleet, build_fleet, teardown_fleet
from hosts import HOST_IMAGE
from rendezvous import ACROSS, ALLREDUCE
from test_interactive import gbatch_in_background, sacct_lines

pytestmark = pytest.mark.docker

CONFIG = FAST_CONFIG + TMP_MOUNTS_CONFIG + "kill_grace_seconds: 2\n"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(
        tmp_path, {"mn1": 1, "mn2": 1}, config=CONFIG, node_keys={"mn1": ACROSS, "mn2": ACROSS}
    )
    yield built
    teardown_fleet(built)


def allocation(fleet: Fleet, tmp_path: Path) -> tuple[int, list[str]]:
    """A running job holding both hosts (a container on each), and its nodes, first first."""
    head = fleet.head
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o755)
    (work / "rendezvous.py").write_text(ALLREDUCE)
    job_file = tmp_path / "hold.yaml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "image": HOST_IMAGE,
                "nodes": 2,
                "gpus": 1,
                "mounts": [f"{work}:/work"],
                "command": "sleep 600",
                "requeue": False,
            }
        )
    )
    submitted = head.run("sbatch", "--parsable", str(job_file))
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip())
    head.wait_state(job_id, "RUNNING", timeout=120)
    record = head.polled(job_id) or {}
    peers = record.get("peers") or []
    nodes = [str(record["node"]), *(str(peer[0]) for peer in peers)]  # type: ignore[attr-defined]
    assert sorted(nodes) == ["mn1", "mn2"]
    return job_id, nodes


def srun(head: Head, job_id: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return head.run("srun", "--jobid", str(job_id), *argv, input="")


def test_srun_across_two_hosts_runs_a_task_on_each_that_meet_as_one_step(
    fleet: Fleet, tmp_path: Path
) -> None:
    head = fleet.head
    job_id, nodes = allocation(fleet, tmp_path)
    named = srun(head, job_id, "-l", "sh", "-c", "echo $SLURMD_NODENAME $SLURM_NODEID")
    assert named.returncode == 0, named.stderr
    assert sorted(named.stdout.splitlines()) == [f"0: {nodes[0]} 0", f"1: {nodes[1]} 1"]
    met = srun(head, job_id, "-l", "python3", "/work/rendezvous.py")
    assert met.returncode == 0, met.stderr
    assert sorted(met.stdout.splitlines()) == ["0: rank 0 of 2: sum 1", "1: rank 1 of 2: sum 1"]
    assert sacct_lines(head, job_id)[-2:] == [
        f"{job_id}.0|sh|COMPLETED|0:0",
        f"{job_id}.1|python3|COMPLETED|0:0",
    ]


def test_a_failing_task_on_one_host_stops_the_other_and_scancel_stops_both(
    fleet: Fleet, tmp_path: Path
) -> None:
    head = fleet.head
    job_id, nodes = allocation(fleet, tmp_path)
    # Rank 1 fails; rank 0 would wait for it at the rendezvous for ever: it is stopped.
    failed = srun(
        head, job_id, "sh", "-c", "FAIL_RANK=1 FAIL_CODE=5 exec python3 /work/rendezvous.py"
    )
    assert failed.returncode == 5, failed.stderr
    assert f"srun: error: {nodes[1]}: task 1: Exited with exit code 5" in failed.stderr
    assert f"srun: Terminating StepId={job_id}.0" in failed.stderr
    wait_for(lambda: f"{job_id}.0|sh|FAILED|5:0" in sacct_lines(head, job_id), 30)
    assert head.state(job_id) == "RUNNING"
    # scancel N.M: every task of the step ends, on both hosts.
    hanging = gbatch_in_background(
        head, "srun", "--jobid", str(job_id), "-l", "sh", "-c",
        "HANG=1 exec python3 /work/rendezvous.py",
    )  # fmt: skip
    try:
        assert hanging.stdout is not None
        lines = sorted(hanging.stdout.readline() for _ in range(2))
        if lines != ["0: rank 0 of 2: sum 1\n", "1: rank 1 of 2: sum 1\n"]:
            hanging.kill()
            raise AssertionError(f"{lines}: {hanging.communicate()}")
        head.run("scancel", f"{job_id}.1", check=True)
        assert hanging.wait(60) != 0
    finally:
        hanging.kill()
    wait_for(
        lambda: any(
            line.startswith(f"{job_id}.1|sh|CANCELLED|") for line in sacct_lines(head, job_id)
        ),
        60,
        "the step cancelled",
    )
    wait_for(
        lambda: subprocess.run(["pgrep", "-f", "/work/rendezvous.py"]).returncode == 1,
        30,
        "no task left on either host",
    )
    assert head.state(job_id) == "RUNNING"
