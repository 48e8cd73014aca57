"""One small handler per request the daemon serves.

A handler takes the daemon, the caller (from SO_PEERCRED, never from the request)
and its request (a wire request type, its fields' types already checked), and returns
the reply's fields or raises Refused. Handlers write intents to the store and wake
the loop; they never start or signal runs.
"""

from __future__ import annotations

import functools
import grp
import json
import logging
import os
import pwd
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, assert_never

from gbatch import __version__
from gbatch.core import dependency
from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.jobids import JobIdError, parse_job_ids
from gbatch.core.limits import (
    ARRAY_HARD_CAP,
    PendingLimitReached,
    Use,
    UserLimits,
    UserShare,
    array_refusal,
    gpus_refusal,
    use_by_user,
)
from gbatch.core.model import (
    ACTIVE_STATES,
    ALLOCATED_STATES,
    IMPLICIT_PARTITION,
    IllegalTransition,
    Job,
    JobSpec,
    JobState,
    PartitionInfo,
)
from gbatch.core.submitenv import filter_submit_env
from gbatch.core.timefmt import MAX_TIME_LIMIT_S, format_duration, show_value
from gbatch.core.views import JobPriority
from gbatch.head import jobupdate, notify
from gbatch.head.accounting import usage_by
from gbatch.head.daemon import Daemon
from gbatch.head.fairshare import factors
from gbatch.head.groupcommit import CommitterClosed
from gbatch.head.idlegpu import IDLE_REASON
from gbatch.head.store import (
    LISTING_SORTS,
    JobBrief,
    JobNotFound,
    ListingQuery,
    ListingSpecs,
    StateChange,
    StoreError,
    StoreFull,
    Submission,
    listing_specs,
)
from gbatch.head.tokens import MAX_LIFESPAN, TokenError, parse_scopes
from gbatch.jobspec.spec import (
    SpecError,
    build_spec,
    check_submit_env_size,
    parse_array,
    secret_env_values,
    split_throttle,
)
from gbatch.jobspec.sweep import Sweep, check_templates, sweep_from_wire
from gbatch.jobspec.sweep import task_spec as sweep_task_spec
from gbatch.nodes import resolve
from gbatch.nodes.base import HostError
from gbatch.protocol import wire
from gbatch.site import policy

log = logging.getLogger("gbatchd")
MAX_ARRAY = ARRAY_HARD_CAP
LOG_CHUNK = 256 * 1024
# gbatchd's own user, who may do anything (as root): read once, since it never changes
# while gbatchd runs (os.getuid() is a system call, and a submit asked up to three times).
DAEMON_UID = os.getuid()

# Agent installs at once: `node install --all` on a large fleet is a bounded burst of SSH
# handshakes and SFTP copies from the head, not one per host.
INSTALL_WORKERS = 8


@dataclass(frozen=True)
class Caller:
    """Who makes a request: the socket's peer (SO_PEERCRED), or the user an API token
    was issued to (`scopes` then says what the token allows, `via` names it)."""

    uid: int
    user: str
    pid: int
    scopes: frozenset[str] | None = None  # None: no token, the peer's own rights
    via: str = ""  # "token:<jti>" for a request made with a token


class Refused(Exception):
    """The request cannot be served, for the reason `kind` says."""

    def __init__(self, kind: wire.ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


# The most characters of a user's string a log line takes: a 4 MB node name refused
# fifty times must not add 200 MB to the log.
LOGGED_CHARS = 200
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def loggable(value: object, limit: int = LOGGED_CHARS) -> str:
    """`value` as a safe part of one log line: control characters (a newline that would
    forge the next line, an ESC that would drive the reader's terminal) written as
    escapes, and cut to `limit` characters, saying how many more there were."""
    text = str(value)
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    text = _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
    return f"{text}...[{cut} more characters]" if cut > 0 else text


def audit(
    daemon: Daemon, caller: Caller, action: str, target: Job | JobBrief | str, outcome: str
) -> None:
    """Record who tried what on what, and why it was refused or allowed: one line.

    `caller` is from SO_PEERCRED (never what the request claims); `target` a job, or
    what else was acted on ("node gpu1", "daemon"); `outcome` is "refused: <why>"
    (logged as a warning) or "allowed: <why>". The line is key=value, for grep:
    `audit: user=bob uid=1001 pid=42 op=cancel job=12 owner=alice -> refused: not the
    owner`. A user's refusals past the daemon's budget are counted instead, and said in
    one line (gbatch/head/refusals.py)."""
    refused = outcome.startswith("refused")
    if refused and not daemon.refusal_lines.admit(caller.uid, loggable(caller.user), action):
        return
    what = (
        f"job={target.id} owner={loggable(target.user)}"
        if isinstance(target, Job | JobBrief)
        else f"target={loggable(target.replace(' ', '_'))}"
    )
    _audit_line(caller, action, what, outcome)


def audit_jobs(
    daemon: Daemon,
    caller: Caller,
    action: str,
    count: int,
    ids: Sequence[int],
    owners: Iterable[str],
    outcome: str,
) -> None:
    """One audit line for `count` jobs refused alike in one request, naming the first
    `ids` and their `owners`: `... op=cancel jobs=500000 ids=12,13,14,15,16... owners=alice
    -> refused: not the owner`. Within the user's refusal budget, as audit's."""
    if outcome.startswith("refused") and not daemon.refusal_lines.admit(
        caller.uid, loggable(caller.user), action
    ):
        return
    shown = ",".join(map(str, ids)) + ("..." if count > len(ids) else "")
    whose = ",".join(sorted(loggable(owner) for owner in owners))
    _audit_line(caller, action, f"jobs={count} ids={shown} owners={whose}", outcome)


def _audit_line(caller: Caller, action: str, what: str, outcome: str) -> None:
    level = logging.WARNING if outcome.startswith("refused") else logging.INFO
    log.log(
        level,
        "audit: user=%s uid=%s pid=%s%s op=%s %s -> %s",
        loggable(caller.user),
        caller.uid,
        caller.pid,
        f" via={caller.via}" if caller.via else "",
        action,
        what,
        loggable(outcome),
    )


def is_admin(daemon: Daemon, caller: Caller) -> bool:
    """Root, the daemon's own user, the users named in `admins:` and the members of
    `admin_group:` (supplementary or primary) may act on any job."""
    if caller.uid in (0, DAEMON_UID) or caller.user in daemon.config.admins:
        return True
    group = daemon.config.admin_group
    epoch = int(time.monotonic() // GROUP_CACHE_S)
    return group is not None and _in_group(caller.uid, caller.user, group, epoch)


# Group membership is read from the system's group database (grp/pwd), and kept for
# this long: a sweep over thousands of jobs asks once, and a change still takes hold.
GROUP_CACHE_S = 10.0


@functools.lru_cache(maxsize=256)
def _in_group(uid: int, user: str, group: str, epoch: int) -> bool:
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return False
    if user in entry.gr_mem:
        return True
    try:
        return pwd.getpwuid(uid).pw_gid == entry.gr_gid
    except KeyError:
        return False


def _require_admin(daemon: Daemon, caller: Caller, op: str, target: str, what: str) -> None:
    """Refuse (and audit) a caller who is not an admin; `what` they may not do."""
    if not is_admin(daemon, caller):
        audit(daemon, caller, op, target, "refused: not an admin")
        raise Refused("permission", f"only root, the daemon's user or an admin may {what}")


def may_act_on(daemon: Daemon, caller: Caller, job: Job) -> bool:
    return caller.uid == job.uid or is_admin(daemon, caller)


def _named_job(
    daemon: Daemon, caller: Caller, job_id: int, op: str, task: int | None = None
) -> Job:
    """The job a request names (with `task`: task `task` of the array `job_id`, N_K).
    Under private_data another user's job answers as a job that does not exist (Slurm's
    PrivateData=jobs), and the attempt is audited."""
    if task is not None:
        tasks = daemon.store.array_tasks_in(job_id, ((task, task),), MAX_ARRAY)
        if task not in tasks:
            raise Refused("not_found", f"Invalid job id specified: {job_id}_{task}")
        job_id = tasks[task]
    found = _job(daemon, job_id)
    if daemon.config.private_data and not may_act_on(daemon, caller, found):
        audit(daemon, caller, op, found, "refused: not the owner (private_data: not found)")
        raise Refused("not_found", f"Invalid job id specified: {found.id}")
    return found


def _job_to_wire(job: Job, *, owner_view: bool) -> dict[str, Any]:
    """A job as `caller` may see it: env values are the owner's and admins' only (they
    often hold tokens); others get the names with empty values."""
    data = wire.job_to_wire(job)
    if not owner_view and "env" in data["spec"]:
        data["spec"]["env"] = dict.fromkeys(data["spec"]["env"], "")
    return data


def _job(daemon: Daemon, job_id: int) -> Job:
    job = daemon.store.get(job_id)
    if job is None:
        raise Refused("not_found", f"Invalid job id specified: {job_id}")
    return job


def _states(states: Sequence[str]) -> list[JobState] | None:
    """A request's state filter (names or codes, any case); None when empty."""
    if not states:
        return None
    try:
        return [JobState.parse(s) for s in states]
    except ValueError as err:
        raise Refused("invalid", f"unknown job state {err}. Use e.g. PD, R, CD or PENDING") from err


# -- handlers ------------------------------------------------------------------------


def ping(daemon: Daemon, caller: Caller, request: wire.Ping) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "version": __version__,
        "started_at": daemon.started_at,
        "home": str(daemon.paths.home),
        "active": daemon.store.active_counts(),
        "nodes": [wire.node_to_wire(n) for n in daemon.fleet.node_infos()],
    }


def _mount_resolver(
    spec: JobSpec, caller: Caller, site: policy.ContainerPolicy
) -> resolve.Resolved | None:
    """The job's mount paths followed on this machine with the submitter's rights
    (a child process that becomes them, when the daemon is root); None without mounts."""
    if not spec.mounts:
        return None
    try:
        run_as = policy.submitter_identity(caller.uid)
        return resolve.resolve_here(run_as, policy.paths_to_resolve(spec, caller.user, site))
    except (ValueError, HostError) as err:
        raise Refused("invalid", f"mounts: cannot follow them as {caller.user}: {err}") from err


def submit(daemon: Daemon, caller: Caller, request: wire.Submit) -> dict[str, Any]:
    """Queue one spec, or `count` copies of it (an array: one transaction)."""
    raw = request.spec
    # On the wire a time limit is already in seconds, not a job file's minutes.
    limit = raw.get("time_limit")
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= MAX_TIME_LIMIT_S
    ):
        raise Refused("invalid", f"time_limit: {limit!r} is not a number of seconds")
    # Secret values come beside the spec, never in it; the spec's names are their keys.
    secrets = {"secret_env": request.secret_env or None}
    try:
        spec = build_spec(
            {**raw, "time_limit": None, **secrets},
            {},
            default_name=str(raw.get("name") or "job"),
            source="spec",
            wire=True,
        )
        secret_values = secret_env_values(secrets, {})
        # Filtered again: a client other than gbatch's own may send anything.
        submit_env = filter_submit_env(request.submit_env or {})
        check_submit_env_size(submit_env)
        indices = None if request.array is None else parse_array(request.array, max_tasks=MAX_ARRAY)
        throttle = None if request.array is None else split_throttle(request.array)[1]
        sweep = _submitted_sweep(request, spec)
    except SpecError as err:
        raise Refused("invalid", str(err)) from err
    _check_notify_allowed(daemon, spec)
    spec = _in_partition(daemon, spec, limit)
    try:  # the site's policy: mount roots (symlinks followed as the submitter), bare jobs
        spec = policy.check_submission(
            spec,
            uid=caller.uid,
            user=caller.user,
            policy=daemon.config.container_policy,
            resolve=_mount_resolver(spec, caller, daemon.config.container_policy),
            daemon_uid=DAEMON_UID,
        )
    except SpecError as err:
        raise Refused("invalid", str(err)) from err
    if sweep is not None:  # a sweep is the array 0-(rows-1)
        indices = tuple(range(len(sweep.rows)))
        array_text: str | None = f"0-{len(indices) - 1}"
    else:
        array_text = split_throttle(request.array)[0] if request.array else None
    count = request.count if indices is None else len(indices)
    if not 1 <= count <= MAX_ARRAY:
        raise Refused("invalid", f"--array: 1 to {MAX_ARRAY} tasks per submission")
    have, why = daemon.fleet.max_gpus_per_node()
    if spec.gpus > have and daemon.fleet.all_reported():
        hint = (
            "Set GBATCH_SIMULATE_GPUS=N before `gbatch daemon start` to try gbatch without "
            "GPUs, or ask for gpus: 0"
            if have == 0
            else f"Ask for at most {have}"
        )
        detail = f" ({why})" if why and have == 0 else ""
        raise Refused(
            "invalid",
            f"gpus: {spec.gpus} GPUs requested but the largest node has {have}{detail}. {hint}",
        )
    _check_runnable_somewhere(daemon, spec)
    if spec.dependency is not None:
        spec = spec.replace(dependency=_check_dependency(daemon, caller, spec.dependency))
    limits = _submit_limits(daemon, caller)
    if limits is not None:
        for refusal in (
            array_refusal(count, limits.max_array_size),
            gpus_refusal(spec.gpus, limits.max_gpus),
        ):
            if refusal is not None:
                raise Refused("invalid", refusal)
    if request.test_only:
        return {"test": _test_start(daemon, caller, spec)}
    tail_count = 0
    if indices is not None and sweep is None:
        # Ids of one submission are consecutive: task i's position is its offset. Past
        # the first ARRAY_ROWS, the tasks wait as one record (the store's array tail).
        spec = spec.replace(array=array_text, array_throttle=throttle)
        specs = [
            spec.replace(array_task=index, array_pos=i)
            for i, index in enumerate(indices[:ARRAY_ROWS])
        ]
        tail_count = len(indices) if len(indices) > ARRAY_ROWS else 0
    elif indices is not None:
        specs = [
            spec.replace(array_task=index, array_pos=i, array=array_text)
            for i, index in enumerate(indices)
        ]
        if sweep is not None:
            try:
                specs = [
                    sweep_task_spec(task, sweep, k, request.name_template)
                    for k, task in enumerate(specs)
                ]
            except SpecError as err:
                raise Refused("invalid", str(err)) from err
    elif count == 1:
        specs = [spec]
    else:
        specs = [spec.replace(array_task=i, array_pos=i) for i in range(min(count, ARRAY_ROWS))]
        tail_count = count if count > ARRAY_ROWS else 0
    try:
        ids = daemon.committer.submit(
            Submission(
                tuple(specs),
                caller.uid,
                caller.user,
                request.held,
                tuple(secret_values.items()),
                submit_env=tuple(submit_env.items()),
                max_pending=None if limits is None else limits.max_pending_jobs,
                tail_count=tail_count,
            )
        )
    except PendingLimitReached as err:
        raise Refused("permission", str(err)) from err
    except CommitterClosed as err:
        raise Refused("unavailable", f"{err}. Submit again once it is back") from err
    daemon.metrics.count_submitted(max(tail_count, len(specs)))
    # A job that cannot start yet needs no pass: a held one's release wakes the loop,
    # and a tick (about 1 s) comes past a --begin time (its reason is written with it).
    if not request.held and (spec.begin is None or spec.begin <= daemon.clock()):
        daemon.submitted()
    return {"ids": ids}


