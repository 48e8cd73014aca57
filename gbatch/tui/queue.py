"""The queue view: active jobs (or finished ones), state counts, filters, sort, and the
job actions."""

from __future__ import annotations

import gc
from dataclasses import replace
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from gbatch.model import Job, JobState
from gbatch.tui import rows
from gbatch.tui.data import QueueSnapshot
from gbatch.tui.live import LiveScreen, Services
from gbatch.tui.table import cursor_key, sync_rows

COLUMN_KEYS = tuple(key for key, _ in rows.QUEUE_COLUMNS)
# So many jobs new to the view (a first load, a large array) and the garbage collector
# waits GC_PAUSE_SECONDS: see QueueScreen._pause_gc_until_painted.
GC_PAUSE_NEW_JOBS = 1000
GC_PAUSE_SECONDS = 1.0
_STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.CONFIGURING: "cyan",
    JobState.RUNNING: "green",
    JobState.COMPLETING: "magenta",
}


class QueueScreen(LiveScreen):
    AUTO_FOCUS = "#jobs"  # never the hidden input
    DEFAULT_CSS = """
    QueueScreen #counts { height: 1; background: $panel; }
    QueueScreen #filter { display: none; }
    QueueScreen #filter.shown { display: block; }
    QueueScreen #jobs { height: 1fr; }
    QueueScreen #status { height: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "act('cancel')", "Cancel"),
        Binding("h", "act('hold')", "Hold"),
        Binding("r", "act('release')", "Release"),
        Binding("R", "act('requeue')", "Requeue"),
        Binding("f", "toggle_finished", "Finished"),
        Binding("m", "toggle_mine", "Mine"),
        Binding("s", "next_state", "State"),
        Binding("slash", "edit_filter", "Filter"),
        Binding("o", "next_sort", "Sort"),
        Binding("O", "reverse_sort", "Reverse", show=False),
        Binding("n", "nodes", "Nodes"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.filter = rows.QueueFilter(user=services.user)
        self.sort_column = "id"
        self.sort_reverse = False
        self.finished = False  # the finished-jobs view (sacct) instead of the queue
        self.snapshot: QueueSnapshot | None = None
        self._cells = rows.CellCache()
        # Each shown row's Text cells by its text, kept between refreshes so that an
        # unchanged row hands sync_rows the very objects it already shows.
        self._texts: dict[tuple[str, ...], list[Text]] = {}
        self._reading = False  # a refresh_data worker is reading the queue
        self._read_again = False  # and another read was asked for meanwhile
        self._gc_paused = False  # by _pause_gc_until_painted, until the next frame
        self._skip_next_read = False  # the rows shown at mount are that fresh

    def on_mount(self) -> None:
        # (LiveScreen.on_mount runs too: textual calls each class's handler.)
        # `gbatch tui` read the queue while it started: show those rows before the
        # first frame, not an empty table (and not after a second read).
        ready = self.services.link.prefetched_queue()
        if ready is not None:
            self._skip_next_read = True
            self.fetched()
            self.show_queue(ready)

    def compose(self) -> ComposeResult:
        yield Static(id="counts")
        yield Input(placeholder="filter: id, name, user, node or reason", id="filter")
        table: DataTable[Text] = DataTable(id="jobs", cursor_type="row", zebra_stripes=True)
        for key, header in rows.QUEUE_COLUMNS:
            table.add_column(header, key=key)
        yield table
        yield Static(id="status")
        yield Footer(compact=True, show_command_palette=False)

    # -- data --------------------------------------------------------------------

    @work(group="queue")
    async def refresh_data(self) -> None:
        """One read of the queue at a time; a refresh asked for meanwhile (the timer,
        an action's outcome) is one more read right after it.

        Not an exclusive worker: cancelling a read in flight does not stop its thread,
        which still holds the daemon link, so the next read would wait for it and be
        cancelled in turn at the next tick. With 10,000 jobs on a busy machine a read
        can outlast the refresh period, and the view would then never update.
        """
        if self._skip_next_read:  # the resume that follows mount: rows just read
            self._skip_next_read = False
            return
        if self._reading:
            self._read_again = True
            return
        self._reading = True
        try:
            self._read_again = True
            while self._read_again:
                self._read_again = False
                finished = self.finished
                await self.fetch_and_show(
                    partial(self.services.link.queue, finished=finished, now=self.services.clock()),
                    self.show_queue,
                )
        finally:
            self._reading = False

    def show_queue(self, snapshot: QueueSnapshot) -> None:
        if snapshot.finished is not self.finished:
            return  # read before the view was toggled; the next read is on its way
        self.snapshot = snapshot
        self.render_queue()

    def render_queue(self) -> None:
        """Show the last snapshot through the current filter and sort."""
        snapshot = self.snapshot
        if snapshot is None:
            return
        self._render_snapshot(snapshot)

    def _pause_gc_until_painted(self) -> None:
        """Cyclic garbage collection off for GC_PAUSE_SECONDS: the rows get painted.

        A first load of 10,000 jobs makes some 100,000 objects that live on (jobs,
        cells, rows), and that many allocations set off a full collection of the whole
        heap, over 100 ms, before the rows are painted. Reference counting still frees
        everything acyclic meanwhile; the collector catches up once the frame is out.
        (Textual pauses it the same way while it scrolls: PAUSE_GC_ON_SCROLL.) A timer,
        not call_after_refresh: that runs before the table has laid its rows out.
        Only for loads that big: an ordinary refresh every second must not keep the
        collector off for good.
        """
        if self._gc_paused or not gc.isenabled():
            return
        gc.disable()
        self._gc_paused = True
        self.set_timer(GC_PAUSE_SECONDS, self._resume_gc)

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def on_unmount(self) -> None:
        self._resume_gc()  # the screen closed before its frame: never leave it off

    def _render_snapshot(self, snapshot: QueueSnapshot) -> None:
        if self._cells.unseen(snapshot.jobs) >= GC_PAUSE_NEW_JOBS:
            self._pause_gc_until_painted()
        cells = self._cells.cells(snapshot.jobs, snapshot.now, snapshot.labels)
        shown = rows.sort_jobs(
            rows.visible(snapshot.jobs, self.filter, cells),
            self.sort_column,
            snapshot.now,
            cells,
            reverse=self.sort_reverse,
        )
        table = self.query_one("#jobs", DataTable)
        sync_rows(table, self._styled_rows(shown, cells), COLUMN_KEYS)
        self.query_one("#counts", Static).update(self._header(snapshot, len(shown)))

    def _styled_rows(
        self, jobs: list[Job], cells: dict[int, tuple[str, ...]]
    ) -> list[tuple[str, list[Text]]]:
        """(job id, Text cells) per job: last refresh's objects for a row whose text is
        the same; new rows that differ in their id alone (10,000 held jobs of one
        user) share the Text objects of their other cells."""
        known = self._texts
        texts: dict[tuple[str, ...], list[Text]] = {}
        tails: dict[tuple[str, ...], list[Text]] = {}  # the ST cell tells the state
        out = []
        for job in jobs:
            row = cells[job.id]
            styled = known.get(row)
            if styled is None:
                tail = tails.get(row[1:])
                if tail is None:
                    tail = tails[row[1:]] = _styled(job, row)[1:]
                styled = [Text(row[0]), *tail]
            texts[row] = styled
            out.append((str(job.id), styled))  # keyed by id: an array task's JOBID is N_K
        self._texts = texts
        return out

    def _header(self, snapshot: QueueSnapshot, shown: int) -> Text:
        owned = rows.owned(snapshot.jobs, self.filter)
        counts = rows.format_counts(rows.state_counts(owned, finished=self.finished))
        if self.finished:
            counts = f"ended (7 days): {counts}"
        whose = f"mine ({self.filter.user})" if self.filter.mine else "all users"
        state = self.filter.state.code if self.filter.state else "any"
        arrow = "v" if self.sort_reverse else "^"
        text = f" {counts} | {whose} | st:{state} | sort:{self.sort_column}{arrow} | {shown} shown"
        if self.filter.text:
            text += f" | /{self.filter.text}"
        return Text(text)

    def selected_job(self) -> Job | None:
        key = cursor_key(self.query_one("#jobs", DataTable))
        if key is None or self.snapshot is None:
            return None
        return next((job for job in self.snapshot.jobs if str(job.id) == key), None)

    # -- actions -----------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_open_job()

    def action_open_job(self) -> None:
        from gbatch.tui.jobview import JobScreen  # the queue opens without it

        job = self.selected_job()
        if job is not None:
            label = self.snapshot.labels.get(job.id) if self.snapshot else None
            self.app.push_screen(JobScreen(self.services, job.id, label))

    def action_nodes(self) -> None:
        from gbatch.tui.nodes import NodesScreen

        self.app.push_screen(NodesScreen(self.services))

    def action_act(self, op: str) -> None:
        job = self.selected_job()
        if job is None:
            self.show_status(f"no job selected to {op}", error=True)
            return
        self.request_action(op, job.id, job.spec.name)

    def action_toggle_mine(self) -> None:
        self._set_filter(replace(self.filter, mine=not self.filter.mine))

    def action_toggle_finished(self) -> None:
        """Switch between the queue and the jobs that ended (submitted in the last
        week): a new list, so the state filter starts again at "any"."""
        self.finished = not self.finished
        self.snapshot = None
        self.query_one("#jobs", DataTable).clear()
        self.filter = replace(self.filter, state=None)
        self.query_one("#counts", Static).update(Text(" loading..."))
        self.refresh_data()

    def action_next_state(self) -> None:
        states = rows.FINISHED_STATE_FILTERS if self.finished else rows.STATE_FILTERS
        following = states[(states.index(self.filter.state) + 1) % len(states)]
        self._set_filter(replace(self.filter, state=following))

    def action_next_sort(self) -> None:
        index = COLUMN_KEYS.index(self.sort_column)
        self.sort_column = COLUMN_KEYS[(index + 1) % len(COLUMN_KEYS)]
        self.render_queue()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.render_queue()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        elif key is not None:
            self.sort_column, self.sort_reverse = key, False
        self.render_queue()

    def action_edit_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.query_one("#jobs", DataTable).focus()
        self._set_filter(replace(self.filter, text=""))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self._set_filter(replace(self.filter, text=event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value:
                event.input.remove_class("shown")
            self.query_one("#jobs", DataTable).focus()

    def _set_filter(self, filt: rows.QueueFilter) -> None:
        self.filter = filt
        self.render_queue()


def _styled(job: Job, cells: tuple[str, ...]) -> list[Text]:
    """Cells as Text (never markup: a job name may hold '['); the state coloured.
    The table never changes a Text in place, so rows may share them."""
    state_style = _STATE_STYLE.get(job.state, "")
    return [
        Text(cell, style=state_style if key == "state" else "")
        for key, cell in zip(COLUMN_KEYS, cells, strict=True)
    ]
