"""The job view: the job's record and events, and its log followed live.

The record and events show as `scontrol show job` prints them; the log is scrollable and
searchable.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Log, Static

from gbatch.core.jobids import job_label
from gbatch.protocol.client import RequestFailed
from gbatch.render import scontrol
from gbatch.render.cells import nodelist_text
from gbatch.tui.data import LINK_ERRORS, JobSnapshot, LogChunk
from gbatch.tui.live import JOB_ACTION_BINDINGS, LiveScreen, Services, screen_gone

LOG_POLL_SECONDS = 0.2  # as `gbatch logs -f`
LOG_MAX_LINES = 200_000  # a runaway log must not eat the terminal's memory


class JobScreen(LiveScreen):
    AUTO_FOCUS = "#log"  # never the hidden input
    DEFAULT_CSS = """
    JobScreen #title { height: 1; background: $panel; }
    JobScreen #details { height: 40%; border-bottom: solid $primary; }
    JobScreen #log { height: 1fr; }
    JobScreen #search { display: none; }
    JobScreen #search.shown { display: block; }
    JobScreen #status { height: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        *JOB_ACTION_BINDINGS,
        Binding("slash", "search", "Search"),
        Binding("n", "find(1)", "Next"),
        Binding("N", "find(-1)", "Prev", show=False),
        Binding("f", "follow", "Follow"),
    ]

    def __init__(self, services: Services, job_id: int, label: str | None = None) -> None:
        super().__init__(services)
        self.job_id = job_id
        self.label = label or str(job_id)  # an array task's `N_K` (the queue knows it)
        self.snapshot: JobSnapshot | None = None
        self.follow = True
        self.needle = ""
        self.match_line: int | None = None
        self.log_done = False

    def compose(self) -> ComposeResult:
        yield Static(Text(f" job {self.label}"), id="title")
        with VerticalScroll(id="details"):
            yield Static(id="record")
        yield Log(id="log", max_lines=LOG_MAX_LINES, auto_scroll=False)
        yield Input(placeholder="search the log (Enter: next match)", id="search")
        yield Static(id="status")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        # LiveScreen.on_mount runs too: textual calls the handler of every class.
        self.follow_log()

    # -- data --------------------------------------------------------------------

    @work(exclusive=True, group="job")
    async def refresh_data(self) -> None:
        await self.fetch_and_show(partial(self.services.link.job, self.job_id), self.show_job)

    def show_job(self, snapshot: JobSnapshot) -> None:
        self.snapshot = snapshot
        job = snapshot.job
        where = f" on {nodelist_text(job)}" if job.node else ""
        self.label = job_label(job)
        title = f" job {self.label} {job.spec.name!r} of {job.user}: {job.state.value}{where}"
        self.query_one("#title", Static).update(Text(title))
        record = scontrol.format_job_details(job, snapshot.events, snapshot.now)
        self.query_one("#record", Static).update(Text(record.rstrip("\n")))

    @work(exclusive=True, group="log")
    async def follow_log(self) -> None:
        """Read the log from the start and keep reading until the job is over.

        The loop of `gbatch logs -f`; the worker ends with the screen.
        """
        offset = 0
        while True:
            try:
                chunk = await asyncio.to_thread(self.services.link.log, self.job_id, offset)
            except RequestFailed as err:  # e.g. not the owner: the daemon's reason
                with screen_gone():
                    self.query_one("#log", Log).write_line(f"[log unavailable: {err.message}]")
                    self.show_status(f"log: {err.message}", error=True)
                return
            except LINK_ERRORS as err:
                with screen_gone():
                    self.fetch_failed(err)
                await asyncio.sleep(self.services.refresh_seconds)
                continue
            with screen_gone():
                self.show_log(chunk)
            if chunk.done:
                return
            offset = chunk.offset
            if not chunk.data:
                await asyncio.sleep(LOG_POLL_SECONDS)

    def show_log(self, chunk: LogChunk) -> None:
        log = self.query_one("#log", Log)
        if chunk.data:
            log.write(chunk.data, scroll_end=self.follow)
        if chunk.done:
            self.log_done = True
            self.show_status(f"end of log ({log.line_count} lines)")

    # -- actions -----------------------------------------------------------------

    def action_back(self) -> None:
        search = self.query_one("#search", Input)
        if search.has_focus:
            search.remove_class("shown")
            self.query_one("#log", Log).focus()
            return
        self.app.pop_screen()

    def acted_on(self) -> tuple[int, str]:
        name = self.snapshot.job.spec.name if self.snapshot else str(self.job_id)
        return self.job_id, name

    def action_follow(self) -> None:
        self.follow = not self.follow
        if self.follow:
            self.query_one("#log", Log).scroll_end(animate=False)
        self.show_status("following the log" if self.follow else "not following the log")

    def action_search(self) -> None:
        self.open_input("#search")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "search":
            self.needle = event.value
            self.match_line = None
            self.action_find(1)
            self.query_one("#log", Log).focus()

    def action_find(self, step: int) -> None:
        """Scroll to the next (step 1) or previous (-1) line holding the search text.

        It wraps around, and stops following so the match stays in view.
        """
        if not self.needle:
            self.show_status("nothing to search: press / first")
            return
        log = self.query_one("#log", Log)
        needle = self.needle.lower()
        hits = [i for i, line in enumerate(log.lines) if needle in line.lower()]
        if not hits:
            self.show_status(f"no line holds {self.needle!r}", error=True)
            return
        line = _next_hit(hits, self.match_line, step)
        self.match_line = line
        self.follow = False
        log.scroll_to(y=line, animate=False)
        self.show_status(
            f"{self.needle!r}: match {hits.index(line) + 1}/{len(hits)}, line {line + 1}"
        )


def _next_hit(hits: list[int], current: int | None, step: int) -> int:
    if current is None:
        return hits[0] if step > 0 else hits[-1]
    if step > 0:
        return next((h for h in hits if h > current), hits[0])
    return next((h for h in reversed(hits) if h < current), hits[-1])
