"""The protocol's requests: one type per request the daemon serves, and a reply's error kinds.

Each type has its `op` and its fields as named on the socket. The client encodes them
(encode_request), the daemon decodes them (gbatch.protocol.decoder), and mypy checks
both ends and every call site."""

from __future__ import annotations

import inspect  # dataclasses loads it too (the model, which most commands import)
from collections.abc import Mapping

# typing is for type checkers here (2-3 ms of every command's start: bench/bench_startup.py).
# What runs needs none of it: the decorator below marks _Request for mypy alone, the
# annotations are text (the daemon's decoder reads them: type_hints), and
# ErrorKind is built from ERROR_KINDS where code asks for it (__getattr__, below).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, Literal, dataclass_transform

    ErrorKind = Literal[
        "invalid", "not_found", "permission", "unavailable", "internal", "unauthenticated"
    ]
    """Why a request failed, as a reply's `kind` says: invalid (bad input, bad request),
    not_found (no such job or node), permission (not yours, not an admin, not in the
    token's scopes), unavailable (a component is missing or failing: no docker engine, a
    full disk), internal (a bug), unauthenticated (a token that lets nobody in:
    malformed, altered, expired, revoked, or signed with a key the daemon does not
    have)."""
else:

    def dataclass_transform(**_kwargs: object) -> object:
        return lambda cls: cls

    def __getattr__(name: str) -> object:
        if name == "ErrorKind":  # typing.Literal[*ERROR_KINDS], as the type checkers read it
            from typing import Literal

            return Literal[ERROR_KINDS]
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ERROR_KINDS: tuple[ErrorKind, ...] = (
    "invalid",
    "not_found",
    "permission",
    "unavailable",
    "internal",
    "unauthenticated",
)
"""ErrorKind's values, in its order (tests/unit/test_protocol_requests.py holds them equal)."""


def type_hints(cls: type[object]) -> dict[str, Any]:
    """typing.get_type_hints(cls) of a request type (the daemon's decoder reads them).

    Given the typing names its annotations use, which this module imports for type
    checkers alone: get_type_hints(cls) by itself would not find them.
    """
    from typing import Any, ClassVar, Literal, get_type_hints

    names = {"Any": Any, "ClassVar": ClassVar, "Literal": Literal}
    return get_type_hints(cls, globalns={**globals(), **names})


def error_reply(kind: ErrorKind, message: str) -> dict[str, Any]:
    """A reply that refuses: one line for the user, `kind` for the exit status."""
    return {"ok": False, "kind": kind, "error": message}


def error_kind(value: object) -> ErrorKind:
    """A reply's `kind` as an ErrorKind; one this client does not know reads as internal.

    An unknown kind comes from a newer daemon.
    """
    for kind in ERROR_KINDS:
        if value == kind:
            return kind
    return "internal"


@dataclass_transform(kw_only_default=True, frozen_default=True)
class _Request:
    """What every request type is: a frozen record of keyword-only fields, named by `op`.

    The fields are the class's own annotations, defaults from its body; `op` names it on
    the socket; mypy reads it as a frozen dataclass. Not dataclasses.dataclass: that
    writes each class's methods with exec, a cost for each class, and every command
    would pay it at start-up. `secret`: fields whose values a refusal never shows (they
    may hold tokens).
    """

    op: ClassVar[str]
    _fields: ClassVar[tuple[str, ...]]
    _defaults: ClassVar[dict[str, Any]]
    _secret: ClassVar[frozenset[str]]

    def __init_subclass__(cls, *, op: str, secret: tuple[str, ...] = ()) -> None:
        cls.op = op
        cls._fields = tuple(inspect.get_annotations(cls))
        cls._defaults = {name: cls.__dict__[name] for name in cls._fields if name in cls.__dict__}
        cls._secret = frozenset(secret)

    def __init__(self, **values: Any) -> None:
        for name in self._fields:
            if name in values:
                value = values.pop(name)
            elif name in self._defaults:
                value = self._defaults[name]
            else:
                raise TypeError(f"{type(self).__name__}: {name} is required")
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(values)}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]  # fields hold lists and dicts

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in vars(self).items())
        return f"{type(self).__name__}({shown})"


class Ping(_Request, op="ping"):
    """The daemon's pid, version, home, active job counts and nodes."""


