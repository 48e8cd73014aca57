"""The queue view: counts, mine/all, state and text filters, sort, live refresh."""

from __future__ import annotations

from conftest import (
    Head,
    drive,
    require_root,
    row_key_under_cursor,
    seed,
    submit_as_nobody,
    table_rows,
    text_of,
    tui,
    until,
)
from textual.pilot import Pilot


def ids_shown(app: object) -> list[int]:
    return [int(row[0]) for row in table_rows(app, "#jobs")]  # type: ignore[arg-type]


def time_of(app: object, job_id: int) -> str:
    rows = table_rows(app, "#jobs")  # type: ignore[arg-type]
    return next(row[5] for row in rows if row[0] == str(job_id))


def test_queue_shows_my_jobs_with_counts_time_and_pending_reasons(tui_head: Head) -> None:
    ids = seed(tui_head)
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(table_rows(app, "#jobs")) == 4, "the four jobs")
        rows = {row[2]: row for row in table_rows(app, "#jobs")}
        assert rows["train"][:5] == [str(ids["train"]), "root", "train", "R", "1"]
        assert rows["train"][6] == "local"
        assert rows["big"][3:] == ["PD", "2", "0:00/UNLIMITED", "(Resources)"]
        assert rows["later"][6] == "(JobHeldUser)"
        assert text_of(app, "#counts").startswith(" PD 2  CF 0  R 2  CG 0 | mine (root)")

    drive(app, scenario)


def test_mine_is_the_default_and_m_shows_every_users_jobs(tui_head: Head) -> None:
    require_root()
    mine = tui_head.sbatch("-J", "mine", "-H", "--wrap", "true")
    theirs = submit_as_nobody(tui_head, "theirs")
    app = tui(tui_head, user="root")

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: ids_shown(app) == [mine], "only my job")
        await pilot.press("m")
        await until(pilot, lambda: ids_shown(app) == [mine, theirs], "everyone's jobs")
        assert "all users" in text_of(app, "#counts")
        assert table_rows(app, "#jobs")[1][1:3] == ["nobody", "theirs"]
        await pilot.press("m")
        await until(pilot, lambda: ids_shown(app) == [mine], "only mine again")

    drive(app, scenario)


def test_state_filter_text_filter_and_sort(tui_head: Head) -> None:
    ids = seed(tui_head)
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(ids_shown(app)) == 4, "the four jobs")
        await pilot.press("s")  # pending only
        await until(pilot, lambda: ids_shown(app) == [ids["big"], ids["later"]], "PD jobs")
        assert "st:PD" in text_of(app, "#counts")
        await pilot.press("s")  # running only
        await until(pilot, lambda: ids_shown(app) == [ids["train"], ids["eval"]], "R jobs")
        await pilot.press("s", "s")  # completing, then any again
        await until(pilot, lambda: len(ids_shown(app)) == 4, "every state again")

        await pilot.press("slash", *"resou")  # matches big's (Resources)
        await until(pilot, lambda: ids_shown(app) == [ids["big"]], "the text filter")
        await pilot.press("enter")  # back to the table, the filter kept
        assert ids_shown(app) == [ids["big"]]
        await pilot.press("escape")
        await until(pilot, lambda: len(ids_shown(app)) == 4, "the filter cleared")

        await pilot.press("O")  # reverse: highest id first
        await until(pilot, lambda: ids_shown(app) == sorted(ids.values(), reverse=True), "desc")
        await pilot.press("O", "o", "o", "o")  # ascending, by user, name, then state
        assert "sort:name" in text_of(app, "#counts") or "sort:state" in text_of(app, "#counts")
        by_state = [ids["train"], ids["eval"], ids["big"], ids["later"]]
        await until(pilot, lambda: ids_shown(app)[:2] == sorted(by_state[2:]), "PD first")
        await pilot.press("o")  # by GPUs
        await until(
            pilot,
            lambda: ids_shown(app) == [ids["later"], ids["train"], ids["eval"], ids["big"]],
            "by GPUs, ties by id",
        )

    drive(app, scenario)


def test_refresh_keeps_the_cursor_on_its_job_while_rows_come_and_change(
    tui_head: Head,
) -> None:
    ids = seed(tui_head)
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(ids_shown(app)) == 4, "the four jobs")
        await pilot.press("O")  # newest first: a new job lands above the cursor
        # The cursor stayed on its job (train) through the re-sort; one up is eval.
        await until(pilot, lambda: row_key_under_cursor(app, "#jobs") == str(ids["train"]), "c")
        await pilot.press("up")
        assert row_key_under_cursor(app, "#jobs") == str(ids["eval"])
        time_before = time_of(app, ids["train"])
        new = tui_head.sbatch("-J", "new", "-H", "--wrap", "true")
        await until(pilot, lambda: ids_shown(app)[0] == new, "the new job on top")
        assert row_key_under_cursor(app, "#jobs") == str(ids["eval"])
        # Rows refresh in place: the running job's time ticks, the cursor stays.
        await until(pilot, lambda: time_of(app, ids["train"]) != time_before, "a tick", 5)
        assert row_key_under_cursor(app, "#jobs") == str(ids["eval"])

    drive(app, scenario)


def test_f_shows_the_jobs_that_ended_and_back(tui_head: Head) -> None:
    done = tui_head.sbatch("-J", "done", "--wrap", "true")
    failed = tui_head.sbatch("-J", "broken", "--retries", "0", "--wrap", "exit 3")
    gone = tui_head.sbatch("-J", "gone", "-H", "--wrap", "true")
    tui_head.run("scancel", str(gone), check=True)
    waiting = tui_head.sbatch("-J", "waiting", "-H", "--wrap", "true")
    tui_head.wait_state(done, "COMPLETED")
    tui_head.wait_state(failed, "FAILED")
    app = tui(tui_head)

    async def scenario(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: ids_shown(app) == [waiting], "the queue: the held job")
        await pilot.press("f")
        await until(pilot, lambda: ids_shown(app) == [done, failed, gone], "the ended jobs")
        states = [row[3] for row in table_rows(app, "#jobs")]
        assert states == ["CD", "F", "CA"]
        assert text_of(app, "#counts").startswith(
            " ended (7 days): CD 1  F 1  CA 1  TO 0  NF 0  OOM 0  PR 0 | mine (root)"
        )
        await pilot.press("s", "s")  # any -> CD -> F
        await until(pilot, lambda: ids_shown(app) == [failed], "the failed job alone")
        await pilot.press("enter")
        await until(pilot, lambda: "ExitCode=3:0" in text_of(app, "#record"), "its record")
        await pilot.press("escape", "f")
        await until(pilot, lambda: ids_shown(app) == [waiting], "the queue again")
        assert text_of(app, "#counts").startswith(" PD 1")

    drive(app, scenario)
