"""Per-user and per-group limits: the head config's `limits:` block and one user's share.

They are Slurm's QOS MaxSubmitJobsPerUser, MaxJobsPerUser, MaxTRESPerUser=gres/gpu and
MaxArraySize: the `limits:` block of the head's config, validated, and the limits that
apply to one user.

    limits:
      max_pending_jobs: 10000   # per user, PENDING jobs (held ones too): refused at submit
      max_running_jobs: null    # per user, jobs holding a node: the rest wait
      max_gpus: null            # per user, GPUs held by their jobs: the rest wait
      max_array_size: 10001     # tasks in one array submit: refused at submit
      users:  {alice: {max_gpus: 8}}
      groups: {students: {max_running_jobs: 4, max_gpus: 2}}

null is "no limit". How entries combine, per setting (`Limits.for_user`): the user's own
entry wins when it names the setting; else, among the groups the user is in (primary or
supplementary) whose entry names it, the most generous value (null beats any number);
else the top-level value (or its default). Pure but for `unix_groups`, which reads the
system's user and group databases.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from gbatch.core.model import Job

# The most tasks one array submit may ever have, whatever the config says: one submit is
# one transaction, and this bounds its size.
ARRAY_HARD_CAP = 100_000


@dataclass(frozen=True)
class UserLimits:
    """The limits that apply to one user; None is no limit."""

    max_pending_jobs: int | None = 10_000
    max_running_jobs: int | None = None
    max_gpus: int | None = None
    max_array_size: int | None = 10_001

    @property
    def limits_running(self) -> bool:
        """Whether the planner has anything to hold back for this user."""
        return self.max_running_jobs is not None or self.max_gpus is not None


SETTINGS = tuple(f.name for f in fields(UserLimits))
_MINIMUM = {"max_pending_jobs": 0, "max_running_jobs": 0, "max_gpus": 0, "max_array_size": 1}

# One `users:` or `groups:` entry: only the settings it names.
Override = Mapping[str, int | None]


def _frozen(mapping: Mapping[str, Override]) -> Mapping[str, Override]:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in mapping.items()})


@dataclass(frozen=True)
class Limits:
    """The whole `limits:` block. `default`: the top-level settings."""

    default: UserLimits = UserLimits()
    users: Mapping[str, Override] = field(default_factory=lambda: MappingProxyType({}))
    groups: Mapping[str, Override] = field(default_factory=lambda: MappingProxyType({}))

    def for_user(self, user: str, groups: Collection[str] = ()) -> UserLimits:
        """The limits of `user`, a member of `groups`, setting by setting.

        Each setting comes from the user's entry, else the most generous of their groups',
        else the default. `groups` are names; those the config does not name are ignored.
        """
        mine = self.users.get(user, {})
        theirs = [self.groups[g] for g in groups if g in self.groups]
        if not mine and not theirs:
            return self.default
        values: dict[str, int | None] = {}
        for name in SETTINGS:
            if name in mine:
                values[name] = mine[name]
                continue
            named = [entry[name] for entry in theirs if name in entry]
            if not named:
                values[name] = getattr(self.default, name)
            elif None in named:
                values[name] = None
            else:
                values[name] = max(v for v in named if v is not None)
        return UserLimits(**values)

    @property
    def limits_running(self) -> bool:
        """Whether any user may be held back by max_running_jobs or max_gpus."""
        return self.default.limits_running or any(
            entry.get(name) is not None
            for entry in (*self.users.values(), *self.groups.values())
            for name in ("max_running_jobs", "max_gpus")
        )


@dataclass(frozen=True)
class Use:
    """What a user's jobs hold now: jobs on a node and their GPUs.

    A job on a node is starting, running or stopping.
    """

    running_jobs: int = 0
    gpus: int = 0


def use_by_user(allocated: Iterable[Job]) -> dict[str, Use]:
    """Each user's Use, from the jobs that hold a node (ALLOCATED_STATES)."""
    counts: dict[str, tuple[int, int]] = {}
    for job in allocated:
        running, gpus = counts.get(job.user, (0, 0))
        counts[job.user] = (running + 1, gpus + job.gpu_count)
    return {user: Use(running, gpus) for user, (running, gpus) in counts.items()}