class Submit(_Request, op="submit", secret=("secret_env", "submit_env")):
    """Queue `spec`, `count` copies of it, or one task per index of `array`.

    `spec` is JobSpec.to_dict(), its time_limit in seconds; `count` copies make an
    array; `array` is an --array expression and wins over count. secret_env: the values
    of the spec's secret_env names, sent beside the spec and never inside it;
    submit_env: the submitting shell's variables the job exports (spec.export),
    likewise. Replies {"ids": [...]}. `test_only`: queue nothing; reply {"test":
    {"start", "node", "gpus"}} (start: epoch seconds or null when the planner cannot
    tell; node: null likewise).
    """

    spec: dict[str, Any]
    secret_env: dict[str, str] | None = None
    count: int = 1
    held: bool = False
    submit_env: dict[str, str] | None = None
    array: str | None = None
    test_only: bool = False
    # A parameter sweep ({"names": [...], "rows": [[...], ...]}, gbatch/jobspec/sweep.py): one
    # task per row, as an array 0-(rows-1); not with `array`. name_template names each
    # task ("{name}-lr{lr}").
    sweep: dict[str, Any] | None = None
    name_template: str | None = None


class Cancel(_Request, op="cancel"):
    """Cancel or signal the jobs (and steps) a request names, or those its filters select.

    `ranges` are "FIRST-LAST", e.g. an array's "12-511". Named jobs are narrowed by the
    filters `users`, `states` (names or codes), `names`, `partitions` and `nodes`; with
    none named, the filters select among the active jobs the caller may act on (an
    admin's: everyone's), as `scancel -u` does. With `signal`, nothing is cancelled: the
    signal goes to the running jobs' steps (`batch`: their batch shells; `full`: both).
    Replies {"results": [{"id", "ok": false, "error"}, ...], "done", "failed"}: the
    jobs that failed (at most 1,000 listed; "failed" counts them all) and how many were
    cancelled.
    """

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    # Job id texts (gbatch/core/jobids.py: N, N_K, N_[K-M], FIRST-LAST), as the commands
    # send them: N names a whole array when N is an array's id, as in Slurm.
    jobs: tuple[str, ...] = ()
    # Step ids (gbatch/core/steps.py: N.M, N_K.M, N.batch, N.interactive): that step only.
    steps: tuple[str, ...] = ()
    # scancel -n/-p/-w: only jobs of these names, partitions, nodes (AND between them).
    names: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    # scancel -s: send this signal (a name or number) instead of cancelling; to the
    # jobs' steps, or with `batch` to their batch shells alone, with `full` to both.
    signal: str | None = None
    batch: bool = False
    full: bool = False


class Hold(_Request, op="hold"):
    """Hold pending jobs (`ids`, `ranges`).

    Replies {"results", "done", "failed"} as Cancel does.
    """

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


class Release(_Request, op="release"):
    """Release held jobs (`ids`, `ranges`). Replies as Cancel does."""

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


class Requeue(_Request, op="requeue"):
    """Queue jobs again (`ids`, `ranges`); a running one once its run has ended.

    Replies as Cancel does.
    """

    ids: tuple[int, ...] = ()
    ranges: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs


JobAction = Cancel | Hold | Release | Requeue
# The actions a button, a key or a URL names on one job (the web page, the HTTP API, the
# TUI): the requests scancel and scontrol hold/release/requeue send.
JOB_ACTIONS: dict[str, type[JobAction]] = {
    "cancel": Cancel,
    "hold": Hold,
    "release": Release,
    "requeue": Requeue,
}