def _check_notify_allowed(daemon: Daemon, spec: JobSpec) -> None:
    """Refuse a job webhook whose URL no webhook_prefixes_allowed prefix starts: the
    head must never POST where its admin did not allow (an internal address)."""
    prefixes = daemon.config.webhook_prefixes_allowed
    refused = notify.disallowed_hooks(spec.notify, prefixes)
    if not refused:
        return
    fix = (
        f"Use a URL starting with {' or '.join(prefixes)}"
        if prefixes
        else "This head allows no job webhooks: drop notify, or ask an admin to list "
        "your hook's URL prefix in webhook_prefixes_allowed"
    )
    raise Refused("invalid", f"notify: {refused[0]} is not an allowed webhook address. {fix}")


def _submitted_sweep(request: wire.Submit, spec: JobSpec) -> Sweep | None:
    """The request's parameter sweep, checked (names, rows, the command's and name
    template's placeholders), or None; SpecError for one that cannot be queued."""
    if request.sweep is None:
        if request.name_template is not None:
            raise SpecError("--name-template", "names a sweep's tasks; give --param or sweep:")
        return None
    if request.array is not None or request.count != 1:
        raise SpecError(
            "--array",
            "a sweep is its own array (one task per row). Remove --array, or the sweep",
        )
    if request.name_template is not None and not isinstance(request.name_template, str):
        raise SpecError("--name-template", "not text")
    sweep = sweep_from_wire(request.sweep)
    check_templates(spec.command, sweep.names, request.name_template, spec.name)
    return sweep


def _in_partition(daemon: Daemon, spec: JobSpec, time_limit: int | None) -> JobSpec:
    """The spec with the request's time limit (seconds, or None), its partition named
    (the default one when it names none), its partition's default time limit and image
    filled in; Refused for a partition the fleet lacks or a limit past the partition's
    max_time (Slurm would leave the job pending, PartitionTimeLimit, for good: better
    said at once). One copy of the spec."""
    partitions = daemon.fleet.partitions
    if not partitions:
        return spec if time_limit == spec.time_limit else spec.replace(time_limit=time_limit)
    if spec.partition is None:
        chosen = daemon.fleet.default_partition()
        if chosen is None:
            raise Refused("invalid", "partition: none given and no default. Pass -p NAME")
    elif spec.partition in partitions:
        chosen = partitions[spec.partition]
    else:
        names = ", ".join(p.name + ("*" if p.default else "") for p in partitions.values())
        raise Refused(
            "invalid",
            f"partition: {show_value(spec.partition)} is not a partition here. Use one of: "
            f"{names} (* is the default)",
        )
    limit = time_limit if time_limit is not None else chosen.limit_without_time
    if chosen.max_time is not None and limit is not None and limit > chosen.max_time:
        raise Refused(
            "invalid",
            f"time_limit: {format_duration(limit)} is over partition {chosen.name}'s max_time "
            f"({format_duration(chosen.max_time)}). Ask for at most that (-t), or use "
            "another partition",
        )
    return spec.replace(
        partition=chosen.name,
        time_limit=limit,
        image=spec.image if spec.image is not None else chosen.default_image,
    )


def _check_dependency(daemon: Daemon, caller: Caller, text: str) -> str:
    """The dependency as stored: every job it names exists (Slurm refuses the submit
    otherwise), and an array's id is written `N_*`, all its tasks. Another user's job
    may be named, as in Slurm; under private_data it is as one that does not exist, so
    the refusal tells no more than squeue would."""
    parsed = dependency.parse(text)
    refs = parsed.refs
    found = {brief.id: brief for brief in daemon.store.briefs(sorted({r.id for r in refs}))}
    hide = daemon.config.private_data and not is_admin(daemon, caller)
    arrays: set[int] = set()
    for ref in refs:
        brief = found.get(ref.id)
        if brief is None or (hide and brief.uid != caller.uid):
            raise Refused(
                "invalid",
                f"dependency: job {ref.id} does not exist (Job dependency problem). "
                "Name a job that squeue or sacct shows",
            )
        # Whether it is an array, and the one task named: never the whole array.
        named = ((ref.task, ref.task),) if ref.task is not None else ()
        tasks = daemon.store.array_tasks_at(ref.id, named, MAX_ARRAY)
        if tasks is not None:
            arrays.add(ref.id)
        if ref.task is not None and (tasks is None or ref.task not in tasks):
            raise Refused(
                "invalid",
                f"dependency: {ref} is not a task of an array (Job dependency problem). "
                f"Name the array's id ({ref.id}) or one of its tasks",
            )
        if ref.whole_array and tasks is None:
            raise Refused(
                "invalid",
                f"dependency: job {ref.id} is not an array. Write {ref.id} instead of {ref}",
            )
    return str(dependency.with_arrays(parsed, arrays))


def _test_start(daemon: Daemon, caller: Caller, spec: JobSpec) -> dict[str, Any]:
    """sbatch --test-only: where and when the planner would start `spec` if it were
    queued now, behind the queue as it is; nothing is stored."""
    now = daemon.clock()
    start, node, gpus, reason = daemon.would_start(
        Job(0, caller.uid, caller.user, spec, JobState.PENDING, now), now
    )
    return {
        "start": start,
        "node": node,
        "gpus": list(gpus),
        "reason": reason,
        "partition": spec.partition,
    }


def _submit_limits(daemon: Daemon, caller: Caller) -> UserLimits | None:
    """The caller's limits at submit; None for root and the daemon's own user, who may
    always queue (an admin restoring a queue, the single user of an embedded daemon)."""
    if caller.uid in (0, DAEMON_UID):
        return None
    return daemon.limits_for(caller.user)


def _check_runnable_somewhere(daemon: Daemon, spec: JobSpec) -> None:
    """Refuse at submit what no node could ever run, rather than queue it forever."""
    nodes = list(daemon.fleet.nodes.values())
    if spec.image is None:
        if not any(node.runs_bare_processes for node in nodes):
            raise Refused(
                "invalid",
                "image: the fleet's nodes run containers only. Add `image:` to the job "
                "(or --image)",
            )
        return
    problems = []
    for node in nodes:
        if node.report()[0] is None:
            return  # a node that is down now may well run it when it is back
        problem = node.docker_problem(daemon.clock())
        if problem is None:
            return
        problems.append(f"{node.name}: {problem}")
    where = "node local" if [n.name for n in nodes] == ["local"] else "any node"
    raise Refused(
        "unavailable",
        f"image: jobs with an image need a docker engine on {where}, and none answers "
        f"({'; '.join(problems)}). Start dockerd, or drop `image:` to run a bare process",
    )


