"""The event log's lines (gbatch/head/eventlog.py), what the store feeds it, rotation,
and a write that fails."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head.eventlog import EventLog, job_line, node_line, open_event_log, rfc3339
from gbatch.head.store import StateChange, Store

T0 = 1_700_000_000.0
KEYS = ["ts", "event", "job", "user", "state", "reason", "node", "gpus", "exit_code", "name"]


def spec(name: str = "train") -> JobSpec:
    return JobSpec(name=name, command=("python", "train.py"), image="pytorch:24.01", gpus=1)


def job(**fields: object) -> Job:
    base = Job(id=7, uid=1000, user="ana", spec=spec(), state=JobState.PENDING, submit_time=T0)
    return replace(base, **fields)  # type: ignore[arg-type]


def test_ts_is_rfc3339_utc_to_the_millisecond() -> None:
    assert rfc3339(T0 + 0.1234) == "2023-11-14T22:13:20.123Z"
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"


def test_job_line_has_every_field_in_order() -> None:
    ended = job(state=JobState.COMPLETED, node="gpu1", gpus=(0, 3), exit_code=0)
    line = job_line(ended, T0, "COMPLETED", "exit code 0")
    fields = json.loads(line)
    assert list(fields) == KEYS
    assert fields == {
        "ts": "2023-11-14T22:13:20.000Z",
        "event": "JOB_STATE",
        "job": 7,
        "user": "ana",
        "state": "COMPLETED",
        "reason": "exit code 0",
        "node": "gpu1",
        "gpus": [0, 3],
        "exit_code": 0,
        "name": "train",
    }


def test_pending_job_line_has_nulls_where_nothing_applies() -> None:
    fields = json.loads(job_line(job(exit_code=1), T0, "PENDING", "submitted"))
    # The exit code of an earlier run is not this event's.
    assert (fields["node"], fields["gpus"], fields["exit_code"]) == (None, None, None)
    assert "array_job_id" not in fields


def test_array_task_line_names_its_array_and_task() -> None:
    task = job(id=105, spec=replace(spec(), array_task=12, array_pos=5))
    fields = json.loads(job_line(task, T0, "PENDING", "submitted"))
    assert list(fields) == [*KEYS, "array_job_id", "array_task_id"]
    assert (fields["array_job_id"], fields["array_task_id"]) == (100, 12)


@pytest.mark.parametrize(
    "text",
    [
        'say "hi"',
        "two\nlines\r\n",
        "tab\tnul\x00bell\x07esc\x1b[31m",
        "line sep\u2028para sep\u2029nel\x85",
        "lone \ud800 surrogate",
        "back\\slash é 数据",
    ],
)
def test_any_name_or_reason_stays_one_ascii_line(text: str) -> None:
    line = job_line(job(spec=spec(text)), T0, "FAILED", text)
    assert line.isascii()
    assert len(line.splitlines()) == 1
    fields = json.loads(line)
    assert (fields["name"], fields["reason"]) == (text, text)


def test_node_line() -> None:
    fields = json.loads(node_line("gpu2", "NODE_DOWN", 'silent "300s"\n', T0))
    assert list(fields) == KEYS[:-1]
    assert fields["event"] == "NODE_DOWN"
    assert (fields["node"], fields["reason"]) == ("gpu2", 'silent "300s"\n')
    assert (fields["job"], fields["user"], fields["state"]) == (None, None, None)


class Feed:
    def __init__(self) -> None:
        self.batches: list[list[dict[str, object]]] = []

    def __call__(self, lines: Sequence[str]) -> None:
        self.batches.append([json.loads(line) for line in lines])

    @property
    def lines(self) -> list[dict[str, object]]:
        return [line for batch in self.batches for line in batch]


@pytest.fixture
def feed() -> Feed:
    return Feed()


@pytest.fixture
def store(tmp_path: Path, feed: Feed) -> Store:
    return Store(tmp_path / "jobs.db", feed=feed)


def test_store_feeds_each_committed_state_change(store: Store, feed: Feed) -> None:
    (job_id,) = store.submit([spec()], uid=1000, user="ana", now=T0)
    store.set_state(job_id, JobState.CONFIGURING, "", T0 + 1, node="gpu1", gpus=(1,))
    store.set_state(job_id, JobState.RUNNING, "", T0 + 2)
    store.set_state(job_id, JobState.COMPLETED, "exit code 0", T0 + 3, exit_code=0, end_time=T0)
    assert [(e["job"], e["state"], e["reason"]) for e in feed.lines] == [
        (job_id, "PENDING", "submitted"),
        (job_id, "CONFIGURING", ""),
        (job_id, "RUNNING", ""),
        (job_id, "COMPLETED", "exit code 0"),
    ]
    assert feed.lines[-1]["exit_code"] == 0
    assert (feed.lines[-1]["node"], feed.lines[-1]["gpus"]) == ("gpu1", [1])
    assert feed.lines[0]["ts"] == rfc3339(T0)


def test_store_feeds_nothing_of_a_change_that_rolled_back(store: Store, feed: Feed) -> None:
    (job_id,) = store.submit([spec()], uid=1000, user="ana", now=T0)
    outcomes = store.set_states(
        [
            StateChange(job_id, JobState.CANCELLED, "cancelled"),
            StateChange(job_id, JobState.RUNNING, "refused: ended"),
        ],
        T0 + 1,
    )
    assert outcomes[0] is None and outcomes[1] is not None
    assert [e["state"] for e in feed.lines] == ["PENDING", "CANCELLED"]
    with pytest.raises(ValueError):
        store.set_state(job_id, JobState.CANCELLED, "", T0 + 2, bogus=1)
    assert len(feed.lines) == 2


def test_store_feeds_a_bulk_cancel_one_line_per_job(store: Store, feed: Feed) -> None:
    ids = store.submit([spec(), spec(), spec()], uid=1000, user="ana", now=T0)
    assert store.cancel_pending(ids, "cancelled by ana", T0 + 1) == ids
    cancelled = [e for e in feed.lines if e["state"] == "CANCELLED"]
    assert [e["job"] for e in cancelled] == ids
    assert {e["user"] for e in cancelled} == {"ana"}


def test_store_feeds_node_events_without_any_webhook(store: Store, feed: Feed) -> None:
    assert store.queue_node_event("gpu2", "GPU_FOREIGN", "GPU 1: 1 process", T0) == 0
    assert feed.lines == [json.loads(node_line("gpu2", "GPU_FOREIGN", "GPU 1: 1 process", T0))]


def test_file_log_rotates_at_max_bytes_and_keeps_backups(tmp_path: Path) -> None:
    event_log = open_event_log("events.jsonl", tmp_path, max_bytes=1024, backups=2)
    assert event_log is not None
    lines = [node_line(f"gpu{i}", "NODE_DOWN", "x" * 100, T0 + i) for i in range(60)]
    event_log.write(lines)
    event_log.close()
    files = sorted(tmp_path.glob("events.jsonl*"))
    assert [f.name for f in files] == ["events.jsonl", "events.jsonl.1", "events.jsonl.2"]
    for path in files:
        assert path.stat().st_size <= 1024
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        for text in path.read_text().splitlines():
            json.loads(text)
    # The newest lines are in events.jsonl, whole, in order; the oldest were let go.
    kept = [json.loads(t) for f in reversed(files) for t in f.read_text().splitlines()]
    assert [k["node"] for k in kept] == [f"gpu{i}" for i in range(60 - len(kept), 60)]


def test_relative_path_is_in_home_and_off_is_none(tmp_path: Path) -> None:
    assert open_event_log(None, tmp_path, 1024, 1) is None
    event_log = open_event_log("events.jsonl", tmp_path, 1024, 1)
    assert event_log is not None
    event_log.write(["{}"])
    event_log.close()
    assert (tmp_path / "events.jsonl").read_text() == "{}\n"


class Broken(logging.Handler):
    """A handler whose writes fail while `broken`, as a full disk's would."""

    def __init__(self, failed: object) -> None:
        super().__init__()
        self.failed = failed
        self.broken = True
        self.written: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.broken:
                raise OSError(28, "No space left on device")
            self.written.append(self.format(record))
        except OSError:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        import sys

        self.failed(sys.exc_info()[1])  # type: ignore[operator]


