"""Notifications: who is told of which job event (gbatch/head/notify.py), the outbox rows
the store writes with the state change, and the worker's retries with backoff, on a real
SQLite file. Delivery over real SMTP and HTTP: tests/integration/test_notifications.py."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from docexamples import yaml_block_with
from fullstore import pack_store, unpack_store
from oracles import deliver_due, queue_node_event
from oracles import outbox as outbox_rows

from gbatch.core.model import Gpu, Job, JobSpec, JobState, NotifyHook
from gbatch.head import notify
from gbatch.head.outbox import BATCH, PER_OWNER, DeliveryError, Outbox, Slots, smtp_password
from gbatch.head.store import Store, StoreFull, Submission
from gbatch.site.config import Config, ConfigError, Paths, Webhook, load_config

T0 = 1_767_225_600.0
HOOK = Webhook("ops", "https://hooks.example.org/x", "s3cret", ("FAIL", "NODE_DOWN"))
POLICY = notify.Policy(mail=True, mail_domain="example.org", webhooks=(HOOK,))


def spec(mail_type: str | None = "ALL", **more: object) -> JobSpec:
    return JobSpec(name="train", command=("true",), mail_type=mail_type, **more)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db", POLICY)
    yield opened
    opened.close()


def run_to(store: Store, job_id: int, end: JobState, **fields: object) -> None:
    store.set_state(job_id, JobState.CONFIGURING, "", T0 + 5, node="local", attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0 + 5, start_time=T0 + 5)
    store.set_state(job_id, end, "", T0 + 67, end_time=T0 + 67, **fields)


def rows(store: Store, job_id: int) -> list[tuple[object, object, object]]:
    return [(r["kind"], r["channel"], r["target"]) for r in outbox_rows(store, job_id)]


# -- which events, to whom ----------------------------------------------------------------


def test_all_is_begin_end_fail_requeue_but_not_the_time_limits() -> None:
    types = notify.mail_types("ALL")
    assert {"BEGIN", "END", "FAIL", "REQUEUE"} <= types
    assert "TIME_LIMIT" not in types and "TIME_LIMIT_80" not in types
    assert notify.mail_types("NONE") == frozenset()
    assert notify.mail_types(None) == frozenset()


def test_a_completed_job_with_mail_all_owes_begin_then_end_mail(store: Store) -> None:
    (job_id,) = store.submit([spec(mail_user="ada@lab.org")], 1000, "ada", T0)
    run_to(store, job_id, JobState.COMPLETED, exit_code=0)
    assert rows(store, job_id) == [("BEGIN", "mail", "ada@lab.org"), ("END", "mail", "ada@lab.org")]


def test_a_failure_is_mailed_as_end_without_fail_and_shares_the_webhooks_event_id(
    store: Store,
) -> None:
    (job_id,) = store.submit([spec("END")], 1000, "ada", T0)
    run_to(store, job_id, JobState.FAILED, exit_code=3)
    mail, hook = outbox_rows(store, job_id)
    assert (mail["kind"], mail["channel"], mail["target"]) == ("END", "mail", "ada@example.org")
    assert (hook["kind"], hook["channel"], hook["target"]) == ("FAIL", "webhook", "ops")
    assert mail["event_id"] == hook["event_id"]
    payload = json.loads(str(mail["payload"]))
    assert payload["job"]["exit_code"] == 3 and payload["event_id"] == mail["event_id"]


def test_a_timeout_owes_time_limit_and_fail(store: Store) -> None:
    (job_id,) = store.submit([spec("FAIL,TIME_LIMIT")], 1000, "ada", T0)
    run_to(store, job_id, JobState.TIMEOUT)
    assert [k for k, c, _ in rows(store, job_id) if c == "mail"] == ["TIME_LIMIT", "FAIL"]


def test_a_requeued_run_owes_requeue(store: Store) -> None:
    (job_id,) = store.submit([spec("REQUEUE")], 1000, "ada", T0)
    run_to(store, job_id, JobState.PENDING)
    assert rows(store, job_id) == [("REQUEUE", "mail", "ada@example.org")]


def test_jobs_without_mail_type_or_address_owe_no_mail(tmp_path: Path) -> None:
    opened = Store(tmp_path / "gbatch.db", notify.Policy(mail=True))
    (quiet,) = opened.submit([spec(None)], 1000, "ada", T0)
    (nowhere,) = opened.submit([spec("ALL")], 1000, "ada", T0)  # no mail_user, no domain
    run_to(opened, quiet, JobState.COMPLETED)
    run_to(opened, nowhere, JobState.COMPLETED)
    assert outbox_rows(opened) == []
    opened.close()


def test_array_tasks_mail_as_jobs_only_with_array_tasks() -> None:
    task = Job(1, 1000, "ada", spec("ALL", array_task=3), JobState.COMPLETED, T0)
    assert POLICY.for_job(task, ("END",)) == []
    # Without ARRAY_TASKS, the whole array's END is owed (Store writes it at its end).
    assert POLICY.for_array(task, "FAIL") == [notify.Delivery("FAIL", "mail", "ada@example.org")]
    # A requeue stays the task's own; webhooks stay per task.
    assert POLICY.for_job(task, ("REQUEUE",)) == [
        notify.Delivery("REQUEUE", "mail", "ada@example.org")
    ]
    assert POLICY.for_job(task, ("FAIL",)) == [notify.Delivery("FAIL", "webhook", "ops")]
    each = replace(task, spec=spec("ALL,ARRAY_TASKS", array_task=3))
    assert POLICY.for_job(each, ("END",)) == [notify.Delivery("END", "mail", "ada@example.org")]


def test_an_arrays_end_fails_when_a_task_failed_else_says_how_it_ended() -> None:
    done, cancelled, failed = JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED
    assert notify.array_end({done: 3}) == ("END", done)
    assert notify.array_end({done: 1, cancelled: 2}) == ("END", cancelled)
    assert notify.array_end({done: 1, JobState.TIMEOUT: 1, failed: 1}) == ("FAIL", failed)
    assert notify.array_end({done: 1, JobState.TIMEOUT: 2}) == ("FAIL", JobState.TIMEOUT)


def test_an_array_summary_reads_as_slurmctlds() -> None:
    task = Job(7, 1000, "ada", spec("END", array_task=2, array_pos=2), JobState.FAILED, T0)
    end = notify.array_payload(task, "END", "e1", T0, state=JobState.FAILED, exit_codes=(0, 2))
    assert (
        notify.summary(end)
        == "Slurm Array Summary Job_id=5_* (5) Name=train Ended, Mixed, ExitCode [0-2]"
    )
    killed = {**end, "job": {**end["job"], "max_signal": 9}}  # type: ignore[dict-item]
    assert notify.summary(killed).endswith("Ended, Mixed, MaxSignal [9]")
    begin = notify.array_payload(task, "BEGIN", "e2", T0)
    assert notify.summary(begin) == "Slurm Array Summary Job_id=5_* (5) Name=train Began"


def test_a_tail_cancelled_whole_is_one_end_to_the_webhooks(tmp_path: Path) -> None:
    hook = Webhook("ops", "https://hooks.example.org/x", None, ("END",))
    opened = Store(tmp_path / "gbatch.db", notify.Policy(webhooks=(hook,)))
    specs = tuple(spec(None, array_task=i, array_pos=i) for i in range(2))
    (ids,) = opened.submit_many([Submission(specs, 1000, "ada", tail_count=5)], T0)
    assert isinstance(ids, list)
    assert opened.cancel_tails([ids[0]], "cancelled by ada", T0 + 1) == 3
    (row,) = outbox_rows(opened, ids[0] + 2)
    assert (row["kind"], row["channel"], row["target"]) == ("END", "webhook", "ops")
    assert json.loads(row["payload"])["job"]["array_tasks"] == "2-4"
    opened.close()


def test_a_store_without_a_policy_owes_nothing(tmp_path: Path) -> None:
    opened = Store(tmp_path / "gbatch.db")
    (job_id,) = opened.submit([spec()], 1000, "ada", T0)
    run_to(opened, job_id, JobState.FAILED)
    assert outbox_rows(opened) == []
    opened.close()


def test_cancelling_pending_jobs_owes_end_for_those_that_asked(tmp_path: Path) -> None:
    opened = Store(tmp_path / "gbatch.db", notify.Policy(mail=True, mail_domain="lab.org"))
    asked, silent = opened.submit([spec("END"), spec(None)], 1000, "ada", T0)
    assert opened.cancel_pending([asked, silent], "scancel", T0 + 1) == [asked, silent]
    assert rows(opened, asked) == [("END", "mail", "ada@lab.org")]
    assert rows(opened, silent) == []
    opened.close()


def test_an_event_is_owed_once_per_run_however_often_asked(store: Store) -> None:
    (job_id,) = store.submit([spec("TIME_LIMIT_80")], 1000, "ada", T0)
    store.set_state(job_id, JobState.CONFIGURING, "", T0, attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0, start_time=T0)
    assert store.queue_job_event(job_id, "TIME_LIMIT_80", T0 + 80) == 1
    assert store.queue_job_event(job_id, "TIME_LIMIT_80", T0 + 81) == 0
    assert rows(store, job_id) == [("TIME_LIMIT_80", "mail", "ada@example.org")]


def test_node_events_go_to_the_webhooks_that_ask(store: Store) -> None:
    assert queue_node_event(store, "gpu01", "NODE_DOWN", "no report for 300 s", T0) == 1
    (row,) = outbox_rows(store)
    assert (row["kind"], row["target"], row["job_id"]) == ("NODE_DOWN", "ops", None)
    assert "gpu01" in notify.summary(json.loads(str(row["payload"])))


# -- what they say -------------------------------------------------------------------------


def payload(kind: str, state: str = "COMPLETED", **job: object) -> dict[str, object]:
    fields = {
        "id": 12,
        "array_job_id": None,
        "array_task_id": None,
        "name": "train",
        "state": state,
        "exit_code": 0,
        "submit_time": T0,
        "start_time": T0 + 5,
        "end_time": T0 + 67,
        **job,
    }
    return {"event_id": "e1", "kind": kind, "time": T0 + 67, "job": fields}


@pytest.mark.parametrize(
    ("kind", "state", "subject"),
    [
        ("BEGIN", "RUNNING", "Slurm Job_id=12 Name=train Began, Queued time 00:00:05"),
        (
            "END",
            "COMPLETED",
            "Slurm Job_id=12 Name=train Ended, Run time 00:01:02, COMPLETED, ExitCode 0",
        ),
        (
            "FAIL",
            "FAILED",
            "Slurm Job_id=12 Name=train Failed, Run time 00:01:02, FAILED, ExitCode 0",
        ),
        (
            "TIME_LIMIT_80",
            "RUNNING",
            "Slurm Job_id=12 Name=train Reached 80% of time limit, Run time 00:01:02",
        ),
    ],
)
def test_subjects_read_as_slurms(kind: str, state: str, subject: str) -> None:
    assert notify.summary(payload(kind, state)) == subject


def test_an_array_tasks_subject_names_the_array_and_the_job() -> None:
    text = notify.summary(payload("END", array_job_id=10, array_task_id=2))
    assert text.startswith("Slurm Array Task Job_id=10_2 (12) Name=train Ended")


def test_a_job_name_cannot_put_a_line_break_in_a_header() -> None:
    assert "\n" not in notify.summary(payload("END", name="x\nBcc: all@lab.org"))


def test_webhook_bodies_are_signed_with_hmac_sha256_of_the_exact_body() -> None:
    body = notify.webhook_body(payload("END"), "json")
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert notify.signature("s3cret", body) == f"sha256={expected}"
    assert json.loads(body)["text"].startswith("Slurm Job_id=12")
    assert json.loads(notify.webhook_body(payload("END"), "slack")).keys() == {"text"}


# -- retries ------------------------------------------------------------------------------


def test_retry_delay_doubles_up_to_its_cap() -> None:
    delays = [notify.retry_delay(n, 30.0) for n in (1, 2, 3, 20)]
    assert delays == [30.0, 60.0, 120.0, notify.MAX_RETRY_DELAY]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def test_a_failed_try_waits_its_backoff_then_is_delivered_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = store.submit([spec("BEGIN")], 1000, "ada", T0)
    store.set_state(job_id, JobState.CONFIGURING, "", T0, attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0, start_time=T0)
    clock = Clock()
    outbox = Outbox(store, Config(smtp_host="127.0.0.1", notify_retry_seconds=10), clock)
    sent: list[str] = []

    def down(note: notify.Notification) -> None:
        raise DeliveryError("connection refused")

    monkeypatch.setattr(outbox, "send_mail", down)
    assert deliver_due(outbox, clock.now) == 0
    (row,) = outbox_rows(store, job_id)
    assert (row["attempts"], row["next_attempt_time"], row["delivered"]) == (1, T0 + 10, None)
    assert store.due_notifications(T0 + 9, 10) == []

    monkeypatch.setattr(outbox, "send_mail", lambda note: sent.append(note.event_id))
    clock.now = T0 + 10
    assert deliver_due(outbox, clock.now) == 1
    assert deliver_due(outbox, clock.now + 100) == 0
    (row,) = outbox_rows(store, job_id)
    assert sent == [row["event_id"]] and row["delivered"] == T0 + 10


def test_a_refusal_no_retry_can_change_is_given_up_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue_node_event(store, "gpu01", "NODE_DOWN", "silent", T0)
    outbox = Outbox(store, Config(webhooks=()), Clock())  # the webhook left the config
    assert deliver_due(outbox, T0) == 0
    (row,) = outbox_rows(store)
    assert row["gave_up"] == T0 and "no webhook ops" in str(row["last_error"])
    assert store.due_notifications(T0 + 1e6, 10) == []


def test_the_docs_notifications_example_is_a_config_the_daemon_accepts(tmp_path: Path) -> None:
    block = yaml_block_with("notifications.md", "smtp_host:")
    assert block.startswith("smtp_host:")  # the config as a whole, not a fragment of one
    paths = Paths(tmp_path)
    paths.config_file.write_text(block)
    config = load_config(paths, {})
    assert config.smtp_host == "mail.lab.example"
    assert [hook.form for hook in config.webhooks] == ["json", "slack"]


# -- pruning ------------------------------------------------------------------------------


def test_delivered_rows_are_pruned_after_the_retention_once_an_hour(store: Store) -> None:
    queue_node_event(store, "gpu01", "NODE_DOWN", "silent", T0)
    queue_node_event(store, "gpu02", "NODE_DOWN", "silent", T0)
    queue_node_event(store, "gpu03", "NODE_DOWN", "silent", T0)
    old, fresh, failed = (row["id"] for row in outbox_rows(store))
    store.notification_delivered(int(old), T0)  # type: ignore[arg-type]
    store.notification_delivered(int(fresh), T0 + 86400)  # type: ignore[arg-type]
    store.notification_failed(int(failed), "refused", T0, None)  # type: ignore[arg-type]
    outbox = Outbox(store, Config(webhooks=(HOOK,), notify_retention_days=1), Clock())

    assert outbox.prune_due(T0 + 86400 - 1) == 0  # not a day old yet
    assert outbox.prune_due(T0 + 86400 + 1) == 0  # due, but pruned under an hour ago
    assert outbox.prune_due(T0 + 86400 + 3600) == 1
    assert [row["id"] for row in outbox_rows(store)] == [fresh, failed]  # given up: kept


# -- a job's own webhooks (notify:) -------------------------------------------------------

SLACK = "https://hooks.slack.com/services/"
INTERNAL = "http://127.0.0.1:8080/internal"


def test_a_jobs_webhook_is_owed_its_events_only_under_an_allowed_prefix(tmp_path: Path) -> None:
    hooks = (NotifyHook(SLACK + "T1/B2/x", ("END",), "slack"), NotifyHook(INTERNAL, ("END",)))
    policy = notify.Policy(user_prefixes=(SLACK,))
    assert policy.active
    opened = Store(tmp_path / "gbatch.db", policy)
    try:
        (job_id,) = opened.submit([spec(None, notify=hooks)], 1000, "ada", T0)
        run_to(opened, job_id, JobState.COMPLETED)
        assert rows(opened, job_id) == [("END", "user_webhook/slack", SLACK + "T1/B2/x")]
        (other,) = opened.submit([spec(None, notify=hooks)], 1000, "ada", T0)
        assert opened.cancel_pending([other], "cancelled by ada", T0) == [other]
        assert rows(opened, other) == [("END", "user_webhook/slack", SLACK + "T1/B2/x")]
    finally:
        opened.close()


def test_no_prefix_a_url_only_begins_with_allows_it() -> None:
    assert notify.url_allowed(SLACK + "T1/x", (SLACK,))
    assert not notify.url_allowed("https://hooks.slack.com.evil.example/services/x", (SLACK,))
    assert not notify.url_allowed(INTERNAL, (SLACK,))
    assert not notify.url_allowed(INTERNAL, ())


@pytest.mark.parametrize(
    "path",
    [
        "../../admin",
        "T1/../../../admin",
        "./T1",
        "T1/%2e%2e/%2E%2e/admin",
        "T1/..%2f..%2fadmin",
        "T1/%252e%252e/admin",
        "T1\\..\\..\\admin",
        "T1/..?x=1",
    ],
)
def test_a_dot_segment_never_takes_a_job_webhook_out_of_its_prefix(path: str) -> None:
    """The server resolves them: SLACK + "../../admin" is posted to /admin."""
    assert not notify.url_allowed(SLACK + path, (SLACK,))


def test_dots_that_are_not_a_whole_segment_are_allowed() -> None:
    for path in ("T1/a..b", "T1/...", "T1/.hidden", "T1/x?next=../y", "T1/x#../y"):
        assert notify.url_allowed(SLACK + path, (SLACK,)), path


def test_delivery_refuses_a_job_webhook_the_config_no_longer_allows(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Written while 127.0.0.1 was allowed; the admin has since taken that prefix out.
    (job_id,) = store.submit([spec(None, notify=(NotifyHook(INTERNAL),))], 1000, "ada", T0)
    store._notify = replace(POLICY, user_prefixes=("http://127.0.0.1:8080/",))
    run_to(store, job_id, JobState.FAILED, exit_code=1)
    posted: list[str] = []
    monkeypatch.setattr(
        "gbatch.head.outbox.post_webhook", lambda hook, note: posted.append(hook.url)
    )
    outbox = Outbox(store, Config(webhook_prefixes_allowed=(SLACK,)), Clock())
    deliver_due(outbox, T0 + 100)
    (row,) = [r for r in outbox_rows(store, job_id) if r["channel"] == "user_webhook/json"]
    assert posted == [] and row["gave_up"] is not None
    assert "no longer under webhook_prefixes_allowed" in str(row["last_error"])


def test_a_job_webhook_under_an_allowed_prefix_is_posted_unsigned_in_its_form(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = store.submit(
        [spec(None, notify=(NotifyHook(SLACK + "x", ("FAIL",), "slack"),))], 1000, "ada", T0
    )
    store._notify = replace(POLICY, user_prefixes=(SLACK,))
    run_to(store, job_id, JobState.FAILED, exit_code=1)
    posted: list[Webhook] = []
    monkeypatch.setattr("gbatch.head.outbox.post_webhook", lambda hook, note: posted.append(hook))
    outbox = Outbox(store, Config(webhooks=(HOOK,), webhook_prefixes_allowed=(SLACK,)), Clock())
    assert deliver_due(outbox, T0 + 100) == 2  # the admin's FAIL and the job's
    assert [(h.url, h.form, h.secret) for h in posted if h.name == "job"] == [
        (SLACK + "x", "slack", "")
    ]


# -- node conditions, once per episode ----------------------------------------------------


def gpu(index: int, foreign: int = 0) -> Gpu:
    return Gpu(index, f"GPU-{index}", "H100", 81559, 0, foreign_processes=foreign)


def test_a_foreign_process_and_a_full_disk_are_node_conditions() -> None:
    assert notify.node_conditions((gpu(0), gpu(1)), 50 << 30) == {}
    assert notify.node_conditions((gpu(0), gpu(1)), None) == {}  # not measured: not told
    found = notify.node_conditions((gpu(0), gpu(1, foreign=2)), 5 << 20)
    assert found == {
        "GPU_FOREIGN": "processes outside gbatch on GPU 1 (2)",
        "DISK_FULL": f"its log disk has {5 << 20} bytes free",
    }


def test_a_condition_is_told_once_per_episode_not_once_per_report() -> None:
    episodes = notify.Episodes()
    scope = notify.REPORT_CONDITIONS

    def report(node: str, conditions: dict[str, str]) -> dict[str, str]:
        begun, ended = episodes.changes(node, conditions, scope)
        episodes.record(node, begun, ended)
        return begun

    held = notify.node_conditions((gpu(0, foreign=1),), 50 << 30)
    assert report("gpu01", held) == held
    assert report("gpu01", held) == {}  # the next report: same episode
    assert report("gpu02", held) == held  # another node's own episode
    assert report("gpu01", {}) == {}  # over
    assert report("gpu01", held) == held  # back: a new episode
    full = notify.node_conditions((gpu(0, foreign=1),), 0)
    assert report("gpu01", full) == {"DISK_FULL": "its log disk has 0 bytes free"}
    # Unrecorded (the store could not write it): told on the next report.
    assert episodes.changes("gpu01", {}, scope) == ({}, scope)
    assert report("gpu01", full) == {}


def test_node_down_and_report_conditions_are_episodes_apart() -> None:
    episodes = notify.Episodes({"gpu01": ["GPU_FOREIGN"]})  # as read from the store
    begun, ended = episodes.changes("gpu01", {"NODE_DOWN": "silent"}, notify.DOWN_CONDITIONS)
    assert (begun, ended) == ({"NODE_DOWN": "silent"}, frozenset())  # GPU_FOREIGN stays on
    episodes.record("gpu01", begun, ended)
    assert episodes.on("gpu01") == {"GPU_FOREIGN", "NODE_DOWN"}
    assert episodes.changes("gpu01", {}, notify.REPORT_CONDITIONS) == ({}, {"GPU_FOREIGN"})


def test_episodes_are_recorded_with_the_events_that_tell_them(tmp_path: Path) -> None:
    hook = Webhook("ops", "https://hooks.example.org/x", "", ("GPU_FOREIGN",))
    opened = Store(tmp_path / "gbatch.db", notify.Policy(webhooks=(hook,)))
    try:
        opened.record_episodes("gpu01", {"GPU_FOREIGN": "GPU 0 (1)", "DISK_FULL": "0"}, (), T0)
        assert opened.node_episodes() == {"gpu01": {"GPU_FOREIGN", "DISK_FULL"}}
        assert [r["kind"] for r in outbox_rows(opened)] == ["GPU_FOREIGN"]  # what ops asks for
        opened.record_episodes("gpu01", {}, ("DISK_FULL",), T0 + 1)
        assert opened.node_episodes() == {"gpu01": {"GPU_FOREIGN"}}
    finally:
        opened.close()
    assert Store(tmp_path / "gbatch.db").node_episodes() == {"gpu01": {"GPU_FOREIGN"}}


def test_node_conditions_go_to_the_webhooks_that_ask_for_them(tmp_path: Path) -> None:
    hook = Webhook("ops", "https://hooks.example.org/x", "", ("GPU_FOREIGN", "DISK_FULL"))
    opened = Store(tmp_path / "gbatch.db", notify.Policy(webhooks=(hook, HOOK)))
    try:
        assert queue_node_event(opened, "gpu01", "GPU_FOREIGN", "GPU 1 (2)", T0) == 1
        (row,) = outbox_rows(opened)
        assert (row["kind"], row["target"]) == ("GPU_FOREIGN", "ops")
        text = notify.summary(json.loads(str(row["payload"])))
        assert text == "gbatch node gpu01: gpu foreign: GPU 1 (2)"
    finally:
        opened.close()


# -- deliveries at once, bounded ----------------------------------------------------------


class Receivers:
    """Stands in for Outbox.deliver: a target in `hanging` holds its delivery until
    `release` is set; every other is taken at once."""

    def __init__(self, hanging: set[str]) -> None:
        self.hanging = hanging
        self.release = threading.Event()
        self.changed = threading.Condition()
        self.held: list[str] = []  # the targets of the deliveries held now
        self.most_held: dict[str, int] = {}  # target -> most of its rows held at once
        self.most_at_once = 0  # most deliveries held at once
        self.taken: list[tuple[str, int]] = []  # (target, row id), in the order taken

    def __call__(self, note: notify.Notification) -> None:
        if note.target in self.hanging:
            with self.changed:
                self.held.append(note.target)
                count = self.held.count(note.target)
                self.most_held[note.target] = max(self.most_held.get(note.target, 0), count)
                self.most_at_once = max(self.most_at_once, len(self.held))
                self.changed.notify_all()
            self.release.wait()
            with self.changed:
                self.held.remove(note.target)
        with self.changed:
            self.taken.append((note.target, note.id))
            self.changed.notify_all()

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        with self.changed:
            assert self.changed.wait_for(ready, timeout=30), f"waited for {what}"


def later() -> Clock:
    clock = Clock()
    clock.now = T0 + 100  # after every row the tests write
    return clock


@pytest.fixture
def started() -> Iterator[list[tuple[Outbox, Receivers]]]:
    outboxes: list[tuple[Outbox, Receivers]] = []
    yield outboxes
    for outbox, receivers in outboxes:
        receivers.release.set()
        outbox.stop()


def test_a_hanging_webhook_does_not_hold_up_mail_behind_more_than_a_batch_of_its_rows(
    store: Store, monkeypatch: pytest.MonkeyPatch, started: list[tuple[Outbox, Receivers]]
) -> None:
    # More NODE_DOWN rows to the hanging "ops" than a pass reads, all due before bob's.
    for n in range(BATCH + 10):
        queue_node_event(store, f"gpu{n}", "NODE_DOWN", "silent", T0)
    (job_id,) = store.submit([spec("END", mail_user="bob@lab.org")], 1001, "bob", T0)
    run_to(store, job_id, JobState.COMPLETED)
    receivers = Receivers({"ops"})
    outbox = Outbox(store, Config(smtp_host="127.0.0.1", webhooks=(HOOK,)), later())
    monkeypatch.setattr(outbox, "deliver", receivers)
    started.append((outbox, receivers))
    outbox.start()
    bobs = ("bob@lab.org", mail_row(store, job_id))
    receivers.wait("bob's mail", lambda: bobs in receivers.taken)
    receivers.wait("ops held", lambda: receivers.held == ["ops"])
    assert all(target != "ops" for target, _ in receivers.taken)  # ops hangs still
    receivers.release.set()
    receivers.wait("every row", lambda: len(receivers.taken) == BATCH + 11)
    assert receivers.most_held == {"ops": 1}  # one row of a destination at a time
    ops = [row_id for target, row_id in receivers.taken if target == "ops"]
    assert ops == sorted(ops)  # one destination's rows in the order they fell due


def mail_row(store: Store, job_id: int) -> int:
    (row,) = [r for r in outbox_rows(store, job_id) if r["channel"] == "mail"]
    return int(row["id"])  # type: ignore[call-overload]


def test_one_users_hanging_webhooks_take_at_most_their_share_and_others_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: list[tuple[Outbox, Receivers]]
) -> None:
    policy = notify.Policy(user_prefixes=(SLACK,))
    opened = Store(tmp_path / "gbatch.db", policy)
    hangs = [SLACK + f"ada{n}" for n in range(4)]
    try:
        for url in hangs * 2:  # two jobs per hanging URL
            (job_id,) = opened.submit([spec(None, notify=(NotifyHook(url),))], 1000, "ada", T0)
            run_to(opened, job_id, JobState.COMPLETED)
        (bobs,) = opened.submit([spec(None, notify=(NotifyHook(SLACK + "bob"),))], 1001, "bob", T0)
        run_to(opened, bobs, JobState.COMPLETED)
        receivers = Receivers(set(hangs))
        outbox = Outbox(opened, Config(webhook_prefixes_allowed=(SLACK,)), later())
        monkeypatch.setattr(outbox, "deliver", receivers)
        started.append((outbox, receivers))
        outbox.start()
        receivers.wait("bob's webhook", lambda: any(t == SLACK + "bob" for t, _ in receivers.taken))
        receivers.wait("ada's share held", lambda: len(receivers.held) == PER_OWNER)
        assert all(not target.startswith(SLACK + "ada") for target, _ in receivers.taken)
        receivers.release.set()
        receivers.wait("every row", lambda: len(receivers.taken) == len(hangs) * 2 + 1)
        assert set(receivers.most_held.values()) == {1}  # one at a time per destination
        assert receivers.most_at_once == PER_OWNER  # never more of ada's at once
        outbox.stop()
        assert opened.due_notifications(T0 + 1e6, 100) == []  # each marked delivered
    finally:
        opened.close()


def test_slots_allow_one_per_destination_and_a_cap_per_owner() -> None:
    slots = Slots(size=3, per_owner=2)

    def note(target: str, user: str | None, row: int = 1) -> notify.Notification:
        payload: dict[str, object] = {"job": {"user": user}} if user else {"node": {}}
        return notify.Notification(row, "e", "END", "mail", target, payload, 0)

    assert slots.take(note("a1", "ada"))
    assert not slots.take(note("a1", "bob"))  # that destination is in flight
    assert slots.take(note("a2", "ada"))
    assert not slots.take(note("a3", "ada"))  # ada's cap
    assert slots.busy() == (frozenset({"a1", "a2"}), frozenset({"ada"}))
    assert slots.take(note("ops", None))  # a node's event: the admins' own cap
    assert not slots.take(note("b1", "bob"))  # all three workers busy
    slots.release(note("a1", "ada"))
    assert slots.busy() == (frozenset({"a2", "ops"}), frozenset())
    assert slots.take(note("b1", "bob")) and slots.free == 0


# -- SMTP's password, from its own file ---------------------------------------------------


def test_the_smtp_password_is_read_from_a_private_file_only(tmp_path: Path) -> None:
    secret = tmp_path / "smtp-password"
    config = Config(smtp_user="gbatch", smtp_tls="starttls", smtp_password_file=secret)
    assert smtp_password(Config()) is None
    with pytest.raises(ConfigError, match=r"^smtp_password_file: cannot read .*mode 0600$"):
        smtp_password(config)
    secret.write_text("hunter2\n")
    secret.chmod(0o644)
    with pytest.raises(ConfigError) as caught:
        smtp_password(config)
    assert str(caught.value) == (
        f"smtp_password_file: {secret} may be read by others (mode 644). Run chmod 600 {secret}"
    )
    secret.chmod(0o600)
    assert smtp_password(config) == "hunter2"
    secret.write_text("\n")
    with pytest.raises(ConfigError, match="holds no password"):
        smtp_password(config)
    link = tmp_path / "link"
    link.symlink_to(secret)
    with pytest.raises(ConfigError, match="not a link"):
        smtp_password(replace(config, smtp_password_file=link))


# -- the head's own full disk, told directly ------------------------------------------------


def test_a_full_store_is_told_once_per_spell_through_its_hook(tmp_path: Path) -> None:
    opened = Store(tmp_path / "gbatch.db")
    spells: list[str] = []
    opened.on_full = lambda err: spells.append(str(err))
    try:
        (job_id,) = opened.submit([spec(None)], 1000, "ada", T0)
        (pad,) = opened.submit([spec(None)], 1000, "ada", T0)
        pack_store(opened, pad)
        for _ in range(3):
            with pytest.raises(StoreFull):
                opened.submit([spec(None)] * 20, 1000, "ada", T0)
        assert spells == [f"the job store cannot write: disk full ({tmp_path})"]
        unpack_store(opened)
        opened.set_state(job_id, JobState.CANCELLED, "", T0, end_time=T0)  # written: over
        pack_store(opened, pad)
        with pytest.raises(StoreFull):
            opened.submit([spec(None)] * 20, 1000, "ada", T0)
        assert len(spells) == 2  # a new spell
    finally:
        opened.close()


def test_a_full_store_is_posted_straight_to_the_webhooks_that_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asks = Webhook("disk", "https://hooks.example.org/d", "s", ("STORE_FULL",))
    posted: list[tuple[str, notify.Notification]] = []
    done = threading.Event()

    def post(hook: Webhook, note: notify.Notification) -> None:
        posted.append((hook.name, note))
        done.set()

    monkeypatch.setattr("gbatch.head.outbox.post_webhook", post)
    opened = Store(tmp_path / "gbatch.db")
    try:
        outbox = Outbox(opened, Config(webhooks=(HOOK, asks)), Clock())
        outbox.tell_store_full(StoreFull(tmp_path))
        assert done.wait(30)
        assert outbox_rows(opened) == []  # not through the outbox: it is on the full disk
    finally:
        opened.close()
    ((name, note),) = posted  # HOOK does not ask for it
    assert name == "disk" and note.kind == "STORE_FULL" and note.event_id
    assert notify.summary(note.payload) == (
        f"gbatch head {socket.gethostname()}: store full: "
        f"the job store cannot write: disk full ({tmp_path})"
    )


def test_a_preempted_jobs_mail_says_so_in_its_subject_and_body(store: Store) -> None:
    """Issue 33: REQUEUE (and END) of a preempted run say "preempted": the subject's state
    is PREEMPTED, as sacct's of that run, and the body gives the reason."""
    (job_id,) = store.submit([spec("ALL")], 1000, "ada", T0)
    why = "Preempted by 15 (QOS high)"
    store.set_state(job_id, JobState.CONFIGURING, "", T0 + 5, node="local", attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", T0 + 5, start_time=T0 + 5)
    store.set_state(job_id, JobState.COMPLETING, why, T0 + 60, stop_state=JobState.PENDING)
    store.set_state(job_id, JobState.PENDING, why, T0 + 67, end_time=T0 + 67)
    (row,) = [r for r in outbox_rows(store, job_id) if r["kind"] == "REQUEUE"]
    sent = json.loads(str(row["payload"]))
    assert notify.summary(sent) == (
        f"Slurm Job_id={job_id} Name=train Requeued, Run time 00:01:02, PREEMPTED, ExitCode 0"
    )
    assert f"reason: {why}" in notify.mail_body(sent)
    assert notify.summary(payload("END", "PREEMPTED", reason=why)).endswith(
        "Ended, Run time 00:01:02, PREEMPTED, ExitCode 0"
    )
