"""Navigation: the job view (record, events, live log, search), the nodes view, the
help screen; and what the views do when the daemon goes away."""

from __future__ import annotations

import json
import os
import pty
import shlex
import subprocess

import pytest
from conftest import (
    ME,
    Head,
    drive,
    row_key_under_cursor,
    table_rows,
    text_of,
    tui,
    until,
)
from integration.conftest import GBATCH
from textual.pilot import Pilot
from textual.widgets import DataTable, Log

from gbatch.tui.help import HelpScreen
from gbatch.tui.jobview import JobScreen
from gbatch.tui.nodes import NodesScreen
from gbatch.tui.queue import QueueScreen

# Ten lines, then the rest once the test opens the gate: the view must show lines while
# the job still writes, whatever the load (a job that wrote on a clock could finish
# before a loaded machine's first read).
CHATTY = (
    "for i in $(seq 1 10); do echo step $i; done; "
    "while [ ! -e {gate} ]; do sleep 0.05; done; "
    "for i in $(seq 11 30); do echo step $i; done; sleep 300"
)


def test_job_view_shows_record_events_and_follows_the_log(tui_head: Head) -> None:
    gate = tui_head.home.parent / "chatty-gate"
    chatty = CHATTY.format(gate=shlex.quote(str(gate)))
    job_id = tui_head.sbatch("-J", "chatty", "--gpus", "1", "--wrap", chatty)
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), "the job view")
        await until(pilot, lambda: "Events:" in text_of(app, "#record"), "the record")
        record = text_of(app, "#record")
        assert f"JobId={job_id} JobName=chatty" in record
        assert "NodeList=local Gres=gpu:1" in record
        assert "RUNNING" in record.split("Events:")[1]  # the history, with its states
        assert "'chatty' of root: RUNNING on local" in text_of(app, "#title")
        log = app.screen.query_one("#log", Log)
        seen = await until(pilot, lambda: log.line_count > 1 and log.line_count, "first lines")
        assert seen <= 10, "the log should arrive while the job writes it"
        gate.touch()
        await until(pilot, lambda: "step 30" in log.lines, "the last line", 30)

        await pilot.press("slash", *"step 1", "enter")  # step 1, 10..19
        await until(pilot, lambda: "match 1/11" in text_of(app, "#status"), "a match")
        assert log.scroll_y == 0
        await pilot.press("n", "n")
        assert "match 3/11, line 11" in text_of(app, "#status")
        await pilot.press("N")
        assert "match 2/11, line 10" in text_of(app, "#status")
        await pilot.press("slash", *"nowhere", "enter")
        assert "no line holds 'nowhere'" in text_of(app, "#status")

        await pilot.press("h")  # refused: it runs; the reason comes from the daemon
        await until(pilot, lambda: "hold refused: Job is no longer" in text_of(app, "#status"), "r")
        await pilot.press("c", "y")  # cancel from the job view ends the log
        await until(pilot, lambda: "end of log" in text_of(app, "#status"), "the log's end", 15)
        await until(pilot, lambda: "CANCELLED" in text_of(app, "#title"), "the final state")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), "back in the queue")

    drive(app, scenario)


def test_nodes_view_lists_each_gpu_with_its_job_owner_and_outside_use(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "one", "--gpus", "1", "--wrap", "sleep 300")
    tui_head.wait_state(job_id, "RUNNING")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NodesScreen), "the nodes view")
        await until(pilot, lambda: len(table_rows(app, "#nodes")) == 4, "node and 3 GPUs")
        node, gpu0, gpu1, gpu2 = table_rows(app, "#nodes")
        assert node[:3] == ["local 1/3 alloc", "mixed", ""]
        assert gpu0 == [
            "  gpu0 Simulated GPU",
            "alloc",
            "0.0/80",
            "0%",
            str(job_id),
            "root",
            "simulated",
        ]
        assert gpu1[1] == "free"
        assert gpu2[1:4] == ["busy", "3.9/80", "37%"]
        assert gpu2[6] == "1 outside gbatch, simulated"
        table = app.screen.query_one("#nodes", DataTable)
        assert str(table.get_row("gpu:local:2")[1].style) == "bold magenta"
        assert "1 allocated, 1 busy outside gbatch, 1 free" in text_of(app, "#summary")

        tui_head.run("node", "drain", "local", "--reason", "fan noise", check=True)
        await until(pilot, lambda: table_rows(app, "#nodes")[0][1] == "drained", "drained")
        assert table_rows(app, "#nodes")[0][6] == "fan noise [root]"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), "back in the queue")

    drive(app, scenario)


def test_help_lists_the_keys_of_the_screen_it_covers(tui_head: Head) -> None:
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        text = text_of(app, "#help-text")
        for line in (
            "c            Cancel",
            "m            Mine",
            "/            Filter",
            "q            Quit",
        ):
            assert line in text
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, QueueScreen), "the queue again")

    drive(app, scenario)


