"""The agent's `--docker` view against a real engine: labelled containers in, entries the
head's parser reads out."""

from __future__ import annotations

import datetime
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerenv import ensure_test_image, require_docker

from gbatch.nodes.report import ContainerReport, NodeReport, parse_report_line

pytestmark = pytest.mark.docker

AGENT = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"
LABELS = (
    "--label",
    "gbatch.job=9001",
    "--label",
    "gbatch.attempt=1",
    "--label",
    "gbatch.user=alice",
)


@pytest.fixture
def image() -> str:
    require_docker()
    return ensure_test_image()


@pytest.fixture
def started() -> Iterator[list[str]]:
    """Names of the containers a test started; all removed afterwards, whatever happened."""
    names: list[str] = []
    try:
        yield names
    finally:
        if names:
            subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=60)


def docker_run(started: list[str], image: str, *args: str) -> str:
    """`docker run -d` under a fresh gbatch-agenttest-* name; returns the full id."""
    name = f"gbatch-agenttest-{uuid.uuid4().hex}"
    started.append(name)
    done = subprocess.run(
        ["docker", "run", "-d", "--name", name, *args[:-1], image, "sh", "-c", args[-1]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def docker_times(container_id: str) -> tuple[float, float]:
    """StartedAt and FinishedAt as docker shows them, read here with datetime (microseconds)."""
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.StartedAt}} {{.State.FinishedAt}}", container_id],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    started, finished = (
        datetime.datetime.fromisoformat(text[:26].rstrip("Z") + "+00:00").timestamp()
        for text in out
    )
    return started, finished


def probe(docker: str) -> NodeReport:
    done = subprocess.run(
        [sys.executable, str(AGENT), "probe", "--docker", docker],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (line,) = done.stdout.splitlines()
    return parse_report_line(line)


def test_agent_reports_labelled_containers_with_state_and_exit_code(
    image: str, started: list[str]
) -> None:
    exited_id = docker_run(started, image, *LABELS, "exit 3")
    running_id = docker_run(started, image, *LABELS, "sleep 30")
    plain_id = docker_run(started, image, "sleep 30")
    # `docker wait` returns once the container has exited: no polling, no sleeping.
    subprocess.run(["docker", "wait", exited_id], capture_output=True, timeout=60, check=True)

    report = probe("docker")

    assert report.docker_note == ""
    listed = {c.id: c for c in report.containers}
    exited, running = listed[exited_id], listed[running_id]
    assert plain_id not in listed
    assert (exited.name, exited.job, exited.attempt, exited.user) == (
        started[0],
        9001,
        1,
        "alice",
    )
    assert (exited.state, exited.exit_code, exited.oom_killed) == ("exited", 3, False)
    # Compared with docker's own values, not with each other: for a container that exits
    # at once docker may record FinishedAt a fraction of a millisecond before StartedAt.
    started_at, finished_at = docker_times(exited_id)
    assert exited.started_at == pytest.approx(started_at, abs=1e-5)
    assert exited.finished_at == pytest.approx(finished_at, abs=1e-5)
    assert running == ContainerReport(
        id=running_id,
        name=started[1],
        job=9001,
        attempt=1,
        user="alice",
        state="running",
        exit_code=None,  # docker says 0; the agent reports no exit code before the end
        oom_killed=False,
        started_at=running.started_at,
        finished_at=None,
    )
    assert running.started_at is not None


def test_agent_with_a_missing_docker_client_notes_it_and_lists_nothing() -> None:
    report = probe("/nonexistent")

    assert report.containers == ()
    assert report.docker_note.startswith("docker ps: cannot run /nonexistent: ")
