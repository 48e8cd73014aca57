"""Notifications: which events are told to whom, and what the telling says. Pure.

A job's state change becomes rows of the store's outbox in the transaction that writes
it (the store asks `Policy.job_rows`: the Policy is the store's Notices), so no event is
lost to a crash; the outbox worker (gbatch/head/outbox.py) delivers them, at least once.
One event (an event id) has one row per destination: a mail address, an admin's webhook
by name.

Mail follows Slurm's --mail-type: BEGIN when a run starts, REQUEUE when a run goes back
to the queue, END or FAIL when the job ends (FAIL for every end but COMPLETED and
CANCELLED; a job without FAIL in its types gets END's mail then, as in slurmctld),
TIME_LIMIT when the limit stopped it, TIME_LIMIT_50/80/90 once per run. ALL is BEGIN,
END, FAIL, REQUEUE (and Slurm's INVALID_DEPEND, STAGE_OUT, never sent here).

An array's BEGIN, END and FAIL are the whole array's, as in slurmctld, unless its mail
types have ARRAY_TASKS (then each task mails as a job): BEGIN once, when its first task
starts; END once its last task has ended (FAIL in its place when some task failed),
counting the tasks of a pending tail cancelled whole (that record's END, one event for
its tasks, goes to ARRAY_TASKS mail and to webhooks as a job's). Store writes them with
the change that makes them due, keyed to the array (its id, attempt ARRAY_ATTEMPT), so
a second write of one is ignored. REQUEUE, TIME_LIMIT and the TIME_LIMIT_<pct> warnings stay a
task's own (slurmctld too sends each as it happens). Webhooks do not follow mail types:
they stay per task, each with its own `events`.

A job's own webhooks (`notify:` in its file, --notify) are owed its events only at a URL
under one of the config's webhook_prefixes_allowed (`url_allowed`): the store checks
when it writes the row, the outbox again before it posts (the config may have changed
in between), and the handler refuses the submit of any other. So no user can make the
head POST anywhere an admin did not name. They are not signed (README: Notifications).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gbatch.core.labels import format_spans, merge_spans
from gbatch.core.model import CLUSTER_LINK_EVENT, GPU_MEM_EVENT, Gpu, Job, JobState, NotifyHook
from gbatch.core.qos import PREEMPTED_BY
from gbatch.core.timefmt import format_elapsed_fixed
from gbatch.core.urls import has_dot_segment

# The outbox's own: read through here too by the outbox worker and the tests.
from gbatch.head.store.notices import ARRAY_ATTEMPT as ARRAY_ATTEMPT
from gbatch.head.store.notices import Notification as Notification
from gbatch.head.store.notices import Owed
from gbatch.site.config import IDLE_GPU_EVENT, Config, Webhook

MAIL = "mail"
WEBHOOK = "webhook"
# A job's own webhook: the channel carries its form ("user_webhook/slack"), the target
# is its URL.
USER_WEBHOOK = "user_webhook"
_ALL = frozenset({"BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND", "STAGE_OUT"})
# TIME_LIMIT_<pct>: sent once per run when its run time passes that share of its limit.
TIME_LIMIT_WARNINGS = {"TIME_LIMIT_50": 0.5, "TIME_LIMIT_80": 0.8, "TIME_LIMIT_90": 0.9}
# A failed delivery is tried again after notify_retry_seconds, doubling up to this...
MAX_RETRY_DELAY = 3600.0
# ...and given up after this many tries (about a day at the defaults): an endpoint that
# long gone is a configuration to fix, not a queue to grow.
MAX_ATTEMPTS = 30
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ENDED_WELL = frozenset({JobState.COMPLETED, JobState.CANCELLED, JobState.PREEMPTED})
# The kinds an array without ARRAY_TASKS is mailed once for, as a whole.
ARRAY_KINDS = frozenset({"BEGIN", "END", "FAIL"})
# The admins' policies' warnings of a running job (idle GPUs, over its GPU memory
# budget): mailed to its owner whatever their --mail-type, when mail is set up.
OWNER_TOLD = frozenset({IDLE_GPU_EVENT, GPU_MEM_EVENT, CLUSTER_LINK_EVENT})


@dataclass(frozen=True)
class Delivery:
    """An event kind owed to one destination (a row Store writes to the outbox)."""

    kind: str
    channel: str
    target: str


def mail_types(text: str | None) -> frozenset[str]:
    """The mail types of a spec's mail_type ("BEGIN,END", "ALL"), ALL expanded."""
    types = {t for t in (text or "").split(",") if t and t != "NONE"}
    if "ALL" in types:
        types |= _ALL
    return frozenset(types)