# -- requests over many jobs: cancel, hold, release, requeue ---------------------------
#
# `scancel -u student` over 500,000 pending jobs must neither stall the daemon nor hold
# 500,000 Jobs in memory. So these requests read the jobs they name a batch at a time as
# JobBriefs (id, owner, state), and pending jobs are cancelled, held or released by set
# in one transaction per batch (Store.cancel_pending, set_held_many). The store's lock is
# let go between batches, so other requests and the loop run meanwhile. Running jobs are
# few: they go one by one through set_states, and the loop signals them.
#
# A reply lists only what failed ({"id", "ok": false, "error"}), the first
# LISTED_FAILURES of them, and counts: {"results": [...], "done": N, "failed": M}.

# Jobs per batch: one read and one transaction each (5,000 pending cancels commit in
# about 50 ms here), short enough that a squeue waits little behind one.
BULK_BATCH = 5000
LISTED_FAILURES = 1000
# The longest the audit line of a request's refusals makes its list of job ids.
AUDITED_IDS = 5


@dataclass
class _Refusals:
    """Jobs of one request refused for one reason: how many, the first few and owners."""

    count: int = 0
    ids: list[int] = field(default_factory=list)
    owners: set[str] = field(default_factory=set)
    first: JobBrief | None = None


class _Tally:
    """What a request over many jobs did: how many jobs it acted on, its failures (the
    first LISTED_FAILURES kept, all counted), and its refusals, each kind audited in ONE
    line when the request ends (a refused sweep of 500,000 jobs is one line, not 500,000)."""

    def __init__(self, daemon: Daemon, caller: Caller, op: str) -> None:
        self.daemon = daemon
        self.caller = caller
        self.op = op
        self.done = 0
        self.failed = 0
        self.failures: list[dict[str, Any]] = []
        self._refused: dict[str, _Refusals] = {}  # by the audit line's outcome

    def fail(self, target: int | str, error: str) -> None:
        self.failed += 1
        if len(self.failures) < LISTED_FAILURES:
            self.failures.append({"id": target, "ok": False, "error": error})

    def refuse(self, job: JobBrief, outcome: str, error: str | None) -> None:
        """Refuse `job` (audited with `outcome`); `error`, when given, is what the caller
        reads (None: the job is left out silently, as one private_data hides in a range)."""
        refused = self._refused.setdefault(outcome, _Refusals(first=job))
        refused.count += 1
        if len(refused.ids) < AUDITED_IDS:
            refused.ids.append(job.id)
            refused.owners.add(job.user)
        if error is not None:
            self.fail(job.id, error)

    def finish(self) -> dict[str, Any]:
        """Audit the refusals and return the reply's fields."""
        for outcome, refused in self._refused.items():
            if refused.count == 1 and refused.first is not None:
                audit(self.daemon, self.caller, self.op, refused.first, outcome)
            else:
                audit_jobs(
                    self.daemon,
                    self.caller,
                    self.op,
                    refused.count,
                    refused.ids,
                    refused.owners,
                    outcome,
                )
        return {"results": self.failures, "done": self.done, "failed": self.failed}


def _ranges(texts: Sequence[str]) -> list[tuple[int, int]]:
    """`FIRST-LAST` job id ranges (an array as sbatch printed it), checked."""
    ranges = []
    for text in texts:
        first, dash, last = text.partition("-")
        if not (dash and first.isdigit() and last.isdigit() and 0 < int(first) <= int(last)):
            raise Refused(
                "invalid",
                f"ranges: {loggable(text, 40)!r} is not a range of job ids. Use FIRST-LAST, "
                "e.g. 12-511",
            )
        ranges.append((int(first), int(last)))
    return ranges


def _targets(
    daemon: Daemon,
    request: wire.Cancel | wire.Hold | wire.Release | wire.Requeue | wire.ListJobs,
    tally: _Tally | None,
    arrays: list[tuple[int, int]] | None = None,
) -> tuple[list[int], list[tuple[int, int]]]:
    """The ids and id ranges a request names: its `ids`, its `ranges` and its `jobs`
    texts (gbatch/core/jobids.py; refused whole when one is not a job id). An array's id
    names all its tasks, `N_K` and `N_[K-M]` the tasks of array N; a task or array
    that does not exist fails "Invalid job id specified" (with `tally`). `arrays`, when
    given, receives the ranges that are whole arrays named by their id."""
    ranges = _ranges(getattr(request, "ranges", ()))
    ids = list(request.ids)
    plain: list[int] = []
    for text in request.jobs:
        try:
            targets = parse_job_ids(text)
        except JobIdError as err:
            raise Refused("invalid", f"jobs: {err}") from None
        for target in targets:
            if target.last is not None:
                ranges.append((target.job, target.last))
            elif target.tasks is None:
                plain.append(target.job)
            else:
                tasks = daemon.store.array_tasks_in(target.job, target.tasks, MAX_ARRAY)
                chosen = list(tasks.values())
                if not chosen and tally is not None:
                    tally.fail(str(target), f"Invalid job id specified: {target}")
                ids.extend(sorted(chosen))
    ends = daemon.store.array_ends(plain, MAX_ARRAY) if plain else {}
    for job_id in plain:
        if job_id in ends:
            ranges.append((job_id, ends[job_id]))
            if arrays is not None:
                arrays.append((job_id, ends[job_id]))
        else:
            ids.append(job_id)
    if ids and not isinstance(request, wire.ListJobs):
        # Tasks named alone that still wait in their array's tail become rows, so that
        # what acts on one job (cancel, hold, requeue) acts on them. A listing reads
        # them where they are.
        daemon.store.materialise(ids)
    return ids, ranges


def _named(
    daemon: Daemon,
    caller: Caller,
    tally: _Tally,
    ids: Sequence[int],
    ranges: Sequence[tuple[int, int]],
    admin: bool,
) -> Iterator[list[JobBrief]]:
    """The jobs a request names, a batch at a time: `ids` in their order, then each
    range's jobs by id. An id without a job fails "Invalid job id specified", and so does
    a range without one. Under private_data another user's job is as one that does not
    exist (Slurm's PrivateData=jobs), and the attempt is audited."""
    hide = daemon.config.private_data and not admin
    private = "refused: not the owner (private_data: not found)"
    for start in range(0, len(ids), BULK_BATCH):
        part = ids[start : start + BULK_BATCH]
        found = {brief.id: brief for brief in daemon.store.briefs(part)}
        batch = []
        for job_id in part:
            brief = found.get(job_id)
            if brief is None:
                tally.fail(job_id, f"Invalid job id specified: {job_id}")
            elif hide and brief.uid != caller.uid:
                tally.refuse(brief, private, f"Invalid job id specified: {job_id}")
            else:
                batch.append(brief)
        yield batch
    for first, last in ranges:
        after, seen = first - 1, False
        while page := daemon.store.briefs_between(first, last, after=after, limit=BULK_BATCH):
            after = page[-1].id
            batch = []
            for brief in page:
                if hide and brief.uid != caller.uid:
                    tally.refuse(brief, private, None)
                else:
                    batch.append(brief)
            seen = seen or bool(batch)
            yield batch
        if not seen:
            tally.fail(f"{first}-{last}", f"Invalid job id specified: {first}-{last}")


def _owned(caller: Caller, admin: bool, tally: _Tally, batch: list[JobBrief]) -> list[JobBrief]:
    """Those of `batch` the caller may act on; the others are refused (and audited)."""
    mine = []
    for brief in batch:
        if admin or brief.uid == caller.uid:
            mine.append(brief)
        else:
            tally.refuse(
                brief, "refused: not the owner", f"Access/permission denied for job {brief.id}"
            )
    return mine


def cancel(daemon: Daemon, caller: Caller, request: wire.Cancel) -> dict[str, Any]:
    """Cancel the jobs named by `ids` and `ranges` (narrowed by the filters), or with
    neither, the active jobs the filters (users, states) select among those the caller
    may act on, as `scancel -u` does. Quiet on success: the reply lists failures."""
    users = set(request.users)
    states = set(_states(request.states) or ())
    admin = is_admin(daemon, caller)
    tally = _Tally(daemon, caller, "cancel")
    arrays: list[tuple[int, int]] = []
    ids, ranges = _targets(daemon, request, tally, arrays)
    if request.ids or request.ranges or request.jobs:
        for batch in _named(daemon, caller, tally, ids, ranges, admin):
            chosen = [
                brief
                for brief in batch
                if (not users or brief.user in users)
                and (not states or brief.state in states)
                # `scancel N` of an array: its tasks still to end, as Slurm; the ended
                # ones are no failure.
                and not (brief.state.is_final and any(a <= brief.id <= b for a, b in arrays))
            ]
            _cancel_named(daemon, caller, tally, _owned(caller, admin, tally, chosen))
        if not states or JobState.PENDING in states:
            _cancel_tails(daemon, caller, tally, [a for a, _ in arrays], users, admin)
    elif users or states:
        _cancel_sweep(daemon, caller, tally, users, states, admin)
    else:
        raise Refused("invalid", "no job ids given. Name job ids, or use -u USER / -t STATE")
    daemon.wake.set()
    return tally.finish()


def _cancel_named(daemon: Daemon, caller: Caller, tally: _Tally, briefs: list[JobBrief]) -> None:
    """Cancel named jobs the caller may act on: the pending ones in one transaction, the
    others (running, or moved on meanwhile) one by one."""
    pending = [brief.id for brief in briefs if brief.state is JobState.PENDING]
    one_by_one = [brief.id for brief in briefs if brief.state is not JobState.PENDING]
    cancelled = _cancel_pending(daemon, caller, tally, pending)
    one_by_one += [job_id for job_id in pending if job_id not in cancelled]
    for job_id in one_by_one:
        outcome = _cancel_one(daemon, caller, job_id)
        if outcome is None:
            tally.done += 1
        else:
            tally.fail(job_id, outcome[0])


def _cancel_tails(
    daemon: Daemon,
    caller: Caller,
    tally: _Tally,
    array_ids: Sequence[int],
    users: set[str],
    admin: bool,
) -> None:
    """Cancel the tails (tasks not yet rows) of the arrays `array_ids` the caller may
    act on: one write however many tasks they hold."""
    if not array_ids:
        return
    tails = daemon.store.tails(
        states=[JobState.PENDING],
        users=users or None,
        overlapping=[(a, a) for a in array_ids],
    )
    mine = [t.array_id for t in tails if t.array_id in array_ids and (admin or t.uid == caller.uid)]
    try:
        tally.done += daemon.store.cancel_tails(mine, f"cancelled by {caller.user}", daemon.clock())
    except StoreFull as err:
        for array_id in mine:
            tally.fail(array_id, _store_full_message(err))


