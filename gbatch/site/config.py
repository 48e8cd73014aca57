"""The head's configuration (where gbatch keeps its files: gbatch/core/paths.py).

`GBATCH_HOME` (default: the user's data dir, e.g. ~/.local/share/gbatch) holds
config.yaml, the store, the socket, job logs and per-run state. Environment
variables override config.yaml (`GBATCH_SIMULATE_GPUS`).
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

from gbatch.core.limits import Limits, LimitsError, parse_limits
from gbatch.core.model import JOB_EVENTS

# Paths and resolve_paths live in gbatch.core.paths (every command needs them, cheaply);
# named here too for the daemon and the tests that read them from config.
from gbatch.core.paths import SYSTEM_SOCKET as SYSTEM_SOCKET
from gbatch.core.paths import Paths as Paths
from gbatch.core.paths import resolve_paths as resolve_paths
from gbatch.core.qos import QosTable, parse_qos
from gbatch.core.shares import DEFAULT_HEADROOM_MIB, ShareGpus, check_share_gpus
from gbatch.core.urls import has_dot_segment
from gbatch.jobspec.slurmopts import WEBHOOK_URL
from gbatch.jobspec.spec import NETWORK_NAME
from gbatch.site.policy import (
    DEFAULT_CAPABILITIES,
    DOCKER_DEFAULT_CAPABILITIES,
    DOCKER_SOCKET_PATHS,
    USER_PLACEHOLDER,
    ContainerPolicy,
    MountRoot,
)


class ConfigError(Exception):
    """A bad setting; `str()` names the file, the key and the fix."""


def make_private(path: Path) -> None:
    """Create the file at `path` if missing, readable and writable by its owner alone.

    That holds whatever the umask, and an existing file loses any group or other bits (a
    store or log made by an older gbatch under umask 022). Raises OSError.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def check_private_home(home: Path) -> None:
    """Raise ConfigError when users other than its owner may list `home`.

    Its files are the owner's alone, but their names tell of every job. Entering it (711) is
    allowed: other users reach a socket inside it that way.
    """
    try:
        mode = home.stat().st_mode & 0o777
    except FileNotFoundError:
        return  # made 0700 by whoever starts the daemon
    if mode & 0o044:
        raise ConfigError(
            f"{home} may be read by other users (mode {mode:o}): they could list its jobs' "
            f"logs and runs. Run `chmod 700 {home}` (or 711 when other users connect to a "
            "socket inside it)"
        )


def check_socket_directory(socket: Path, config: Config) -> None:
    """Raise ConfigError when a socket open to others lies in a directory others may write.

    One of them could put a socket of their own there (while the daemon is stopped, or in
    place of a stale one) and receive everyone's requests and secrets.
    """
    if not config.socket_mode & 0o077:
        return
    directory = socket.parent
    try:
        info = directory.stat()
    except FileNotFoundError:
        return  # made by the daemon, 0755, its own
    if info.st_mode & 0o022 or info.st_uid not in (0, os.geteuid()):
        raise ConfigError(
            f"the socket {socket} is open to other users (socket_mode "
            f"{config.socket_mode:o}) but {directory} may be written by others (mode "
            f"{info.st_mode & 0o7777:o}, owner uid {info.st_uid}): one could put their own "
            "socket there. Put socket_path in a directory only gbatchd's user may write, "
            "such as /run/gbatch"
        )


def daemon_paths(paths: Paths, config: Config) -> Paths:
    """The paths a daemon serves on: GBATCH_SOCKET, else `socket_path`, else its home's socket.

    `socket_path` is the config's. Never the system socket found by a client's fallback: a
    per-user daemon must not take over a lab's socket.
    """
    if paths.socket_from == "env":
        return paths
    return paths.with_socket(config.socket_path, "home")


@dataclass(frozen=True)
class RootInContainers:
    """`root_in_containers:` in config.yaml: where a container may keep its image's user."""

    images: tuple[str, ...] = ()  # fnmatch patterns over the image reference
    nodes: tuple[str, ...] = ()  # node names, as in the inventory

    def __bool__(self) -> bool:
        return bool(self.images or self.nodes)


# smtp_tls's values: STARTTLS on the SMTP port, or TLS from the start (SMTPS).
SMTP_TLS = ("starttls", "implicit")

