"""A cluster partition's jobs as their options say: -o/-e there, scontrol update
TimeLimit forwarded, container jobs through pyxis (issue 34, phase B "s-route")."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from test_cluster import CLUSTER, T0, FakeCluster, _job, _step, _submit

from gbatch.core.model import JobState
from gbatch.head.store import Store
from gbatch.nodes.cluster import (
    batch_script,
    enroot_image,
    output_file,
    parse_refusals,
    parse_time_limit,
    refusal,
    sbatch_options,
    time_limit_argv,
)

PYXIS = replace(CLUSTER, containers=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db")
    yield opened
    opened.close()


# -- -o/-e ----------------------------------------------------------------------------------


def test_output_and_error_patterns_are_expanded_as_gbatch_does_and_sent() -> None:
    job = _job(41, output="logs/%x-%j.out", error="/scratch/alice/%u.%4j.err")
    options = sbatch_options(job, CLUSTER, "gbatch:h:41.1")
    assert "--output=logs/train-41.out" in options
    assert "--error=/scratch/alice/alice.0041.err" in options
    assert output_file(job) == "logs/train-41.out"
    # Without -o: gbatch-<id>.out in the workdir, stderr with it.
    plain = sbatch_options(_job(41), CLUSTER, "gbatch:h:41.1")
    assert "--output=gbatch-41.out" in plain and not any(o.startswith("--error") for o in plain)


def test_a_percent_left_after_expansion_is_sent_literally() -> None:
    job = _job(5, output="100%%-%j.out")
    assert output_file(job) == "\\100%-5.out"  # sbatch expands nothing after a backslash


def test_an_output_naming_the_node_is_refused_for_a_cluster() -> None:
    why = refusal(_job(output="out-%N.txt").spec, CLUSTER) or ""
    assert "%N" in why and "-o/--output" in why
    assert refusal(_job(error="e-%5N").spec, CLUSTER) is not None
    assert refusal(_job(output="literal-%%N").spec, CLUSTER) is None


# -- scontrol update TimeLimit ------------------------------------------------------------------


def test_squeue_time_limits_are_read_in_seconds() -> None:
    assert parse_time_limit("5:00") == 300
    assert parse_time_limit("1:02:03") == 3723
    assert parse_time_limit("2-00:00:00") == 172800
    assert parse_time_limit("UNLIMITED") is None and parse_time_limit("x:1") is None


def test_time_limits_go_in_one_call_that_reports_each_refusal() -> None:
    argv = time_limit_argv([("101", 10), ("102", 3)])
    assert argv[:2] == ["sh", "-c"] and argv[-4:] == ["101", "10", "102", "3"]
    assert shlex.split(shlex.join(argv)) == argv
    said = parse_refusals(b"102|slurm_update error: Access/permission denied \n")
    assert said == {"102": "slurm_update error: Access/permission denied"}


class LimitedCluster(FakeCluster):
    """A fake cluster that keeps time limits and refuses raising them."""

    def __init__(self) -> None:
        super().__init__()
        self.limit_calls: list[list[tuple[str, int]]] = []

    def submit(self, job, marker):  # type: ignore[no-untyped-def]
        backend_id = super().submit(job, marker)
        minutes = -(-(job.spec.time_limit or 0) // 60)
        self.jobs[backend_id] = replace(self.jobs[backend_id], time_limit=minutes * 60)
        return backend_id

    def set(self, backend_id: str, state: str, **fields: object) -> None:
        limit = self.jobs[backend_id].time_limit
        super().set(backend_id, state, **fields)
        self.jobs[backend_id] = replace(self.jobs[backend_id], time_limit=limit)

    def set_time_limits(self, changes: Sequence[tuple[str, int]]) -> Mapping[str, str]:
        self.limit_calls.append(list(changes))
        refused = {}
        for backend_id, minutes in changes:
            old = self.jobs[backend_id]
            if old.time_limit is not None and minutes * 60 > old.time_limit:
                refused[backend_id] = "Access/permission denied"
            else:
                self.jobs[backend_id] = replace(old, time_limit=minutes * 60)
        return refused


def _set_time_limit(store: Store, job_id: int, seconds: int) -> None:
    old = store.require(job_id)
    new = replace(old.spec, time_limit=seconds)
    store.update_spec(job_id, old.spec, new, {old.state}, "TimeLimit", T0 + 3)


def test_an_updated_time_limit_reaches_the_cluster_once_in_one_call(store: Store) -> None:
    cluster = LimitedCluster()
    step = _step(store, cluster)
    jobs = _submit(store, 2, time_limit=600)
    step.mirror(T0 + 1)
    step.mirror(T0 + 2)
    assert cluster.limit_calls == []  # as sent
    for job_id in jobs:
        _set_time_limit(store, job_id, 170)
    step.mirror(T0 + 4)
    step.mirror(T0 + 5)
    assert cluster.limit_calls == [[("100", 3), ("101", 3)]]
    assert {o.time_limit for o in cluster.jobs.values()} == {180}


def test_a_time_limit_the_cluster_refuses_is_told_once_and_not_asked_again(
    store: Store,
) -> None:
    cluster = LimitedCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store, time_limit=600)
    step.mirror(T0 + 1)
    cluster.set("100", "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    _set_time_limit(store, job_id, 7200)
    for tick in range(4, 8):
        step.mirror(T0 + tick)
    assert cluster.limit_calls == [[("100", 120)]]
    said = [e.reason for e in store.events(job_id)]
    assert any("cluster uni refused TimeLimit=120: Access/permission denied" in r for r in said)
    assert store.require(job_id).state is JobState.RUNNING


# -- containers through pyxis ----------------------------------------------------------------


def test_a_container_job_runs_its_command_through_pyxis() -> None:
    job = _job(image="nvcr.io/nvidia/pytorch:24.01-py3", workdir="/workspace")
    assert refusal(job.spec, PYXIS) is None
    script = batch_script(job).decode()
    assert script.endswith(
        "exec srun --ntasks=1 '--container-image=nvcr.io#nvidia/pytorch:24.01-py3'"
        " --container-workdir=/workspace /bin/sh -c 'echo hi; exit 3' job.sh\n"
    )


def test_docker_references_become_enroot_ones() -> None:
    assert enroot_image("ubuntu:22.04") == "ubuntu:22.04"
    assert enroot_image("library/ubuntu") == "library/ubuntu"
    assert enroot_image("localhost:5000/me/img:1") == "localhost:5000#me/img:1"
    assert enroot_image("ghcr.io/o/i@sha256:ab") == "ghcr.io#o/i@sha256:ab"


def test_what_pyxis_cannot_take_is_refused_in_one_line() -> None:
    assert "pyxis" in (refusal(_job(image="busybox").spec, CLUSTER) or "")
    assert "mounts" in (refusal(_job(image="busybox", mounts=("/data:/data",)).spec, PYXIS) or "")
    assert "command" in (refusal(_job(image="busybox", command=()).spec, PYXIS) or "")
