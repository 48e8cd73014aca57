"""Cancel and requeue (each asks first), hold and release from the queue, and the
daemon's reason when it refuses."""

from __future__ import annotations

import time

from conftest import Head, drive, row_key_under_cursor, table_rows, text_of, tui, until
from textual.pilot import Pilot

from gbatch.tui.dialogs import ConfirmDialog
from gbatch.tui.queue import QueueScreen


def test_cancel_asks_first_and_no_leaves_the_job_alone(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "victim", "-H", "--wrap", "true")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        assert f"Cancel job {job_id} (victim)?" in str(app.screen.query_one("#question").content)
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), "the queue again")
        assert text_of(app, "#status") == f"job {job_id}: not cancelled"
        assert tui_head.state(job_id) == "PENDING"

        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        await pilot.press("y")
        await until(pilot, lambda: "cancel sent" in text_of(app, "#status"), "the outcome")
        assert tui_head.state(job_id) == "CANCELLED"
        await until(pilot, lambda: table_rows(app, "#jobs") == [], "the row to go")

    drive(app, scenario)


def test_cancel_of_a_running_job_stops_it(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "runner", "--wrap", "sleep 300")
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("c", "y")
        await until(pilot, lambda: "cancel sent" in text_of(app, "#status"), "the outcome")

    drive(app, scenario)
    tui_head.wait_state(job_id, "CANCELLED", timeout=15)


def test_hold_then_release_a_pending_job(tui_head: Head) -> None:
    # Three GPUs asked, two usable (the third is busy outside gbatch): it waits.
    job_id = tui_head.sbatch("-J", "waiter", "--gpus", "3", "--wrap", "true")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("h")
        await until(pilot, lambda: table_rows(app, "#jobs")[0][6] == "(JobHeldUser)", "held")
        assert text_of(app, "#status") == f"job {job_id}: held"
        assert tui_head.job(job_id)["held"] is True
        await pilot.press("r")
        await until(pilot, lambda: table_rows(app, "#jobs")[0][6] != "(JobHeldUser)", "freed")
        assert text_of(app, "#status") == f"job {job_id}: released"
        assert tui_head.job(job_id)["held"] is False

    drive(app, scenario)


def test_a_refused_hold_shows_the_daemons_reason(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "busy", "--wrap", "sleep 300")
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("h")
        expected = (
            f"job {job_id}: hold refused: Job is no longer pending execution: "
            f"job {job_id} is RUNNING"
        )
        await until(pilot, lambda: text_of(app, "#status") == expected, "the refusal")
        assert tui_head.job(job_id)["held"] is False

    drive(app, scenario)


def test_requeue_asks_first_then_stops_the_run_and_queues_it_again(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "again", "--wrap", "sleep 300")
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        question = str(app.screen.query_one("#question").content)
        assert f"Requeue job {job_id} (again)? A running job is stopped first." in question
        await pilot.press("n")
        await until(pilot, lambda: text_of(app, "#status") == f"job {job_id}: not requeued", "no")
        assert tui_head.state(job_id) == "RUNNING"

        await pilot.press("R", "y")
        await until(pilot, lambda: text_of(app, "#status") == f"job {job_id}: requeued", "done")

    drive(app, scenario)
    # Stopped, then queued again: the second attempt runs.
    deadline = time.monotonic() + 30
    while tui_head.job(job_id)["attempt"] < 2:
        assert time.monotonic() < deadline, tui_head.job(job_id)
        time.sleep(0.2)


def test_a_refused_requeue_shows_the_daemons_reason(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "once", "--no-requeue", "--wrap", "sleep 300")
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("R", "y")
        prefix = f"job {job_id}: requeue refused: "
        await until(pilot, lambda: text_of(app, "#status").startswith(prefix), "the refusal")
        assert "requeue" in text_of(app, "#status").removeprefix(prefix).lower()
        assert tui_head.state(job_id) == "RUNNING"

    drive(app, scenario)