# What an admin webhook may ask for: the jobs' events (mail types' names) and the nodes'.
# PARTITION_DOWN/UP: a cluster partition's login node stopped or started answering.
NODE_EVENTS = (
    "NODE_DOWN",
    "GPU_FOREIGN",
    "DISK_FULL",
    "RESV_START",
    "RESV_END",
    "PARTITION_DOWN",
    "PARTITION_UP",
)
# The head's own store cannot write (a full disk): told to admins' webhooks directly, not
# through the outbox, which lives on that disk (gbatch/head/outbox.py tell_store_full).
STORE_FULL_EVENT = "STORE_FULL"
# A running job flagged by the idle_gpu policy (gbatch/head/idlegpu.py): admins' webhooks
# may ask for it; its owner is mailed it whatever their --mail-type.
IDLE_GPU_EVENT = "IDLE_GPU"


# gpu_mem_policy's values: a job over its GPU memory budget is only warned, or warned
# and then stopped.
GPU_MEM_POLICIES = ("kill", "warn")


@dataclass(frozen=True)
class Webhook:
    """`webhooks:` in config.yaml: an admin's endpoint for events of every job and node.

    form "json" posts the event (gbatch/head/notify.py); "slack" posts {"text": ...},
    which Slack's and Mattermost's incoming webhooks take."""

    name: str
    url: str
    secret: str = field(default="", repr=False)  # HMAC-SHA256 key of X-Gbatch-Signature
    events: tuple[str, ...] = ("FAIL", "NODE_DOWN")
    form: str = "json"


@dataclass(frozen=True)
class IdleGpuPolicy:
    """`idle_gpu:` in config.yaml: when a job whose GPUs sit idle is flagged or cancelled.

    A running job whose GPUs all read under threshold_percent for after_minutes is flagged
    and its owner told (gbatch/head/idlegpu.py); with cancel_after_minutes (counted from the
    same start, so at least after_minutes) it is cancelled then. On by default, flagging
    only: the readings are already there, and a flag costs nobody a run; cancelling is the
    admins' choice to make.
    """

    threshold_percent: float = 5.0
    after_minutes: float = 30.0
    cancel_after_minutes: float | None = None

    @property
    def after_seconds(self) -> float:
        return self.after_minutes * 60.0

    @property
    def cancel_after_seconds(self) -> float | None:
        return None if self.cancel_after_minutes is None else self.cancel_after_minutes * 60.0


