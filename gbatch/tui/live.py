"""What every TUI screen shares: the daemon link, a refresh timer, a status line, job actions.

The job actions come with their keys; cancel and requeue ask first, hold and release act at
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from rich.text import Text
from textual import work
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Static

from gbatch.tui.data import LINK_ERRORS, ActionOutcome, DaemonLink
from gbatch.tui.dialogs import ConfirmDialog


@dataclass(frozen=True)
class Services:
    """What the app factory hands every screen (no globals)."""

    link: DaemonLink
    user: str  # whose jobs "mine" means
    clock: Callable[[], float]
    refresh_seconds: float


# A worker back from the daemon after its screen (or the app) began to close finds
# its widgets gone: there is nothing left to show, so that is no error.
screen_gone = partial(suppress, NoMatches)

T = TypeVar("T")

_DONE = {"cancel": "cancel sent", "hold": "held", "release": "released", "requeue": "requeued"}
# Actions that stop a running job ask first: the question, and what a "no" leaves.
_CONFIRM = {
    "cancel": ("Cancel job {job} ({label})?", "not cancelled"),
    "requeue": ("Requeue job {job} ({label})? A running job is stopped first.", "not requeued"),
}

# The job actions of every screen that shows jobs (LiveScreen.action_act), in the
# footer's order.
JOB_ACTION_BINDINGS: list[BindingType] = [
    Binding("c", "act('cancel')", "Cancel"),
    Binding("h", "act('hold')", "Hold"),
    Binding("r", "act('release')", "Release"),
    Binding("R", "act('requeue')", "Requeue"),
]


class LiveScreen(Screen[None]):
    """A screen that re-reads the daemon every `refresh_seconds` while it is shown.

    Subclasses implement refresh_data() as a worker that fetches off the UI thread;
    they compose a `Static#status` for show_status().
    """

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services
        self._timer: Timer | None = None
        self._last_update: float | None = None
        self._failing = False

    def on_mount(self) -> None:
        # No read here: textual resumes every screen it shows, the first time too, and
        # on_screen_resume reads then.
        self._timer = self.set_interval(self.services.refresh_seconds, self.refresh_data)

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.pause()  # a covered screen need not load the daemon

    def on_screen_resume(self) -> None:
        if self._timer is not None:
            self._timer.resume()
            self.refresh_data()

    def refresh_data(self) -> object:
        """Start re-reading the daemon (a worker); never blocks the UI."""
        raise NotImplementedError

    async def fetch_and_show(self, fetch: Callable[[], T], show: Callable[[T], None]) -> None:
        """Run `fetch` (a blocking daemon call) off the UI thread, then `show` what it got.

        A failure goes to the status line and the last data stays shown.
        """
        try:
            snapshot = await asyncio.to_thread(fetch)
        except LINK_ERRORS as err:
            with screen_gone():
                self.fetch_failed(err)
            return
        with screen_gone():
            self.fetched()
            show(snapshot)

    # -- status ------------------------------------------------------------------

    def show_status(self, message: str, *, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(Text(message, style="bold red" if error else ""))

    def fetched(self) -> None:
        """Note a successful read (the staleness of a failing one is told from it)."""
        self._last_update = self.services.clock()
        if self._failing:
            self._failing = False
            self.show_status("the daemon answers again")

    def fetch_failed(self, err: Exception) -> None:
        """Say why the data is not fresh; keep showing the last that was."""
        self._failing = True
        age = ""
        if self._last_update is not None:
            age = f" (shown data is {self.services.clock() - self._last_update:.0f} s old)"
        self.show_status(f"{err}{age}", error=True)

    # -- actions -----------------------------------------------------------------

    def acted_on(self) -> tuple[int, str] | None:
        """The job the actions act on: its id and the label a confirmation names it by.

        None when no job is selected.
        """
        return None

    def action_act(self, op: str) -> None:
        """JOB_ACTION_BINDINGS' action: `op` on the job acted_on() names."""
        target = self.acted_on()
        if target is None:
            self.show_status(f"no job selected to {op}", error=True)
            return
        self.request_action(op, *target)

    def open_input(self, selector: str) -> None:
        """Show the hidden input `selector` (its `shown` class) and type into it."""
        box = self.query_one(selector, Input)
        box.add_class("shown")
        box.focus()

    def request_action(self, op: str, job_id: int, label: str) -> None:
        """Cancel and requeue ask first; hold and release act at once."""
        if op not in _CONFIRM:
            self.send_action(op, job_id)
            return
        question, declined = _CONFIRM[op]

        def answered(yes: bool | None) -> None:
            if yes:
                self.send_action(op, job_id)
            else:
                self.show_status(f"job {job_id}: {declined}")

        self.app.push_screen(ConfirmDialog(question.format(job=job_id, label=label)), answered)

    @work(group="action")
    async def send_action(self, op: str, job_id: int) -> None:
        try:
            outcome = await asyncio.to_thread(self.services.link.act, op, job_id)
        except LINK_ERRORS as err:
            with screen_gone():
                self.show_status(f"job {job_id}: {op} not sent: {err}", error=True)
            return
        with screen_gone():
            self.report(outcome)
            self.refresh_data()

    def report(self, outcome: ActionOutcome) -> None:
        """The daemon's answer, its reason word for word when it refused."""
        if outcome.ok:
            self.show_status(f"job {outcome.job_id}: {_DONE[outcome.op]}")
            return
        message = f"job {outcome.job_id}: {outcome.op} refused: {outcome.error}"
        self.show_status(message, error=True)
        self.notify(outcome.error, title=f"{outcome.op} refused", severity="error")
