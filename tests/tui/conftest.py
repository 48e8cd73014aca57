"""Pilot tests of `gbatch tui` against a real daemon per test (simulated GPUs).

The daemon helpers are the integration tier's: pytest's `pythonpath` holds tests/,
and tests/integration (no __init__.py) is then the namespace package `integration`,
so its conftest imports as `integration.conftest`. Only plain helpers are imported,
never its fixtures, so nothing registers twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from integration.conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from gbatch.protocol import wire
from gbatch.protocol.client import Client
from gbatch.tui.app import GbatchApp, make_app
from gbatch.tui.pager import PagedTable
from gbatch.tui.table import cursor_key

SIZE = (80, 24)  # the "readable at 80x24": every test runs at that size
ME = pwd.getpwuid(os.getuid()).pw_name
# Three simulated GPUs; the third is busy with a process gbatch did not start.
SIMULATED_GPUS = {
    "gpus": [
        {"name": "Simulated GPU", "memory_total_mib": 81920, "memory_used_mib": 0},
        {"name": "Simulated GPU", "memory_total_mib": 81920, "memory_used_mib": 0},
        {
            "name": "Simulated GPU",
            "memory_total_mib": 81920,
            "memory_used_mib": 4000,
            "utilization_pct": 37,
            "processes": [{"pid": 999999, "used_memory_mib": 4000}],
        },
    ]
}


@pytest.fixture
def tui_head() -> Iterator[Head]:
    """A daemon others may reach (a shared lab head): 3 GPUs, one busy outside gbatch.

    Its home is under /tmp, not tmp_path: pytest's base dir is private to its user.
    """
    base = Path(tempfile.mkdtemp(prefix="gbatch-tui-", dir="/tmp"))
    base.chmod(0o755)
    head = make_head(base / "home", gpus=3, config=FAST_CONFIG + "socket_mode: '666'\n")
    head.home.chmod(0o711)  # others reach the socket, list nothing
    (head.home / "simulated-gpus.json").write_text(json.dumps(SIMULATED_GPUS))
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)
    remove_tree(base)


def remove_tree(path: Path, timeout: float = 5.0) -> None:
    """Remove `path`, again while a killed job's shim still writes its exit record."""
    deadline = time.monotonic() + timeout
    while True:
        shutil.rmtree(path, ignore_errors=True)
        time.sleep(0.3)
        if not path.exists() or time.monotonic() > deadline:
            return


def socket_of(head: Head) -> Path:
    return head.home / "gbatchd.sock"


def tui(head: Head, user: str = ME) -> GbatchApp:
    # A fast refresh keeps the tests short; the behaviour is the same at 1 s.
    return make_app(socket_of(head), user=user, refresh_seconds=0.2)


def drive(app: GbatchApp, scenario: Callable[[Pilot[None]], Awaitable[None]]) -> None:
    """Run `scenario` against `app` in a headless terminal of SIZE."""

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await scenario(pilot)

    asyncio.run(main())


async def until(
    pilot: Pilot[None], predicate: Callable[[], object], what: str, timeout: float = 15.0
) -> Any:
    """Let the app run until `predicate()` is truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def submit_as_nobody(head: Head, name: str) -> int:
    """Queue a held job owned by `nobody` (from a forked child that dropped to it)."""
    nobody = pwd.getpwnam("nobody")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            with Client(socket_of(head)) as client:
                spec = {"name": name, "command": ["true"], "gpus": 0}
                outcome: object = client.call(wire.Submit(spec=spec, held=True))["ids"]
        except BaseException as err:
            outcome = repr(err)
        os.write(write_end, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        data = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert isinstance(data, list), f"submitting as nobody failed: {data}"
    (job_id,) = data
    return int(job_id)


def require_root() -> None:
    """Acting as another user needs root: a skip on a laptop, a failure in CI."""
    if os.getuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run as root to test another user's job")
        pytest.skip("needs root to act as another user")


def seed(head: Head) -> dict[str, int]:
    """Two running jobs (both usable GPUs), one pending on resources, one held."""
    ids = {
        "train": head.sbatch("-J", "train", "--gpus", "1", "--wrap", "sleep 300"),
        "eval": head.sbatch(
            "-J",
            "eval",
            "--gpus",
            "1",
            "--wrap",
            "for i in $(seq 1 40); do echo step $i; sleep 0.05; done; sleep 300",
        ),
    }
    for job_id in ids.values():
        head.wait_state(job_id, "RUNNING")
    ids["big"] = head.sbatch("-J", "big", "--gpus", "2", "--wrap", "sleep 300")
    ids["later"] = head.sbatch("-J", "later", "-H", "--wrap", "sleep 300")
    return ids


def table_rows(app: GbatchApp, selector: str) -> list[list[str]]:
    """The rows the table `selector` on the current screen holds, as text (a paged
    table's: those of the page it holds, every row for a short listing)."""
    table = app.screen.query_one(selector)
    if isinstance(table, PagedTable):
        return [[cell.plain for cell in cells] for _, cells in table.rows]
    assert isinstance(table, DataTable)
    return [[cell.plain for cell in table.get_row(row.key)] for row in table.ordered_rows]


def text_of(app: GbatchApp, selector: str) -> str:
    """The text a Static on the current screen shows."""
    return str(app.screen.query_one(selector, Static).content)


def row_key_under_cursor(app: GbatchApp, selector: str) -> str | None:
    table = app.screen.query_one(selector)
    if isinstance(table, PagedTable):
        return table.cursor_key
    assert isinstance(table, DataTable)
    return cursor_key(table)