@dataclass(frozen=True)
class Config:
    tick_seconds: float = 1.0  # the daemon's loop wakes at least this often
    report_interval: float = 1.0  # seconds between the agent's GPU reports
    half_life_days: float = 7.0  # fair-share usage decay
    kill_grace_seconds: float = 30.0  # SIGTERM -> SIGKILL (Slurm's KillWait)
    simulate_gpus: int | None = None  # N simulated GPUs on the local node
    # Their models, one per GPU ("" for a plain one), when simulate_gpus named models
    # (`a100-80gb:2,rtx4090:1`, gbatch/core/gputypes.py); set from it, not a key itself.
    simulated_models: tuple[str, ...] = ()
    # The admin's rules from NVML names to GPU types, before the built-in ones:
    # (glob pattern over the name, type), in the file's order.
    gpu_types: tuple[tuple[str, str], ...] = ()
    gpu_memory_threshold_mib: int = 512  # a GPU using more is not handed out
    # Shares of a GPU by memory (gbatch/core/shares.py), for the embedded local node
    # (an inventory's nodes say it per node): which of its GPUs take shares (true, or
    # their indices), and whether it runs CUDA MPS. The headroom kept free on each
    # shared card, every node's unless its inventory entry sets its own.
    share_gpus: ShareGpus = False
    mps: bool = False
    share_headroom_mib: int = DEFAULT_HEADROOM_MIB
    # The size of one of Slurm's shards (--gres=shard:N is N of these); None: none, and
    # --gres=shard is refused.
    shard_mib: int | None = None
    socket_mode: int = 0o600
    # Where the daemon's socket lives when not in GBATCH_HOME (a system deployment:
    # /run/gbatch/gbatchd.sock), and the group it is handed to: with socket_mode '660'
    # that group's members may use gbatch.
    socket_path: Path | None = None
    socket_group: str | None = None
    admins: tuple[str, ...] = ()  # user names allowed to act on any job (root always)
    # Accounts admins may mint API tokens for (gbatch/site/accounts.py): robots' own
    # accounts, never root, gbatchd's own, a system account or a person's.
    service_accounts: tuple[str, ...] = ()
    # Members of this Unix group (supplementary or primary) are admins too.
    admin_group: str | None = None
    # Slurm's PrivateData=jobs: non-admins see and name only their own jobs.
    private_data: bool = False
    # Whether admins (root, gbatchd's user, admins, admin_group) may open steps (gbatch
    # srun --jobid) in other users' jobs. A step runs as the job's owner, so this lets an
    # admin act as that user inside the job: off unless a site wants it.
    admin_steps: bool = False
    # Bare jobs (on the local node) each in a cgroup of their own holding -c and --mem,
    # where this host lets gbatchd make one (gbatch/nodes/cgroups.py); false: CPU
    # affinity and RLIMIT_DATA, as where it cannot.
    bare_job_cgroups: bool = True
    # An srun/salloc allocation that no client waits for or is attached to any more is
    # cancelled this long after its client went away (Slurm's behaviour when srun dies).
    interactive_grace_seconds: float = 30.0
    # The longest an srun/salloc allocation may run on the implicit partition (no
    # inventory, or one without partitions:), in seconds; an inventory's partitions say
    # it with their own max_interactive_time. None: only the partition's max_time.
    max_interactive_time: int | None = None
    # Slurm's SchedulerParameters=kill_invalid_depend: a job whose dependency can never
    # hold is CANCELLED, instead of pending with reason DependencyNeverSatisfied.
    kill_invalid_depend: bool = False
    docker: str = "docker"
    # A node silent this long is down (Slurm's SlurmdTimeout); before that it is suspect.
    node_down_seconds: float = 300.0
    # A host kills its own gbatch containers when the head has not renewed its lease for
    # this long (the agent's fence). The head requeues a down node's jobs only once this
    # lease has surely run out, so a job never runs twice; a head that is itself away
    # longer than this stops every host's runs.
    node_lease_seconds: float = 300.0
    # Container policy (gbatch/site/policy.py). Host paths jobs may mount: none by default.
    mount_roots: tuple[MountRoot, ...] = ()
    # Jobs always run as their submitter. These images (fnmatch patterns) and nodes
    # keep the image's own user (often root) in containers that mount no host path.
    root_in_containers: RootInContainers = RootInContainers()
    job_network: str = "bridge"  # docker --network for every job
    allow_host_network: bool = False  # job_network: host needs this too
    # Networks a container job may pick with `network:` instead of job_network.
    job_networks: tuple[str, ...] = ()
    # Added back after --cap-drop ALL; never beyond docker's default set.
    job_capabilities: tuple[str, ...] = DEFAULT_CAPABILITIES
    # A job's log on the head stops growing here (a line says so); the job runs on.
    max_log_bytes: int = 10 << 30
    # Per-user and per-group limits (gbatch/core/limits.py): sane ones by default.
    limits: Limits = field(default_factory=Limits)
    # Quality of service (gbatch/core/qos.py): `normal` for everyone unless configured.
    qos: QosTable = field(default_factory=QosTable)
    # API tokens (gbatch/head/tokens.py): the clock skew tolerated on their expiry and
    # issue time, between the head and whoever presents them.
    token_leeway_seconds: float = 60.0
    # Notifications (gbatch/head/notify.py). Mail for --mail-type goes through this SMTP
    # server; none set: no mail is sent (and none is queued).
    smtp_host: str | None = None
    smtp_port: int = 25
    # None: plain SMTP (a local relay); "starttls": upgraded before anything is sent, or
    # nothing is; "implicit": TLS from the first byte (SMTPS, port 465). The server's
    # certificate is checked against smtp_ca_file's CAs, else the system's.
    smtp_tls: str | None = None
    smtp_ca_file: Path | None = None
    # AUTH as smtp_user, with the password held in smtp_password_file (0600; read by
    # gbatch/head/outbox.py smtp_password), never in this file.
    smtp_user: str | None = None
    smtp_password_file: Path | None = None
    mail_from: str | None = None  # default: gbatch@<this host>
    # Where a job without --mail-user is mailed: <user>@mail_domain (Slurm's MailDomain).
    mail_domain: str | None = None
    webhooks: tuple[Webhook, ...] = ()
    # Jobs may have webhooks of their own (`notify:`) only at URLs starting with one of
    # these, like "https://hooks.slack.com/services/"; none: jobs may have none.
    webhook_prefixes_allowed: tuple[str, ...] = ()
    # The first retry of a failed delivery waits this long; each next one twice as long.
    notify_retry_seconds: float = 30.0
    # Delivered outbox rows are deleted this long after their delivery.
    notify_retention_days: float = 7.0
    # Reservations users may make for themselves (docs/priorities.md): up to this many
    # GPU-hours a week each (GPUs=N only, Users= themselves); 0: only admins make them.
    user_reservations: float = 0.0
    # Slurm's ResvOverRun: how long a job of a reservation may run past the end of the
    # window it started in, in seconds (`resv_over_run:` minutes in config.yaml, as
    # Slurm's); None (UNLIMITED): until its own time limit. 0 (Slurm's default): ended
    # at the window's end, TIMEOUT.
    resv_over_run: float | None = 0.0
    # Idle GPU hoarders (IdleGpuPolicy); None (`idle_gpu: false`): not watched.
    idle_gpu: IdleGpuPolicy | None = IdleGpuPolicy()
    # A running job whose own processes use more GPU memory than its budget (--gpu-mem)
    # is warned; "kill" also stops it (OUT_OF_MEMORY, OutOfGpuMemoryBudget) once it has
    # stayed over for gpu_mem_grace_seconds: its neighbours on a shared card were
    # placed trusting that budget. "warn" only warns (gbatch/head/gpubudget.py).
    gpu_mem_policy: str = "kill"
    gpu_mem_grace_seconds: float = 30.0
    # The event log (gbatch/head/eventlog.py): one JSON line per job event and node
    # event for a log shipper. None (`off`, the default): none; "stdout" (the journal
    # under systemd); or a file, a relative path being in GBATCH_HOME, rotated at
    # event_log_max_bytes with event_log_backups old files kept.
    event_log: str | None = None
    event_log_max_bytes: int = 100 << 20
    event_log_backups: int = 5

    @property
    def half_life_seconds(self) -> float:
        return self.half_life_days * 86400.0

    @cached_property
    def container_policy(self) -> ContainerPolicy:
        """The container policy settings as the one value gbatch.site.policy's checks take."""
        return ContainerPolicy(
            mount_roots=self.mount_roots,
            network=self.job_network,
            capabilities=self.job_capabilities,
            networks=self.job_networks,
            root_images=self.root_in_containers.images,
            root_nodes=self.root_in_containers.nodes,
        )