class ListJobs(_Request, op="jobs"):
    """squeue and sacct: the active jobs, or with `history` every state since `since`.

    Narrowed by ids, users and states (names or codes), and by job names, partitions
    and nodes (squeue -n, -p, -w). `brief`: listings' spec fields only; `table`: brief,
    as jobs_to_table's rows; `columns`: listing_columns' (squeue). Replies
    {"jobs"|"table"|"columns", "now"}, and with `starts`
    also "starts": [[job id, expected start], ...] for the pending jobs listed that
    have an estimate (the planner's reservation, or a --begin time to come); with
    `gpu_usage` also "gpu_usage": [[job id, *GpuUsage.to_wire()], ...] for the listed
    jobs whose current run has GPU samples (sacct's TRESUsageInMax). A page: with
    `after`, only jobs with greater ids; with `limit`, at most that many, and "next"
    (the last id listed) in the reply when more are left, else null.

    A view's page (with `columns`, by state, user and submit time alone): `sort` (a
    queue column: id, user, name, state, gpus, time, where; `reverse` the whole
    order), `shown_states` and `search` (text in the JOBID, USER, NAME or NODE(REASON)
    cell, any case) narrow and order the listing in the daemon, `offset` skips that
    many rows of it, and the reply has "total" (the rows of the whole narrowed
    listing); with `counts`, also "counts": {state: rows} before `shown_states` and
    `search` narrow it. The TUI's queue asks for the rows it shows."""

    ids: tuple[int, ...] = ()
    jobs: tuple[str, ...] = ()  # as Cancel.jobs; an array's id lists all its tasks
    users: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    history: bool = False
    since: float | None = None
    brief: bool = False
    table: bool = False
    names: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    starts: bool = False
    gpu_usage: bool = False
    columns: bool = False
    after: int | None = None
    limit: int | None = None
    sort: str = ""
    reverse: bool = False
    shown_states: tuple[str, ...] = ()
    search: str = ""
    offset: int | None = None
    counts: bool = False

    @property
    def view_page(self) -> bool:
        """Whether it asks for a view's page (sorted, searched, counted or offset)."""
        return bool(
            self.sort
            or self.reverse
            or self.shown_states
            or self.search
            or self.offset is not None
            or self.counts
        )


class ShowJob(_Request, op="job"):
    """One job's record and events (scontrol show job).

    Replies {"job", "events", "now", "tasks", "gpu_usage"}: `gpu_usage` is
    GpuUsage.to_wire() of its current run, or None; `tasks`, with `with_tasks` when `id`
    is an array's and no `task` is named, its other tasks' records (scontrol show job N
    shows each task, as Slurm); else empty.
    """

    id: int
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)
    with_tasks: bool = False


class UpdateJob(_Request, op="update"):
    """scontrol update: change job `id`'s `changes`.

    Each change is one of UPDATE_KEYS (any case) with its value as the user wrote it
    (the daemon reads and checks it). Replies {"id", "changes": ["TimeLimit 1:00:00 ->
    30:00", ...]}.
    """

    id: int
    changes: dict[str, str]
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)


# What `scontrol update` changes, in Slurm's spelling, and the other names Slurm takes
# for them (keys are matched in any case, as Slurm's are).
UPDATE_KEYS = (
    "TimeLimit",
    "Priority",
    "Nice",
    "JobName",
    "Dependency",
    "NumGPUs",
    "Gres",
    "Partition",
    "QOS",
    "Comment",
    "ArrayTaskThrottle",
    "Features",
    "NumNodes",
)
_UPDATE_ALIASES = {
    "name": "JobName",
    "constraint": "Features",
    "constraints": "Features",
    "nodes": "NumNodes",
}


def update_key(text: str) -> str | None:
    """`text` as one of UPDATE_KEYS (any case, or an alias Slurm takes); None if none."""
    lowered = text.lower()
    return next(
        (key for key in UPDATE_KEYS if key.lower() == lowered), _UPDATE_ALIASES.get(lowered)
    )


class ListNodes(_Request, op="nodes"):
    """The fleet's nodes and partitions.

    Replies {"nodes": [...], "default_partition", "partitions": [{"name", "nodes",
    "default", "default_time", "max_time"}, ...]} (times in seconds, null: none set /
    unlimited).
    """


class ReadLog(_Request, op="logs"):
    """A chunk of a job's log from byte `offset`. Replies {"data", "offset", "done", "state"}.

    `label`: its task log instead, the output of its steps of several tasks (srun inside
    a job across nodes, or -n) and of its runs on every node, each line prefixed with its
    task's rank (a node's SLURM_NODEID) as srun -l does; the job's log where it ran
    neither."""

    id: int
    task: int | None = None  # with it, `id` is an array's id: its task `task` (N_K)
    offset: int = 0
    label: bool = False


class DrainNode(_Request, op="node_drain"):
    """Admins: place no more jobs on node `name`, saying why."""

    name: str
    reason: str


class ResumeNode(_Request, op="node_resume"):
    """Admins: place jobs on a drained node again."""

    name: str


class ChangeReservation(_Request, op="reservation_change"):
    """Admins: `scontrol create|update reservation` with scontrol's Key=Value `words`.

    `action` is "create" or "update". Replies {"reservation": its record}."""

    action: str
    words: tuple[str, ...]


class DeleteReservation(_Request, op="reservation_delete"):
    """Admins: `scontrol delete ReservationName=NAME`."""

    name: str


