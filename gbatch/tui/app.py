"""The TUI application and its factory, which both `gbatch tui` and the tests call."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from gbatch.tui.data import DaemonLink
from gbatch.tui.help import HelpScreen, key_lines
from gbatch.tui.live import Services
from gbatch.tui.queue import QueueScreen


class GbatchApp(App[None]):
    TITLE = "gbatch"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, services: Services) -> None:
        super().__init__()
        self.services = services

    def get_default_screen(self) -> Screen[None]:
        return QueueScreen(self.services)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        self.push_screen(HelpScreen(key_lines(self.screen)))

    async def action_quit(self) -> None:
        self.exit()

    def on_unmount(self) -> None:
        self.services.link.close()


def make_app(
    socket_path: Path,
    *,
    user: str,
    clock: Callable[[], float] = time.time,
    refresh_seconds: float = 1.0,
    link: DaemonLink | None = None,
) -> GbatchApp:
    """A TUI on the daemon at `socket_path`, showing `user`'s jobs as "mine".

    The daemon itself knows the caller from the socket, whatever `user` says.

    `link`, when given, is used instead of one to `socket_path`: `gbatch tui` hands in
    one already reading the queue, the snapshot tests and the README's screenshots one
    that serves fixed data.
    """
    if link is None:
        link = DaemonLink(socket_path)
    return GbatchApp(Services(link, user, clock, refresh_seconds))
