"""A step's tasks across a job's nodes (issue 32): their layout, their lines, their record."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.multinode import Layout, step_nodes
from gbatch.core.steps import Step
from gbatch.head.interactive import Starting
from gbatch.head.loop.steps import StepEnds
from gbatch.head.stepfanout import LONGEST_LINE, TaskLines, rank_label, task_failure
from gbatch.head.store import Store
from gbatch.nodes.base import StepStatus

NODES = ("gpu01", "gpu02", "gpu03")
SPEC = JobSpec(name="t", command=("true",), nodes=3)


def test_a_step_with_no_options_takes_the_jobs_own_layout() -> None:
    assert step_nodes(NODES, SPEC) == (("gpu01", 1), ("gpu02", 1), ("gpu03", 1))
    four = JobSpec(name="t", command=("true",), nodes=3, ntasks_per_node=4)
    assert step_nodes(NODES, four) == (("gpu01", 4), ("gpu02", 4), ("gpu03", 4))


def test_step_options_pick_nodes_and_spread_tasks_as_slurm_does() -> None:
    assert step_nodes(NODES, SPEC, nodes=2) == (("gpu01", 1), ("gpu02", 1))
    assert step_nodes(NODES, SPEC, ntasks=5) == (("gpu01", 2), ("gpu02", 2), ("gpu03", 1))
    assert step_nodes(NODES, SPEC, ntasks=2) == (("gpu01", 1), ("gpu02", 1))
    assert step_nodes(NODES, SPEC, nodes=1, ntasks=3) == (("gpu01", 3),)
    assert step_nodes(NODES, SPEC, nodes=2, ntasks_per_node=2) == (("gpu01", 2), ("gpu02", 2))
    assert step_nodes(NODES, SPEC, nodelist=("gpu03", "gpu02")) == (("gpu02", 1), ("gpu03", 1))
    assert step_nodes(NODES, SPEC, nodes=2, nodelist=("gpu03",)) == (("gpu01", 1), ("gpu03", 1))
    assert step_nodes(("local",), JobSpec(name="t", command=("x",)), ntasks=3) == (("local", 3),)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        (
            {"nodes": 4},
            "-N/--nodes 4: the job's allocation has 3 node(s) (gpu[01-03]). Ask for at most 3",
        ),
        ({"nodelist": ("gpu09",)}, "-w/--nodelist: gpu09 is not a node of the job's allocation"),
        ({"nodes": 1, "nodelist": ("gpu01", "gpu02")}, "-w/--nodelist names 2 nodes and -N"),
        ({"nodes": 3, "ntasks": 2}, "-n/--ntasks 2 is fewer than the 3 nodes asked"),
        ({"ntasks": 100_000}, "33334 tasks on one node, more than the 128 a step starts"),
        ({"ntasks_per_node": 129}, "129 tasks on one node, more than the 128"),
    ],
)
def test_a_step_larger_than_its_allocation_is_refused_in_one_line(
    asked: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as err:
        step_nodes(NODES, SPEC, **asked)  # type: ignore[arg-type]
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_steps_task_sees_the_steps_nodes_and_the_jobs() -> None:
    layout = Layout(("gpu02", "gpu03"), ("10.0.0.2", "10.0.0.3"), (2, 2), 29501)
    env = layout.step_task_env(1, 1, NODES)
    assert env["SLURM_JOB_NODELIST"] == "gpu[01-03]" and env["SLURM_JOB_NUM_NODES"] == "3"
    assert env["SLURM_STEP_NODELIST"] == env["SLURM_NODELIST"] == "gpu[02-03]"
    assert env["SLURM_STEP_NUM_NODES"] == "2" and env["SLURM_STEP_NUM_TASKS"] == "4"
    assert (env["SLURM_PROCID"], env["RANK"], env["SLURM_LOCALID"]) == ("3", "3", "1")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["NODE_RANK"]) == ("10.0.0.2", "29501", "1")


def test_task_lines_are_whole() -> None:
    lines = TaskLines()
    assert lines.feed(b"hal") == []
    assert lines.feed(b"f\nwhole\nnext") == [b"half\n", b"whole\n"]
    assert lines.rest() == [b"next\n"] and lines.rest() == []
    long = TaskLines().feed(b"x" * (LONGEST_LINE + 1))
    assert long == [b"x" * LONGEST_LINE + b"\n"]


def test_rank_labels_are_padded_to_the_widest_rank_as_srun_l() -> None:
    assert rank_label(0, 1) == b"0: "
    assert rank_label(3, 12) == b" 3: " and rank_label(11, 12) == b"11: "


def test_a_failed_task_is_said_in_slurms_words() -> None:
    assert task_failure("gpu02", 1, 3, 0) == "srun: error: gpu02: task 1: Exited with exit code 3"
    assert task_failure("gpu01", 0, 0, 15) == "srun: error: gpu01: task 0: Terminated"


def test_a_steps_tasks_are_ranked_node_by_node() -> None:
    step = Step(
        job_id=1,
        step_id=0,
        attempt=1,
        name="x",
        argv=("x",),
        state=JobState.RUNNING,
        start_time=0.0,
        user="u",
        nodes=(("gpu01", 2), ("gpu02", 1)),
    )
    assert step.tasks() == [(0, "gpu01", 0), (1, "gpu01", 1), (2, "gpu02", 0)]
    assert step.ntasks == 3 and step.fans_out and step.node_names == ("gpu01", "gpu02")
    assert step.task(2).task_label == "0.2" and step.task_label == "0"
    assert Step.from_wire(step.to_wire()) == step


def test_the_store_keeps_a_steps_nodes(tmp_path: Path) -> None:
    store = Store(tmp_path / "db.sqlite")
    (job_id,) = store.submit([JobSpec(name="t", command=("true",))], uid=1, user="u", now=0.0)
    store.set_state(job_id, JobState.CONFIGURING, "", 1.0, node="gpu01", gpus=(0,), attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", 2.0, start_time=2.0)
    opened = store.open_step(
        job_id, 1, name="x", argv=("x",), user="u", pty=False, interactive=False,
        now=3.0, max_open_per_user=8, nodes=(("gpu01", 2), ("gpu02", 2)),
    )  # fmt: skip
    (read,) = store.steps_of([job_id])
    assert read.nodes == opened.nodes == (("gpu01", 2), ("gpu02", 2))


class _Host:
    """A node as the loop asks it of a step's task: what it says, and what it was told."""

    def __init__(self, status: StepStatus) -> None:
        self.status = status
        self.hung_up: list[int | None] = []

    def step_status(self, job: Job, step: Step) -> StepStatus:
        return self.status

    def hang_up_step(self, job: Job, step: Step) -> None:
        self.hung_up.append(step.rank)


