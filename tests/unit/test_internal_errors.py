"""A bug hit again and again writes its traceback once per kind per window, then a count.

Issue 29: a loop of requests that each hit a bug (an OverflowError in the store) wrote
69 MB of tracebacks into gbatchd.log in 20 s. The daemon's requests and loop steps, and
the HTTP API's routes, report their bugs through core/loglines.InternalErrors, built on
the one budget of like lines the audit log's refusals use (LineBudget).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gbatch.core import crashpoints, loglines
from gbatch.core.loglines import InternalErrors, LikeLines, LineBudget
from gbatch.head import handlers, server
from gbatch.head.daemon import Daemon
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

log = logging.getLogger("gbatch.test")
STUDENT = handlers.Caller(uid=5002, user="bob", pid=22)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fail(place: str, text: str = "boom") -> BaseException:
    """An exception raised at `place` (one line of this file per place), caught."""
    try:
        if place == "a":
            raise OverflowError(text)
        raise KeyError(text)
    except Exception as err:
        return err


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "gbatch.test"]


def test_a_bug_hit_5000_times_is_one_traceback_then_one_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    bugs = InternalErrors(log, clock)
    for _ in range(5000):
        bugs.report(fail("a"), "request 'cancel'")
    (first,) = messages(caplog)
    head, _, trace = first.partition("\n")
    assert head.startswith("internal error: request 'cancel' failed: OverflowError at ")
    assert re.search(r" at tests/unit/test_internal_errors.py:\d+: boom$", head)
    assert trace.startswith("Traceback (most recent call last):")
    assert trace.endswith("OverflowError: boom")
    bugs.close_ended()  # the window is still open: nothing more yet
    assert len(messages(caplog)) == 1
    clock.now += loglines.WINDOW_SECONDS
    bugs.close_ended()  # the loop's tick
    assert messages(caplog)[1].startswith("internal error: OverflowError at ")
    assert re.search(
        r"test_internal_errors.py:\d+ -> and 4,999 more in 10 s, not logged one by one \(at "
        r"most one line per kind of error per 10 s\)$",
        messages(caplog)[1],
    )
    bugs.close_ended()
    assert len(messages(caplog)) == 2  # said once
    assert all(r.levelno == logging.ERROR for r in caplog.records)


def test_each_kind_of_bug_gets_its_line_and_a_later_window_no_second_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    bugs = InternalErrors(log, clock)
    for _ in range(100):
        bugs.report(fail("a"), "request 'cancel'")
        bugs.report(fail("b"), "request 'hold'")
    assert [m.split(" at ")[0] for m in messages(caplog)] == [
        "internal error: request 'cancel' failed: OverflowError",
        "internal error: request 'hold' failed: KeyError",
    ]
    clock.now += loglines.WINDOW_SECONDS
    bugs.report(fail("a"), "request 'cancel'")
    # The last window's count first, then this window's line, without the traceback.
    assert "-> and 99 more in 10 s" in messages(caplog)[2]
    assert "\n" not in messages(caplog)[3]
    assert messages(caplog)[3].endswith("boom (traceback logged 10 s ago)")
    clock.now += loglines.TRACEBACK_SECONDS
    bugs.report(fail("a"), "request 'cancel'")
    assert "Traceback (most recent call last):" in messages(caplog)[-1]  # an hour on: again


def test_a_users_text_in_a_bug_is_escaped_and_cut(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    bugs = InternalErrors(log, Clock())
    bugs.report(fail("b", "x" * 4_000_000 + "\naudit: forged"), "request 'jobs'")
    (line,) = messages(caplog)
    assert len(line) < 5000
    assert "\naudit: forged" not in line


def test_a_deep_or_chained_traceback_stays_short(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    def deep(n: int) -> None:
        if n == 0:
            raise RecursionError("deep")
        deep(n - 1)

    try:
        try:
            deep(500)
        except RecursionError as err:
            raise ValueError("while handling") from err
    except ValueError as err:
        InternalErrors(log, Clock()).report(err, "request 'x'")
    (line,) = messages(caplog)
    assert line.count("\n") < 3 * loglines.MAX_FRAMES + 20
    assert "frames not shown" in line and "direct cause" in line


def test_made_up_keys_open_at_most_max_keys_windows() -> None:
    counted: list[tuple[str, int]] = []
    clock = Clock()
    budget: LineBudget[str] = LineBudget(
        clock,
        lambda key, n: counted.append((key, n)),
        lines=1,
        max_keys=3,
        overflow=lambda key: "others",
    )
    admitted = [budget.admit(f"client={n}") for n in range(1000)]
    assert sum(admitted) == 4  # three clients and the shared window
    clock.now += loglines.WINDOW_SECONDS
    budget.close_ended()
    assert counted == [("others", 996)]


def test_like_lines_of_a_library_are_bounded_and_counted_on_a_timer() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("gbatch.test.library")
    logger.propagate = False
    handler = Keep()
    logger.addHandler(handler)
    like = LikeLines(lines=2, window=0.2)
    logger.addFilter(like)
    try:
        for _ in range(1000):
            logger.warning("Invalid HTTP request received.")
        logger.warning("Unsupported upgrade request.")
        deadline = time.monotonic() + 10
        while len(records) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # the budget's own timer writes the count
    finally:
        logger.removeFilter(like)
        logger.removeHandler(handler)
    assert [r.getMessage() for r in records] == [
        "Invalid HTTP request received.",
        "Invalid HTTP request received.",
        "Unsupported upgrade request.",
        "Invalid HTTP request received. -> and 998 more like it in 0.2 s, not logged one by "
        "one (at most 2 per 0.2 s)",
    ]


# -- the daemon: a request that hits a bug, again and again ------------------------------


@contextlib.contextmanager
def serving(daemon: Daemon) -> Iterator[Path]:
    """The daemon's socket server in a thread; the socket's path."""
    base = Path(tempfile.mkdtemp(prefix="gbbug-", dir="/tmp"))
    made = server._Server(str(base / "s.sock"))
    made.daemon = daemon
    thread = threading.Thread(target=made.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield base / "s.sock"
    finally:
        made.shutdown()
        made.server_close()
        shutil.rmtree(base, ignore_errors=True)


def test_a_request_that_hits_a_bug_500_times_logs_one_traceback_and_a_count(
    daemon: Daemon, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    monkeypatch.setattr(crashpoints, "_FAULT_OP", "shares")  # GBATCH_FAULT_AT=request.shares
    clock = Clock()
    daemon.internal_errors = InternalErrors(logging.getLogger("gbatchd"), clock)
    kinds = []
    with serving(daemon) as path, Client(path, timeout=30) as client:
        for _ in range(500):
            with pytest.raises(RequestFailed) as refused:
                client.call(requests.ShowShares())
            kinds.append(refused.value.kind)
        assert client.call(requests.Ping())["pid"]  # other requests go on
    assert set(kinds) == {"internal"}
    assert "injected at request.shares" in refused.value.message
    lines = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    (first,) = lines
    assert first.startswith("internal error: request 'shares' failed: InjectedFault at ")
    assert "gbatch/core/crashpoints.py:" in first and "Traceback" in first
    clock.now += loglines.WINDOW_SECONDS
    daemon.internal_errors.close_ended()
    count = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()][1:]
    assert len(count) == 1 and "-> and 499 more in 10 s" in count[0]


def test_a_failing_loop_step_writes_its_traceback_once_then_counts(
    daemon: Daemon, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    steps = 0

    def failing_step() -> None:
        nonlocal steps
        steps += 1
        if steps >= 50:
            daemon.stop()
        raise OverflowError("every tick")

    monkeypatch.setattr(daemon, "step", failing_step)
    monkeypatch.setattr(daemon.collector, "start", lambda: None)
    monkeypatch.setattr(daemon.collector, "full_when_due", lambda idle: None)
    monkeypatch.setattr(daemon, "config", dataclasses.replace(daemon.config, tick_seconds=0.001))
    daemon.wake.set()
    daemon.run_loop()
    lines = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("internal error: loop step failed: ")


def test_a_bug_every_delivery_hits_is_one_traceback_in_the_daemons_budget(
    daemon: Daemon, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's own webhook is its submitter's text: a bug its delivery hits, row after
    row, is logged once with its traceback and counted, like a request's (issue 29)."""
    from gbatch.head import notify

    caplog.set_level(logging.INFO, logger="gbatchd")
    outbox = daemon.outbox

    def buggy(note: notify.Notification) -> bool:
        raise KeyError("a bug in delivery")

    monkeypatch.setattr(outbox, "deliver_one", buggy)
    for n in range(50):
        payload = {"job": {"user": f"u{n}"}}
        note = notify.Notification(n, f"e{n}", "END", "webhook", f"h{n}", payload, 0)
        assert outbox.slots.take(note)
        outbox._work.put(note)
        if n % 8 == 7:  # the slots: at most WORKERS in flight
            outbox._work.put(None)
            outbox._worker()
    outbox._work.put(None)
    outbox._worker()
    assert outbox.bugs is daemon.internal_errors
    lines = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("internal error: outbox: delivering END failed: KeyError at ")
    assert "Traceback" in lines[0]