def with_cluster_jobs(use: Mapping[str, Use], sent: Iterable[Job]) -> dict[str, Use]:
    """`use` with the jobs sent to a Slurm cluster counted in.

    Each counts as a running job with the GPUs it asked for: the cluster may start it at
    any time, so it counts once sent."""
    counts = {user: [u.running_jobs, u.gpus] for user, u in use.items()}
    for job in sent:
        mine = counts.setdefault(job.user, [0, 0])
        mine[0] += 1
        mine[1] += job.spec.total_gpus
    return {user: Use(running, gpus) for user, (running, gpus) in counts.items()}


def over_limits(limits: UserLimits, use: Use, gpus: int) -> str | None:
    """Why a job of `gpus` GPUs waits under its user's limits (the planner's reason), or None.

    `use`: what the user holds now."""
    if limits.max_running_jobs is not None and use.running_jobs >= limits.max_running_jobs:
        return "QOSMaxJobsPerUserLimit"
    if limits.max_gpus is not None and use.gpus + gpus > limits.max_gpus:
        return "QOSMaxGRESPerUser"
    return None


@dataclass(frozen=True)
class UserShare:
    """One row of `gbatch sshare`: a user's fair share, what their jobs hold, their limits.

    `usage`: decayed GPU-seconds; `effective_usage`: its fraction of everyone's;
    `fairshare`: the planner's factor, in (0, 1].
    """

    user: str
    usage: float
    effective_usage: float
    fairshare: float
    pending: int
    running: int
    gpus: int
    limits: UserLimits


# -- refusals at submit -----------------------------------------------------------------


class PendingLimitReached(Exception):
    """A submit that would take `user` past max_pending_jobs; nothing of it is queued."""

    def __init__(
        self, user: str, pending: int, adding: int, limit: int, qos: str | None = None
    ) -> None:
        """`qos`: the limit is that QOS's (its jobs counted), not the `limits:` block's."""
        self.user, self.pending, self.adding, self.limit = user, pending, adding, limit
        jobs = "pending jobs" if qos is None else f"pending jobs in QOS {qos}"
        the = "the limit" if qos is None else f"QOS {qos}'s limit"
        if adding == 1:
            text = (
                f"limits: you have {pending} {jobs}, {the} (max_pending_jobs) is "
                f"{limit}. Wait for some to start or cancel some"
            )
        else:
            room = max(0, limit - pending)
            text = (
                f"limits: you have {pending} {jobs} and this array adds {adding}, over "
                f"{the} (max_pending_jobs) of {limit}. "
                + (f"Submit at most {room} tasks, or wait" if room else "Wait")
                + " for some to start or cancel some"
            )
        super().__init__(text)


def array_refusal(count: int, limit: int | None) -> str | None:
    """Why an array of `count` tasks is refused under max_array_size `limit`, or None."""
    if limit is None or count <= limit:
        return None
    return (
        f"limits: --array asks for {count} tasks, the limit (max_array_size) is {limit}. "
        f"Submit arrays of at most {limit} tasks"
    )


def gpus_refusal(gpus: int, limit: int | None) -> str | None:
    """Why a job asking `gpus` GPUs can never start under max_gpus `limit`, or None."""
    if limit is None or gpus <= limit:
        return None
    fix = f"Ask for at most {limit}" if limit else "Ask for gpus: 0"
    return (
        f"limits: the job asks for {gpus} GPUs, your limit (max_gpus) is {limit}, so it "
        f"could never start. {fix}, or ask an admin to raise the limit"
    )


# -- config ------------------------------------------------------------------------------


class LimitsError(ValueError):
    """A bad `limits:` setting; str() names the key and the fix.

    The key reads like limits.groups.students.max_gpus; gbatch.site.config prefixes the
    file.
    """


