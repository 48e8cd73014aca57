"""A table of a listing too long to hold: it shows one page of rows, placed among them all.

The page is the rows in view and a margin either side, at their place in a virtual height of
every row.

DataTable keeps and lays out every row: at 100,000 jobs, seconds a refresh. Here the
screen reads the page that the view needs (ListJobs `offset`/`limit`, sorted and
filtered by the daemon) and hands it in with the listing's total; the scroll bar spans
the total, and a scroll past the page asks for another (WindowMoved). Rows are drawn
one line at a time (textual's Line API), only those on screen. It looks and moves as
the DataTable it replaces (cursor row, zebra stripes, fixed header, columns that only
grow); cells are single-line Text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gbatch.tui.data import FIRST_PAGE_ROWS

Row = tuple[str, Sequence[Text]]  # (row key, cells in column order)

# Rows read beyond the view on each side, so that a scroll of fewer stays on the page
# and the next read (every refresh) follows the view.
MARGIN_ROWS = 100
_PAD = 1  # blank cells either side of each cell, as DataTable's cell_padding


class PagedTable(ScrollView, can_focus=True):
    """Rows `start`..`start + len(rows)` of a listing of `total`, with a cursor among all `total`.

    show_page hands the rows in; cursor_row is the cursor.
    """

    DEFAULT_CSS = """
    PagedTable {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .pagedtable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .pagedtable--header { background-tint: $foreground 5%; }
        }
        &:dark > .pagedtable--even-row { background: $surface-darken-1 40%; }
        & > .pagedtable--header { text-style: bold; background: $panel; color: $foreground; }
        &:ansi > .pagedtable--header { background: ansi_bright_blue; color: ansi_default; }
        & > .pagedtable--odd-row { }
        & > .pagedtable--even-row { background: $surface-lighten-1 50%; }
        & > .pagedtable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "pagedtable--header",
        "pagedtable--cursor",
        "pagedtable--even-row",
        "pagedtable--odd-row",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_by(-1)", "Cursor up", show=False),
        Binding("down", "cursor_by(1)", "Cursor down", show=False),
        Binding("pageup", "cursor_page(-1)", "Page up", show=False),
        Binding("pagedown", "cursor_page(1)", "Page down", show=False),
        Binding("home,ctrl+home", "cursor_to_end(False)", "Top", show=False),
        Binding("end,ctrl+end", "cursor_to_end(True)", "Bottom", show=False),
    ]

    class Selected(Message):
        """Enter (or a click) on the cursor row."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    class HeaderSelected(Message):
        """A click on a column's header."""

        def __init__(self, column_key: str) -> None:
            super().__init__()
            self.column_key = column_key

    class WindowMoved(Message):
        """The view scrolled to rows the page does not hold: read the `wanted()` page.

        A page read for where the view was is followed by one more read: the screen reads
        again when this comes during a read.
        """

    def __init__(self, columns: Sequence[tuple[str, str]], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.column_keys = [key for key, _ in columns]
        self.headers = [Text(header) for _, header in columns]
        self.widths = [cell_len(header) for _, header in columns]
        self.total = 0
        self.start = 0
        self.rows: list[Row] = []
        self.cursor_row = 0

    # -- what it holds -------------------------------------------------------------

    @property
    def row_count(self) -> int:
        """Rows in the whole listing (DataTable's name), not on the page."""
        return self.total

    @property
    def cursor_key(self) -> str | None:
        """The key of the cursor's row; None when there is none or it is off the page."""
        row = self.row_at(self.cursor_row)
        return None if row is None else row[0]

    def row_at(self, index: int) -> Row | None:
        at = index - self.start
        return self.rows[at] if 0 <= at < len(self.rows) else None

    def view_height(self) -> int:
        """Rows the view shows (its height less the header); 0 before layout."""
        return max(self.scrollable_content_region.height - 1, 0)

    def wanted(self) -> tuple[int, int]:
        """(offset, limit) of the page to read: the rows in view and MARGIN_ROWS either side.

        A first page before the view has a size.
        """
        shown = self.view_height()
        if not shown:
            return 0, FIRST_PAGE_ROWS
        first = int(self.scroll_y)
        offset = max(0, first - MARGIN_ROWS)
        return offset, first + shown + MARGIN_ROWS - offset

    def covers_view(self) -> bool:
        """Whether the page holds every row the view shows."""
        first = int(self.scroll_y)
        last = min(first + self.view_height(), self.total)
        return self.start <= first and last <= self.start + len(self.rows)

    def show_page(self, total: int, start: int, rows: Sequence[Row]) -> None:
        """Hold rows `start`.. of a listing of `total`, keeping the cursor and the scroll offset.

        The cursor stays on its row's key when the new page has it (a refresh, a new sort),
        else at its place; the scroll offset stays (clamped to the new total), as
        DataTable's sync did.
        """
        key = self.cursor_key
        self.total, self.start, self.rows = total, start, list(rows)
        if key is not None:
            for at, (row_key, _) in enumerate(self.rows):
                if row_key == key:
                    self.cursor_row = start + at
                    break
        self.cursor_row = max(0, min(self.cursor_row, total - 1))
        self._grow(self.rows)
        self.virtual_size = Size(self._line_width(), total + 1)
        # Fewer rows than the view was scrolled past (a filter): back within them.
        bottom = max(0, total + 1 - self.scrollable_content_region.height)
        if self.scroll_y > bottom:
            self.scroll_target_y = self.scroll_y = bottom
        self.refresh()

    def _grow(self, rows: Sequence[Row]) -> None:
        """Columns widen to their widest cell seen, and never narrow (as DataTable's)."""
        for at, cells in enumerate(zip(*(cells for _, cells in rows), strict=True)):
            widest = max(cell_len(text) for text in {cell.plain for cell in cells})
            self.widths[at] = max(self.widths[at], widest)

    def _line_width(self) -> int:
        return sum(width + 2 * _PAD for width in self.widths)

    # -- drawing -------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        base = self.rich_style
        if y == 0:
            style = base + self.get_component_rich_style("pagedtable--header")
            cells: Sequence[Text] = self.headers
            over = None
        else:
            index = scroll_y + y - 1
            if index >= self.total:
                return Strip.blank(width, base)
            row = self.row_at(index)
            cells = row[1] if row is not None else ()
            zebra = "pagedtable--even-row" if index % 2 == 0 else "pagedtable--odd-row"
            style = base + self.get_component_rich_style(zebra)
            over = None
            if index == self.cursor_row:
                over = self.get_component_rich_style("pagedtable--cursor")
        # The line's style reaches the view's edge past the last column, as DataTable's.
        fill = style if over is None else style + over
        return self._strip(cells, style, over).crop_extend(scroll_x, scroll_x + width, fill)

    def _strip(self, cells: Sequence[Text], style: Style, over: Style | None = None) -> Strip:
        """One line of `cells` padded to the columns' widths (blank cells when none:
        a row not read yet), `style` under the cells' own, `over` above them."""
        line = Text(no_wrap=True, end="")
        for at, width in enumerate(self.widths):
            cell = cells[at] if at < len(cells) else Text()
            line.append(" " * _PAD)
            line.append_text(cell)
            line.append(" " * (width - cell_len(cell.plain) + _PAD))
        segments = Segment.apply_style(line.render(self.app.console), style, over)
        return Strip(segments, self._line_width())

    # -- moving --------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if int(old_value) != int(new_value) and self.total and not self.covers_view():
            self.post_message(self.WindowMoved())

    def move_cursor(self, index: int) -> None:
        """The cursor to row `index` (clamped), the view scrolled to show it."""
        if not self.total:
            return
        self.cursor_row = max(0, min(index, self.total - 1))
        shown = max(self.view_height(), 1)
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + shown:
            self.scroll_to(y=self.cursor_row - shown + 1, animate=False)
        self.refresh()

    def action_cursor_by(self, rows: int) -> None:
        self.move_cursor(self.cursor_row + rows)

    def action_cursor_page(self, pages: int) -> None:
        self.move_cursor(self.cursor_row + pages * max(self.view_height(), 1))

    def action_cursor_to_end(self, last: bool) -> None:
        self.move_cursor(self.total - 1 if last else 0)

    def action_select_cursor(self) -> None:
        key = self.cursor_key
        if key is not None:
            self.post_message(self.Selected(key))

    def on_click(self, event: events.Click) -> None:
        """A click on a header picks its column (HeaderSelected); one on a row takes the cursor.

        A click on the cursor's row selects it, as in DataTable.
        """
        event.stop()
        if event.y == 0:
            x = event.x + int(self.scroll_x)
            for key, width in zip(self.column_keys, self.widths, strict=True):
                x -= width + 2 * _PAD
                if x < 0:
                    self.post_message(self.HeaderSelected(key))
                    return
            return
        index = int(self.scroll_y) + event.y - 1
        if index >= self.total:
            return
        if index == self.cursor_row:
            self.action_select_cursor()
        else:
            self.move_cursor(index)