_INT_KEYS = {
    "simulate_gpus",
    "gpu_memory_threshold_mib",
    "socket_mode",
    "smtp_port",
    "share_headroom_mib",
}
_FLOAT_KEYS = {
    "tick_seconds",
    "report_interval",
    "half_life_days",
    "kill_grace_seconds",
    "node_down_seconds",
    "node_lease_seconds",
    "token_leeway_seconds",
    "interactive_grace_seconds",
    "notify_retry_seconds",
    "notify_retention_days",
    "user_reservations",
}


def _check_gpu_types(
    value: object, bad: Callable[[str], ConfigError]
) -> tuple[tuple[str, str], ...]:
    """gpu_types: a mapping from an NVML name (a glob: `NVIDIA A100*`) to a short type."""
    from gbatch.core.gputypes import is_type_name

    usage = 'a mapping of GPU names to types, e.g. {"NVIDIA A100-SXM4-80GB": a100-80gb}'
    if not isinstance(value, dict):
        raise bad(usage)
    rules = []
    for pattern, short in value.items():
        if not isinstance(pattern, str) or not pattern.strip():
            raise bad(usage)
        if not isinstance(short, str) or not is_type_name(short):
            raise bad(
                f"{usage}: the type of {pattern!r} must be lowercase letters, digits, _, . "
                "and -, not only digits"
            )
        rules.append((pattern, short))
    return tuple(rules)


# -- container policy settings (gbatch/site/policy.py) -------------------------------------


def _check_mount_roots(value: object, bad: Callable[[str], ConfigError]) -> tuple[MountRoot, ...]:
    usage = 'a list of roots like {path: /data/{user}, writable: true} or "/datasets"'
    if not isinstance(value, list):
        raise bad(usage)
    roots = []
    for item in value:
        entry = {"path": item} if isinstance(item, str) else item
        if not isinstance(entry, dict) or set(entry) - {"path", "writable"}:
            raise bad(usage)
        path, writable = entry.get("path"), entry.get("writable", False)
        if not isinstance(writable, bool):
            raise bad(f"{usage}; writable is true or false")
        if (
            not isinstance(path, str)
            or not path.startswith("/")
            or ".." in path.split("/")
            or any(c in path for c in ':,"\0\n\r')
        ):
            raise bad(f"{usage}; each path absolute, without .., commas, colons or quotes")
        if "{" in path.replace(USER_PLACEHOLDER, "") or "}" in path.replace(USER_PLACEHOLDER, ""):
            raise bad(f"{usage}; {USER_PLACEHOLDER} is the only placeholder")
        normal = "/" + posixpath.normpath(path).lstrip("/")
        if normal in DOCKER_SOCKET_PATHS:
            raise bad(f"{usage}; {normal} would expose the docker socket, name a data directory")
        roots.append(MountRoot(normal, writable))
    return tuple(roots)