def may_notify(old: JobState, new: JobState) -> bool:
    """Whether `old` -> `new` is an event at all: a start, a requeue of a run, an end.

    Checked before the job is read.
    """
    return (
        (new is JobState.RUNNING and old is JobState.CONFIGURING)
        or (new is JobState.PENDING and old in (JobState.RUNNING, JobState.COMPLETING))
        or new.is_final
    )


def job_events(old: JobState, job: Job) -> tuple[str, ...]:
    """The event kinds of `job` having just moved from `old` to its state."""
    if not may_notify(old, job.state):
        return ()
    if job.state is JobState.RUNNING:
        return ("BEGIN",)
    if job.state is JobState.PENDING:
        return ("REQUEUE",)
    end = "END" if job.state in _ENDED_WELL else "FAIL"
    return ("TIME_LIMIT", end) if job.state is JobState.TIMEOUT else (end,)


@dataclass(frozen=True)
class Policy:
    """Who is told of what, from the config.

    Mail when an SMTP server is set, and the admins' webhooks.
    """

    mail: bool = False
    mail_domain: str | None = None
    webhooks: tuple[Webhook, ...] = ()
    # URL prefixes under which a job's own webhooks are allowed; none: no job's are.
    user_prefixes: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> Policy:
        return cls(
            config.smtp_host is not None,
            config.mail_domain,
            config.webhooks,
            config.webhook_prefixes_allowed,
        )

    @property
    def active(self) -> bool:
        return self.mail or bool(self.webhooks) or bool(self.user_prefixes)

    def hooks_want(self, kind: str) -> bool:
        return any(kind in hook.events for hook in self.webhooks)

    def mail_address(self, job: Job) -> str | None:
        """--mail-user, else <user>@mail_domain, else None (not mailed)."""
        if job.spec.mail_user:
            return job.spec.mail_user
        return f"{job.user}@{self.mail_domain}" if self.mail_domain else None

    def for_job(self, job: Job, kinds: tuple[str, ...]) -> list[Delivery]:
        """The deliveries owed for `kinds` of `job`: mail and webhooks.

        Its mail, per its mail types, and the webhooks that ask for those kinds.
        """
        out: list[Delivery] = []
        types = mail_types(job.spec.mail_type)
        address = self.mail_address(job) if self.mail and types else None
        whole_array = self.array_mail(job) is not None
        for kind in kinds:
            if kind in OWNER_TOLD:
                # The admins' policy tells the owner, whether or not they asked for mail.
                owner = self.mail_address(job) if self.mail else None
                if owner is not None:
                    out.append(Delivery(kind, MAIL, owner))
            elif whole_array and kind in ARRAY_KINDS:
                pass  # the array's, not the task's (Store._queue_array_events)
            elif address is not None and (as_mail := _mail_kind(kind, types)) is not None:
                out.append(Delivery(as_mail, MAIL, address))
            out.extend(
                Delivery(kind, WEBHOOK, hook.name) for hook in self.webhooks if kind in hook.events
            )
            out.extend(
                Delivery(kind, f"{USER_WEBHOOK}/{hook.form}", hook.url)
                for hook in job.spec.notify
                if kind in hook.events and url_allowed(hook.url, self.user_prefixes)
            )
        return out

    def array_mail(self, job: Job) -> str | None:
        """The address `job`'s array is mailed at as a whole, or None.

        Only an array task whose mail types lack ARRAY_TASKS has one.
        """
        types = mail_types(job.spec.mail_type)
        if job.spec.array_task is None or not self.mail or "ARRAY_TASKS" in types:
            return None
        return self.mail_address(job) if types & ARRAY_KINDS else None

    def for_array(self, job: Job, kind: str) -> list[Delivery]:
        """The whole-array mail owed for `kind` (BEGIN, END, FAIL) of `job`'s array."""
        address = self.array_mail(job)
        as_mail = _mail_kind(kind, mail_types(job.spec.mail_type))
        return [] if address is None or as_mail is None else [Delivery(as_mail, MAIL, address)]

    def for_node(self, kind: str) -> list[Delivery]:
        return [Delivery(kind, WEBHOOK, hook.name) for hook in self.webhooks if kind in hook.events]

    # -- what the store writes (store.notices.Notices) --------------------------------

    def may_notify(self, old: JobState, new: JobState) -> bool:
        return may_notify(old, new)

    def job_events(self, old: JobState, job: Job) -> tuple[str, ...]:
        return job_events(old, job)

    def job_rows(self, job: Job, kinds: tuple[str, ...], now: float) -> list[Owed]:
        """The outbox rows owed for `kinds` of `job` (for_job): one event id per kind.

        The id is shared by the kind's destinations.
        """
        ids = {kind: uuid.uuid4().hex for kind in kinds}
        rows: list[Owed] = []
        for each in self.for_job(job, kinds):
            # A FAIL mailed as END keeps the event's id: FAIL's.
            event_id = ids.get(each.kind) or ids.get("FAIL") or uuid.uuid4().hex
            payload = json.dumps(job_payload(job, each.kind, event_id, now))
            rows.append((each.kind, each.channel, each.target, event_id, payload))
        return rows

    def array_mailed(self, job: Job) -> bool:
        return self.array_mail(job) is not None

    def array_begin_rows(self, job: Job, now: float) -> list[Owed]:
        """The whole-array BEGIN mail of `job`'s array (its first task started)."""
        event_id = uuid.uuid4().hex
        payload = json.dumps(array_payload(job, "BEGIN", event_id, now))
        return [
            (each.kind, each.channel, each.target, event_id, payload)
            for each in self.for_array(job, "BEGIN")
        ]

    def array_end_rows(
        self,
        job: Job,
        counts: Mapping[JobState, int],
        exit_codes: tuple[int, int],
        max_signal: int | None,
        now: float,
    ) -> list[Owed]:
        """The whole-array END or FAIL mail of `job`'s array, all of whose tasks ended.

        `counts` are of each final state. A FAIL mailed as END says END, with FAIL's id.
        """
        kind, state = array_end(counts)
        event_id = uuid.uuid4().hex
        tasks = {s.value: n for s, n in sorted(counts.items(), key=lambda i: i[0].value)}
        return [
            (
                each.kind,
                each.channel,
                each.target,
                event_id,
                json.dumps(
                    array_payload(
                        job,
                        each.kind,
                        event_id,
                        now,
                        state=state,
                        tasks=tasks,
                        exit_codes=exit_codes,
                        max_signal=max_signal,
                    )
                ),
            )
            for each in self.for_array(job, kind)
        ]

    def node_rows(self, node: str, kind: str, reason: str, now: float) -> list[Owed]:
        """A node's event (for_node), one event id for its webhooks."""
        event_id = uuid.uuid4().hex
        payload = json.dumps(node_payload(node, kind, reason, event_id, now))
        return [
            (each.kind, each.channel, each.target, event_id, payload)
            for each in self.for_node(kind)
        ]

    def asked_in_spec(self, kind: str) -> tuple[str, ...] | None:
        """The spec keys a job must set to be owed `kind`; None when every job is owed it.

        None when an admin's webhook wants `kind` of every job; else the keys are mail_type
        (with mail on) and notify (with job webhooks allowed).
        """
        if self.hooks_want(kind):
            return None
        asked = (("mail_type", self.mail), ("notify", bool(self.user_prefixes)))
        return tuple(key for key, on in asked if on)


