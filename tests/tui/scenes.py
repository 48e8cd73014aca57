"""How to reach each view of the TUI over the fake lab, waiting until it shows its
data: the snapshot tests and the screenshot script take their pictures after these.

Each scene is `async (pilot) -> None` and starts on the first screen (my queue).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fakelab import ME, lab_finished_jobs, lab_jobs, lab_nodes
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Log, Static

from gbatch.tui.dialogs import ConfirmDialog
from gbatch.tui.help import HelpScreen
from gbatch.tui.jobview import JobScreen
from gbatch.tui.nodes import NodesScreen
from gbatch.tui.pager import PagedTable

Scene = Callable[[Pilot[None]], Awaitable[None]]

MY_JOBS = sum(1 for job in lab_jobs() if job.user == ME)
ALL_JOBS = len(lab_jobs())
MY_FINISHED = sum(1 for job in lab_finished_jobs() if job.user == ME)
ALL_FINISHED = len(lab_finished_jobs())
NODE_ROWS = sum(1 + len(node.gpus) for node in lab_nodes())  # a node's row, then its GPUs


async def until(pilot: Pilot[None], predicate: Callable[[], object], what: str) -> None:
    """Let the app run until `predicate()` holds; fail naming `what` after 30 s.

    A bound, not a wait: a loaded 2-core machine running the suite on six workers has
    taken over 10 s to page a 3,000-job queue in.
    """
    deadline = time.monotonic() + 30.0
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.02)


def columns_fit(table: DataTable[Text]) -> bool:
    """Whether the table has grown its columns to its cells (it does so when idle)."""
    return all(
        column.content_width >= max((cell.cell_len for cell in table.get_column(key)), default=0)
        for key, column in table.columns.items()
    )


async def table_settled(pilot: Pilot[None], selector: str, rows: int) -> None:
    """Wait for `rows` rows and their column widths, then redraw the table whole.

    A DataTable may keep lines it drew between taking rows and widening its columns
    at idle time (Textualize/textual#4470). Whether it drew any is a race: without
    this redraw, a picture may show cut cells on one run and not the next. Toggling
    a style twice (back to what it was) drops those lines. The race itself is for a
    test of gbatch.tui.table to pin down; a snapshot could only flicker on it.
    """
    paged = pilot.app.screen.query_one(selector)
    if isinstance(paged, PagedTable):  # its columns grow as it takes its rows
        await until(pilot, lambda: len(paged.rows) == rows, f"{rows} rows in {selector}")
        await pilot.pause()
        return
    table = pilot.app.screen.query_one(selector, DataTable)
    await until(pilot, lambda: table.row_count == rows, f"{rows} rows in {selector}")
    await until(pilot, lambda: columns_fit(table), f"the column widths of {selector}")
    table.zebra_stripes = not table.zebra_stripes
    table.zebra_stripes = not table.zebra_stripes
    await pilot.pause()


async def my_queue(pilot: Pilot[None]) -> None:
    await table_settled(pilot, "#jobs", MY_JOBS)


async def all_users_queue(pilot: Pilot[None]) -> None:
    await my_queue(pilot)
    await pilot.press("m")
    await table_settled(pilot, "#jobs", ALL_JOBS)


async def finished_jobs(pilot: Pilot[None]) -> None:
    """`f` then `m`: every user's jobs that ended."""
    await my_queue(pilot)
    await pilot.press("f")
    await table_settled(pilot, "#jobs", MY_FINISHED)
    await pilot.press("m")
    await table_settled(pilot, "#jobs", ALL_FINISHED)


async def job_view(pilot: Pilot[None]) -> None:
    """Enter on the first row: job 101, whose log is long enough to scroll."""
    await my_queue(pilot)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(pilot.app.screen, JobScreen), "the job view")
    record = pilot.app.screen.query_one("#record", Static)
    await until(pilot, lambda: "Events:" in str(record.content), "the job's record")
    log = pilot.app.screen.query_one("#log", Log)
    await until(pilot, lambda: log.line_count > 40, "the job's log")
    await until(pilot, lambda: log.scroll_y == log.max_scroll_y > 0, "the log's last lines")


async def nodes_view(pilot: Pilot[None]) -> None:
    await my_queue(pilot)
    await pilot.press("n")
    await until(pilot, lambda: isinstance(pilot.app.screen, NodesScreen), "the nodes view")
    await table_settled(pilot, "#nodes", NODE_ROWS)


async def help_over_queue(pilot: Pilot[None]) -> None:
    await my_queue(pilot)
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), "the help screen")


async def cancel_question(pilot: Pilot[None]) -> None:
    """`c` on the first row (job 101): the question, not yet answered."""
    await my_queue(pilot)
    await pilot.press("c")
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog), "the question")
