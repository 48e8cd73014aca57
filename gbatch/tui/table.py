"""Refresh a DataTable in place, keyed rows, without losing the cursor or scroll.

Built for a queue of 10,000 jobs refreshed every second: a refresh touches only the
cells that changed, and a new set of rows goes in as one bulk load (see _bulk_load)
instead of 10,000 add_row calls, each of which makes DataTable measure every cell.
The nodes view uses it; the queue now shows a page at a time (pager.PagedTable), since
DataTable holds and lays out every row it is given.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from operator import attrgetter, is_
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets._data_table import ColumnKey, RowKey
from textual.widgets._data_table import Row as TableRow

Row = tuple[str, Sequence[Text]]  # (row key, cells in column order)
Rows = Sequence[Row]

# More changed cells than this in one refresh and the rows are loaded as a whole:
# measured, 5,000 update_cell calls cost about one bulk load of 10,000 rows.
_MAX_CELL_UPDATES = 5000
# More rows gone and new than this in one refresh, and the rows are loaded as a whole.
_MAX_ROWS_PATCHED = 1000
# What _bulk_load reaches into (textual 8's DataTable). Should a textual release lack
# one, the public add_row path serves instead: slower, the same rows.
_INTERNALS = (
    "_data",
    "_row_locations",
    "_new_rows",
    "_updated_cells",
    "_update_count",
    "_require_update_dimensions",
    "_clear_caches",
)


def cursor_key(table: DataTable[Text]) -> str | None:
    """The key of the row under the cursor; None for an empty table."""
    if table.row_count == 0:
        return None
    row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
    return row_key.value


def sync_rows(table: DataTable[Text], rows: Rows, column_keys: Sequence[str]) -> None:
    """Make `table` show `rows`, in that order.

    Same keys in the same order (the usual refresh): only the cells that changed are
    updated, so nothing moves; a cell that became wider than its column widens it.
    A few rows gone or new, the others in the same order (a job ended, one was
    submitted): those rows alone are taken out and put in (_patch_rows). Otherwise the
    rows are loaded anew in one go (no frame shows an empty table). Either way the
    cursor stays on the same key, and the view at the same scroll offset, as long as
    that row is still there. Pass the same Text objects for unchanged cells when you
    can: they are recognised without comparing their text.
    """
    current = [row.key.value for row in table.ordered_rows]
    wanted = [key for key, _ in rows]
    if current == wanted:
        changed = _changed_cells(table, rows, column_keys)
        if len(changed) <= _MAX_CELL_UPDATES:
            for key, column, cell in changed:
                wider = cell_len(cell.plain) > table.columns[ColumnKey(column)].content_width
                table.update_cell(key, column, cell, update_width=wider)
            return
    elif _patch_rows(table, rows, column_keys, current, wanted):
        return
    _replace_rows(table, rows, column_keys)


def _changed_cells(
    table: DataTable[Text], rows: Rows, column_keys: Sequence[str]
) -> list[tuple[str, str, Text]]:
    """(row key, column key, new cell) for every cell that differs from the table's."""
    changed = []
    for key, cells in rows:
        old = _cells_of(table, key)
        if all(map(is_, cells, old)):  # the usual case, checked at C speed
            continue
        for column, new, was in zip(column_keys, cells, old, strict=True):
            if new is not was and not _same(new, was):
                changed.append((key, column, new))
    return changed


def _cells_of(table: DataTable[Text], key: str) -> Collection[object]:
    """A row's cells in column order; straight from the table's store when it has one
    (get_row builds a list through two lookups per cell: 10,000 rows, every second)."""
    data = getattr(table, "_data", None)
    if isinstance(data, dict) and key in data:
        return data[key].values()  # type: ignore[no-any-return]
    return table.get_row(key)


def _patch_rows(
    table: DataTable[Text],
    rows: Rows,
    column_keys: Sequence[str],
    current: Sequence[str | None],
    wanted: list[str],
) -> bool:
    """Take out the rows of `current` that `wanted` lacks and put in the new ones, when
    at most _MAX_ROWS_PATCHED come and go and the rows in both keep their order; the
    rows that stay keep their objects (a reload makes 10,000 of each again). Their
    cells that changed are replaced. False, having done nothing, when that does not
    apply (or textual's internals are not there): the caller reloads.
    """
    if not current or not all(hasattr(table, name) for name in _INTERNALS):
        return False
    kept = set(current).intersection(wanted)
    if len(current) + len(wanted) - 2 * len(kept) > _MAX_ROWS_PATCHED:
        return False
    if [key for key in current if key in kept] != [key for key in wanted if key in kept]:
        return False  # reordered (another sort): a reload costs no more
    was = _position(table)
    row_keys = {row_key.value: row_key for row_key in table.rows}
    for key in current:
        if key not in kept:
            gone = row_keys.pop(key)
            del table.rows[gone]
            del table._data[gone]
    data = table._data
    keys: list[Any] = list(column_keys)  # str, typed as ColumnKey: see _bulk_load
    measure: list[Sequence[Text]] = []  # the cells of the rows new or changed
    for key, cells in rows:
        row_key = row_keys.get(key)
        if row_key is None:
            row_key = row_keys[key] = RowKey(key)
            table.rows[row_key] = TableRow(row_key, height=1)
        elif all(map(is_, cells, data[row_key].values())):
            continue
        data[row_key] = dict(zip(keys, cells, strict=True))
        measure.append(cells)
    table._row_locations = TwoWayDict({row_keys[key]: index for index, key in enumerate(wanted)})
    for cell_key in [c for c in table._updated_cells if c.row_key.value not in row_keys]:
        table._updated_cells.discard(cell_key)  # a width update pending for a row gone
    _grow_columns(table, column_keys, measure)
    table._clear_caches()
    table._update_count += 1
    table._require_update_dimensions = True
    table.refresh(layout=True)
    table.check_idle()
    _restore_position(table, wanted, was)
    return True


