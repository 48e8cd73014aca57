"""How `gbatch tui` starts: the queue is read while textual is imported, the first frame
already shows those rows, and a failed early read is reported as any read is."""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
from pathlib import Path

import pytest
from conftest import SIZE, Head, socket_of, table_rows, text_of, until
from integration.conftest import wait_for

from gbatch.cli import tui as tui_command
from gbatch.cli.context import Context
from gbatch.protocol.client import DaemonUnavailable
from gbatch.tui.app import GbatchApp, make_app
from gbatch.tui.data import DaemonLink, QueuePage, QueueView
from gbatch.tui.rows import QueueFilter

ROOTS = QueueView(QueueFilter(user="root"))  # the view the app opens with, as root


class CountingLink(DaemonLink):
    """A real DaemonLink that counts the queue reads it has finished."""

    def __init__(self, socket_path: Path) -> None:
        super().__init__(socket_path)
        self.reads = 0

    def _read_page(
        self, view: QueueView, offset: int, limit: int, now: float | None = None
    ) -> QueuePage:
        page = super()._read_page(view, offset, limit, now)
        self.reads += 1
        return page


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gbatch-prefetch"]


def test_rows_read_before_the_app_starts_are_in_its_first_frame_and_not_read_again(
    tui_head: Head,
) -> None:
    ids = [tui_head.sbatch("-J", f"early{i}", "-H", "--wrap", "true") for i in range(3)]
    link = CountingLink(socket_of(tui_head))
    link.prefetch_queue(ROOTS)
    wait_for(lambda: link.reads == 1, timeout=10, what="the prefetched read")
    app = make_app(socket_of(tui_head), user="root", refresh_seconds=0.2, link=link)
    frames: list[str] = []
    display = app._display

    def record(screen: object, renderable: object) -> None:
        display(screen, renderable)  # type: ignore[arg-type]
        render = getattr(renderable, "render_segments", None)
        frames.append(render(app.console) if render is not None else "")

    app._display = record  # type: ignore[method-assign]

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: frames, "the first frame")
            # Before any other read: the rows came from the prefetch, in frame one.
            assert link.reads == 1
            assert all(f"early{i}" in frames[0] for i in range(3)), frames[0]
            assert [int(row[0]) for row in table_rows(app, "#jobs")] == ids
            assert text_of(app, "#counts").startswith(" PD 3  CF 0  R 0  CG 0 | mine (root)")
            # And the view stays live: the refresh timer reads again.
            await until(pilot, lambda: link.reads >= 3, "two more reads")

    asyncio.run(main())


def test_a_failed_early_read_is_raised_by_the_next_read_and_never_shown() -> None:
    link = DaemonLink(Path("/nonexistent/gbatchd.sock"))
    link.prefetch_queue(ROOTS)
    with pytest.raises(DaemonUnavailable):
        link.queue_page(ROOTS)  # waits for the prefetch and raises its error

    link.prefetch_queue(ROOTS)
    wait_for(lambda: not prefetch_threads(), timeout=10, what="the prefetch to fail")
    assert link.prefetched_queue() is None  # nothing for the first frame
    with pytest.raises(DaemonUnavailable):
        link.queue_page(ROOTS)  # reads anew, and fails as a read does


def test_the_early_read_is_taken_once(tui_head: Head) -> None:
    tui_head.sbatch("-J", "once", "-H", "--wrap", "true")
    link = CountingLink(socket_of(tui_head))
    assert link.prefetched_queue() is None  # no prefetch: nothing to take
    link.prefetch_queue(ROOTS)
    first = link.queue_page(ROOTS)  # waits for the prefetched read rather than reading again
    assert link.reads == 1 and [job.spec.name for job in first.jobs] == ["once"]
    assert link.prefetched_queue() is None
    link.queue_page(ROOTS)
    assert link.reads == 2
    # A prefetch of another view is no answer to this one: read anew.
    link.prefetch_queue(QueueView(QueueFilter(user="root"), finished=True))
    assert link.queue_page(ROOTS).view == ROOTS
    wait_for(lambda: link.reads == 4, timeout=10, what="both reads")
    link.close()


def test_gbatch_tui_prefetches_and_runs_the_app_with_the_collector_on(
    tui_head: Head, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command turns cyclic GC off while textual is imported; the app must never
    # run with it still off (garbage cycles would pile up for as long as it runs).
    tui_head.sbatch("-J", "cli", "-H", "--wrap", "true")
    seen: dict[str, object] = {}

    def fake_run(app: GbatchApp) -> None:
        link = app.services.link
        wait_for(lambda: not prefetch_threads(), timeout=10, what="the prefetch")
        seen["gc"] = gc.isenabled()
        snapshot = link.prefetched_queue()
        seen["names"] = None if snapshot is None else [j.spec.name for j in snapshot.jobs]
        link.close()

    monkeypatch.setattr(GbatchApp, "run", fake_run)
    monkeypatch.setattr(tui_command, "_need_a_terminal", lambda: None)  # pytest's stdin
    monkeypatch.setenv("GBATCH_HOME", str(tui_head.home))
    monkeypatch.delenv("GBATCH_SOCKET", raising=False)
    try:
        assert tui_command.run(argparse.Namespace(refresh=1.0), Context()) == 0
    finally:
        gc_was_on = gc.isenabled()
        gc.unfreeze()  # the command froze this test process's heap: give it back
        gc.enable()
    assert seen == {"gc": True, "names": ["cli"]}
    assert gc_was_on
