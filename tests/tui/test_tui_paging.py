"""The queue of a long listing: the view holds one page, reads the page the view
moves to, and keeps counting every job."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from conftest import row_key_under_cursor, table_rows, text_of
from fakelab import ME, FakeLink, lab_app, page_of
from scenes import until
from textual.pilot import Pilot

from gbatch.core.model import Job
from gbatch.tui.data import QueuePage, QueueView
from gbatch.tui.pager import MARGIN_ROWS, PagedTable

JOBS = 3000


class LongQueueLink(FakeLink):
    """The fake lab with JOBS of alice's held jobs after its own, every page read
    noted as (offset, limit)."""

    def __init__(self) -> None:
        super().__init__()
        held = next(job for job in self.jobs if job.held)
        self.jobs = (*self.jobs, *(replace(held, id=1000 + i) for i in range(JOBS)))
        self.reads: list[tuple[int, int]] = []

    def _read_page(
        self, view: QueueView, offset: int, limit: int, now: float | None = None
    ) -> QueuePage:
        self.reads.append((offset, limit))
        return page_of(self.jobs, view, offset, limit)


def mine(link: LongQueueLink) -> list[Job]:
    return [job for job in link.jobs if job.user == ME]


def run(scenario: Callable[[Pilot[None]], Awaitable[None]], link: LongQueueLink) -> None:
    async def main() -> None:
        async with lab_app(link).run_test(size=(80, 24)) as pilot:
            await scenario(pilot)

    asyncio.run(main())


def test_a_long_queue_holds_a_page_counts_every_job_and_reads_where_the_view_goes() -> None:
    link = LongQueueLink()
    everyone = len(mine(link))

    async def scenario(pilot: Pilot[None]) -> None:
        table = pilot.app.screen.query_one("#jobs", PagedTable)
        await until(pilot, lambda: table.rows, "the first page")
        assert table.row_count == everyone
        assert f"| {everyone} shown" in text_of(pilot.app, "#counts")
        assert f"PD {everyone - 2}" in text_of(pilot.app, "#counts")  # alice: 2 R/CG
        assert len(table.rows) < everyone  # a page, not the listing
        assert table.virtual_size.height == everyone + 1  # the scroll bar spans it all

        # The key goes to the focused widget: under load the table may not have it yet.
        table.focus()
        await until(pilot, lambda: table.has_focus, "the table's focus")
        last = str(mine(link)[-1].id)
        # The last job: its page is read, the cursor on it. Pressed again every 5 s while
        # not there: a loaded CI run's one press went nowhere for 30 s (the bound below).
        pressed = 0.0
        deadline = time.monotonic() + 30.0
        while row_key_under_cursor(pilot.app, "#jobs") != last:
            assert time.monotonic() < deadline, "timed out waiting for last"
            if time.monotonic() - pressed > 5.0:
                table.focus()
                await pilot.press("end")
                pressed = time.monotonic()
            await pilot.pause(0.02)
        assert table.scroll_y == table.max_scroll_y > 0
        assert link.reads[-1][0] > everyone - 2 * MARGIN_ROWS - 30

        await pilot.press("home")
        first = str(mine(link)[0].id)
        await until(pilot, lambda: row_key_under_cursor(pilot.app, "#jobs") == first, "first")
        assert table.scroll_y == 0

        table.scroll_to(y=1500, animate=False)  # a scroll bar's drag: rows read there
        await until(pilot, lambda: table.covers_view(), "the rows at 1500")
        shown = [row[0] for row in table_rows(pilot.app, "#jobs")]
        assert str(mine(link)[1500].id) in shown

        await pilot.press("O")  # reversed in the daemon: the newest job first
        await until(pilot, lambda: "sort:idv" in text_of(pilot.app, "#counts"), "reversed")
        table.scroll_to(y=0, animate=False)
        await until(
            pilot, lambda: table_rows(pilot.app, "#jobs")[0][0] == last, "the newest on top"
        )

    run(scenario, link)


def test_the_state_and_text_filters_narrow_the_total_in_the_daemon() -> None:
    link = LongQueueLink()

    async def scenario(pilot: Pilot[None]) -> None:
        table = pilot.app.screen.query_one("#jobs", PagedTable)
        await until(pilot, lambda: table.rows, "the first page")
        await pilot.press("s", "s")  # running only: alice's one
        await until(pilot, lambda: table.row_count == 1, "the running job")
        assert "| 1 shown" in text_of(pilot.app, "#counts")
        await pilot.press("s", "s")  # completing, then any
        await until(pilot, lambda: table.row_count == len(mine(link)), "every job again")
        table.scroll_to(y=1500, animate=False)
        await until(pilot, lambda: table.covers_view(), "the rows at 1500")
        await pilot.press("slash", *"1999")
        await until(pilot, lambda: table.row_count == 1, "the one job")
        assert table_rows(pilot.app, "#jobs")[0][0] == "1999"
        assert table.scroll_y == 0  # the view came back to the one row
        assert f"PD {len(mine(link)) - 2}" in text_of(pilot.app, "#counts")  # counts whole

    run(scenario, link)
