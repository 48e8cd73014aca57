"""Audit lines where the docs say: in gbatchd.log under `daemon start` and under
`daemon run` (the systemd way, where they also go to stderr, the journal, with their
syslog priority), and a flood of refusals grows that log by a bounded amount."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from asuser import User, as_user
from conftest import GBATCH, Head, require_root, shared_home, wait_for

from gbatch.head import refusals
from gbatch.protocol import wire
from gbatch.protocol.client import Client, DaemonUnavailable, RequestFailed

_NOBODY = pwd.getpwnam("nobody")
NOBODY = User(_NOBODY.pw_name, _NOBODY.pw_uid, _NOBODY.pw_gid)
REFUSED_DRAIN = "op=node_drain target=node_local -> refused: not an admin"
SUMMARY = re.compile(r"audit: user=nobody uid=\d+ op=\S+ -> and ([\d,]+) more refusals in 10 s")


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to act as nobody")


@pytest.fixture
def open_head() -> Iterator[Head]:
    """A head other users reach (socket 666), not started yet."""
    with shared_home("gbatch-audit-") as head:
        yield head


def answers(head: Head) -> bool:
    try:
        with Client(head.home / "gbatchd.sock", timeout=5) as client:
            client.call(wire.Ping())
    except DaemonUnavailable:
        return False
    return True


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


@pytest.mark.parametrize("mode", ["daemon start", "daemon run", "daemon run under systemd"])
def test_audit_lines_reach_gbatchd_log_in_every_mode(
    open_head: Head, tmp_path: Path, mode: str
) -> None:
    stderr_file = tmp_path / "stderr"  # what the journal would get
    process = None
    if mode == "daemon start":
        open_head.start()
    else:
        with open(stderr_file, "ab") as stderr:
            env = dict(open_head.env)
            if mode.endswith("systemd"):
                st = os.fstat(stderr.fileno())
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            process = subprocess.Popen(
                [*GBATCH, "daemon", "run"],
                env=env,
                cwd=open_head.home,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
    try:
        wait_for(lambda: answers(open_head) or (process and process.poll() is not None), 30)
        assert answers(open_head), stderr_file.read_text() if process else ""
        drain_as_nobody(open_head)
    finally:
        if process is not None:
            process.terminate()  # as systemd stops it
            process.wait(30)
    log = (open_head.home / "gbatchd.log").read_text()
    who = f"audit: user=nobody uid={NOBODY.uid} pid="
    (line,) = [line for line in log.splitlines() if who in line]  # once, in every mode
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d [\d:,]+ gbatchd WARNING {who}\d+ {REFUSED_DRAIN}", line
    )
    if mode == "daemon start":
        return
    err = stderr_file.read_text().splitlines()
    if mode == "daemon run":
        assert line in err  # as in the file
        return
    # The journal: each line's priority first (warning 4, info 6), no timestamp.
    assert [e for e in err if who in e] == ["<4>" + line[line.index("gbatchd ") :]]
    assert f"<6>gbatchd INFO gbatchd {process.pid if process else 0} serving " in "\n".join(err)
    assert all(e.startswith("<") for e in err), err


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
