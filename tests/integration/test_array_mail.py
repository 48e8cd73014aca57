"""Whole-array mail (issue 17): an array without ARRAY_TASKS is mailed BEGIN once, when
its first task starts, and END or FAIL once, when its last task has ended, a pending
tail cancelled whole counting as its tasks ending. The real store writes the outbox rows
with the state change; the real outbox worker delivers them to a real SMTP server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head, wait_for
from oracles import deliver_due
from test_notifications import Inbox, notify_config, smtp_server

from gbatch.core.model import JobSpec, JobState
from gbatch.head.notify import Policy
from gbatch.head.outbox import Outbox
from gbatch.head.store import Store, Submission
from gbatch.site.config import Config

T0 = 1_767_225_600.0


class Lab:
    """A store and its outbox, with mail going to a real SMTP server."""

    def __init__(self, path: Path, port: int) -> None:
        self.path = path
        self.config = Config(smtp_host="127.0.0.1", smtp_port=port, mail_from="g@lab.test")
        self.open()

    def open(self) -> None:
        self.store = Store(self.path, Policy.from_config(self.config))

    def deliver(self) -> int:
        return deliver_due(Outbox(self.store, self.config, lambda: T0), T0 + 1000)

    def array(self, n: int, mail_type: str, *, rows: int | None = None) -> list[int]:
        """Submit an array of `n` tasks, its first `rows` rows (the rest its tail)."""
        base = JobSpec(
            name="sweep",
            command=("true",),
            mail_type=mail_type,
            mail_user="ada@lab.test",
            array=f"0-{n - 1}",
        )
        made = n if rows is None else rows
        specs = tuple(
            JobSpec(**{**vars(base), "array_task": i, "array_pos": i}) for i in range(made)
        )
        (ids,) = self.store.submit_many(
            [Submission(specs, 1000, "ada", tail_count=n if made < n else 0)], T0
        )
        assert isinstance(ids, list)
        return ids

    def start(self, job_id: int) -> None:
        self.store.set_state(job_id, JobState.CONFIGURING, "", T0 + 5, node="local", attempt=1)
        self.store.set_state(job_id, JobState.RUNNING, "", T0 + 5, start_time=T0 + 5)

    def end(self, job_id: int, state: JobState = JobState.COMPLETED, code: int = 0) -> None:
        self.store.set_state(job_id, state, "", T0 + 60, end_time=T0 + 60, exit_code=code)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[Lab, Inbox]]:
    smtp, inbox = smtp_server()
    lab = Lab(tmp_path / "gbatch.db", smtp.port)
    try:
        yield lab, inbox
    finally:
        lab.store.close()
        smtp.stop()


@pytest.fixture
def stopped_heads() -> Iterator[list[Head]]:
    heads: list[Head] = []
    yield heads
    for head in heads:
        head.stop()
        kill_leftover_jobs(head.home)


def subjects(inbox: Inbox) -> list[str]:
    return [str(mail["Subject"]) for mail in inbox.messages]


def test_an_array_of_three_with_end_is_mailed_once_when_its_last_task_ends(
    lab: tuple[Lab, Inbox],
) -> None:
    lab_, inbox = lab
    a, b, c = lab_.array(3, "END")
    for job_id in (a, b, c):
        lab_.start(job_id)
    lab_.end(a)
    lab_.end(b)
    assert lab_.deliver() == 0 and inbox.messages == []
    lab_.end(c)
    assert lab_.deliver() == 1
    assert subjects(inbox) == [
        f"Slurm Array Summary Job_id={a}_* ({a}) Name=sweep Ended, COMPLETED, ExitCode [0-0]"
    ]
    assert inbox.messages[0]["To"] == "ada@lab.test"
    assert "tasks: 3 COMPLETED" in inbox.messages[0].get_content()


def test_begin_is_mailed_once_when_the_arrays_first_task_starts(lab: tuple[Lab, Inbox]) -> None:
    lab_, inbox = lab
    ids = lab_.array(3, "BEGIN,END")
    lab_.start(ids[1])
    lab_.start(ids[0])
    lab_.end(ids[0])
    lab_.start(ids[2])
    assert lab_.deliver() == 1
    assert subjects(inbox) == [f"Slurm Array Summary Job_id={ids[0]}_* ({ids[0]}) Name=sweep Began"]


def test_a_failed_task_makes_the_arrays_mail_fail(lab: tuple[Lab, Inbox]) -> None:
    lab_, inbox = lab
    failing = lab_.array(3, "FAIL")
    ending = lab_.array(3, "END")  # no FAIL asked: slurmctld's END mail, as for a job
    for ids in (failing, ending):
        for job_id in ids:
            lab_.start(job_id)
        lab_.end(ids[0])
        lab_.end(ids[1], JobState.FAILED, 3)
        lab_.end(ids[2])
    assert lab_.deliver() == 2
    assert sorted(subjects(inbox)) == [
        f"Slurm Array Summary Job_id={failing[0]}_* ({failing[0]}) Name=sweep Failed,"
        " Mixed, ExitCode [0-3]",
        f"Slurm Array Summary Job_id={ending[0]}_* ({ending[0]}) Name=sweep Ended,"
        " Mixed, ExitCode [0-3]",
    ]


def test_array_tasks_keeps_one_mail_per_task(lab: tuple[Lab, Inbox]) -> None:
    lab_, inbox = lab
    ids = lab_.array(3, "BEGIN,END,ARRAY_TASKS")
    for job_id in ids:
        lab_.start(job_id)
        lab_.end(job_id)
    assert lab_.deliver() == 6
    assert not any("Array Summary" in s for s in subjects(inbox))
    ended = sorted(s for s in subjects(inbox) if " Ended, " in s)
    assert ended == [
        f"Slurm Array Task Job_id={ids[0]}_{i} ({job_id}) Name=sweep Ended, Run time 00:00:55,"
        " COMPLETED, ExitCode 0"
        for i, job_id in enumerate(ids)
    ]


def test_scancel_of_a_pending_tail_counts_as_its_tasks_ending(lab: tuple[Lab, Inbox]) -> None:
    lab_, inbox = lab
    # Its first task a row, tasks 1 and 2 one pending record: the first ends, then the
    # tail is cancelled (the mail then); or the tail first, while the first still runs.
    first, *_ = lab_.array(3, "END", rows=1)
    lab_.start(first)
    lab_.end(first)
    assert lab_.deliver() == 0
    assert lab_.store.cancel_tails([first], "cancelled by ada", T0 + 70) == 2
    second, *_ = lab_.array(3, "END", rows=1)
    lab_.start(second)
    assert lab_.store.cancel_tails([second], "cancelled by ada", T0 + 70) == 2
    assert lab_.deliver() == 1
    lab_.end(second, JobState.FAILED, 1)
    assert lab_.deliver() == 1
    assert subjects(inbox) == [
        f"Slurm Array Summary Job_id={first}_* ({first}) Name=sweep Ended, CANCELLED,"
        " ExitCode [0-0]",
        f"Slurm Array Summary Job_id={second}_* ({second}) Name=sweep Ended, Mixed, ExitCode [0-1]",
    ]


def test_with_array_tasks_a_cancelled_tail_is_mailed_once_as_its_record(
    lab: tuple[Lab, Inbox],
) -> None:
    lab_, inbox = lab
    first, *_ = lab_.array(3, "END,ARRAY_TASKS", rows=1)
    assert lab_.store.cancel_tails([first], "cancelled by ada", T0 + 70) == 2
    assert lab_.deliver() == 1
    assert subjects(inbox) == [
        f"Slurm Array Task Job_id={first}_[1-2] ({first + 1}) Name=sweep Ended,"
        " Run time 00:00:00, CANCELLED, ExitCode 0"
    ]


def test_cancelling_an_arrays_pending_rows_at_once_mails_its_end_once(
    lab: tuple[Lab, Inbox],
) -> None:
    lab_, inbox = lab
    ids = lab_.array(3, "END")
    lab_.start(ids[0])
    assert lab_.store.cancel_pending(ids[1:], "cancelled by ada", T0 + 10) == ids[1:]
    assert lab_.deliver() == 0
    lab_.end(ids[0], JobState.CANCELLED)
    assert lab_.store.cancel_pending(lab_.array(2, "END"), "cancelled by ada", T0 + 10)
    assert lab_.deliver() == 2
    assert [s.split(" Name=sweep ")[1] for s in subjects(inbox)] == [
        "Ended, CANCELLED, ExitCode [0-0]"
    ] * 2


def test_the_arrays_end_owed_when_the_daemon_stopped_is_delivered_once_after(
    lab: tuple[Lab, Inbox],
) -> None:
    lab_, inbox = lab
    ids = lab_.array(3, "END")
    for job_id in ids:
        lab_.start(job_id)
        lab_.end(job_id)
    # Stopped between the last task's end and the delivery: the row was written with
    # that end, so the restarted head owes it, once.
    lab_.store.close()
    lab_.open()
    assert lab_.deliver() == 1
    assert lab_.deliver() == 0
    (row,) = lab_.store.outbox(ids[0])
    assert row["delivered"] is not None and row["kind"] == "END"
    (mail,) = inbox.messages
    assert mail["X-Gbatch-Event-Id"] == row["event_id"]
    # The same end written again (a task's change replayed) is not owed twice.
    lab_.store.set_state(ids[2], JobState.PENDING, "requeued", T0 + 61)
    lab_.start(ids[2])
    lab_.end(ids[2])
    assert lab_.deliver() == 0 and len(inbox.messages) == 1


def test_a_daemons_array_is_mailed_once_and_scancel_of_its_held_tail_ends_another(
    tmp_path: Path, stopped_heads: list[Head]
) -> None:
    smtp, inbox = smtp_server()
    try:
        head = make_head(tmp_path / "home", config=notify_config(smtp.port))
        stopped_heads.append(head)
        head.start()
        mail = ("--mail-type=BEGIN,END", "--mail-user=ada@lab.test")
        ran = head.sbatch("-J", "sweep", "--array=0-2", *mail, "--wrap", "true")
        # 40 tasks: past the first rows, the rest wait as one record; held, none starts.
        held = head.sbatch("-J", "held", "--hold", "--array=0-39", *mail, "--wrap", "true")
        for task in range(3):
            head.wait_state(ran + task, "COMPLETED")
        head.run("scancel", str(held), check=True)
        head.wait_state(held, "CANCELLED")
        wait_for(lambda: len(inbox.messages) == 3, what="BEGIN, END and the held array's END")
        head.stop()
    finally:
        smtp.stop()
    assert sorted(subjects(inbox)) == sorted(
        [
            f"Slurm Array Summary Job_id={held}_* ({held}) Name=held Ended, CANCELLED,"
            " ExitCode [0-0]",
            f"Slurm Array Summary Job_id={ran}_* ({ran}) Name=sweep Began",
            f"Slurm Array Summary Job_id={ran}_* ({ran}) Name=sweep Ended, COMPLETED,"
            " ExitCode [0-0]",
        ]
    )
