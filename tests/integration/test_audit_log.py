"""A flood of refusals grows gbatchd.log by a bounded amount, and is counted."""

from __future__ import annotations

import pwd
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asuser import User, as_user
from conftest import (
    FAST_CONFIG,
    Head,
    kill_leftover_jobs,
    make_head,
    require_root,
    wait_for,
)

from gbatch.client import Client, RequestFailed
from gbatch.head import refusals

_NOBODY = pwd.getpwnam("nobody")
NOBODY = User(_NOBODY.pw_name, _NOBODY.pw_uid, _NOBODY.pw_gid)
SUMMARY = re.compile(r"audit: user=nobody uid=\d+ -> and ([\d,]+) more refusals in 10 s")


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to act as nobody")


@pytest.fixture
def open_head() -> Iterator[Head]:
    """A head other users reach (socket 666), not started yet."""
    base = Path(tempfile.mkdtemp(prefix="gbatch-audit-", dir="/tmp"))
    base.chmod(0o755)
    head = make_head(base / "home", config=FAST_CONFIG + "socket_mode: '666'\n")
    head.home.chmod(0o711)  # others reach the socket, list nothing
    try:
        yield head
        head.stop()
        kill_leftover_jobs(head.home)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def drain_as_nobody(head: Head, times: int = 1, name: str = "local") -> dict[str, float]:
    """`times` refused node_drain requests as nobody over one connection."""
    sock = head.home / "gbatchd.sock"

    def drain() -> dict[str, float]:
        refused, started = 0, time.monotonic()
        with Client(sock) as client:
            for _ in range(times):
                try:
                    client.send({"op": "node_drain", "name": name, "reason": "mine"})
                except RequestFailed as err:
                    refused += err.kind == "permission"
        return {"refused": refused, "seconds": time.monotonic() - started}

    done: dict[str, float] = as_user(NOBODY, drain)
    assert done["refused"] == times
    return done


def test_a_flood_of_refusals_grows_the_log_by_a_bounded_amount_and_is_counted(
    open_head: Head,
) -> None:
    open_head.start()
    log = open_head.home / "gbatchd.log"
    before = log.stat().st_size
    flood = 1000
    done = drain_as_nobody(open_head, times=flood, name="x" * 16384)
    windows = int(done["seconds"] // refusals.WINDOW_SECONDS) + 1
    lines = [line for line in log.read_text().splitlines() if "audit: user=nobody" in line]
    assert 0 < len(lines) <= windows * (refusals.LINES + 1)
    # Each line is cut to a few hundred characters: 16 MB of names added a few KB.
    assert log.stat().st_size - before < windows * (refusals.LINES + 1) * 1000

    def counted() -> int:
        text = log.read_text()
        logged = text.count(f"uid={NOBODY.uid} pid=")
        return logged + sum(int(n.replace(",", "")) for n in SUMMARY.findall(text))

    # The last window's count is written once it has ended, flood over or not.
    wait_for(lambda: counted() == flood, 3 * refusals.WINDOW_SECONDS, "the count of the rest")
    assert SUMMARY.search(log.read_text())
