"""The event log of a real gbatchd: a job run to its end and one cancelled while pending
leave one JSON line per event, in order, in the file config.yaml names; a small
event_log_max_bytes rotates it."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for

KEYS = ["ts", "event", "job", "user", "state", "reason", "node", "gpus", "exit_code", "name"]


@pytest.fixture
def logged_head(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Head]:
    extra = getattr(request, "param", "")
    head = make_head(tmp_path / "home", config=FAST_CONFIG + "event_log: events.jsonl\n" + extra)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


def read_lines(*paths: Path) -> list[dict[str, object]]:
    lines = []
    for path in paths:
        for text in path.read_text().splitlines():
            lines.append(json.loads(text))
    return lines


def states_of(lines: list[dict[str, object]], job_id: int) -> list[object]:
    return [line["state"] for line in lines if line["job"] == job_id]


def test_a_completed_and_a_cancelled_job_leave_their_lines_in_order(logged_head: Head) -> None:
    head = logged_head
    done = head.sbatch("-J", "train.v1", "--gpus=1", "--wrap", "true")
    held = head.sbatch("-J", "waits", "--hold", "--wrap", "true")
    head.wait_state(done, "COMPLETED")
    assert head.run("scancel", str(held)).returncode == 0
    head.wait_state(held, "CANCELLED")
    path = head.home / "events.jsonl"
    wait_for(lambda: states_of(read_lines(path), held)[-1:] == ["CANCELLED"], what="lines")

    lines = read_lines(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for line in lines:
        assert list(line) == KEYS
        assert line["event"] == "JOB_STATE"
        assert str(line["ts"]).endswith("Z")
    # A job's own lines rise in time. Across jobs the file is in commit order, and a
    # line's ts is when its change happened: a job's end (its process's) can be read
    # after the other job's submit committed, so the whole file need not be sorted.
    for job in (done, held):
        stamps = [str(line["ts"]) for line in lines if line["job"] == job]
        assert stamps == sorted(stamps), job
    assert states_of(lines, done) == ["PENDING", "CONFIGURING", "RUNNING", "COMPLETED"]
    assert states_of(lines, held) == ["PENDING", "CANCELLED"]
    end = [line for line in lines if line["job"] == done][-1]
    assert end["name"] == "train.v1"
    assert end["exit_code"] == 0
    assert end["node"] is not None and len(end["gpus"]) == 1  # type: ignore[arg-type]
    assert [line for line in lines if line["job"] == held][-1]["exit_code"] is None


@pytest.mark.parametrize(
    "logged_head", ["event_log_max_bytes: 1K\nevent_log_backups: 1\n"], indirect=True
)
def test_a_small_max_bytes_rotates_the_file(logged_head: Head) -> None:
    head = logged_head
    first = head.sbatch("--hold", "--array=0-9", "--wrap", "true")
    assert head.run("scancel", str(first)).returncode == 0
    path, old = head.home / "events.jsonl", head.home / "events.jsonl.1"
    wait_for(old.exists, what="a rotated file")
    wait_for(lambda: "CANCELLED" in path.read_text(), what="the cancels' lines")
    assert not (head.home / "events.jsonl.2").exists()
    for each in (path, old):
        assert each.stat().st_size <= 1024
    lines = read_lines(old, path)
    assert all(list(line)[: len(KEYS)] == KEYS for line in lines)
    assert all(line["array_job_id"] == first for line in lines)