def _cancel_sweep(
    daemon: Daemon,
    caller: Caller,
    tally: _Tally,
    users: set[str],
    states: set[JobState],
    admin: bool,
) -> None:
    """`scancel -u/-t/--me`: the caller's own jobs among those selected (an admin's: all
    of them); no job of another user is refused, none is touched. Pending jobs first, a
    batch at a time in id order; then the allocated ones, which include any the loop
    dispatched meanwhile. Jobs that ended meanwhile are not reported."""
    uid = None if admin else caller.uid
    if not states or JobState.PENDING in states:
        after = 0
        while ids := daemon.store.pending_ids(
            after=after, limit=BULK_BATCH, users=users or None, uid=uid
        ):
            after = ids[-1]
            _cancel_pending(daemon, caller, tally, ids)
        tails = daemon.store.tails(states=[JobState.PENDING], users=users or None, uid=uid)
        _cancel_tails(daemon, caller, tally, [t.array_id for t in tails], users, admin)
    allocated = (states or ACTIVE_STATES) & (ACTIVE_STATES - {JobState.PENDING})
    for job in daemon.store.jobs(states=allocated, users=users or None) if allocated else []:
        if uid is None or job.uid == uid:
            outcome = _cancel_one(daemon, caller, job.id)
            if outcome is None:
                tally.done += 1
            elif not outcome[1]:
                tally.fail(job.id, outcome[0])


def _cancel_pending(daemon: Daemon, caller: Caller, tally: _Tally, ids: list[int]) -> set[int]:
    """Cancel those of `ids` still pending, in one transaction. Returns the ids dealt
    with: those cancelled, or all of them when the disk is full (each then fails)."""
    if not ids:
        return set()
    try:
        cancelled = daemon.store.cancel_pending(ids, f"cancelled by {caller.user}", daemon.clock())
    except StoreFull as err:
        # Each batch is its own transaction: those cancelled before stay cancelled.
        for job_id in ids:
            tally.fail(job_id, _store_full_message(err))
        return set(ids)
    tally.done += len(cancelled)
    return set(cancelled)


def _cancel_one(daemon: Daemon, caller: Caller, job_id: int) -> tuple[str, bool] | None:
    """Cancel one job as it is now (running: COMPLETING, and the loop stops it). None
    when done, else (why not, whether the job had ended already)."""
    for _ in range(3):
        job = daemon.store.get(job_id)
        if job is None:
            return f"Invalid job id specified: {job_id}", False
        now = daemon.clock()
        change = _cancel_change(job, caller, now)
        if change is None:
            return None
        if isinstance(change, str):
            return change, True
        try:
            (refused,) = daemon.store.set_states([change], now)
        except StoreFull as err:
            return _store_full_message(err), False
        if refused is None:
            return None
    return f"job {job_id} changed state too often; try again", False


def _cancel_change(job: Job, caller: Caller, now: float) -> StateChange | str | None:
    """The state change that cancels `job` as it was read; None when it is stopping
    already; why not when it has ended."""
    if job.state is JobState.PENDING:
        return StateChange(
            job.id,
            JobState.CANCELLED,
            f"cancelled by {caller.user}",
            {JobState.PENDING},
            {"end_time": now},
        )
    if job.state in (JobState.CONFIGURING, JobState.RUNNING):
        return StateChange(
            job.id,
            JobState.COMPLETING,
            f"cancel requested by {caller.user}",
            {job.state},
            {"stop_state": JobState.CANCELLED},
        )
    if job.state is JobState.COMPLETING:
        return None  # already stopping
    return f"Job/step already completing or completed: job {job.id} is {job.state.value}"


def _set_hold(
    daemon: Daemon, caller: Caller, request: wire.Hold | wire.Release, held: bool
) -> dict[str, Any]:
    """Hold or release the pending jobs named, a batch per transaction."""
    admin = is_admin(daemon, caller)
    tally = _Tally(daemon, caller, "hold" if held else "release")
    arrays: list[tuple[int, int]] = []
    ids, ranges = _targets(daemon, request, tally, arrays)
    if arrays:
        tails = daemon.store.tails(
            states=[JobState.PENDING], overlapping=[(a, a) for a, _ in arrays]
        )
        mine = [t.array_id for t in tails if admin or t.uid == caller.uid]
        tally.done += daemon.store.hold_tails(mine, held)
    for batch in _named(daemon, caller, tally, ids, ranges, admin):
        pending = []
        for brief in _owned(caller, admin, tally, batch):
            if brief.state is JobState.PENDING:
                pending.append(brief.id)
            elif not (brief.state.is_final and any(a <= brief.id <= b for a, b in arrays)):
                # An array named by its id: its ended tasks are passed over; a running
                # one is refused, as Slurm does.
                tally.fail(brief.id, _not_pending(brief.id, brief.state))
        if not pending:
            continue
        try:
            done = set(daemon.store.set_held_many(pending, held, daemon.clock()))
        except StoreFull as err:
            for job_id in pending:
                tally.fail(job_id, _store_full_message(err))
            continue
        tally.done += len(done)
        moved = [job_id for job_id in pending if job_id not in done]
        for brief in daemon.store.briefs(moved):  # the loop dispatched them meanwhile
            tally.fail(brief.id, _not_pending(brief.id, brief.state))
    daemon.wake.set()
    return tally.finish()


def _not_pending(job_id: int, state: JobState) -> str:
    return f"Job is no longer pending execution: job {job_id} is {state.value}"


def hold(daemon: Daemon, caller: Caller, request: wire.Hold) -> dict[str, Any]:
    return _set_hold(daemon, caller, request, True)


def release(daemon: Daemon, caller: Caller, request: wire.Release) -> dict[str, Any]:
    return _set_hold(daemon, caller, request, False)


def requeue(daemon: Daemon, caller: Caller, request: wire.Requeue) -> dict[str, Any]:
    """`scontrol requeue`: a running job is stopped (SIGTERM, grace, SIGKILL) and goes back
    to PENDING once its run has ended, never before; a finished one goes back at once.
    Jobs with `requeue: false` refuse, as Slurm's --no-requeue jobs do."""
    admin = is_admin(daemon, caller)
    tally = _Tally(daemon, caller, "requeue")
    ids, ranges = _targets(daemon, request, tally)
    for batch in _named(daemon, caller, tally, ids, ranges, admin):
        for brief in _owned(caller, admin, tally, batch):
            job = daemon.store.get(brief.id)
            if job is None:
                error: str | None = f"Invalid job id specified: {brief.id}"
            elif not job.spec.requeue:
                error = (
                    f"Requested operation is presently disabled: job {job.id} has requeue: false"
                )
            else:
                error = _requeue_one(daemon, caller, job)
            if error is None:
                tally.done += 1
            else:
                tally.fail(brief.id, error)
    daemon.wake.set()
    return tally.finish()


def _requeue_one(daemon: Daemon, caller: Caller, job: Job) -> str | None:
    """None when done, else why not."""
    now = daemon.clock()
    if job.state in (JobState.CONFIGURING, JobState.RUNNING):
        change = StateChange(
            job.id,
            JobState.COMPLETING,
            f"requeue requested by {caller.user}",
            {job.state},
            {"stop_state": JobState.PENDING},
        )
    elif job.state.is_final:
        change = StateChange(
            job.id,
            JobState.PENDING,
            f"requeued by {caller.user}",
            {job.state},
            {
                "node": None,
                "gpus": (),
                "gpu_uuids": (),
                "start_time": None,
                "end_time": None,
                "exit_code": None,
                "exit_signal": None,
                "stop_state": None,
            },
        )
    elif job.state is JobState.PENDING:
        return f"Job is pending execution: job {job.id} has not run yet"
    else:
        return f"Job is already stopping: job {job.id} is {job.state.value}"
    try:
        (refused,) = daemon.store.set_states([change], now)
    except StoreFull as err:
        return _store_full_message(err)
    if refused is not None:
        return f"job {job.id} changed state meanwhile ({refused}); try again"
    return None


def jobs(daemon: Daemon, caller: Caller, request: wire.ListJobs) -> dict[str, Any]:
    """squeue (active jobs) and sacct (finished=None: every state) queries. Everyone
    sees the queue, as in Slurm; under private_data a non-admin sees only their own."""
    states = _states(request.states)
    named, id_ranges = _targets(daemon, request, None)
    ids = named if (request.ids or request.jobs) else None
    users: Sequence[str] | None = request.users or None
    admin = is_admin(daemon, caller)
    private = daemon.config.private_data and not admin  # a non-admin sees their own
    if private:
        if users is not None and caller.user not in users:
            return {"jobs": [], "now": daemon.clock()}
        users = [caller.user]
    if request.view_page:
        return _view_page(daemon, caller, request, states, users, private, ids)
    if request.columns and _narrow(request, ids):
        return _listing_columns(daemon, caller, request, states, users, private)
    if ids is None and not (
        request.table or request.columns or request.starts or request.gpu_usage
    ):
        return _streamed_jobs(daemon, caller, request, states, users, admin, private)
    if request.history:
        found = daemon.store.jobs(
            ids=ids, id_ranges=id_ranges, states=states, users=users, since=request.since
        )
    elif states is not None or ids is not None:
        found = daemon.store.jobs(
            ids=ids,
            id_ranges=id_ranges,
            states=states,
            users=users,
            finished=None if ids is not None else False,
        )
    elif private or _filtered(request):
        found = daemon.store.jobs(users=users, finished=False)
    else:
        # The queue as it is: a page is cut in the query (one row past it tells whether
        # more follow), not from every active job's Job.
        first = None if request.limit is None else request.limit + 1
        found = daemon.store.jobs(users=users, finished=False, after=request.after, first=first)
    if private:
        found = [j for j in found if j.uid == caller.uid]
    found, following = _page(_narrowed(found, request), request, _job_id)
    if request.columns:
        return {"columns": wire.jobs_to_columns(found), "now": daemon.clock(), **following}
    if request.table:  # brief, as columns: the TUI's queue every second
        return {"table": wire.jobs_to_table(found), "now": daemon.clock(), **following}
    now = daemon.clock()
    records: list[dict[str, Any]]
    if request.brief:  # no env in a brief record: the same for every caller
        records = [wire.job_to_wire(j, brief=True) for j in found]
    else:
        records = [_job_to_wire(j, owner_view=admin or j.uid == caller.uid) for j in found]
    reply: dict[str, Any] = {"jobs": records, "now": now, **following}
    if request.starts:
        reply["starts"] = _expected_starts(found, daemon.expected_starts, now)
    if request.gpu_usage:
        usage = daemon.store.gpu_usage([(j.id, j.attempt) for j in found])
        reply["gpu_usage"] = [[run[0], *u.to_wire()] for run, u in usage.items()]
    return reply


