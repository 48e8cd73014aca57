"""The help screen: every key of the screen below it, and what the views show."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

ABOUT = """\
gbatch tui: a live view of the gbatch daemon (refreshed every second).

Queue: your active jobs (m: everyone's; f: the jobs that ended, submitted
in the last 7 days, as sacct). ST is squeue's state code; TIME/LIMIT the
run time and the time limit; NODE(REASON) the node, or why a job waits.
Enter opens a job: its record, events and live log.
n: nodes and their GPUs; GPUs busy outside gbatch are magenta.
Cancel and requeue ask first; a refused action shows the daemon's reason.
"""


def key_lines(screen: Screen[object]) -> list[str]:
    """`key  description` for each binding of `screen` and the app (shown or not)."""
    lines = []
    for node in (screen, screen.app):
        for binding in node.BINDINGS:
            if isinstance(binding, Binding) and binding.description:
                keys = binding.key.replace("slash", "/").replace("question_mark", "?")
                lines.append(f"  {keys:<12} {binding.description}")
    return lines


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 80; max-width: 100%; height: auto; max-height: 100%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "app.pop_screen", "Close")
    ]

    def __init__(self, keys: list[str]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text(ABOUT + "\nKeys:\n" + "\n".join(self.keys)), id="help-text")