def _check_root_in_containers(value: object, bad: Callable[[str], ConfigError]) -> RootInContainers:
    usage = 'a mapping like {images: ["lab/admin-tools:*"], nodes: [gpu07]}'
    if value is None:
        return RootInContainers()
    if not isinstance(value, dict) or set(value) - {"images", "nodes"}:
        raise bad(usage)
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("images", "nodes"):
        items = value.get(key) or []
        if not isinstance(items, list) or not all(
            isinstance(item, str) and item and not item.startswith("-") and item.isprintable()
            for item in items
        ):
            raise bad(f"{usage}; {key} is a list of names")
        lists[key] = tuple(dict.fromkeys(items))
    return RootInContainers(lists["images"], lists["nodes"])


def _check_webhooks(value: object, bad: Callable[[str], ConfigError]) -> tuple[Webhook, ...]:
    usage = (
        "a list of {name: ops, url: https://..., secret: ..., events: [FAIL, NODE_DOWN], "
        "form: json or slack}"
    )
    if not isinstance(value, list):
        raise bad(usage)
    hooks: list[Webhook] = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"name", "url", "secret", "events", "form"}:
            raise bad(usage)
        name, url = item.get("name"), item.get("url")
        secret, form = item.get("secret", ""), item.get("form", "json")
        events = item.get("events", list(Webhook.events))
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise bad(f"{usage}; name is letters, digits, . _ or -")
        if name in {hook.name for hook in hooks}:
            raise bad(f"{usage}; the name {name} is given twice")
        if not isinstance(url, str) or not WEBHOOK_URL.fullmatch(url):
            raise bad(f"{usage}; url is an http:// or https:// address")
        if not isinstance(secret, str):
            raise bad(f"{usage}; secret is a string")
        if form not in ("json", "slack"):
            raise bad(f"{usage}; form is json or slack")
        known = (*JOB_EVENTS, IDLE_GPU_EVENT, *NODE_EVENTS, STORE_FULL_EVENT)
        if not isinstance(events, list) or not all(e in known for e in events):
            raise bad(f"{usage}; events are among {', '.join(known)}")
        hooks.append(Webhook(name, url, secret, tuple(dict.fromkeys(events)), form))
    return tuple(hooks)


def _check_webhook_prefixes(value: object, bad: Callable[[str], ConfigError]) -> tuple[str, ...]:
    # The host must end in the prefix (a "/" after it): "https://hooks.slack.com" would
    # also allow https://hooks.slack.com.evil.example/.
    usage = 'a list of URL prefixes, each with its host and a "/", like https://hooks.slack.com/'
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(item, str) and re.fullmatch(r"https?://[^\s/?#@]+/\S*", item) for item in value
    ):
        raise bad(usage)
    dotted = [item for item in value if has_dot_segment(item)]
    if dotted:
        raise bad(f"a prefix without `.` or `..` in its path, not {dotted[0]}")
    return tuple(dict.fromkeys(value))


def _check_idle_gpu(value: object, bad: Callable[[str], ConfigError]) -> IdleGpuPolicy | None:
    usage = (
        "false, or a mapping like {threshold_percent: 5, after_minutes: 30, "
        "cancel_after_minutes: 120}"
    )
    if value is False or value is None:
        return None
    keys = {"threshold_percent", "after_minutes", "cancel_after_minutes"}
    if not isinstance(value, dict) or set(value) - keys:
        raise bad(usage)
    numbers: dict[str, float | None] = {}
    for key in keys:
        given = value.get(key, getattr(IdleGpuPolicy, key))
        if given is None and key == "cancel_after_minutes":
            numbers[key] = None
            continue
        if isinstance(given, bool) or not isinstance(given, int | float):
            raise bad(f"{usage}; {key} is a number")
        if not math.isfinite(given) or given <= 0:
            raise bad(f"{usage}; {key} is greater than zero")
        numbers[key] = float(given)
    policy = IdleGpuPolicy(**numbers)  # type: ignore[arg-type]
    if policy.threshold_percent > 100:
        raise bad(f"{usage}; threshold_percent is at most 100")
    grace = policy.cancel_after_minutes
    if grace is not None and grace < policy.after_minutes:
        raise bad(f"{usage}; cancel_after_minutes is at least after_minutes (both from the start)")
    return policy