def _view_page(
    daemon: Daemon,
    caller: Caller,
    request: wire.ListJobs,
    states: Sequence[JobState] | None,
    users: Sequence[str] | None,
    private: bool,
    ids: object,
) -> dict[str, Any]:
    """A view's page of the narrow listing, sorted, narrowed and cut in the store's
    query (Store.listing_page): the TUI's queue at 100,000 jobs reads the rows it
    shows, not every job every second."""
    if not request.columns or not _narrow(request, ids):
        raise Refused(
            "invalid",
            "sort, reverse, shown_states, search, offset and counts need `columns` and "
            "no ids, names, partitions, nodes or starts",
        )
    sort = request.sort or "id"
    if sort not in LISTING_SORTS:
        raise Refused("invalid", f"sort: {sort!r}; use one of {', '.join(LISTING_SORTS)}")
    if request.limit is not None and request.limit < 1:
        raise Refused("invalid", f"limit: {request.limit}; give 1 or more jobs a page")
    if request.offset is not None and request.offset < 0:
        raise Refused("invalid", f"offset: {request.offset}; give 0 or more")
    query = ListingQuery(
        states=states,
        users=users,
        history=request.history,
        since=request.since,
        after=request.after,
        uid=caller.uid if private else None,
        shown_states=_states(request.shown_states),
        search=request.search.strip(),
        sort=sort,
        reverse=request.reverse,
        now=daemon.clock(),
    )
    page = daemon.store.listing_page(
        query, offset=request.offset or 0, limit=request.limit, counts=request.counts
    )
    reply: dict[str, Any] = {
        "columns": wire.listing_columns(page.rows, listing_specs(page.rows)),
        "now": query.now,
        "total": page.total,
    }
    if request.counts:
        reply["counts"] = page.counts
    return reply


def _listing_columns(
    daemon: Daemon,
    caller: Caller,
    request: wire.ListJobs,
    states: list[JobState] | None,
    users: Sequence[str] | None,
    private: bool,
) -> dict[str, Any]:
    """squeue's listing: the store's narrow rows (no Job per row), read a page at a
    time (Store.listing_pages) into the columns' JSON text (wire.ListingColumns), so
    that a listing of 1,000,000 jobs holds its text, not its rows (issue 16)."""
    limit = request.limit
    if limit is not None and limit < 1:
        raise Refused("invalid", f"limit: {limit}; give 1 or more jobs a page")
    specs = ListingSpecs()
    columns = wire.ListingColumns(specs, as_text=True, most_keys=_LISTING_KEYS)
    following: dict[str, Any] = {}
    if request.after is not None or limit is not None:
        following["next"] = None
    listed = 0
    last: int | None = None
    pages = daemon.store.listing_pages(
        states=states,
        users=users,
        history=request.history,
        since=request.since,
        after=request.after,
        # One row past the page tells whether more are left; a listing narrowed by uid
        # after the store's is read to its end (a page of it could come back short).
        first=None if private or limit is None else limit + 1,
        specs=specs,
    )
    try:
        for page in pages:
            if private:
                page = [row for row in page if row[1] == caller.uid]
            if limit is not None and listed + len(page) > limit:
                # One more is left: the page ends at the last listed.
                page = page[: limit - listed]
                columns.add(page)
                following["next"] = last if not page else _row_job_id(page[-1])
                break
            columns.add(page)
            listed += len(page)
            if page:
                last = _row_job_id(page[-1])
    finally:
        pages.close()
    return {"columns": columns.made(), "now": daemon.clock(), **following}


# Spec keys ListingColumns remembers at once for a listing.
_LISTING_KEYS = 10_000


def _streamed_jobs(
    daemon: Daemon,
    caller: Caller,
    request: wire.ListJobs,
    states: list[JobState] | None,
    users: Sequence[str] | None,
    admin: bool,
    private: bool,
) -> dict[str, Any]:
    """jobs()' records of a listing not narrowed by ids, made while the reply is
    written (wire.Streamed) from the store's pages (Store.job_pages): at most a page
    of Jobs at once, however many are listed (issue 16: sacct -a -S all of 1,000,000
    jobs built them all, 3.5 GB). Brief records of unchanged rows are the texts
    remembered (wire.BriefRecords). The same reply, byte for byte, as building the
    records whole (tests/unit/test_large_replies.py)."""
    limit, after = request.limit, request.after
    if limit is not None and limit < 1:
        raise Refused("invalid", f"limit: {limit}; give 1 or more jobs a page")
    brief = daemon.brief_records if request.brief else None
    narrowed = private or _filtered(request)
    specs = ListingSpecs()
    pages = daemon.store.job_pages(
        states=states,
        users=users,
        finished=None if request.history else False,
        since=request.since if request.history else None,
        after=after,
        # One row past the page tells whether more are left (when no filter after the
        # store's may leave rows out).
        first=None if narrowed or limit is None else limit + 1,
        known=None if brief is None else brief.known(),
        specs=specs,
    )
    following: dict[str, int | None] = {"next": None}

    def runs() -> Iterator[str]:
        listed = 0
        last = 0
        try:
            for page in pages:
                texts: list[str] = []
                for changed, item in page:
                    job = item if isinstance(item, Job) else item.job
                    if narrowed and not _shown(job, request, private, caller):
                        continue
                    if listed == limit:  # one more is left: the page ends at the last
                        following["next"] = last
                        yield ",".join(texts)
                        return
                    if not isinstance(item, Job):  # a brief record remembered
                        text = item.text
                    elif brief is not None:
                        text = brief.text(job, changed, keep=specs.size() <= brief.most)
                    else:
                        record = _job_to_wire(job, owner_view=admin or job.uid == caller.uid)
                        text = json.dumps(record, separators=wire.COMPACT)
                    texts.append(text)
                    listed += 1
                    last = job.id
                yield ",".join(texts)
        finally:
            pages.close()

    reply: dict[str, Any] = {"jobs": wire.Streamed(runs()), "now": daemon.clock()}
    if after is not None or limit is not None:
        reply["next"] = wire.Later(lambda: following["next"])
    return reply


T = TypeVar("T")


def _page(
    listed: list[T], request: wire.ListJobs, id_of: Callable[[T], int]
) -> tuple[list[T], dict[str, Any]]:
    """The page of `listed` (by id) that request.after and request.limit ask for, and
    {"next": the last id on it, or None when nothing is left} when they ask for one."""
    if request.after is None and request.limit is None:
        return listed, {}
    if request.limit is not None and request.limit < 1:
        raise Refused("invalid", f"limit: {request.limit}; give 1 or more jobs a page")
    if request.after is not None:
        after = request.after
        listed = [item for item in listed if id_of(item) > after]
    if request.limit is None or len(listed) <= request.limit:
        return listed, {"next": None}
    listed = listed[: request.limit]
    return listed, {"next": id_of(listed[-1])}


def _row_job_id(row: Sequence[Any]) -> int:
    return int(row[0])


def _job_id(job: Job) -> int:
    return job.id


def _narrow(request: wire.ListJobs, ids: object) -> bool:
    """Whether Store.listing_rows serves the listing: the queue or the history, by
    state, user and submit time alone (no ids, names, partitions, nodes or expected
    starts)."""
    return not (
        ids is not None or request.names or request.partitions or request.nodes or request.starts
    )


def _filtered(request: wire.ListJobs) -> bool:
    """Whether _narrowed may leave out jobs of the store's answer."""
    return bool(request.names or request.partitions or request.nodes)


def _narrowed(found: list[Job], request: wire.ListJobs) -> list[Job]:
    """squeue's -n (job names), -p (partitions) and -w (nodes) filters: a job passes
    when it matches one of each list given. A job queued before partitions existed
    is in the implicit partition, as squeue shows it."""
    if request.names:
        names = set(request.names)
        found = [j for j in found if j.spec.name in names]
    if request.partitions:
        parts = set(request.partitions)
        found = [j for j in found if (j.spec.partition or IMPLICIT_PARTITION) in parts]
    if request.nodes:
        hosts = set(request.nodes)
        found = [j for j in found if j.node is not None and j.node in hosts]
    return found


def _shown(job: Job, request: wire.ListJobs, private: bool, caller: Caller) -> bool:
    """Whether a listing shows `job`: _narrowed's filters, and under private_data
    (`private`) only the caller's own."""
    return (
        (not private or job.uid == caller.uid)
        and (not request.names or job.spec.name in request.names)
        and (
            not request.partitions
            or (job.spec.partition or IMPLICIT_PARTITION) in request.partitions
        )
        and (not request.nodes or (job.node is not None and job.node in request.nodes))
    )


def _expected_starts(
    found: Sequence[Job], reserved: Mapping[int, float], now: float
) -> list[list[float]]:
    """[job id, expected start] of the pending jobs in `found` that have one: the
    planner's reservation, else a --begin time still to come (as Slurm shows it)."""
    starts: list[list[float]] = []
    for job in found:
        if job.state is not JobState.PENDING:
            continue
        at = reserved.get(job.id)
        if at is None and job.spec.begin is not None and job.spec.begin > now:
            at = job.spec.begin
        if at is not None:
            starts.append([job.id, at])
    return starts


def job(daemon: Daemon, caller: Caller, request: wire.ShowJob) -> dict[str, Any]:
    """scontrol show job: anyone may read a job's record and command; its env values
    are the owner's and admins' only."""
    found = _named_job(daemon, caller, request.id, "job", request.task)
    owner_view = may_act_on(daemon, caller, found)
    if not owner_view and found.spec.env:
        audit(daemon, caller, "job_env", found, "refused: env values withheld, not the owner")
    others: list[Job] = []
    if request.with_tasks and request.task is None and found.array_job_id == found.id:
        # An array's id: Slurm shows each of its tasks.
        last = daemon.store.array_ends([found.id], MAX_ARRAY).get(found.id, found.id)
        others = daemon.store.jobs(id_ranges=[(found.id + 1, last)]) if last > found.id else []
    usage = daemon.store.gpu_usage([(found.id, found.attempt)]).get((found.id, found.attempt))
    return {
        "job": _job_to_wire(found, owner_view=owner_view),
        "events": [wire.event_to_wire(e) for e in daemon.store.events(found.id)],
        "tasks": [_job_to_wire(j, owner_view=owner_view) for j in others],
        "now": daemon.clock(),
        "gpu_usage": None if usage is None else usage.to_wire(),
    }


