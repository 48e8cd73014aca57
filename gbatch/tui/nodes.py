"""The nodes view: each node's state (and why it takes no jobs), each GPU a row.

Under them, each GPU's utilisation sparkline and a compact timeline of its runs
(activity.py)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static

from gbatch.core.labels import printable
from gbatch.core.model import NodeState
from gbatch.tui import rows
from gbatch.tui.activity import ACTIVITY_COLUMNS, Activity, lane, sparkline, user_style, users_text
from gbatch.tui.data import NodesSnapshot
from gbatch.tui.live import LiveScreen
from gbatch.tui.table import sync_rows

COLUMN_KEYS = tuple(key for key, _ in rows.NODE_COLUMNS)
ACTIVITY_KEYS = tuple(key for key, _ in ACTIVITY_COLUMNS)
# Foreign use has a colour of its own: those GPUs are busy, but not with gbatch jobs.
USE_STYLE = {
    rows.GpuUse.FREE: "",
    rows.GpuUse.ALLOCATED: "green",
    rows.GpuUse.FOREIGN: "bold magenta",
    rows.GpuUse.MIG: "dim",
}
NODE_STYLE = {
    NodeState.IDLE: "bold",
    NodeState.MIXED: "bold",
    NodeState.ALLOCATED: "bold",
    NodeState.DRAINED: "bold yellow",
    NodeState.SUSPECT: "bold yellow",
    NodeState.DOWN: "bold red",
}


class NodesScreen(LiveScreen):
    AUTO_FOCUS = "#nodes"  # never the hidden input
    DEFAULT_CSS = """
    NodesScreen #summary { height: 1; background: $panel; }
    NodesScreen #nodes { height: 1fr; }
    NodesScreen #activity { height: 1fr; border-top: solid $panel; }
    NodesScreen #status { height: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    def compose(self) -> ComposeResult:
        yield Static(Text(" nodes"), id="summary")
        table: DataTable[Text] = DataTable(id="nodes", cursor_type="row")
        for key, header in rows.NODE_COLUMNS:
            table.add_column(header, key=key)
        yield table
        activity: DataTable[Text] = DataTable(id="activity", cursor_type="none")
        for key, header in ACTIVITY_COLUMNS:
            activity.add_column(header, key=key)
        yield activity
        yield Static(id="status")
        yield Footer(compact=True, show_command_palette=False)

    @work(exclusive=True, group="nodes")
    async def refresh_data(self) -> None:
        await self.fetch_and_show(self.services.link.nodes, self.show_nodes)

    def show_nodes(self, snapshot: NodesSnapshot) -> None:
        node_rows = rows.node_rows(snapshot.nodes, snapshot.owners)
        table = self.query_one("#nodes", DataTable)
        sync_rows(table, [(row.key, _styled(row)) for row in node_rows], COLUMN_KEYS)
        # A card in MIG mode is no GPU a job gets: its slices are.
        gpus = [row for row in node_rows if row.use not in (None, rows.GpuUse.MIG)]
        used = {use: sum(1 for row in gpus if row.use == use) for use in USE_STYLE}
        summary = (
            f" {len(snapshot.nodes)} nodes, {len(gpus)} GPUs: {used[rows.GpuUse.ALLOCATED]} "
            f"allocated, {used[rows.GpuUse.FOREIGN]} busy outside gbatch, "
            f"{used[rows.GpuUse.FREE]} free"
        )
        self.query_one("#summary", Static).update(Text(summary))
        if snapshot.activity is not None:
            table = self.query_one("#activity", DataTable)
            sync_rows(table, _activity_rows(snapshot.activity), ACTIVITY_KEYS)


def _styled(row: rows.NodeRow) -> list[Text]:
    if row.use is not None:
        style = USE_STYLE[row.use]
    else:
        style = NODE_STYLE.get(row.node_state, "") if row.node_state else ""
    return [Text(cell, style=style) for cell in row.cells]


def _activity_rows(activity: Activity) -> list[tuple[str, list[Text]]]:
    """A row per GPU: its sparkline, its runs' lane coloured by user, and those users."""
    out = []
    for gpu in activity.gpus:
        strip = Text()
        for char, user in lane(gpu.runs, activity.now):
            strip.append(char, style=user_style(user) if char == "█" else "dim")
        cells = [
            Text(f"{printable(gpu.node)}/{gpu.index}"),
            Text(sparkline(gpu.samples, activity.now), style="green"),
            strip,
            Text(users_text(gpu.runs, activity.now)),
        ]
        out.append((f"act:{gpu.node}:{gpu.index}", cells))
    return out