def _check_time_limit(value: object, bad: Callable[[str], ConfigError]) -> int | None:
    """A time limit as sbatch -t takes it (minutes, or [D-]HH:MM:SS); seconds, None unset."""
    from gbatch.core.timefmt import TimeLimitError, parse_time_limit

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad("a time limit, e.g. 60 (minutes) or 4:00:00")
    try:
        return parse_time_limit(value, field="")
    except TimeLimitError:
        raise bad("a time limit, e.g. 60 (minutes) or 4:00:00") from None


def _check_flag(value: object, bad: Callable[[str], ConfigError]) -> bool:
    if not isinstance(value, bool):
        raise bad("true or false")
    return value


def _check_network(value: object, bad: Callable[[str], ConfigError]) -> str:
    if not isinstance(value, str) or not NETWORK_NAME.fullmatch(value):
        # "container:<name>" joins another container's network namespace: never.
        raise bad("a docker network name (bridge, none, host or a network you created)")
    return value


def _check_networks(value: object, bad: Callable[[str], ConfigError]) -> tuple[str, ...]:
    usage = "a list of docker network names like [none, labnet], or []"
    if not isinstance(value, list):
        raise bad(usage)
    for name in value:
        if not isinstance(name, str) or not NETWORK_NAME.fullmatch(name):
            raise bad(f"{usage}; {name!r} is not one")
    return tuple(dict.fromkeys(value))