def update(daemon: Daemon, caller: Caller, request: wire.UpdateJob) -> dict[str, Any]:
    """scontrol update: change a job's fields (gbatch/head/jobupdate.py says which, when
    and who may). The owner or an admin only; raises need an admin. One transaction,
    one event per job; the planner sees it at its next pass, which this starts. An
    array's id (N, no task) changes each of its tasks that may still change, its tasks
    still waiting as one record too, as Slurm's `update JobId=N` of an array does."""
    found = _named_job(daemon, caller, request.id, "update", request.task)
    admin = is_admin(daemon, caller)
    if not admin and caller.uid != found.uid:
        audit(daemon, caller, "update", found, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {found.id} is {found.user}'s; only its owner "
            "or an admin may update it",
        )
    changes = dict(request.changes)
    throttled = [key for key in changes if wire.update_key(key) == "ArrayTaskThrottle"]
    notes: list[str] = []
    if throttled:
        notes.append(_update_throttle(daemon, caller, found, changes.pop(throttled[-1])))
        for key in throttled:
            changes.pop(key, None)
        if not changes:
            daemon.wake.set()
            return {"id": found.id, "changes": notes}
    if request.task is None and found.array_job_id == found.id:
        notes.extend(_update_array(daemon, caller, found, changes, admin))
        daemon.wake.set()
        return {"id": found.id, "changes": notes}
    if daemon.store.materialise([found.id]):  # a task still in its array's tail
        found = _job(daemon, found.id)
    spec, change = _planned_update(daemon, caller, found, changes, admin)
    if change.notes:
        _write_update(daemon, caller, found, spec, change)
        daemon.wake.set()
    return {"id": found.id, "changes": [*notes, *change.notes]}


def _planned_update(
    daemon: Daemon, caller: Caller, found: Job, changes: Mapping[str, str], admin: bool
) -> tuple[JobSpec, jobupdate.Update]:
    """The spec `changes` make of `found`'s, checked against the fleet and the queue."""
    try:
        change = jobupdate.plan_update(
            found, changes, admin=admin, partitions=daemon.fleet.partitions
        )
    except jobupdate.UpdateRefused as err:
        if err.kind == "permission":
            audit(daemon, caller, "update", found, f"refused: {err.message}")
        raise Refused(err.kind, err.message) from None
    spec = change.spec
    if spec.gpus != found.spec.gpus:
        _check_update_gpus(daemon, caller, spec.gpus)
    if spec.dependency is not None and spec.dependency != found.spec.dependency:
        if jobupdate.self_reference(found.id, spec.dependency, found.array_job_id):
            raise Refused(
                "invalid",
                f"Dependency: job {found.id} cannot wait for itself (or its own array). "
                "Name other jobs",
            )
        spec = replace(spec, dependency=_check_dependency(daemon, caller, spec.dependency))
    return spec, change


def _write_update(
    daemon: Daemon, caller: Caller, found: Job, spec: JobSpec, change: jobupdate.Update
) -> None:
    what = "; ".join(change.notes)
    try:
        daemon.store.update_spec(
            found.id,
            found.spec,
            spec,
            change.states,
            f"updated {what} by {caller.user}",
            daemon.clock(),
        )
    except IllegalTransition:
        now = daemon.store.get(found.id)
        state = now.state.value if now is not None else "gone"
        raise Refused(
            "invalid",
            f"job {found.id} changed meanwhile (it is {state}); nothing was updated. "
            "Look at it (scontrol show job) and try again",
        ) from None
    audit(daemon, caller, "update", found, f"allowed: {what}")


def _update_array(
    daemon: Daemon, caller: Caller, array: Job, changes: Mapping[str, str], admin: bool
) -> list[str]:
    """`update JobId=N` of array N: each task that may take the changes gets them (a
    running one only a TimeLimit), and so does the record of its tasks still waiting.
    Refused as a single job's update when no task could take them."""
    last = daemon.store.array_ends([array.id], MAX_ARRAY).get(array.id, array.id)
    tasks = [
        job
        for job in daemon.store.jobs(id_ranges=[(array.id, last)], finished=False)
        if job.state is not JobState.COMPLETING
    ]
    notes: list[str] = []
    refused: Refused | None = None
    for job in tasks:
        try:
            spec, change = _planned_update(daemon, caller, job, changes, admin)
        except Refused as err:
            refused = refused or err
            continue
        if not change.notes:
            continue
        if job.array_more:  # the tasks still waiting as one record
            daemon.store.update_tail_spec(array.id, spec)
        else:
            _write_update(daemon, caller, job, spec, change)
        notes = notes or list(change.notes)
    if not notes and refused is not None:
        raise refused
    return notes


def _update_throttle(daemon: Daemon, caller: Caller, found: Job, value: str) -> str:
    """scontrol update ArrayTaskThrottle=M of the array `found` belongs to: at most M of
    its tasks run at once from the next pass (0: no limit, as Slurm). Tasks running
    already carry on."""
    array_id = found.array_job_id
    if array_id is None:
        raise Refused(
            "invalid",
            f"ArrayTaskThrottle: job {found.id} is not an array task. Name an array (N or N_K)",
        )
    text = value.strip()
    if not text.isdigit() or len(text) > 7:
        raise Refused(
            "invalid",
            f"ArrayTaskThrottle: {show_value(value)} is not a number of tasks. Give 0 (no "
            "limit) or more",
        )
    throttle = int(text) or None
    last = daemon.store.array_ends([array_id], MAX_ARRAY).get(array_id, array_id)
    old = found.spec.array_throttle
    daemon.store.set_array_throttle(array_id, last, throttle)
    note = f"ArrayTaskThrottle {old or 0} -> {throttle or 0}"
    audit(daemon, caller, "update", found, f"allowed: {note}")
    return note


def _check_update_gpus(daemon: Daemon, caller: Caller, gpus: int) -> None:
    """A new GPU count as submit checks one: some node must have that many, and the
    user's max_gpus must allow it."""
    have, _ = daemon.fleet.max_gpus_per_node()
    if gpus > have and daemon.fleet.all_reported():
        raise Refused(
            "invalid",
            f"NumGPUs: {gpus} GPUs but the largest node has {have}. Ask for at most {have}",
        )
    limits = _submit_limits(daemon, caller)
    refusal = None if limits is None else gpus_refusal(gpus, limits.max_gpus)
    if refusal is not None:
        raise Refused("invalid", refusal)


def nodes(daemon: Daemon, caller: Caller, request: wire.ListNodes) -> dict[str, Any]:
    default = daemon.fleet.default_partition()
    return {
        "nodes": [wire.node_to_wire(n) for n in daemon.fleet.node_infos()],
        "default_partition": None if default is None else default.name,
        "partitions": [
            wire.partition_to_wire(
                PartitionInfo(p.name, p.max_time, p.default, tuple(p.nodes), p.default_time)
            )
            for p in daemon.fleet.partitions.values()
        ],
    }


def logs(daemon: Daemon, caller: Caller, request: wire.ReadLog) -> dict[str, Any]:
    """A chunk of a job's log from `offset`; `done` once the job is final and read out."""
    found = _named_job(daemon, caller, request.id, "logs", request.task)
    if not may_act_on(daemon, caller, found):
        audit(daemon, caller, "logs", found, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {found.id} is "
            f"{found.user}'s, and only its owner may read its log",
        )
    offset = request.offset
    if offset < 0:
        raise Refused("invalid", "offset must be a non-negative integer")
    path = daemon.paths.job_log(found.id)
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            data = handle.read(LOG_CHUNK)
    except FileNotFoundError:
        data = b""
    final = found.state.is_final or (found.state is JobState.PENDING and found.attempt == 0)
    return {
        "data": data.decode("utf-8", errors="replace"),
        "offset": offset + len(data),
        "done": final and len(data) < LOG_CHUNK,
        "state": found.state.value,
    }


def _admin_node(daemon: Daemon, caller: Caller, name: str, what: str) -> str:
    _require_admin(daemon, caller, f"node_{what}", f"node {name}", f"{what} nodes")
    if name not in daemon.fleet.nodes:
        known = ", ".join(sorted(daemon.fleet.nodes))
        raise Refused("not_found", f"no node {show_value(name)} in the fleet (nodes: {known})")
    return name


def node_drain(daemon: Daemon, caller: Caller, request: wire.DrainNode) -> dict[str, Any]:
    """Stop placing jobs on a node; its running jobs carry on (Slurm's DRAIN)."""
    name = _admin_node(daemon, caller, request.name, "drain")
    reason = request.reason
    if not reason.strip():
        raise Refused("invalid", "--reason: say why the node is drained (Slurm asks too)")
    daemon.store.drain_node(name, f"{reason.strip()} [{caller.user}]", daemon.clock())
    log.info("node %s drained by %s: %s", name, caller.user, loggable(reason))
    daemon.wake.set()
    return {}


def node_resume(daemon: Daemon, caller: Caller, request: wire.ResumeNode) -> dict[str, Any]:
    name = _admin_node(daemon, caller, request.name, "resume")
    if not daemon.store.resume_node(name):
        raise Refused("invalid", f"node {name} is not drained")
    log.info("node %s resumed by %s", name, caller.user)
    daemon.wake.set()
    return {}


def node_install(daemon: Daemon, caller: Caller, request: wire.InstallAgent) -> dict[str, Any]:
    """Copy the agent to hosts over SFTP and check it runs; one result per node, in the
    order named. Hosts are installed concurrently, at most INSTALL_WORKERS at once, each
    within install_agent's own bounds (connect timeout, SFTP timeouts, probe deadline)."""
    from gbatch.nodes.remote import RemoteNode

    _require_admin(daemon, caller, "node_install", "nodes", "install agents")
    names = request.names or [
        n for n, node in daemon.fleet.nodes.items() if isinstance(node, RemoteNode)
    ]
    with ThreadPoolExecutor(INSTALL_WORKERS, thread_name_prefix="node-install") as pool:
        results = list(pool.map(functools.partial(_install_one, daemon), names))
    log.info("agent install by %s: %s", caller.user, loggable(results, limit=4000))
    return {"results": results}


def _install_one(daemon: Daemon, name: str) -> dict[str, Any]:
    from gbatch.nodes.local import agent_script
    from gbatch.nodes.remote import RemoteNode, install_agent
    from gbatch.nodes.ssh import RemoteError

    node = daemon.fleet.nodes.get(name)
    if not isinstance(node, RemoteNode):
        why = "the local node needs no install" if node else "no such node in the fleet"
        return {"name": name, "ok": False, "error": why}
    try:
        summary = install_agent(node.node, agent_script())
    except RemoteError as err:
        return {"name": name, "ok": False, "error": str(err)}
    node.retry_now()  # its report stream need not wait out the backoff
    return {"name": name, "ok": True, "summary": summary}


def _trust_node(daemon: Daemon, caller: Caller, name: str, op: str) -> Any:
    """The RemoteNode a node_hostkey/node_trust request names; refusals are audited."""
    from gbatch.nodes.remote import RemoteNode

    _require_admin(daemon, caller, op, f"node {name}", "trust host keys")
    node = daemon.fleet.nodes.get(name)
    if not isinstance(node, RemoteNode):
        if node is not None:
            raise Refused(
                "invalid", f"node {show_value(name)} is this machine, reached without SSH: no key"
            )
        known = ", ".join(sorted(daemon.fleet.nodes))
        raise Refused("not_found", f"no node {show_value(name)} in the fleet (nodes: {known})")
    return node