def _ends(nodes: dict[str, _Host], starting: Starting) -> StepEnds:
    fleet: Any = SimpleNamespace(nodes=nodes)
    return StepEnds(cast(Any, None), fleet, cast(Any, None), starting, threading.Event())


def _across(job_id: int = 7) -> tuple[Job, Step]:
    spec = JobSpec(name="t", command=("x",), nodes=2)
    job = Job(id=job_id, spec=spec, user="u", uid=1, state=JobState.RUNNING, submit_time=0.0,
              node="gpu01", gpus=(0,), peers=(("gpu02", (0,)),), attempt=1)  # fmt: skip
    step = Step(job_id=job_id, step_id=0, attempt=1, name="x", argv=("x",),
                state=JobState.RUNNING, start_time=0.0, user="u",
                nodes=(("gpu01", 1), ("gpu02", 1)))  # fmt: skip
    return job, step


def test_a_task_whose_relay_is_still_being_attached_is_not_hung_up() -> None:
    # A host says "vanished, hang it up" of a task it has no relay for yet: while its
    # step is being started that is every task whose channel is not open yet.
    job, step = _across()
    gone = StepStatus("vanished", hangup=True, error="no relay")
    first, second = _Host(StepStatus("running")), _Host(gone)
    starting = Starting()
    starting.begin(job.id)
    ends = _ends({"gpu01": first, "gpu02": second}, starting)
    assert ends._tasks_status(job, step, 10.0).state == "vanished"
    assert second.hung_up == []
    starting.end(job.id)
    assert ends._tasks_status(job, step, 10.0).state == "running"  # task 0 still runs
    assert second.hung_up == [1]


def test_a_steps_end_is_its_first_failing_tasks() -> None:
    job, step = _across()
    first = _Host(StepStatus("exited", 0, 15, end_time=5.0))  # stopped after the failure
    second = _Host(StepStatus("exited", 3, 0, end_time=4.0))
    ends = _ends({"gpu01": first, "gpu02": second}, Starting())
    status = ends._tasks_status(job, step, 10.0)
    assert (status.state, status.exit_code, status.signal, status.end_time) == ("exited", 3, 0, 5.0)
    # Read once from the host (which forgets it), kept until the step's end is recorded.
    second.status = StepStatus("vanished", hangup=True)
    assert ends._tasks_status(job, step, 10.0).exit_code == 3
