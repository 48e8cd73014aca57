"""sync_rows' bulk load and its patch of the rows that came and went (both into
textual's DataTable internals) show what clear() and add_row() would: the same
screens, sizes, widths, cursor and scroll."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from gbatch.tui import table as table_module
from gbatch.tui.table import cursor_key, sync_rows

COLUMNS = ["id", "text", "state"]
PATCH_ROWS = table_module._patch_rows


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


def without(step: list[tuple[str, list[Text]]], *keys: int) -> list[tuple[str, list[Text]]]:
    return [row for row in step if row[0] not in {str(key) for key in keys}]


def changed(
    step: list[tuple[str, list[Text]]], key: int, text: str
) -> list[tuple[str, list[Text]]]:
    """`step` with row `key`'s middle cell replaced (a new Text, wider than before)."""
    return [(k, [c[0], Text(text), c[2]]) if k == str(key) else (k, c) for k, c in step]


# Each step is synced, then the cursor moved to (row, scrolling there); what the
# screen shows after each sync is compared.
STEPS = [
    (rows(30, 20), 25),
    (rows(5, 3), 30),  # 25 gone: a reload
    (rows(40, 25), 30),  # 35 new: a reload
    (rows(41, 25, reverse=True), 30),  # reordered: a reload
    (rows(60, 25), 40),
    (without(rows(60, 25), 3, 41), 38),  # two gone, one of them above the view
    (without(rows(60, 25), 3, 38, 41), 10),  # the row under the cursor gone
    (without(rows(64, 25), 3, 38, 41), 59),  # four new at the end
    (changed(without(rows(64, 25), 0, 3, 38, 41), 7, "w" * 40), 0),  # gone, and wider
    (rows(25, 25), 24),  # a reload, then the view scrolled to the end
    (rows(8, 25), 7),  # 17 gone: the rest fit the view, the scroll bar hides
    (rows(25, 25), 0),  # 17 new: the scroll bar is back, in the right place
    (rows(2, 3), 1),  # most gone: a reload
    ([], 0),  # the last two gone
    (rows(3, 3), 0),  # into an empty table: a load
]
# What each step is expected to be: a patch (True) or a load, with at most this many
# rows coming and going in a patch.
MAX_PATCHED = 20
PATCHED = [False] * 5 + [True] * 4 + [False, True, True, False, True, False]


def screens(monkeypatch: pytest.MonkeyPatch, bulk: bool) -> tuple[list[object], list[bool]]:
    """What each step shows, and (the bulk path) whether each change was a patch."""
    if not bulk:
        monkeypatch.setattr(table_module, "_INTERNALS", ("no_such_attribute",))
    patched: list[bool] = []
    patch = PATCH_ROWS  # not an earlier run's spy

    def spy(*args: Any) -> bool:
        patched.append(patch(*args))
        return patched[-1]

    monkeypatch.setattr(table_module, "_patch_rows", spy)
    monkeypatch.setattr(table_module, "_MAX_ROWS_PATCHED", MAX_PATCHED)

    async def scenario() -> list[object]:
        app = OneTable()
        seen: list[object] = []
        async with app.run_test(size=(60, 12)) as pilot:
            table = app.query_one(DataTable)
            for step, cursor in STEPS:
                sync_rows(table, step, COLUMNS)
                await pilot.pause(0.2)
                seen += [app.export_screenshot(), table.scroll_y, cursor_key(table)]
                seen += [column.content_width for column in table.columns.values()]
                seen += [table.row_count, [row.key.value for row in table.ordered_rows]]
                if step:
                    table.move_cursor(row=min(len(step) - 1, cursor))
                await pilot.pause(0.2)
        return seen

    return asyncio.run(scenario()), patched


def test_bulk_load_and_patches_show_what_add_row_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    bulk, patched = screens(monkeypatch, bulk=True)
    with monkeypatch.context() as patch:
        plain, _ = screens(patch, bulk=False)
    assert bulk == plain
    assert patched == PATCHED