def _offered_key(node: Any) -> Any:
    from gbatch.nodes.remote import target_of
    from gbatch.nodes.ssh import RemoteError, offered_host_key

    try:
        return offered_host_key(target_of(node.node))
    except RemoteError as err:
        raise Refused("unavailable", f"cannot ask node {node.name} for its key: {err}") from err


def _hostkey_reply(node: Any, offered: Any) -> dict[str, Any]:
    from gbatch.nodes.ssh import fingerprint

    return {
        "name": node.name,
        "address": f"{node.node.host}:{node.node.port}",
        "known_hosts": str(node.node.known_hosts),
        "key_type": offered.key_type,
        "fingerprint": offered.fingerprint,
        "pinned": offered.pinned,
        "pinned_keys": [
            {"key_type": k.get_name(), "fingerprint": fingerprint(k)} for k in offered.pinned_keys
        ],
    }


def node_hostkey(daemon: Daemon, caller: Caller, request: wire.GetHostKey) -> dict[str, Any]:
    """The key a node's host offers now and how known_hosts stands on it (none, the same
    key, or a different one). Reads only; for `gbatch node trust` to show the admin."""
    node = _trust_node(daemon, caller, request.name, "node_hostkey")
    return _hostkey_reply(node, _offered_key(node))


def node_trust(daemon: Daemon, caller: Caller, request: wire.TrustHostKey) -> dict[str, Any]:
    """Pin the key a node's host offers in known_hosts, only when it is still the one
    whose `fingerprint` the admin checked; a different key already pinned is replaced
    only with `replace: true`. Then the node reconnects at once, not after its backoff."""
    from gbatch.nodes.ssh import replace_host_key, trust_host_key

    node = _trust_node(daemon, caller, request.name, "node_trust")
    wanted = request.fingerprint
    if not wanted.startswith("SHA256:"):
        raise Refused("invalid", f"fingerprint: {wanted!r} is not a fingerprint like SHA256:...")
    offered = _offered_key(node)
    target = f"node {node.name}"
    if offered.fingerprint != wanted:
        audit(daemon, caller, "node_trust", target, f"refused: host offers {offered.fingerprint}")
        raise Refused(
            "invalid",
            f"fingerprint: node {node.name} now offers {offered.key_type} "
            f"{offered.fingerprint}, not {wanted}: the key changed while you looked (or the "
            f"fingerprint is mistyped); nothing was trusted. Check the key on the host and run "
            f"`gbatch node trust {node.name}` again",
        )
    reply = _hostkey_reply(node, offered)
    if offered.pinned == "different" and not request.replace:
        audit(daemon, caller, "node_trust", target, "refused: a different key is pinned")
        old = ", ".join(f"{k['key_type']} {k['fingerprint']}" for k in reply["pinned_keys"])
        raise Refused(
            "invalid",
            f"replace: {node.node.known_hosts} holds a DIFFERENT key for node {node.name} "
            f"({old}); nothing was trusted. If the host was reinstalled, trust the new key "
            f"with `gbatch node trust {node.name} --replace`",
        )
    config = node.node
    if offered.pinned == "different":
        replace_host_key(config.known_hosts, config.host, config.port, offered.key)
    elif offered.pinned == "none":
        trust_host_key(config.known_hosts, config.host, config.port, offered.key)
    audit(daemon, caller, "node_trust", target, f"allowed: pinned {offered.fingerprint}")
    node.retry_now()  # the key is on file now: reconnect without waiting out the backoff
    return {**reply, "was_pinned": offered.pinned}


def shares(daemon: Daemon, caller: Caller, request: wire.ShowShares) -> dict[str, Any]:
    """sshare: each user's fair-share figures, what their jobs hold now, and the limits
    that apply to them. A user sees their own row; admins any user's, or all."""
    wanted = set(request.users)
    if request.all_users or wanted - {caller.user}:
        _require_admin(
            daemon,
            caller,
            "shares",
            "users",
            "see other users' shares and limits (yours: `gbatch sshare`)",
        )
    now = daemon.clock()
    allocated = daemon.store.jobs_in(ALLOCATED_STATES)
    usage = daemon.usage(allocated, now)
    held = use_by_user(allocated)
    if request.all_users:
        pending = daemon.store.pending_counts()
        named = daemon.config.limits.users
        shown = sorted(
            {*pending, *held, *named, *(user for user, used in usage.items() if used > 0)}
        )
    else:
        shown = sorted(wanted or {caller.user})
        pending = daemon.store.pending_counts(shown)
    share = factors(usage, {*pending, *shown})
    total = sum(max(used, 0.0) for used in usage.values())
    exempt = {"root", server_user_name()}
    rows = []
    for user in shown:
        used = max(usage.get(user, 0.0), 0.0)
        limits = daemon.limits_for(user)
        if user in exempt:  # never refused at submit: see _submit_limits
            limits = replace(limits, max_pending_jobs=None, max_array_size=None)
        mine = held.get(user, Use())
        rows.append(
            UserShare(
                user=user,
                usage=used,
                effective_usage=used / total if total > 0 else 0.0,
                fairshare=share.get(user, 1.0),
                pending=pending.get(user, 0),
                running=mine.running_jobs,
                gpus=mine.gpus,
                limits=limits,
            )
        )
    return {"users": [wire.share_to_wire(row) for row in rows], "now": now}


def priorities(daemon: Daemon, caller: Caller, request: wire.ShowPriorities) -> dict[str, Any]:
    """sprio: pending jobs and what orders them in the planner (fair-share factor of
    their user, then priority - nice, then submit time, then id). As Slurm's sprio,
    only jobs the scheduler may consider: held jobs (priority 0 in Slurm) and jobs
    whose --begin is still to come are left out, even when named. The factors are the
    planner's: over the users whose jobs its latest pass ordered (a user whose every
    job is held is not among them) and every user with usage, whoever the caller may
    see. Everyone sees the queue; under private_data a non-admin sees only their own."""
    now = daemon.clock()
    users: Sequence[str] | None = request.users or None
    private = daemon.config.private_data and not is_admin(daemon, caller)
    if private:
        if users is not None and caller.user not in users:
            return {"jobs": [], "now": now}
        users = [caller.user]
    found = daemon.store.jobs(
        ids=request.ids or None, states=[JobState.PENDING], users=users, finished=None
    )
    found = [j for j in found if not j.held and (j.spec.begin is None or j.spec.begin <= now)]
    if private:
        found = [j for j in found if j.uid == caller.uid]
    usage = daemon.usage(daemon.store.jobs_in(ALLOCATED_STATES), now)
    share = factors(usage, daemon.planned_users)
    ordered = sorted(
        found,
        key=lambda j: (-share.get(j.user, 1.0), -j.spec.effective_priority, j.submit_time, j.id),
    )
    rank = {j.id: place for place, j in enumerate(ordered, 1)}
    return {
        "jobs": [
            JobPriority(
                id=j.id,
                user=j.user,
                partition=j.spec.partition,
                array_job_id=j.array_job_id,
                array_task=j.spec.array_task,
                priority=j.spec.priority,
                nice=j.spec.nice,
                fairshare=share.get(j.user, 1.0),
                submit_time=j.submit_time,
                held=j.held,
                rank=rank[j.id],
            ).to_wire()
            for j in found
        ],
        "now": now,
    }