def _replace_rows(table: DataTable[Text], rows: Rows, column_keys: Sequence[str]) -> None:
    was = _position(table)
    if all(hasattr(table, name) for name in _INTERNALS):
        _bulk_load(table, rows, column_keys)
    else:
        table.clear()
        for key, cells in rows:
            table.add_row(*cells, key=key)
    _restore_position(table, [key for key, _ in rows], was)


Position = tuple[str | None, int, float]  # the cursor's row key and index, the scroll offset


def _position(table: DataTable[Text]) -> Position:
    return cursor_key(table), table.cursor_row, table.scroll_y


def _restore_position(table: DataTable[Text], keys: Sequence[str], was: Position) -> None:
    """After the rows changed to `keys`: the cursor on the row it was on (that row gone,
    a job ended: at the same height instead), and the view at the same offset once the
    new rows are laid out (clamped to them)."""
    keep, old_index, scroll_y = was
    index = keys.index(keep) if keep is not None and keep in keys else old_index
    if keys:
        table.move_cursor(row=min(index, len(keys) - 1), animate=False, scroll=False)
    else:
        table.cursor_coordinate = Coordinate(0, 0)
    table.call_after_refresh(_scroll_back, table, scroll_y)


def _scroll_back(table: DataTable[Text], scroll_y: float) -> None:
    table.scroll_to(y=scroll_y, animate=False)
    # A scroll bar hidden while the offset was clamped (the rows fitted the view) was
    # not told: it would show its old place when the rows grow again.
    table.vertical_scrollbar.position = table.scroll_y


def _bulk_load(table: DataTable[Text], rows: Rows, column_keys: Sequence[str]) -> None:
    """Replace every row as `clear()` then `add_row()` for each would, in one pass.

    add_row measures every cell with a Rich console (for the column widths) on the
    next idle, row by row: seconds for a queue of 10,000 jobs (bench/bench_tui.py). Cells here
    are single-line Text, whose width is the cell length of its plain text, so the
    widths are computed from that. Reaches into DataTable's private state (textual
    8); the TUI tests and bench/bench_tui.py exercise this path.
    """
    columns = [table.columns[ColumnKey(key)] for key in column_keys]
    row_keys = [RowKey(key) for key, _ in rows]
    table._clear_caches()
    # Each row's cells by the plain column key: a ColumnKey looks up a str key as the
    # str itself (DataTable's StringKey says so), and a str hashes at C speed where a
    # ColumnKey calls Python: 70,000 of those calls for 10,000 rows.
    keys: list[Any] = [column.key.value for column in columns]  # str, typed as ColumnKey
    table._data = {
        row_key: dict(zip(keys, cells, strict=True))
        for row_key, (_, cells) in zip(row_keys, rows, strict=True)
    }
    table.rows = {row_key: TableRow(row_key, height=1) for row_key in row_keys}
    table._row_locations = TwoWayDict({row_key: index for index, row_key in enumerate(row_keys)})
    table._new_rows.clear()
    table._updated_cells.clear()
    _grow_columns(table, column_keys, [cells for _, cells in rows])
    table._update_count += 1
    table._require_update_dimensions = True  # the virtual size, on the next idle
    # As clear() does; the caller scrolls back once the new size is laid out.
    table.scroll_x = table.scroll_y = 0
    table.scroll_target_x = table.scroll_target_y = 0
    table.refresh(layout=True)
    table.check_idle()


def _grow_columns(
    table: DataTable[Text], column_keys: Sequence[str], rows: Sequence[Sequence[Text]]
) -> None:
    """Widen each column to its widest cell among `rows` (cells in column order).
    Columns only grow, as they do under add_row. Rows share Text objects, so each
    distinct one is measured once."""
    columns = [table.columns[ColumnKey(key)] for key in column_keys]
    by_column = zip(*rows, strict=True) if rows else ()
    for column, cells in zip(columns, by_column, strict=False):
        distinct = dict(zip(map(id, cells), cells, strict=True)).values()
        column.content_width = max(column.content_width, _widest(map(_plain, distinct)))


_plain = attrgetter("plain")


def _widest(texts: Iterable[str]) -> int:
    """The most terminal cells any of `texts` takes. All-ASCII texts (a queue's, as a
    rule) take one cell per character: measured with len, at C speed, where cell_len
    costs a Python call per text (10,000 job ids). An ASCII control character counts
    one cell there, none for cell_len: a column one cell wider at worst."""
    texts = list(texts)
    if "".join(texts).isascii():
        return max(map(len, texts), default=0)
    return max(map(cell_len, texts), default=0)


def _same(new: Text, old: object) -> bool:
    return isinstance(old, Text) and new.plain == old.plain and new.style == old.style
