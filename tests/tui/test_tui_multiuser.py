"""The TUI as another real Unix user: pressing cancel, hold or release on someone
else's job shows the daemon's refusal and changes nothing; under private_data the
queue lists only the user's own jobs, even with "all users" (m).

Each user's TUI runs in a forked child that became that user (asuser.as_user); the
parent first drives the same screens as root, so every module the child needs is
already imported (after the fork /root, where the interpreter lives, is unreadable).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SIMULATED_GPUS,
    drive,
    remove_tree,
    require_root,
    row_key_under_cursor,
    socket_of,
    text_of,
    tui,
    until,
)
from integration.asuser import User, as_user, preload, temp_users
from integration.conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head
from textual.pilot import Pilot

from gbatch.protocol import wire
from gbatch.protocol.client import Client
from gbatch.tui.app import GbatchApp
from gbatch.tui.dialogs import ConfirmDialog
from gbatch.tui.pager import PagedTable
from gbatch.tui.queue import QueueScreen

AUDIT = re.compile(
    r"audit: user=(\S+) uid=(\d+) pid=(\d+) op=(\S+) job=(\d+) owner=(\S+) -> (refused: .*)"
)


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    require_root()
    preload()
    with temp_users("gbta", ["alice", "bob"]) as made:
        yield made


def start_head(private_data: bool) -> Head:
    base = Path(tempfile.mkdtemp(prefix="gbatch-tuimu-", dir="/tmp"))
    base.chmod(0o755)
    config = FAST_CONFIG + f"socket_mode: '666'\nprivate_data: {str(private_data).lower()}\n"
    head = make_head(base / "home", gpus=3, config=config)
    head.home.chmod(0o711)  # others reach the socket, list nothing
    (head.home / "simulated-gpus.json").write_text(json.dumps(SIMULATED_GPUS))
    head.start()
    return head


def stop_head(head: Head) -> None:
    head.stop()
    kill_leftover_jobs(head.home)
    remove_tree(head.home.parent)


@pytest.fixture
def open_head(users: dict[str, User]) -> Iterator[Head]:
    head = start_head(private_data=False)
    yield head
    stop_head(head)


@pytest.fixture
def private_head(users: dict[str, User]) -> Iterator[Head]:
    head = start_head(private_data=True)
    yield head
    stop_head(head)


def submit_as(head: Head, user: User, name: str, command: str, held: bool = False) -> int:
    def submit() -> int:
        spec = {"name": name, "command": ["sh", "-c", command], "gpus": 0}
        with Client(socket_of(head)) as client:
            (job_id,) = client.call(wire.Submit(spec=spec, held=held))["ids"]
        return int(job_id)

    job_id: int = as_user(user, submit)
    return job_id


def everything(head: Head) -> dict[int, dict[str, Any]]:
    with Client(socket_of(head)) as client:
        return {job["id"]: job for job in client.call(wire.ListJobs(history=True))["jobs"]}


async def put_cursor_on(pilot: Pilot[None], app: GbatchApp, job_id: int) -> None:
    await pilot.press("home")
    for _ in range(10):
        if row_key_under_cursor(app, "#jobs") == str(job_id):
            return
        await pilot.press("down")
    raise AssertionError(f"job {job_id} is not in the queue")


def act_on(app: GbatchApp, targets: list[tuple[str, int]]) -> list[str]:
    """Show every user's jobs, then press each key on its job (answering yes when asked);
    the status line after each."""
    statuses: list[str] = []

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), "the queue")
        await pilot.press("m")
        await until(pilot, lambda: "all users" in text_of(app, "#counts"), "all users")
        for key, job_id in targets:
            await until(pilot, lambda: row_key_under_cursor(app, "#jobs") is not None, "rows", 15)
            await put_cursor_on(pilot, app, job_id)
            before = text_of(app, "#status")
            await pilot.press(key)
            if key == "c":
                await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
                await pilot.press("y")
            await until(
                pilot, lambda was=before: text_of(app, "#status") not in ("", was), "the outcome"
            )
            statuses.append(text_of(app, "#status"))

    drive(app, scenario)
    return statuses


def test_another_users_cancel_hold_and_release_are_refused_with_the_reason(
    open_head: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    running = submit_as(open_head, alice, "train", "sleep 300")
    held = submit_as(open_head, alice, "later", "true", held=True)
    open_head.wait_state(running, "RUNNING")
    # Root walks the same screens first (hold on a running job is refused, cancel
    # asked): every module the child will need gets imported here.
    warm = act_on(tui(open_head), [("h", running)])
    assert warm == [
        f"job {running}: hold refused: Job is no longer pending execution: job {running} is RUNNING"
    ]
    before = everything(open_head)

    targets = [("c", running), ("h", held), ("r", held), ("c", held)]

    def as_bob() -> dict[str, Any]:
        return {"pid": os.getpid(), "statuses": act_on(tui(open_head, bob.name), targets)}

    seen = as_user(bob, as_bob)
    assert seen["statuses"] == [
        f"job {job_id}: {op} refused: Access/permission denied for job {job_id}"
        for op, job_id in (("cancel", running), ("hold", held), ("release", held), ("cancel", held))
    ]
    assert everything(open_head) == before
    audit = AUDIT.findall((open_head.home / "gbatchd.log").read_text())
    assert sorted(audit) == sorted(
        (
            bob.name,
            str(bob.uid),
            str(seen["pid"]),
            op,
            str(job_id),
            alice.name,
            "refused: not the owner",
        )
        for op, job_id in (("cancel", running), ("hold", held), ("release", held), ("cancel", held))
    )


def test_private_data_lists_only_the_users_own_jobs_even_for_all_users(
    private_head: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    hers = submit_as(private_head, alice, "hers", "true", held=True)
    his = submit_as(private_head, bob, "his", "true", held=True)
    warm = act_on(tui(private_head), [("h", hers)])  # root, an admin, sees both
    assert warm == [f"job {hers}: held"]

    def as_bob() -> list[str]:
        app = tui(private_head, bob.name)
        shown: list[str] = []

        async def scenario(pilot: Pilot[None]) -> None:
            await pilot.press("m")
            await until(pilot, lambda: "all users" in text_of(app, "#counts"), "all users")
            await until(pilot, lambda: row_key_under_cursor(app, "#jobs"), "a row")
            await pilot.pause(0.5)  # a few refreshes: nothing else turns up
            table = app.screen.query_one("#jobs", PagedTable)
            shown.extend(key for key, _ in table.rows)
            assert table.row_count == len(table.rows)  # the total counts bob's alone

        drive(app, scenario)
        return shown

    assert as_user(bob, as_bob) == [str(his)]