class ListReservations(_Request, op="reservations"):
    """`scontrol show reservation [NAME]`, `sinfo -T`: every reservation, or `name`'s.

    Replies {"reservations": [record, ...], "now"}."""

    name: str | None = None


class InstallAgent(_Request, op="node_install"):
    """Admins: copy the agent to `names` (none: every remote node). Replies {"results"}."""

    names: tuple[str, ...] = ()


class GetHostKey(_Request, op="node_hostkey"):
    """Admins: the SSH host key node `name` offers, and how known_hosts stands on it."""

    name: str


class TrustHostKey(_Request, op="node_trust"):
    """Admins: pin node `name`'s host key if it still has `fingerprint`.

    A different key already pinned is replaced only with `replace`.
    """

    name: str
    fingerprint: str
    replace: bool = False


class ShowShares(_Request, op="shares"):
    """sshare: users' fair-share figures, what their jobs hold and their limits.

    The caller's own row; `users` or `all_users` (every user with jobs, usage or a
    limits entry) are for admins, bar the caller's own name. Replies {"users": [...],
    "now"}.
    """

    users: tuple[str, ...] = ()
    all_users: bool = False


class ShowPriorities(_Request, op="priorities"):
    """sprio: pending jobs (narrowed by `ids` and `users`) with what orders them.

    What orders them: the user's fair-share factor, the job's priority and nice, its
    age. Under private_data a non-admin sees only their own. Replies {"jobs": [{"id",
    "user", "partition", "array_job_id", "array_task", "priority", "nice", "fairshare",
    "submit_time", "held", "rank"}, ...], "now"} (JobPriority.to_wire()); rank is the
    job's place (1 first) among the jobs shown, in the planner's order.
    """

    ids: tuple[int, ...] = ()
    users: tuple[str, ...] = ()


class ReportUsage(_Request, op="usage_report"):
    """sreport: GPU-seconds that runs spent inside [start, end), summed by user.

    Summed by the user's Unix group instead with `by_group` (admins), or by partition
    with `by_partition` (everyone's jobs, as the web page's usage chart shows them to
    anyone). The caller's own row; `users`, `all_users` and `by_group` are for admins.
    Replies {"rows": [{"name", "gpu_seconds", "jobs"}, ...], "start", "end", "now"}.
    """

    start: float
    end: float
    users: tuple[str, ...] = ()
    all_users: bool = False
    by_group: bool = False
    by_partition: bool = False


class ReportUsageSeries(_Request, op="usage_series"):
    """sreport's GPU-seconds per step of a period, by user and by partition (/ui/usage).

    `edges`: the steps' bounds, ascending (2 to 401: days or weeks, as the caller's clock
    draws them); step i is [edges[i], edges[i+1]). Replies {"edges", "now", "users":
    [[user, [GPU-seconds per step]], ...], "partitions": [[partition, [...]], ...],
    "shares": [[user, fair-share factor], ...], "hidden": bool}. Under private_data a
    non-admin's view of other users is one row named "" (other users), and their shares
    are left out; the partitions are everyone's."""

    edges: tuple[float, ...]


class ShowTimeline(_Request, op="timeline"):
    """The GPU timeline's data over [start, end): runs, pending queue, reservations.

    Replies {"start", "end", "now", "runs", "pending", "windows", "lanes"}:
    - runs: each run that overlaps the range, a job's last and those a requeue ended
      (state "REQUEUED", with the requeue's "reason"), {"id", "attempt", "name", "user",
      "state", "reason", "start", "end" (null: still on), "placements": [[node, [GPU
      ids]], ...], "idle": [[node, GPU, start, end], ...]}; idle: the stretches a GPU of
      it read under the idle_gpu policy's threshold for its after_minutes or longer (the
      sample history);
    - pending: [[time, jobs pending], ...], a step function, its first point at `start`;
    - windows: [[reservation, node, [GPU ids] (empty: the whole node), start, end,
      MAINT], ...];
    - lanes: [[node, [[GPU id, its card's id for a MIG slice, else null], ...]], ...],
      the fleet's GPUs now.
    Under private_data a non-admin's view of another user's run has "id" 0 and "name"
    and "user" "" (an other user's bar)."""

    start: float
    end: float