@functools.lru_cache(maxsize=1024)
def _group_of(uid: int, epoch: int) -> str:
    """The name of `uid`'s primary group (its number when the system has no name)."""
    try:
        gid = pwd.getpwuid(uid).pw_gid
    except KeyError:
        return f"uid:{uid}"
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def usage_report(daemon: Daemon, caller: Caller, request: wire.ReportUsage) -> dict[str, Any]:
    """sreport: GPU-seconds inside [start, end) by user or by Unix group (the job's
    submitter's primary group, as the system names it now). A user sees their own row,
    as in sshare; other users, all users and groups are for admins."""
    if not request.end > request.start:
        raise Refused("invalid", "the period's end must be after its start. Check -S and -E")
    wanted = set(request.users)
    if request.all_users or request.by_group or wanted - {caller.user}:
        _require_admin(
            daemon,
            caller,
            "usage_report",
            "users",
            "see other users' or groups' usage (yours: `gbatch sreport`)",
        )
    now = daemon.clock()
    users = None if request.all_users or request.by_group else sorted(wanted or {caller.user})
    ran = daemon.store.jobs_run_between(request.start, request.end, users)
    epoch = int(time.monotonic() // GROUP_CACHE_S)
    rows = usage_by(
        ran,
        request.start,
        request.end,
        now,
        (lambda j: _group_of(j.uid, epoch)) if request.by_group else (lambda j: j.user),
    )
    return {
        "rows": [row.to_wire() for row in rows],
        "start": request.start,
        "end": request.end,
        "now": now,
    }


def metrics(daemon: Daemon, caller: Caller, request: wire.Metrics) -> dict[str, Any]:
    """A snapshot for Prometheus, read in a few cheap passes: one grouped count of the
    jobs not yet ended, the fleet's node rows (the latest reports), the usage table,
    and the daemon's own counters. Per-user figures are everyone's: under private_data
    only admins may see them."""
    if daemon.config.private_data:
        _require_admin(
            daemon, caller, "metrics", "daemon", "read metrics under private_data (every user's)"
        )
    now = daemon.clock()
    usage = daemon.usage(daemon.store.jobs_in(ALLOCATED_STATES), now)
    counts = daemon.store.queue_counts()
    share = factors(usage, {user for _, user, _ in counts})
    ticks = daemon.monotonic()
    round_trips = {}
    for name, node in daemon.fleet.nodes.items():
        measured = node.round_trip()
        if measured is not None:
            round_trips[name] = [measured[0], max(0.0, ticks - measured[1])]
    return {
        "now": now,
        "uptime": max(0.0, now - daemon.started_at),
        "jobs": [[*key, n] for key, n in sorted(counts.items())],
        "nodes": [wire.node_to_wire(n) for n in daemon.fleet.node_infos()],
        "round_trips": round_trips,
        "shares": [[user, max(usage.get(user, 0.0), 0.0), share[user]] for user in sorted(share)],
        "daemon": daemon.metrics.to_wire(),
        "idle_gpu_jobs": daemon.store.idle_flagged_count(IDLE_REASON),
    }


def server_user_name() -> str:
    """The name of the user the daemon runs as (its uid when the system has no name)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def shutdown(daemon: Daemon, caller: Caller, request: wire.Shutdown) -> dict[str, Any]:
    _require_admin(daemon, caller, "shutdown", "daemon", "stop the daemon")
    daemon.stop()
    return {"pid": os.getpid()}


# -- API tokens (gbatch/head/tokens.py) -------------------------------------------------

# The scope a token needs for each request it may make. A request not named here
# (admin commands, tokens themselves) is refused to a token, whoever it was issued to:
# only a user at the head, on the socket, makes those.
TOKEN_SCOPE_OF: Mapping[str, str] = {
    "ping": "read",
    "jobs": "read",
    "job": "read",
    "logs": "read",
    "nodes": "read",
    "shares": "read",
    "priorities": "read",
    "usage_report": "read",
    "metrics": "read",
    "submit": "submit",
    "cancel": "control",
    "hold": "control",
    "release": "control",
    "requeue": "control",
    "update": "control",
}


def _check_token_scope(daemon: Daemon, caller: Caller, request: wire.Request) -> None:
    """Refuse (and audit) a request a token caller's scopes do not allow."""
    if caller.scopes is None:
        return
    needed = TOKEN_SCOPE_OF.get(request.op)
    if needed is None:
        audit(daemon, caller, request.op, "api", "refused: not allowed with a token")
        raise Refused(
            "permission",
            f"{request.op} cannot be done with an API token. Run gbatch on the head instead",
        )
    if needed not in caller.scopes:
        audit(daemon, caller, request.op, "api", f"refused: token lacks scope {needed}")
        has = ",".join(sorted(caller.scopes)) or "none"
        raise Refused(
            "permission",
            f"the token does not allow {needed} (its scopes: {has}). Mint one with "
            f"`gbatch token --scope {needed}`",
        )


def _token_user(daemon: Daemon, name: str, *, named: bool) -> pwd.struct_passwd:
    """The Unix account a token is minted for: it must exist (its jobs run as it), and
    not be root (a leaked token would run jobs as root)."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        raise Refused(
            "not_found" if named else "invalid",
            f"no Unix user {show_value(name)}: a token's jobs run as a real account. "
            "Create it first (useradd --system NAME)",
        ) from None
    if account.pw_uid == 0:
        raise Refused(
            "permission",
            "no tokens for root: a leaked token would run jobs as root. Mint one for a "
            "service account with --user NAME",
        )
    return account


def mint_token(daemon: Daemon, caller: Caller, request: wire.MintToken) -> dict[str, Any]:
    """A token for the caller, or (admins) for the account `user` names."""
    named = request.user is not None and request.user != caller.user
    if named:
        _require_admin(
            daemon, caller, "token", f"user {request.user}", "mint tokens for other users"
        )
    account = _token_user(daemon, request.user or caller.user, named=named)
    if not 1 <= request.lifespan <= MAX_LIFESPAN:
        raise Refused(
            "invalid",
            f"--lifespan: {request.lifespan} s; give 1 s to {MAX_LIFESPAN // 86400} days",
        )
    try:
        scopes = parse_scopes(request.scopes)
    except ValueError as err:
        raise Refused("invalid", f"--scope: {err}") from None
    try:
        token, record = daemon.tokens.mint(
            account.pw_name, account.pw_uid, scopes, request.lifespan, daemon.clock()
        )
    except TokenError as err:
        raise Refused("unavailable", str(err)) from None
    audit(
        daemon,
        caller,
        "token",
        f"user {record.user}",
        f"allowed: jti {record.jti}, scopes {','.join(scopes)}, {request.lifespan} s",
    )
    return {
        "token": token,
        "jti": record.jti,
        "user": record.user,
        "scopes": list(record.scopes),
        "expires": record.expires,
        "kid": record.kid,
    }


def list_tokens(daemon: Daemon, caller: Caller, request: wire.ListTokens) -> dict[str, Any]:
    if request.all_users:
        _require_admin(daemon, caller, "tokens", "users", "list other users' tokens")
    now = daemon.clock()
    shown = [
        {
            "jti": r.jti,
            "user": r.user,
            "scopes": list(r.scopes),
            "issued": r.issued,
            "expires": r.expires,
            "revoked": r.revoked,
        }
        for r in daemon.tokens.records(now)
        if request.all_users or r.uid == caller.uid
    ]
    return {"tokens": shown, "now": now}


def revoke_token(daemon: Daemon, caller: Caller, request: wire.RevokeToken) -> dict[str, Any]:
    found = daemon.tokens.record(request.jti)
    if found is None or (found.uid != caller.uid and not is_admin(daemon, caller)):
        # Another user's token answers as one that does not exist: jtis are not listed.
        raise Refused(
            "not_found", f"no token {show_value(request.jti)} of yours (see `gbatch token --list`)"
        )
    record = daemon.tokens.revoke(request.jti, daemon.clock())
    audit(daemon, caller, "token_revoke", f"user {record.user}", f"allowed: jti {record.jti}")
    return {"jti": record.jti, "user": record.user}


def rotate_token_key(
    daemon: Daemon, caller: Caller, request: wire.RotateTokenKey
) -> dict[str, Any]:
    _require_admin(daemon, caller, "token_rotate", "daemon", "rotate the token signing key")
    kid = daemon.tokens.rotate(daemon.clock(), drop_old=request.drop_old)
    outcome = "old keys dropped" if request.drop_old else "old keys verify until expiry"
    audit(daemon, caller, "token_rotate", "daemon", f"allowed: new key {kid}, {outcome}")
    return {"kid": kid}


# A token's user is looked up in the system's account database at most once in this
# many seconds (of the daemon's clock): the lookup opened and read /etc/passwd on every
# HTTP request, ~20-30 us of gbatchd's ~400 per submit. A user removed, or a uid given
# to another name, is refused from the next window on.
USER_CHECK_S = 1.0


@functools.lru_cache(maxsize=256)
def _still_user(uid: int, user: str, epoch: int) -> bool:
    """Whether `uid` is still the account `user` (in window `epoch`)."""
    try:
        return pwd.getpwuid(uid).pw_name == user
    except KeyError:
        return False


def with_token(daemon: Daemon, caller: Caller, request: wire.WithToken) -> dict[str, Any]:
    """The inner request, made by the token's user within its scopes: the peer that
    sent it (the HTTP API) lends it nothing."""
    now = daemon.clock()
    try:
        record = daemon.tokens.verify(request.token, now)
    except TokenError as err:
        audit(daemon, caller, "with_token", "api", f"refused: {err}")
        raise Refused("unauthenticated", str(err)) from None
    if not _still_user(record.uid, record.user, int(now // USER_CHECK_S)):
        audit(daemon, caller, "with_token", "api", f"refused: no user {record.user}")
        raise Refused(
            "unauthenticated", f"the token's user {record.user} is no longer uid {record.uid}"
        )
    as_user = Caller(
        uid=record.uid,
        user=record.user,
        pid=caller.pid,
        scopes=frozenset(record.scopes),
        via=f"token:{record.jti}",
    )
    try:
        inner = wire.decode_request(request.request)
    except wire.BadRequest as err:
        raise Refused("invalid", str(err)) from None
    return dispatch(daemon, as_user, inner)


def dispatch(daemon: Daemon, caller: Caller, request: wire.Request) -> dict[str, Any]:
    """The reply's fields from the handler of `request`'s type; raises as it does.
    One case per request type: mypy checks that none is left without a handler. A
    token's caller is held to its scopes here, before any handler runs."""
    _check_token_scope(daemon, caller, request)
    match request:
        case wire.Ping():
            return ping(daemon, caller, request)
        case wire.Submit():
            return submit(daemon, caller, request)
        case wire.Cancel():
            return cancel(daemon, caller, request)
        case wire.Hold():
            return hold(daemon, caller, request)
        case wire.Release():
            return release(daemon, caller, request)
        case wire.Requeue():
            return requeue(daemon, caller, request)
        case wire.ListJobs():
            return jobs(daemon, caller, request)
        case wire.ShowJob():
            return job(daemon, caller, request)
        case wire.UpdateJob():
            return update(daemon, caller, request)
        case wire.ListNodes():
            return nodes(daemon, caller, request)
        case wire.ReadLog():
            return logs(daemon, caller, request)
        case wire.DrainNode():
            return node_drain(daemon, caller, request)
        case wire.ResumeNode():
            return node_resume(daemon, caller, request)
        case wire.InstallAgent():
            return node_install(daemon, caller, request)
        case wire.GetHostKey():
            return node_hostkey(daemon, caller, request)
        case wire.TrustHostKey():
            return node_trust(daemon, caller, request)
        case wire.ShowShares():
            return shares(daemon, caller, request)
        case wire.ShowPriorities():
            return priorities(daemon, caller, request)
        case wire.ReportUsage():
            return usage_report(daemon, caller, request)
        case wire.Metrics():
            return metrics(daemon, caller, request)
        case wire.Shutdown():
            return shutdown(daemon, caller, request)
        case wire.MintToken():
            return mint_token(daemon, caller, request)
        case wire.ListTokens():
            return list_tokens(daemon, caller, request)
        case wire.RevokeToken():
            return revoke_token(daemon, caller, request)
        case wire.RotateTokenKey():
            return rotate_token_key(daemon, caller, request)
        case wire.WithToken():
            return with_token(daemon, caller, request)
        case _:
            assert_never(request)


def handle(daemon: Daemon, caller: Caller, data: object, *, stream: bool = False) -> dict[str, Any]:
    """Serve one request as parsed from its JSON line; the reply always has `ok`. With
    `stream`, a large listing's records may come as wire.Streamed (made as the reply
    is written: wire.reply_pieces), else as the list a client would decode.

    A request of the wrong shape or types, or an unknown op, is refused as "invalid"
    (wire.decode_request says which field and why). A bug in a handler raises: the
    caller (the server) logs it and replies "internal"."""
    try:
        request = wire.decode_request(data)
    except wire.BadRequest as err:
        return wire.error_reply("invalid", str(err))
    try:
        reply = {"ok": True, **dispatch(daemon, caller, request)}
        return reply if stream else wire.materialised(reply)
    except Refused as err:
        return wire.error_reply(err.kind, err.message)
    except JobNotFound as err:
        return wire.error_reply("not_found", str(err))
    except StoreFull as err:
        message = _store_full_message(err, resubmit=isinstance(request, wire.Submit))
        return wire.error_reply("unavailable", message)
    except StoreError as err:
        # Nothing was written (the transaction rolled back): say so, and where to look.
        return wire.error_reply(
            "unavailable",
            f"{err}. Nothing was changed; see {daemon.paths.daemon_log}, "
            "fix the store, then try again",
        )


def _store_full_message(err: StoreFull, *, resubmit: bool = False) -> str:
    """What a caller reads when the store's disk is full: nothing it asked was done."""
    if resubmit:
        return f"{err}; nothing was queued. Free space there and resubmit"
    return f"{err}; nothing was changed. Free space there and try again"