def owner(payload: Mapping[str, object]) -> str:
    """Whose event a payload tells: its job's user, "" for a node's (the admins')."""
    job = payload.get("job")
    user = job.get("user") if isinstance(job, Mapping) else None
    return user if isinstance(user, str) else ""


def url_allowed(url: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a job's webhook may be posted to: under an allowed prefix, resolved.

    Its URL starts with an allowed prefix, and its path has no dot-segment that would
    take it out of the prefix once resolved. Each prefix names its host and ends in a
    path (config.py checks), so https://hooks.slack.com/ cannot be matched by
    https://hooks.slack.com.evil.example; and https://hooks.slack.com/services/../admin
    (or %2e%2e) is refused, not resolved, as the server would resolve it (core/urls.py).
    """
    if has_dot_segment(url):
        return False
    return any(url.startswith(prefix) for prefix in prefixes)


def disallowed_hooks(hooks: tuple[NotifyHook, ...], prefixes: tuple[str, ...]) -> list[str]:
    """The URLs of `hooks` that no prefix allows (a submit's refusal names them)."""
    return [hook.url for hook in hooks if not url_allowed(hook.url, prefixes)]


# A node's log disk with less free than this is told as DISK_FULL: jobs' output is
# being dropped, or soon will be.
DISK_FULL_BYTES = 100 << 20


def node_conditions(gpus: tuple[Gpu, ...], disk_free_bytes: int | None) -> dict[str, str]:
    """The conditions a node's report shows that admins are told of: event kind -> why.

    GPU_FOREIGN: a GPU holds a process gbatch did not start; DISK_FULL: its log disk is
    (nearly) full.
    """
    found: dict[str, str] = {}
    held = [g for g in gpus if g.foreign_processes > 0]
    if held:
        found["GPU_FOREIGN"] = "processes outside gbatch on GPU " + ", ".join(
            f"{g.index} ({g.foreign_processes})" for g in held
        )
    if disk_free_bytes is not None and disk_free_bytes < DISK_FULL_BYTES:
        found["DISK_FULL"] = f"its log disk has {disk_free_bytes} bytes free"
    return found


# The conditions a node's report shows (node_conditions), and the one its silence does.
REPORT_CONDITIONS = frozenset({"GPU_FOREIGN", "DISK_FULL"})
DOWN_CONDITIONS = frozenset({"NODE_DOWN"})


class Episodes:
    """Which node conditions are on, so each is told once per episode.

    Told when it starts, not on every report while it lasts. One that ends and comes back is
    a new episode. Kept in the store (Store.record_episodes; this is its copy, changed only
    once the store has the change), so a restart tells neither an episode still on again nor
    fails to tell one that ended meanwhile and comes back.
    """

    def __init__(self, on: Mapping[str, Iterable[str]] | None = None) -> None:
        self._on: dict[str, frozenset[str]] = {
            node: frozenset(kinds) for node, kinds in (on or {}).items()
        }

    def changes(
        self, node: str, conditions: Mapping[str, str], scope: frozenset[str]
    ) -> tuple[dict[str, str], frozenset[str]]:
        """`node`'s conditions of `scope` that begin now (kind -> why), and those that end.

        `conditions` is all of that scope on now; those that end were on before.
        """
        before = self._on.get(node, frozenset()) & scope
        begun = {kind: why for kind, why in conditions.items() if kind not in before}
        return begun, before - conditions.keys()

    def record(self, node: str, begun: Iterable[str], ended: Iterable[str]) -> None:
        self._on[node] = (self._on.get(node, frozenset()) | set(begun)) - set(ended)

    def on(self, node: str) -> frozenset[str]:
        return self._on.get(node, frozenset())


def _mail_kind(kind: str, types: frozenset[str]) -> str | None:
    """The mail a job with mail `types` gets for event `kind` (slurmctld's choice: a
    failure without FAIL asked for is mailed as END)."""
    if kind in types:
        return kind
    if kind == "FAIL" and "END" in types:
        return "END"
    return None


def job_payload(job: Job, kind: str, event_id: str, now: float) -> dict[str, object]:
    """What an event says of its job: the webhook's JSON and the mail's source.

    A record standing for more of an array's tasks (a pending tail's, cancelled whole) says
    which (`array_tasks`: "32-99").
    """
    payload = {
        "event_id": event_id,
        "kind": kind,
        "time": now,
        "job": {
            "id": job.id,
            "array_job_id": job.array_job_id,
            "array_task_id": job.spec.array_task,
            "name": job.spec.name,
            "user": job.user,
            "state": job.state.value,
            "reason": job.reason,
            "exit_code": job.exit_code,
            "signal": job.exit_signal,
            "node": job.node,
            "attempt": job.attempt,
            "submit_time": job.submit_time,
            "start_time": job.start_time,
            "end_time": job.end_time,
            "time_limit": job.spec.time_limit,
        },
    }
    if job.array_more:
        first = job.spec.array_task or 0
        tasks = format_spans(merge_spans([(first, first), *job.array_more]))
        payload["job"]["array_tasks"] = tasks  # type: ignore[index]
    return payload


def array_end(counts: Mapping[JobState, int]) -> tuple[str, JobState]:
    """The event and state of an array whose tasks all ended, from `counts` of each final state.

    FAIL when some task failed (the array FAILED if one did, else the failure most of them
    had), else END, CANCELLED if some task was cancelled, else COMPLETED.
    """
    failed = {state: n for state, n in counts.items() if n and state not in _ENDED_WELL}
    if failed:
        if JobState.FAILED in failed:
            return "FAIL", JobState.FAILED
        return "FAIL", max(failed, key=failed.__getitem__)
    return "END", JobState.CANCELLED if counts.get(JobState.CANCELLED) else JobState.COMPLETED


def array_payload(
    job: Job,
    kind: str,
    event_id: str,
    now: float,
    *,
    state: JobState | None = None,
    tasks: Mapping[str, int] | None = None,
    exit_codes: tuple[int, int] = (0, 0),
    max_signal: int | None = None,
) -> dict[str, object]:
    """What a whole-array event says of its array.

    `job` is any task of it, for its array's id, name, user. At its end the event says the
    array's state, its tasks by state, and their exit codes' range.
    """
    array_id = job.array_job_id if job.array_job_id is not None else job.id
    return {
        "event_id": event_id,
        "kind": kind,
        "time": now,
        "job": {
            "id": array_id,
            "array_job_id": array_id,
            "array_task_id": "*",
            "array_summary": True,
            "name": job.spec.name,
            "user": job.user,
            "state": (state or job.state).value,
            "tasks": dict(tasks or {}),
            "exit_code_min": exit_codes[0],
            "exit_code_max": exit_codes[1],
            "max_signal": max_signal,
            "submit_time": job.submit_time,
            "end_time": now if state is not None else None,
        },
    }


def node_payload(node: str, kind: str, reason: str, event_id: str, now: float) -> dict[str, object]:
    return {
        "event_id": event_id,
        "kind": kind,
        "time": now,
        "node": {"name": node, "reason": reason},
    }


def head_payload(head: str, kind: str, reason: str, event_id: str, now: float) -> dict[str, object]:
    """An event of the head itself (STORE_FULL): `head` is its host name."""
    return {
        "event_id": event_id,
        "kind": kind,
        "time": now,
        "head": {"name": head, "reason": reason},
    }


def summary(payload: Mapping[str, object]) -> str:
    """One line for the event; for a job's, Slurm's mail subject.

    `Slurm Job_id=12 Name=train Ended, Run time 00:01:02, COMPLETED, ExitCode 0`.
    """
    kind = str(payload["kind"])
    job = payload.get("job")
    head = payload.get("head")
    if isinstance(head, Mapping):
        what = kind.lower().replace("_", " ")
        return _clean(f"gbatch head {head.get('name')}: {what}: {head.get('reason')}")
    if not isinstance(job, Mapping):
        node = payload.get("node")
        name = node.get("name") if isinstance(node, Mapping) else ""
        reason = node.get("reason") if isinstance(node, Mapping) else ""
        if kind.startswith("PARTITION_"):
            state = kind.removeprefix("PARTITION_").lower()
            return _clean(f"gbatch partition {name}: {state}: {reason}")
        return _clean(f"gbatch node {name}: {kind.lower().replace('_', ' ')}: {reason}")
    if job.get("array_summary"):
        return _array_summary(kind, job)
    task = job.get("array_task_id")
    if job.get("array_tasks"):
        task = f"[{job['array_tasks']}]"
    who = (
        f"Slurm Job_id={job['id']}"
        if task is None
        else f"Slurm Array Task Job_id={job['array_job_id']}_{task} ({job['id']})"
    )
    head = f"{who} Name={job['name']}"
    start, end = _number(job.get("start_time")), _number(job.get("end_time"))
    now = _number(payload.get("time")) or 0.0
    run_time = format_elapsed_fixed(((end or now) - start) if start is not None else 0.0)
    if kind == "BEGIN":
        queued = (start or now) - (_number(job.get("submit_time")) or now)
        return _clean(f"{head} Began, Queued time {format_elapsed_fixed(queued)}")
    if kind in ("END", "FAIL", "REQUEUE"):
        verb = {"END": "Ended", "FAIL": "Failed", "REQUEUE": "Requeued"}[kind]
        code = job.get("exit_code")
        state = job["state"]
        if kind == "REQUEUE" and str(job.get("reason") or "").startswith(PREEMPTED_BY):
            state = JobState.PREEMPTED.value  # the run ended so (sacct's State of it)
        return _clean(f"{head} {verb}, Run time {run_time}, {state}, ExitCode {code or 0}")
    if kind == "TIME_LIMIT":
        return _clean(f"{head} Reached time limit, Run time {run_time}")
    if kind == IDLE_GPU_EVENT:
        return _clean(f"{head} GPUs idle, Run time {run_time}")
    if kind == GPU_MEM_EVENT:
        return _clean(f"{head} Over its GPU memory budget, Run time {run_time}")
    if kind == CLUSTER_LINK_EVENT:
        return _clean(f"{head} Cluster link broken: relink it (gbatch cluster status)")
    if kind in TIME_LIMIT_WARNINGS:
        share = round(TIME_LIMIT_WARNINGS[kind] * 100)
        return _clean(f"{head} Reached {share}% of time limit, Run time {run_time}")
    return _clean(f"{head} {kind}")


def _array_summary(kind: str, job: Mapping[str, object]) -> str:
    """slurmctld's whole-array subject: `Slurm Array Summary Job_id=12_* (12) Name=x
    Ended, COMPLETED, ExitCode [0-0]` (Mixed when some exit codes are 0 and some not;
    `Mixed, MaxSignal [9]` when a task was killed by a signal)."""
    head = f"Slurm Array Summary Job_id={job['id']}_* ({job['id']}) Name={job['name']}"
    if kind not in ("END", "FAIL"):
        return _clean(f"{head} Began" if kind == "BEGIN" else f"{head} {kind}")
    verb = "Ended" if kind == "END" else "Failed"
    low, high, signal = job.get("exit_code_min"), job.get("exit_code_max"), job.get("max_signal")
    if signal:
        return _clean(f"{head} {verb}, Mixed, MaxSignal [{signal}]")
    state = "Mixed" if low == 0 and isinstance(high, int) and high > 0 else job["state"]
    return _clean(f"{head} {verb}, {state}, ExitCode [{low}-{high}]")


def mail_body(payload: Mapping[str, object]) -> str:
    job = payload.get("job")
    lines = [summary(payload), ""]
    if isinstance(job, Mapping):
        lines += [f"{key}: {job[key]}" for key in ("state", "reason", "node") if job.get(key)]
        tasks = job.get("tasks")
        if isinstance(tasks, Mapping) and tasks:
            lines.append("tasks: " + ", ".join(f"{n} {state}" for state, n in tasks.items()))
    lines.append(f"event id: {payload['event_id']}")
    return "\n".join(lines) + "\n"


def webhook_body(payload: Mapping[str, object], form: str) -> bytes:
    """The POST body: the event with its summary as `text` ("json"), or only the text ("slack").

    "slack" is what Slack's and Mattermost's incoming webhooks take.
    """
    text = summary(payload)
    body = {"text": text} if form == "slack" else {**payload, "text": text}
    return json.dumps(body, sort_keys=True).encode()


def signature(secret: str, body: bytes) -> str:
    """X-Gbatch-Signature: `sha256=<hex HMAC-SHA256 of the body under the secret>`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def retry_delay(attempts: int, base: float) -> float:
    """Seconds before the next try, after `attempts` failed ones (1, 2, ...)."""
    return min(base * 2.0 ** max(0, attempts - 1), MAX_RETRY_DELAY)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _clean(text: str) -> str:
    # A job name is the user's: no control character may reach a mail header.
    return _CONTROL.sub("?", text)
