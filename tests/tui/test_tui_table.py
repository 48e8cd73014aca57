"""sync_rows' bulk load (into textual's DataTable internals) shows what clear() and
add_row() would: the same screens, sizes, widths, cursor and scroll."""

from __future__ import annotations

import asyncio

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gbatch.tui import table as table_module
from gbatch.tui.table import cursor_key, sync_rows

COLUMNS = ["id", "text", "state"]


def rows(count: int, width: int, *, reverse: bool = False) -> list[tuple[str, list[Text]]]:
    made = [
        (str(i), [Text(str(i)), Text("x" * (i % width)), Text("PD", style="yellow")])
        for i in range(count)
    ]
    return made[::-1] if reverse else made


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        table: DataTable[Text] = DataTable(id="t", cursor_type="row", zebra_stripes=True)
        for key in COLUMNS:
            table.add_column(key.upper() + "HEADER", key=key)
        yield table


def screens(monkeypatch: pytest.MonkeyPatch, bulk: bool) -> list[object]:
    if not bulk:
        monkeypatch.setattr(table_module, "_INTERNALS", ("no_such_attribute",))

    async def scenario() -> list[object]:
        app = OneTable()
        seen: list[object] = []
        async with app.run_test(size=(60, 12)) as pilot:
            table = app.query_one(DataTable)
            steps = [rows(30, 20), rows(5, 3), rows(40, 25), rows(41, 25, reverse=True)]
            for step in steps:
                sync_rows(table, step, COLUMNS)
                await pilot.pause(0.2)
                seen += [app.export_screenshot(), table.scroll_y, cursor_key(table)]
                seen += [column.content_width for column in table.columns.values()]
                table.move_cursor(row=min(len(step) - 1, 30))
                await pilot.pause(0.2)
        return seen

    return asyncio.run(scenario())


def test_bulk_load_shows_what_add_row_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    bulk = screens(monkeypatch, bulk=True)
    with monkeypatch.context() as patch:
        plain = screens(patch, bulk=False)
    assert bulk == plain
