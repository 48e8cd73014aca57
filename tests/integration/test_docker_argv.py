"""gbatch.nodes.docker' command lines against a real docker engine and the test image.

GPUs come from the test stand-in hook (.ci/setup-docker.sh): the container sees
NVIDIA_VISIBLE_DEVICES but no device.
"""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerenv import ensure_test_image, require_docker

from gbatch.core.model import JobSpec
from gbatch.nodes.docker import (
    CONTAINER_SRUN,
    container_name,
    docker_inspect_argv,
    docker_kill_argv,
    docker_logs_argv,
    docker_rm_argv,
    docker_run_argv,
    docker_wait_argv,
    env_file_text,
    parse_inspect,
    parse_wait,
)

pytestmark = pytest.mark.docker

_TIMEOUT_S = 60


def _docker(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)


def _ok(argv: list[str]) -> str:
    done = _docker(argv)
    assert done.returncode == 0, f"{argv} failed: {done.stderr}"
    return done.stdout


@pytest.fixture
def image() -> str:
    require_docker()
    return ensure_test_image()


@pytest.fixture
def job_id() -> Iterator[int]:
    """A job id no other test run uses, so container names never collide; every
    container of that job is removed afterwards, whatever the test did."""
    job = 900_000_000 + uuid.uuid4().int % 99_000_000
    yield job
    for attempt in range(4):
        _docker(docker_rm_argv(container_name(job, attempt)))


def _run(image: str, job: int, command: tuple[str, ...], gpus: list[int], attempt: int = 1) -> str:
    spec = JobSpec(name="t", command=command, image=image)
    argv = docker_run_argv(
        job_id=job, attempt=attempt, user="alice", spec=spec, gpus=gpus, env_file=None
    )
    _ok(argv)
    return container_name(job, attempt)


def test_container_sees_exactly_its_two_gpus_through_quoted_device_list(
    image: str, job_id: int
) -> None:
    name = _run(
        image, job_id, ("sh", "-c", "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"), [1, 2]
    )
    assert parse_wait(_ok(docker_wait_argv(name))) == 0
    assert _ok(docker_logs_argv(name, follow=False)).strip() == "NVIDIA_VISIBLE_DEVICES=1,2"


def test_srun_in_a_container_runs_its_command_here_from_the_images_own_path(
    image: str, job_id: int
) -> None:
    # The test image is busybox: no bash, no python; srun is POSIX sh and the tools it has.
    script = (
        "srun echo hi; srun -l -n 2 sh -c 'echo rank $RANK'; "
        # Bound read-only: not even the image's root can change the srun other jobs run.
        "if (echo x > /usr/bin/srun) 2>/dev/null; then exit 9; fi; srun sh -c 'exit 5'"
    )
    spec = JobSpec(name="t", command=("sh", "-c", script), image=image)
    argv = docker_run_argv(
        job_id=job_id,
        attempt=1,
        user="alice",
        spec=spec,
        gpus=[],
        env_file=None,
        srun=str(CONTAINER_SRUN),
    )
    _ok(argv)
    name = container_name(job_id, 1)
    assert parse_wait(_ok(docker_wait_argv(name))) == 5
    out = _ok(docker_logs_argv(name, follow=False)).splitlines()
    assert out[0] == "hi" and sorted(out[1:]) == ["0: rank 0", "1: rank 1"]


def test_docker_wait_reports_the_command_exit_code(image: str, job_id: int) -> None:
    name = _run(image, job_id, ("sh", "-c", "exit 3"), [])
    assert parse_wait(_ok(docker_wait_argv(name))) == 3


def test_inspect_shows_labels_restart_no_and_init(image: str, job_id: int) -> None:
    name = _run(image, job_id, ("true",), [1, 2], attempt=2)
    _ok(docker_wait_argv(name))
    raw = json.loads(_ok(["docker", "inspect", "--type", "container", name]))[0]
    assert raw["Config"]["Labels"] == {
        "gbatch.job": str(job_id),
        "gbatch.attempt": "2",
        "gbatch.user": "alice",
    }
    assert raw["HostConfig"]["RestartPolicy"]["Name"] == "no"
    assert raw["HostConfig"]["Init"] is True
    assert raw["HostConfig"]["Privileged"] is False
    assert "no-new-privileges" in raw["HostConfig"]["SecurityOpt"]


def test_parse_inspect_reads_a_real_exited_container(image: str, job_id: int) -> None:
    name = _run(image, job_id, ("sh", "-c", "exit 3"), [], attempt=1)
    _ok(docker_wait_argv(name))
    (status,) = parse_inspect(_ok(docker_inspect_argv([name])))
    assert status.name == name
    assert status.state == "exited"
    assert status.exit_code == 3
    assert status.oom_killed is False
    assert status.started_at is not None and status.finished_at is not None
    assert status.labels["gbatch.job"] == str(job_id)
    assert status.labels["gbatch.attempt"] == "1"
    assert status.labels["gbatch.user"] == "alice"


def test_inspect_of_a_missing_container_still_parses_the_others(image: str, job_id: int) -> None:
    name = _run(image, job_id, ("true",), [])
    _ok(docker_wait_argv(name))
    done = _docker(docker_inspect_argv([name, container_name(job_id, 3)]))
    assert done.returncode != 0
    assert [s.name for s in parse_inspect(done.stdout)] == [name]


def test_sigterm_through_docker_kill_ends_a_sleeping_container(image: str, job_id: int) -> None:
    # As the head stops a run (scancel, time limit): SIGTERM first, SIGKILL after a grace.
    name = _run(image, job_id, ("sleep", "600"), [0])
    (before,) = parse_inspect(_ok(docker_inspect_argv([name])))
    assert before.state == "running"
    _ok(docker_kill_argv(name, signal.SIGTERM.name))
    assert parse_wait(_ok(docker_wait_argv(name))) == 143
    (after,) = parse_inspect(_ok(docker_inspect_argv([name])))
    assert after.state == "exited"
    # --init forwards SIGTERM to sleep, which dies of it: 128 + 15.
    assert after.exit_code == 143


def test_a_second_run_of_the_same_attempt_is_refused(image: str, job_id: int) -> None:
    _run(image, job_id, ("sleep", "600"), [])
    spec = JobSpec(name="t", command=("true",), image=image)
    again = _docker(
        docker_run_argv(job_id=job_id, attempt=1, user="alice", spec=spec, gpus=[], env_file=None)
    )
    assert again.returncode != 0
    assert "already in use" in again.stderr


def test_env_file_values_arrive_literally(image: str, job_id: int, tmp_path: Path) -> None:
    env = {"PLAIN": "x", "TRICKY": " 'quoted' \"double\" $HOME a=b #not-a-comment "}
    env_file = tmp_path / "env"
    env_file.write_text(env_file_text(env))
    env_file.chmod(0o600)
    spec = JobSpec(name="t", command=("printenv", "PLAIN", "TRICKY"), image=image)
    argv = docker_run_argv(
        job_id=job_id, attempt=1, user="alice", spec=spec, gpus=[], env_file=str(env_file)
    )
    _ok(argv)
    name = container_name(job_id, 1)
    assert parse_wait(_ok(docker_wait_argv(name))) == 0
    assert _ok(docker_logs_argv(name, follow=False)) == f"{env['PLAIN']}\n{env['TRICKY']}\n"
