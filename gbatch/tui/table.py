"""Refresh a DataTable in place, keyed rows, without losing the cursor or scroll."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

Row = tuple[str, Sequence[Text]]  # (row key, cells in column order)


def cursor_key(table: DataTable[Text]) -> str | None:
    """The key of the row under the cursor; None for an empty table."""
    if table.row_count == 0:
        return None
    row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    return row_key.value


def sync_rows(table: DataTable[Text], rows: Sequence[Row], column_keys: Sequence[str]) -> None:
    """Make `table` show `rows`, in that order.

    Same keys in the same order (the usual refresh): only the cells that changed are
    updated, so nothing moves. Otherwise the rows are rebuilt in one go (no frame
    shows an empty table) and the cursor stays on the same key, and the view at the
    same scroll offset, as long as that row is still there.
    """
    current = [row.key.value for row in table.ordered_rows]
    if current == [key for key, _ in rows]:
        for key, cells in rows:
            old = table.get_row(key)
            for column, new, was in zip(column_keys, cells, old, strict=True):
                if not _same(new, was):
                    table.update_cell(key, column, new)
        return
    keep = cursor_key(table)
    old_index = table.cursor_row
    scroll_y = table.scroll_y
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    # The row under the cursor gone (a job ended): stay at the same height instead.
    index = next((i for i, (key, _) in enumerate(rows) if key == keep), old_index)
    if rows:
        table.move_cursor(row=min(index, len(rows) - 1), animate=False, scroll=False)
    # The new rows' sizes are laid out on the next refresh; scroll after it.
    table.call_after_refresh(table.scroll_to, y=scroll_y, animate=False)


def _same(new: Text, old: object) -> bool:
    return isinstance(old, Text) and new.plain == old.plain and new.style == old.style
