"""One user cannot take all of the daemon's connections (issue 13): past
MAX_CONNECTIONS_PER_USER open ones the next is refused in one line, kind "unavailable"
(exit status 5), while root is served; once the user closes some, the next is served."""

from __future__ import annotations

import json
import os
import pwd
import time
from pathlib import Path

import pytest
from conftest import Head, require_root

from gbatch.head.server import MAX_CONNECTIONS_PER_USER
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to act as another user")


def flood_as_nobody(socket_path: Path, report: int, go_on: int) -> None:
    """The child: as nobody, hold the most connections one user may (each answered a
    ping, so each is counted), try one more, report, then wait for the word to close
    them all and say whether a new one is served again."""
    outcome: dict[str, object] = {}
    try:
        os.setgroups([])
        os.setgid(NOBODY.pw_gid)
        os.setuid(NOBODY.pw_uid)
        held = [Client(socket_path) for _ in range(MAX_CONNECTIONS_PER_USER)]
        for client in held:
            client.call(requests.Ping())
        try:
            Client(socket_path).call(requests.Ping())
            outcome["one_more"] = "served"
        except RequestFailed as err:
            outcome["one_more"] = {"kind": err.kind, "error": err.message}
        os.write(report, (json.dumps(outcome) + "\n").encode())
        os.read(go_on, 1)
        for client in held:
            client.close()
        deadline = time.monotonic() + 30
        while True:  # the daemon counts a connection out when it sees it closed
            try:
                Client(socket_path).call(requests.Ping())
                outcome = {"after_closing": "served"}
                break
            except RequestFailed as err:
                if time.monotonic() > deadline:
                    outcome = {"after_closing": err.message}
                    break
                time.sleep(0.05)
    except BaseException as err:
        outcome = {"crash": repr(err)}
    os.write(report, (json.dumps(outcome) + "\n").encode())


def test_one_user_is_capped_and_root_is_served_meanwhile(shared_head: Head) -> None:
    socket_path = shared_head.home / "gbatchd.sock"
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(report_r)
        os.close(go_w)
        try:
            flood_as_nobody(socket_path, report_w, go_r)
        finally:
            os._exit(0)
    os.close(report_w)
    os.close(go_r)
    with os.fdopen(report_r) as reports:
        first = json.loads(reports.readline())
        assert first == {
            "one_more": {
                "kind": "unavailable",
                "error": f"nobody has {MAX_CONNECTIONS_PER_USER} connections open to gbatchd, "
                "the most one user may. Close some (each running gbatch command or TUI holds "
                "one) and try again",
            }
        }
        # While nobody holds all of theirs, root (an admin) is served.
        assert shared_head.run("squeue", check=True).returncode == 0
        # One refusal said: the one more. (Read now: after closing, the child's tries
        # before the daemon counts its closed connections out are refused too.)
        refusals = connect_lines(shared_head)
        assert len(refusals) == 1 and "user=nobody" in refusals[0], refusals
        os.write(go_w, b"x")
        second = json.loads(reports.readline())
    os.close(go_w)
    os.waitpid(pid, 0)
    assert second == {"after_closing": "served"}
    assert all("user=nobody" in line for line in connect_lines(shared_head))


def connect_lines(head: Head) -> list[str]:
    """gbatchd.log's audit lines of refused connections."""
    log = (head.home / "gbatchd.log").read_text()
    return [line for line in log.splitlines() if "op=connect" in line]