def parse_limits(
    raw: object,
    *,
    user_exists: Callable[[str], bool] | None = None,
    group_exists: Callable[[str], bool] | None = None,
) -> Limits:
    """The `limits:` block of config.yaml (null: the defaults). Raises LimitsError.

    Names under `users:` and `groups:` must exist in the system's databases (a typo
    must not silently leave someone unlimited); `user_exists`/`group_exists` replace the
    lookups (tests)."""
    user_exists = user_exists or _user_exists
    group_exists = group_exists or _group_exists
    if raw is None:
        return Limits()
    if not isinstance(raw, Mapping):
        raise LimitsError(
            f"limits: {raw!r} is not a mapping of settings like {{max_pending_jobs: 10000}}. "
            "Fix the value"
        )
    top = _settings(raw, "limits", extra=("users", "groups"))
    users = _entries(raw.get("users"), "users", user_exists)
    groups = _entries(raw.get("groups"), "groups", group_exists)
    return Limits(UserLimits(**top), _frozen(users), _frozen(groups))


def _entries(
    raw: object, kind: str, exists: Callable[[str], bool]
) -> dict[str, dict[str, int | None]]:
    where = f"limits.{kind}"
    if raw is None:
        return {}
    what = "user" if kind == "users" else "Unix group"
    example = "{alice: {max_gpus: 8}}" if kind == "users" else "{students: {max_gpus: 2}}"
    if not isinstance(raw, Mapping):
        raise LimitsError(
            f"{where}: {raw!r} is not a mapping of {what} names to settings like {example}. "
            "Fix the value"
        )
    entries = {}
    for name, settings in raw.items():
        if not isinstance(name, str) or not name:
            raise LimitsError(f"{where}: {name!r} is not a {what} name. Fix the value")
        if not exists(name):
            make = "useradd" if kind == "users" else "groupadd"
            raise LimitsError(
                f"{where}: {name!r} is not an existing {what} (create it with {make}, or fix "
                "the name). Fix the value"
            )
        if settings is None:
            settings = {}
        if not isinstance(settings, Mapping):
            raise LimitsError(
                f"{where}.{name}: {settings!r} is not a mapping of settings like "
                "{max_gpus: 2}. Fix the value"
            )
        entries[name] = _settings(settings, f"{where}.{name}")
    return entries


def _settings(
    raw: Mapping[object, object], where: str, extra: tuple[str, ...] = ()
) -> dict[str, int | None]:
    values: dict[str, int | None] = {}
    for key, value in raw.items():
        if key in extra:
            continue
        if not isinstance(key, str) or key not in SETTINGS:
            import difflib  # deferred: only a mistyped key needs it

            known = (*SETTINGS, *extra)
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f'Did you mean "{near[0]}"?' if near else f"Valid keys: {', '.join(known)}"
            raise LimitsError(f'{where}: unknown setting "{key}". {hint}')
        values[key] = _limit(value, f"{where}.{key}", _MINIMUM[key])
    return values


def _limit(value: object, where: str, minimum: int) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise LimitsError(f"{where}: {value!r} is not a whole number, or null for no limit")
    if value < minimum:
        least = "zero or more" if minimum == 0 else f"at least {minimum}"
        raise LimitsError(f"{where}: {value!r} is not {least}. Fix the value")
    if where.endswith("max_array_size") and value > ARRAY_HARD_CAP:
        raise LimitsError(
            f"{where}: {value!r} is over gbatch's cap of {ARRAY_HARD_CAP} tasks per submit. "
            "Fix the value"
        )
    return value


def _user_exists(name: str) -> bool:
    import pwd  # deferred: only a config that names users needs it

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _group_exists(name: str) -> bool:
    import grp  # deferred: only a config that names groups needs it

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def unix_groups(user: str, epoch: int) -> frozenset[str]:
    """The names of the groups `user` is in, primary and supplementary.

    Read from the system's databases; empty for a user they do not know. `epoch` is the
    caller's clock in cache periods: a new one reads the databases again, so a change to
    a user's groups takes hold within a period while a sweep over thousands of jobs asks
    once.
    """
    import grp
    import os
    import pwd

    try:
        gid = pwd.getpwnam(user).pw_gid
        gids = os.getgrouplist(user, gid)
    except (KeyError, OSError):
        return frozenset()
    names = set()
    for each in gids:
        try:
            names.add(grp.getgrgid(each).gr_name)
        except KeyError:
            continue
    return frozenset(names)