def _check_capabilities(value: object, bad: Callable[[str], ConfigError]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad("a list of capability names like [CHOWN, SETUID], or []")
    names = tuple(dict.fromkeys(v.upper().removeprefix("CAP_") for v in value))
    beyond = [n for n in names if n not in DOCKER_DEFAULT_CAPABILITIES]
    if beyond:
        raise bad(
            f"within docker's default set ({beyond[0]} is not; "
            f"allowed: {', '.join(sorted(DOCKER_DEFAULT_CAPABILITIES))})"
        )
    return names


_POLICY_KEYS: Mapping[str, Callable[[object, Callable[[str], ConfigError]], object]] = {
    "mount_roots": _check_mount_roots,
    "root_in_containers": _check_root_in_containers,
    "job_network": _check_network,
    "allow_host_network": _check_flag,
    "job_networks": _check_networks,
    "job_capabilities": _check_capabilities,
}


def _check_policy(config: Config, source: str) -> Config:
    """Settings that depend on each other."""
    if config.smtp_user is not None and config.smtp_password_file is None:
        raise ConfigError(
            f"{source}: smtp_user: its password is not set. Name a file holding it (mode "
            "0600) with smtp_password_file"
        )
    if config.smtp_password_file is not None and config.smtp_user is None:
        raise ConfigError(
            f"{source}: smtp_password_file: it names no user's password. Set smtp_user too"
        )
    if config.smtp_user is not None and config.smtp_tls is None:
        raise ConfigError(
            f"{source}: smtp_user: its password would cross the network in clear. Set "
            "smtp_tls: starttls (or implicit, with the server's SMTPS port)"
        )
    if config.smtp_tls == "implicit" and config.smtp_port == 25:
        raise ConfigError(
            f"{source}: smtp_tls: implicit TLS on port 25, where servers speak plain SMTP. "
            "Set smtp_port: 465, or smtp_tls: starttls"
        )
    if config.job_network == "host" and not config.allow_host_network:
        raise ConfigError(
            f"{source}: job_network: host lets every job reach the services bound to its "
            "node's localhost and ports. Set allow_host_network: true as well if you mean it"
        )
    if "host" in config.job_networks and not config.allow_host_network:
        raise ConfigError(
            f"{source}: job_networks: host lets a job reach the services bound to its "
            "node's localhost and ports. Set allow_host_network: true as well if you mean it"
        )
    return config


def load_config(paths: Paths, environ: Mapping[str, str]) -> Config:
    """Read config.yaml (optional) and apply environment overrides."""
    raw: dict[str, object] = {}
    if paths.config_file.exists():
        import yaml  # deferred: only the daemon and sbatch read config

        try:
            loaded = yaml.safe_load(paths.config_file.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{paths.config_file}: cannot read it ({err}). Fix the file") from err
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{paths.config_file}: the top level must be a mapping of settings")
        raw = dict(loaded or {})
    config = _validate(raw, str(paths.config_file))
    if environ.get("GBATCH_SIMULATE_GPUS"):
        simulate = _coerce("simulate_gpus", environ["GBATCH_SIMULATE_GPUS"], "environment")
        config = replace(config, **_simulation(simulate))  # type: ignore[arg-type]
    return config


def _simulation(value: object) -> dict[str, object]:
    """Config's fields for simulate_gpus' checked value: a count, or a model per GPU."""
    if isinstance(value, tuple):
        models = value if any(value) else ()
        return {"simulate_gpus": len(value), "simulated_models": models}
    return {"simulate_gpus": value, "simulated_models": ()}


# Settings that are gone: the value that still means what it did (None: none does),
# and what to do instead.
_REMOVED: Mapping[str, tuple[object, str]] = {
    "run_as_submitter": (
        True,
        "jobs always run as their submitter now, so it can no longer be turned off. "
        "Remove the line",
    ),
    "allow_root_jobs": (
        None,
        "root's jobs run as root and everyone else's as themselves. Remove the line (for "
        "images that need their own user, see root_in_containers in docs/security.md)",
    ),
}


def _validate(raw: Mapping[str, object], source: str) -> Config:
    known = {f.name for f in fields(Config)} - {"simulated_models"}
    values: dict[str, object] = {}
    for key, value in raw.items():
        if key in _REMOVED:
            still, instead = _REMOVED[key]
            if value is still:
                continue
            raise ConfigError(f"{source}: {key} is no longer a setting: {instead}")
        if not isinstance(key, str) or key not in known:
            import difflib

            near = difflib.get_close_matches(str(key), known, n=1)
            hint = (
                f'Did you mean "{near[0]}"?' if near else f"Valid keys: {', '.join(sorted(known))}"
            )
            raise ConfigError(f'{source}: unknown setting "{key}". {hint}')
        values[key] = _coerce(key, value, source)
    if "simulate_gpus" in values:
        values.update(_simulation(values["simulate_gpus"]))
    return _check_policy(Config(**values), source)  # type: ignore[arg-type]


def _coerce(key: str, value: object, source: str) -> object:
    def bad(what: str) -> ConfigError:
        where = "GBATCH_SIMULATE_GPUS" if source == "environment" else f"{source}: {key}"
        return ConfigError(f"{where}: {value!r} is not {what}. Fix the value")

    if key == "simulate_gpus" and value is None:
        return None
    if key == "simulate_gpus" and isinstance(value, str) and not value.strip().isdigit():
        from gbatch.core.gputypes import SIMULATE_FORMS, parse_simulated

        try:
            return parse_simulated(value)
        except ValueError as err:
            raise bad(f"{SIMULATE_FORMS} ({err})") from None
    if key == "gpu_types":
        return _check_gpu_types(value, bad)
    if key == "share_gpus":
        try:
            return check_share_gpus(value)
        except ValueError as err:
            raise ConfigError(f"{source}: share_gpus: {err}") from None
    if key == "shard_mib":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad("a size in MiB, a whole number above 0 (e.g. 10240 for 10G shards)")
        return value

    if key == "admins":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of user names")
        return tuple(value)
    if key == "admin_group":
        return _check_group(value, bad)
    if key == "service_accounts":
        return _check_service_accounts(value, bad)
    if key in ("private_data", "kill_invalid_depend", "admin_steps", "bare_job_cgroups", "mps"):
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if key in _POLICY_KEYS:
        return _POLICY_KEYS[key](value, bad)
    if key == "limits":
        try:
            return parse_limits(value)
        except LimitsError as err:
            raise ConfigError(f"{source}: {err}") from err
    if key == "qos":
        try:
            return parse_qos(value)
        except LimitsError as err:
            raise ConfigError(f"{source}: {err}") from err
    if key == "webhooks":
        return _check_webhooks(value, bad)
    if key == "idle_gpu":
        return _check_idle_gpu(value, bad)
    if key == "resv_over_run":
        if isinstance(value, str) and value.strip().upper() == "UNLIMITED":
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65533:
            raise bad("minutes (0 to 65533, Slurm's ResvOverRun) or UNLIMITED")
        return 60.0 * value
    if key == "max_interactive_time":
        return _check_time_limit(value, bad)
    if key == "gpu_mem_policy":
        if value not in GPU_MEM_POLICIES:
            raise bad(" or ".join(GPU_MEM_POLICIES))
        return value
    if key == "gpu_mem_grace_seconds":
        # 0 is allowed: stopped at the first report over its budget.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number of seconds, 0 or more")
        if not math.isfinite(value) or value < 0:
            raise bad("a number of seconds, 0 or more")
        return float(value)
    if key == "webhook_prefixes_allowed":
        return _check_webhook_prefixes(value, bad)
    if key == "smtp_tls":
        if value not in (None, *SMTP_TLS):
            raise bad("starttls or implicit (SMTPS, usually port 465); leave it out for plain SMTP")
        return value
    if key in ("smtp_ca_file", "smtp_password_file"):
        if value is not None and (not isinstance(value, str) or not value.startswith("/")):
            raise bad("an absolute path like /etc/gbatch/smtp-password")
        return None if value is None else Path(value)
    if key == "smtp_user":
        if value is not None and (
            not isinstance(value, str) or not value.isprintable() or not value
        ):
            raise bad("a user name")
        return value
    if key in ("smtp_host", "mail_from", "mail_domain"):
        if value is not None and (
            not isinstance(value, str) or not re.fullmatch(r"[^\s,<>]{1,255}", value)
        ):
            raise bad("a host name, an address or a domain")
        return value
    if key == "docker":
        if not isinstance(value, str) or not value:
            raise bad("a command name")
        return value
    if key == "socket_path":
        if value is not None and (not isinstance(value, str) or not value.startswith("/")):
            raise bad("an absolute path like /run/gbatch/gbatchd.sock")
        return None if value is None else Path(value)
    if key == "socket_group":
        return _check_group(value, bad)
    if key in ("max_log_bytes", "event_log_max_bytes"):
        return _check_size(value, bad)
    if key == "event_log":
        return _check_event_log(value, bad)
    if key == "event_log_backups":
        # Python's rotation keeps a file of 0 backups growing for ever.
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad("a whole number of old files to keep, at least 1")
        return value
    if key in _INT_KEYS:
        if isinstance(value, bool):
            raise bad("an integer")
        try:
            if key == "socket_mode" and not isinstance(value, str):
                # YAML reads 660 as decimal and 0660 as octal: only a string is clear.
                raise bad("a quoted octal mode like '660'")
            number = int(str(value), 8) if key == "socket_mode" else int(str(value))
        except ValueError as err:
            raise bad("an octal mode like '660'" if key == "socket_mode" else "an integer") from err
        if key == "socket_mode" and number > 0o777:
            raise bad("a permission mode (at most 777)")
        if number < 0:
            raise bad("zero or more")
        return number
    if key in _FLOAT_KEYS:
        try:
            number_f = float(str(value))
        except ValueError as err:
            raise bad("a number") from err
        if not math.isfinite(number_f) or number_f <= 0:
            raise bad("a finite number greater than zero")
        return number_f
    raise AssertionError(key)


_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?) *(?:([KMGT])I?B?|B)?", re.ASCII | re.IGNORECASE)


def _check_size(value: object, bad: Callable[[str], ConfigError]) -> int:
    """A size in bytes: a whole number, or with K, M, G or T (powers of 1024, as
    Slurm's and docker's sizes): 10G, 1.5T, 512MiB."""
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise bad("a size like 10G, 512M or 1048576 (bytes)")
    number, unit = match.groups()
    size = int(float(number) * 1024 ** " KMGT".index((unit or " ").upper()))
    if size < 1024:
        raise bad("a size of at least 1K")
    return size


def _check_event_log(value: object, bad: Callable[[str], ConfigError]) -> str | None:
    """`off` (YAML reads a bare off as false), `stdout`, or a file's path."""
    if value is None or value is False or value == "off":
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise bad("off, stdout or a file's path")
    return value


def _check_service_accounts(value: object, bad: Callable[[str], ConfigError]) -> tuple[str, ...]:
    """Existing accounts an admin may mint tokens for: none root, gbatchd's or a system one.

    Checked again at each mint (an account may change); here a typo or a dangerous name
    stops the daemon at start, with the reason."""
    usage = "a list of service accounts' user names like [ci-bot]"
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise bad(usage)
    import pwd  # deferred: only a config that names service accounts needs it

    from gbatch.site import accounts

    daemon_uids = {os.getuid(), os.geteuid()}
    for name in value:
        try:
            uid = pwd.getpwnam(name).pw_uid
        except KeyError as err:
            raise bad(
                f"a list of existing accounts ({name} is none: create it with useradd -M -s "
                "/usr/sbin/nologin NAME, or fix the name)"
            ) from err
        why = accounts.forbidden_account(
            name, uid, daemon_uids=daemon_uids, uid_min=accounts.login_uid_min()
        )
        if why is not None:
            raise bad(f"a list of service accounts ({name}: {why}; remove it)")
    return tuple(dict.fromkeys(value))


def _check_group(value: object, bad: Callable[[str], ConfigError]) -> str | None:
    """An existing Unix group's name: a typo must not silently make nobody an admin."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise bad("a Unix group name")
    import grp  # deferred: only a config that names a group needs it

    try:
        grp.getgrnam(value)
    except KeyError as err:
        raise bad("an existing Unix group (create it with groupadd, or fix the name)") from err
    return value