def test_a_vanished_daemon_is_a_status_line_and_the_last_data_stays(tui_head: Head) -> None:
    job_id = tui_head.sbatch("-J", "kept", "-H", "--wrap", "true")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(job_id), "row")
        tui_head.stop()
        await until(pilot, lambda: "no gbatch daemon answers" in text_of(app, "#status"), "err")
        assert "s old)" in text_of(app, "#status")
        assert table_rows(app, "#jobs")[0][2] == "kept"
        tui_head.start()
        await until(pilot, lambda: text_of(app, "#status") == "the daemon answers again", "ok")

    drive(app, scenario)


def test_gbatch_tui_without_a_daemon_says_so_in_one_line(tui_head: Head) -> None:
    tui_head.stop()
    result = subprocess.run(
        [*GBATCH, "tui"], env=tui_head.env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 3
    assert result.stderr.startswith("gbatch tui: error: no gbatch daemon answers at ")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("stdin_terminal", [False, True], ids=["stdin-devnull", "stdout-piped"])
def test_gbatch_tui_without_a_terminal_refuses_in_one_line(
    tui_head: Head, stdin_terminal: bool
) -> None:
    # Without a terminal textual drew escape codes into the pipe and ran on for minutes.
    primary, secondary = pty.openpty()
    try:
        result = subprocess.run(
            [*GBATCH, "tui"],
            env=tui_head.env,
            cwd=tui_head.home,
            stdin=secondary if stdin_terminal else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        os.close(primary)
        os.close(secondary)
    stream = "stdout" if stdin_terminal else "stdin"
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"gbatch tui: error: {stream} is not a terminal, and the full-screen view needs one. "
        "In a script use `gbatch squeue` (add -i SECONDS to watch it)\n"
    )


def test_array_tasks_read_n_k_in_the_queue_and_the_job_views_title(tui_head: Head) -> None:
    array = tui_head.sbatch("-J", "sweep", "--array", "3-5", "-H", "--wrap", "true")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        # One row a task, as squeue -r (pending tasks are not folded into N_[3-5]).
        labels = [f"{array}_{k}" for k in (3, 4, 5)]
        await until(pilot, lambda: [r[0] for r in table_rows(app, "#jobs")] == labels, "tasks")
        await pilot.press("slash", *f"{array}_4", "enter")  # the filter matches N_K
        await until(pilot, lambda: len(table_rows(app, "#jobs")) == 1, "one task")
        assert table_rows(app, "#jobs")[0][:3] == [f"{array}_4", ME, "sweep"]
        assert row_key_under_cursor(app, "#jobs") == str(array + 1)  # task 4: its own id
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, JobScreen), "the job view")
        await until(pilot, lambda: "'sweep' of" in text_of(app, "#title"), "the record")
        assert text_of(app, "#title").startswith(f" job {array}_4 'sweep' of {ME}: PENDING")

    drive(app, scenario)


def test_nodes_view_draws_each_gpus_utilisation_sparkline_and_its_runs_live(
    tui_head: Head,
) -> None:
    from gbatch.tui.activity import LEVELS

    job_id = tui_head.sbatch("-J", "one", "--gpus", "1", "--wrap", "sleep 300")
    job = tui_head.wait_state(job_id, "RUNNING")
    (gpu,) = job["gpus"]  # type: ignore[misc]
    app = tui(tui_head)

    def activity(index: int) -> list[str]:
        rows = {row[0]: row for row in table_rows(app, "#activity")}
        return rows.get(f"local/{index}", ["", "", "", ""])

    def last_bar(index: int) -> str:
        return activity(index)[1].rstrip()[-1:]

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NodesScreen), "the nodes view")
        await until(pilot, lambda: len(table_rows(app, "#activity")) == 3, "a row per GPU")
        # Samples of 0 % so far: the lowest bar; the job's run fills its lane up to now.
        await until(pilot, lambda: last_bar(gpu) == LEVELS[0], "the 0 % samples", 30)
        _, _, lane, users = activity(gpu)
        assert lane.endswith("█") and users == ME
        assert activity(2)[3] == ""  # the GPU busy outside gbatch: no run of gbatch's
        simulation = tui_head.home / "simulated-gpus.json"
        described = json.loads(simulation.read_text())
        described["gpus"][gpu]["utilization_pct"] = 95
        simulation.write_text(json.dumps(described))  # the agent reads it at each report
        await until(pilot, lambda: last_bar(gpu) not in ("", LEVELS[0]), "the bar rising", 30)
        assert last_bar(1 - gpu if gpu < 2 else 0) in ("", LEVELS[0])  # the others stay

    drive(app, scenario)
