"""A step's own share of its job: GPUs picked, held and shared; recorded and shown."""

from __future__ import annotations

from typing import Any

import pytest

from gbatch.core.model import JobSpec, JobState
from gbatch.core.steps import Step, StepAsk, pick_gpus
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import StepBusy, Store
from gbatch.nodes import docker

ALICE = Caller(uid=1000, user="alice", pid=10)
T0 = 1_800_000_000.0


def test_gpus_are_picked_from_those_no_step_holds_then_shared_only_with_overlap() -> None:
    assert pick_gpus((2, 5, 7), set(), 2, overlap=False) == (2, 5)
    assert pick_gpus((2, 5, 7), {2}, 2, overlap=False) == (5, 7)
    assert pick_gpus((2, 5, 7), {2, 5}, 2, overlap=False) is None
    assert pick_gpus((2, 5, 7), {2, 5}, 2, overlap=True) == (7, 2)
    assert pick_gpus((2, 5), set(), 0, overlap=False) == ()


def running_job(daemon: Daemon, gpus: tuple[int, ...]) -> int:
    spec: dict[str, Any] = JobSpec(name="j", command=("sleep",), gpus=len(gpus)).to_dict()
    (job_id,) = handle(daemon, ALICE, {"op": "submit", "spec": spec})["ids"]
    store = daemon.store
    store.set_state(job_id, JobState.CONFIGURING, "", T0, node="local", gpus=gpus, attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0, start_time=T0)
    return int(job_id)


def open_step(store: Store, job_id: int, ask: StepAsk, gpus: tuple[int, ...]) -> Step:
    return store.open_step(
        job_id, 1, name="x", argv=("x",), user="alice", pty=False, interactive=False,
        now=T0, max_open_per_user=64, ask=ask, job_gpus=gpus,
    )  # fmt: skip


def test_concurrent_steps_get_disjoint_gpus_recorded_in_the_store(daemon: Daemon) -> None:
    store = daemon.store
    job_id = running_job(daemon, (3, 4))
    first = open_step(store, job_id, StepAsk(gpus=1, cpus=1, mem_mb=100), (3, 4))
    second = open_step(store, job_id, StepAsk(gpus=1), (3, 4))
    assert (first.gpus, second.gpus, first.exclusive) == ((3,), (4,), True)
    with pytest.raises(StepBusy):
        open_step(store, job_id, StepAsk(gpus=1), (3, 4))
    whole = open_step(store, job_id, StepAsk(), (3, 4))  # asks none: sees all, holds none
    assert (whole.gpus, whole.exclusive) == (None, False)
    store.end_step(job_id, first.step_id, JobState.COMPLETED, T0 + 1)
    third = open_step(store, job_id, StepAsk(gpus=1), (3, 4))
    assert third.gpus == (3,)
    read = {s.step_id: s for s in store.steps_of([job_id])}
    assert (read[0].gpus, read[0].cpus, read[0].mem_mb) == ((3,), 1, 100)
    assert read[2].gpus is None and Step.from_wire(read[3].to_wire()) == read[3]


def test_a_step_in_a_container_sees_its_gpus_by_the_containers_numbering() -> None:
    argv = docker.docker_exec_argv(
        "gbatch-7-1", ["nvidia-smi"], tty=False, run_as=None, env_file="/x", visible_gpus=[1]
    )
    assert argv[-4:] == ["-e", "CUDA_VISIBLE_DEVICES=1", "gbatch-7-1", "nvidia-smi"]