class ShowGpuHistory(_Request, op="gpu_history"):
    """GPUs' utilisation and memory over [start, end), from the head's sample history.

    `node` "" for every node; `gpus` () for each GPU of the node(s) now. Each second's
    samples where the range lies within the last hour, else each minute's, merged into
    at most `points` steps (1 to 1,000). Replies {"start", "end", "now", "series":
    [{"node", "index", "memory_total_mib" (null: not reported), "points": [[time, util
    mean|null, util max|null, MiB used mean, MiB used max], ...]}, ...]}."""

    start: float
    end: float
    node: str = ""
    gpus: tuple[int, ...] = ()
    points: int = 120


class Metrics(_Request, op="metrics"):
    """What `GET /metrics` shows: the queue, the fleet and the daemon's counters, all users'.

    gbatch/api/metrics.py renders it for Prometheus. A snapshot, every user's. Under
    private_data, admins only. Replies {"now", "uptime", "jobs": [[state, user,
    partition, count], ...] (jobs not yet ended), "nodes": [node_to_wire, ...],
    "round_trips": {node: [seconds, age in seconds]} (SSH; measured nodes only),
    "shares": [[user, decayed GPU-seconds, fair-share factor], ...], "daemon":
    head/metrics.DaemonMetrics.to_wire(), "gpu_jobs": [[node, GPU index, job id, user],
    ...] (each GPU an allocated job holds)}."""


class Shutdown(_Request, op="shutdown"):
    """Admins: stop the daemon (jobs carry on). Replies {"pid"}."""


class MintToken(_Request, op="token"):
    """An API token for the caller, or with `user` (admins) for that Unix user.

    A token for another user is a service account's. `scopes` as head/tokens.SCOPES
    names them (none: all), valid `lifespan` seconds. Socket callers only. Replies
    {"token", "jti", "user", "scopes", "expires", "kid"}.
    """

    lifespan: int = 3600
    scopes: tuple[str, ...] = ()
    user: str | None = None


class ListTokens(_Request, op="tokens"):
    """The caller's unexpired tokens' records, never the tokens themselves.

    With `all_users`, admins: everyone's. Replies {"tokens": [{"jti", "user", "scopes",
    "issued", "expires", "revoked"}, ...], "now"}.
    """

    all_users: bool = False


class RevokeToken(_Request, op="token_revoke"):
    """Refuse token `jti` from now on: its owner's or an admin's. Replies {"jti", "user"}."""

    jti: str


class RotateTokenKey(_Request, op="token_rotate"):
    """Admins: sign new tokens with a new key.

    The old keys still verify their tokens until those expire, unless `drop_old`.
    Replies {"kid"}.
    """

    drop_old: bool = False


class LinkCluster(_Request, op="cluster_link"):
    """Link the caller's login on a per-user cluster partition: a key pair made on the head.

    The private half is sealed in the store; replaces an earlier link. Socket callers
    only. Replies {"partition", "user", "login", "public"} (an authorized_keys line)."""

    partition: str
    login: str


class UnlinkCluster(_Request, op="cluster_unlink"):
    """Forget the caller's link to `partition` (its key with it); with `user`, admins: theirs.

    Refused while that user's jobs are on the cluster. Replies {"partition", "user",
    "login"}."""

    partition: str
    user: str | None = None


class ClusterStatus(_Request, op="cluster_status"):
    """The cluster partitions (up or down, why) and the caller's links (ok or broken, why).

    With `all_users`, admins: everyone's links. Replies {"partitions": [{"name",
    "identity", "login", "state", "reason"}], "links": [{"partition", "user", "login",
    "state", "reason", "since", "linked", "public"}]}."""

    all_users: bool = False


class WithToken(_Request, op="with_token", secret=("token",)):
    """`request` made by the user API token `token` was issued to, within its scopes.

    `request` is one request object, as encode_request makes it; whoever sends it, the
    caller is the token's user, never the socket's peer. The HTTP API sends every
    request so.
    """

    token: str
    request: dict[str, Any]
    # The address of the HTTP client that presented the token, as the API saw it: whom
    # the audit log charges a token nobody signed to (its refusal budget), never who
    # the caller is.
    client: str = ""