def test_failed_writes_are_counted_and_said_once(caplog: pytest.LogCaptureFixture) -> None:
    handlers: list[Broken] = []
    event_log = EventLog(lambda failed: handlers.append(Broken(failed)) or handlers[-1])
    with caplog.at_level(logging.INFO, logger="gbatchd"):
        event_log.write(["a", "b"])
        event_log.write(["c"])
        handlers[0].broken = False
        event_log.write(["d", "e"])
    assert event_log.lost == 3
    assert handlers[0].written == ["d", "e"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert "cannot write" in said[0] and "No space left" in said[0]
    assert "3 lines lost" in said[1]


def test_a_file_that_cannot_be_reopened_loses_lines_without_raising(tmp_path: Path) -> None:
    event_log = open_event_log("events.jsonl", tmp_path, 1 << 20, 1)
    assert event_log is not None
    event_log.write(["a"])
    event_log._handler.close()  # the next write reopens the file...
    (tmp_path / "events.jsonl").unlink()
    (tmp_path / "events.jsonl").mkdir()  # ...and cannot, even as root
    event_log.write(["b", "c"])
    assert event_log.lost == 2
    (tmp_path / "events.jsonl").rmdir()
    event_log.write(["d"])
    event_log.close()
    assert (tmp_path / "events.jsonl").read_text() == "d\n"
