"""The queue view: active jobs (or finished ones), state counts, filters, sort, job actions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Input, Static

from gbatch.core.model import Job, JobState
from gbatch.tui import rows
from gbatch.tui.data import FIRST_PAGE_ROWS, QueuePage, QueueView
from gbatch.tui.live import JOB_ACTION_BINDINGS, LiveScreen, Services, screen_gone
from gbatch.tui.pager import PagedTable

COLUMN_KEYS = tuple(key for key, _ in rows.QUEUE_COLUMNS)
_STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.CONFIGURING: "cyan",
    JobState.RUNNING: "green",
    JobState.COMPLETING: "magenta",
}


class QueueScreen(LiveScreen):
    """The queue, a page at a time: the daemon sorts, filters and sends the rows in view.

    It sorts and filters the whole listing and sends a margin beside the rows in view, with
    the total and the counts per state; a scroll past the page, a new sort or filter, and
    the refresh timer read again.
    """

    AUTO_FOCUS = "#jobs"  # never the hidden input
    DEFAULT_CSS = """
    QueueScreen #counts { height: 1; background: $panel; }
    QueueScreen #filter { display: none; }
    QueueScreen #filter.shown { display: block; }
    QueueScreen #jobs { height: 1fr; }
    QueueScreen #status { height: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        *JOB_ACTION_BINDINGS,
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
        self.page: QueuePage | None = None
        self._cells = rows.CellCache()
        # Each shown row's Text cells by its text, kept between refreshes so that an
        # unchanged row is drawn from the very objects it was.
        self._texts: dict[tuple[str, ...], list[Text]] = {}
        self._reading = False  # a refresh_data worker is reading the queue
        self._read_again = False  # and another read was asked for meanwhile
        self._skip_next_read = False  # the rows shown at mount are that fresh

    def view(self) -> QueueView:
        """What the queue shows now (the filters, the list, the order)."""
        return QueueView(self.filter, self.finished, self.sort_column, self.sort_reverse)

    def on_mount(self) -> None:
        # (LiveScreen.on_mount runs too: textual calls each class's handler.)
        # `gbatch tui` read the first page while it started: show those rows before
        # the first frame, not an empty table (and not after a second read).
        ready = self.services.link.prefetched_queue()
        if ready is not None and ready.view == self.view():
            self._skip_next_read = True
            self.fetched()
            self.show_queue(ready)

    def compose(self) -> ComposeResult:
        yield Static(id="counts")
        yield Input(placeholder="filter: id, name, user, node or reason", id="filter")
        yield PagedTable(rows.QUEUE_COLUMNS, id="jobs")
        yield Static(id="status")
        yield Footer(compact=True, show_command_palette=False)

    # -- data --------------------------------------------------------------------

    @work(group="queue")
    async def refresh_data(self) -> None:
        """Read the queue's page in view, one read at a time.

        A refresh asked for meanwhile (the timer, an action's outcome, a scroll, a new
        filter) is one more read right after it, of the view and the page as they are then.

        Not an exclusive worker: cancelling a read in flight does not stop its thread,
        which still holds the daemon link, so the next read would wait for it and be
        cancelled in turn at the next tick. On a busy machine a read can outlast the
        refresh period, and the view would then never update.
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
                offset, limit = 0, FIRST_PAGE_ROWS
                with screen_gone():
                    offset, limit = self.query_one("#jobs", PagedTable).wanted()
                read = partial(
                    self.services.link.queue_page,
                    self.view(),
                    offset,
                    limit,
                    now=self.services.clock(),
                )
                await self.fetch_and_show(read, self.show_queue)
        finally:
            self._reading = False

    def show_queue(self, page: QueuePage) -> None:
        if page.view != self.view():
            return  # read before the view changed; the next read is on its way
        self.page = page
        cells = self._cells.cells(page.jobs, page.now, page.labels)
        table = self.query_one("#jobs", PagedTable)
        table.show_page(page.total, page.offset, self._styled_rows(page.jobs, cells))
        self.query_one("#counts", Static).update(self._header(page))

    def on_paged_table_window_moved(self, event: PagedTable.WindowMoved) -> None:
        self.refresh_data()

    def _styled_rows(
        self, jobs: Sequence[Job], cells: dict[int, tuple[str, ...]]
    ) -> list[tuple[str, list[Text]]]:
        """(job id, Text cells) per job: last refresh's objects for a row whose text is
        the same; rows that differ in their id alone (held jobs of one user) share the
        Text objects of their other cells."""
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

    def _header(self, page: QueuePage) -> Text:
        counts = rows.format_counts(rows.ordered_counts(page.counts, finished=self.finished))
        if self.finished:
            counts = f"ended (7 days): {counts}"
        whose = f"mine ({self.filter.user})" if self.filter.mine else "all users"
        state = self.filter.state.code if self.filter.state else "any"
        arrow = "v" if self.sort_reverse else "^"
        text = (
            f" {counts} | {whose} | st:{state} | sort:{self.sort_column}{arrow} "
            f"| {page.total} shown"
        )
        if self.filter.text:
            text += f" | /{self.filter.text}"
        return Text(text)

    def selected_job(self) -> Job | None:
        table = self.query_one("#jobs", PagedTable)
        page = self.page
        if page is None or table.cursor_key is None:
            return None
        at = table.cursor_row - page.offset
        return page.jobs[at] if 0 <= at < len(page.jobs) else None

    # -- actions -----------------------------------------------------------------

    def on_paged_table_selected(self, event: PagedTable.Selected) -> None:
        self.action_open_job()

    def action_open_job(self) -> None:
        from gbatch.tui.jobview import JobScreen  # the queue opens without it

        job = self.selected_job()
        if job is not None:
            label = self.page.labels.get(job.id) if self.page else None
            self.app.push_screen(JobScreen(self.services, job.id, label))

    def action_nodes(self) -> None:
        from gbatch.tui.nodes import NodesScreen

        self.app.push_screen(NodesScreen(self.services))

    def acted_on(self) -> tuple[int, str] | None:
        job = self.selected_job()
        return None if job is None else (job.id, job.spec.name)

    def action_toggle_mine(self) -> None:
        self._set_filter(replace(self.filter, mine=not self.filter.mine))

    def action_toggle_finished(self) -> None:
        """Switch between the queue and the jobs that ended (submitted in the last week).

        A new list, so the state filter starts again at "any".
        """
        self.finished = not self.finished
        self.page = None
        self.query_one("#jobs", PagedTable).show_page(0, 0, [])
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
        self.refresh_data()

    def action_reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refresh_data()

    def on_paged_table_header_selected(self, event: PagedTable.HeaderSelected) -> None:
        key = event.column_key
        if key == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = key, False
        self.refresh_data()

    def action_edit_filter(self) -> None:
        self.open_input("#filter")

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.query_one("#jobs", PagedTable).focus()
        self._set_filter(replace(self.filter, text=""))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self._set_filter(replace(self.filter, text=event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            if not event.value:
                event.input.remove_class("shown")
            self.query_one("#jobs", PagedTable).focus()

    def _set_filter(self, filt: rows.QueueFilter) -> None:
        if filt != self.filter:
            self.filter = filt
            self.refresh_data()


def _styled(job: Job, cells: tuple[str, ...]) -> list[Text]:
    """Cells as Text (never markup: a job name may hold '['); the state coloured.
    The table never changes a Text in place, so rows may share them."""
    state_style = _STATE_STYLE.get(job.state, "")
    return [
        Text(cell, style=state_style if key == "state" else "")
        for key, cell in zip(COLUMN_KEYS, cells, strict=True)
    ]