class OpenStep(_Request, op="step", secret=("env",)):
    """Run `argv` as a new step of running job `job`, on its node, as its owner.

    Only the job's owner may (an admin too where the config's admin_steps says so).
    `env` is the caller's environment (the daemon filters it as an export's, then sets
    the job's and step's SLURM_* and GPU variables over it); `cwd` where a bare step
    starts. `pty`: a pseudo-terminal of `rows` x `cols` with `term` as TERM, instead of
    pipes. `interactive`: salloc's shell, the step `N.interactive`. With `task`, `job` is
    an array's id and the step is its task `task`'s (N_K). Replies {"job", "step",
    "label", "leads", "gpus"}; after that line the connection carries the step's frames
    (gbatch/core/stepframes.py) until its EXIT frame.

    The step's own share of the job (srun -G, -c, --mem inside it): `gpus`, `cpus`,
    `mem_mb` (None: the job's, all of it, none held for itself); `overlap`: GPUs other
    steps hold may be shared. When the GPUs asked are held by the job's other steps
    now, the reply is {"busy": why} and the connection ends: ask again later.

    Its tasks across the allocation (srun inside a job across nodes): `nodes` (-N, the
    first that many of the job's), `ntasks` (-n), `ntasks_per_node`, `nodelist` (-w, of
    the job's nodes); none given: the job's own layout (one task per node, or its -n /
    --ntasks-per-node). More than one task, or `label`: the step is a fan-out, its
    tasks' output carried back in whole lines (`label`: each prefixed with its rank,
    as srun -l), the reply's "tasks" counting them. `kill_on_bad_exit`: a task that
    fails stops the others (srun -K, on by default here).
    """

    job: int
    argv: tuple[str, ...]
    env: dict[str, str] | None = None
    cwd: str | None = None
    pty: bool = False
    rows: int = 24
    cols: int = 80
    interactive: bool = False
    task: int | None = None
    gpus: int | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    overlap: bool = False
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    nodelist: tuple[str, ...] = ()
    label: bool = False
    kill_on_bad_exit: bool = True


class AwaitAllocation(_Request, op="await_allocation"):
    """Wait up to `seconds` (at most 30) for interactive job `job` to be allocated.

    srun and salloc ask it again and again while they wait: an allocation nobody waits
    for is cancelled after the config's interactive_grace_seconds. `planned`: return as
    soon as the planner has looked at the job (srun -I). Replies {"state", "reason",
    "node", "gpus"} as the job is when it is RUNNING or ended, or when the wait is over.
    """

    job: int
    seconds: float = 10.0
    planned: bool = False


class ListSteps(_Request, op="steps"):
    """The steps of jobs `ids` (sacct).

    Replies {"steps": [Step.to_wire(), ...]}: of the caller's own jobs only under
    private_data (an admin's: all)."""

    ids: tuple[int, ...] = ()


class OpenForward(_Request, op="port_forward"):
    """Carry a TCP connection to port `ports[0]` inside running job `job` (port-forward).

    Only the job's owner may (an admin too where admin_steps says so). Replies {"job",
    "node", "port", "to"} once gbatchd has connected to the port (the job's host's
    127.0.0.1 for a bare job, its container's address for a container job); after that
    line the connection carries the TCP stream's bytes both ways, until either side
    closes it or the job ends. With `watch`, nothing is connected: `ports` are those the
    forward will carry (for the audit log), and the connection stays open, silent, until
    the job's run ends, when one JSON line {"ended": STATE} comes and it closes. With
    `task`, `job` is an array's id and the forward reaches its task `task` (N_K).
    """

    job: int
    ports: tuple[int, ...]
    watch: bool = False
    task: int | None = None


Request = (
    Ping
    | Submit
    | Cancel
    | Hold
    | Release
    | Requeue
    | ListJobs
    | ShowJob
    | UpdateJob
    | ListNodes
    | ReadLog
    | DrainNode
    | ResumeNode
    | ChangeReservation
    | DeleteReservation
    | ListReservations
    | InstallAgent
    | GetHostKey
    | TrustHostKey
    | ShowShares
    | ShowPriorities
    | ReportUsage
    | ReportUsageSeries
    | ShowTimeline
    | ShowGpuHistory
    | Metrics
    | Shutdown
    | MintToken
    | ListTokens
    | RevokeToken
    | RotateTokenKey
    | WithToken
    | OpenStep
    | AwaitAllocation
    | ListSteps
    | OpenForward
    | LinkCluster
    | UnlinkCluster
    | ClusterStatus
)
REQUESTS: Mapping[str, type[Request]] = {cls.op: cls for cls in Request.__args__}


def encode_request(request: Request) -> dict[str, Any]:
    """The JSON object for `request`: its op and every field (tuples become lists)."""
    return {"op": request.op, **vars(request)}
