"""A partition backed by a Slurm cluster: sbatch, squeue, sacct and scancel on its login node.

The head reaches the login node over one pooled SSH connection (gbatch/nodes/ssh.py,
host key pinned like a fleet host's) and runs Slurm's own commands there as the
partition's `user` (identity "shared": the lab's service account). Each job is sent as a
script made from its spec (the `#SBATCH` options gbatch parsed become sbatch's
options) with the head's marker in `--comment`, so that a job sent by a head killed
before it recorded the cluster's id is found again (Observation.marker) and never sent
twice. Everything the head learns comes from one `squeue` per pass for all of its jobs
there, and one `sacct` for those squeue no longer lists.

The builders and parsers are pure (tested as such in tests/unit/test_cluster.py); the
SSH calls sit in SlurmBackend.
"""

from __future__ import annotations

import calendar
import re
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from gbatch.core.model import ClusterNodes, Job, JobSpec
from gbatch.core.outputs import expand, job_fields
from gbatch.core.submitenv import is_env_name
from gbatch.nodes.backend import (
    BackendDown,
    BackendRefused,
    LinkedLogin,
    LinkRefused,
    Observation,
    SessionFailed,
)
from gbatch.nodes.base import HostError
from gbatch.nodes.inventory import Partition, SlurmCluster

if TYPE_CHECKING:
    from gbatch.nodes.ssh import SshConnection

# Seconds each call to the login node may take, at least (three times the partition's
# connect_timeout when longer): a cluster's slurmctld under load answers squeue slowly.
CALL_TIMEOUT = 10.0
# What squeue prints of each job, one line each, fields ended by '|' (no padding); the
# comment last, since a foreign job's comment may hold anything.
SQUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "exit_code", "TimeLimit", "Comment")
SQUEUE_FORMAT = ",".join(f"{name}:|" for name in SQUEUE_FIELDS)
SACCT_FIELDS = "JobIDRaw,State,Reason,NodeList,ExitCode,Comment"
MARKER_PREFIX = "gbatch:"
# Slurm's final states, as squeue and sacct print them (sacct's "CANCELLED by 0" too).
SLURM_FINAL = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)


# A user's login on a cluster (gbatch cluster link --login): what clusters' admins
# hand out, and safe as an SSH user name and an argument of squeue -u.
_LOGIN_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}", re.ASCII)


def login_problem(login: str) -> str | None:
    """Why `login` cannot be a cluster login name (one line), or None when it can."""
    if _LOGIN_RE.fullmatch(login):
        return None
    return (
        f"{login!r} is not a login name. Give your account's name on the cluster: letters, "
        "digits, '_', '.' and '-', not starting with '.' or '-', at most 64 characters"
    )


def job_marker(head: str, job_id: int, attempt: int) -> str:
    """The marker of one attempt of a job, put in its --comment: unique per head."""
    return f"{MARKER_PREFIX}{head}:{job_id}.{attempt}"


def parse_marker(comment: str) -> str:
    """The marker in a job's comment ('' when none: a job gbatch did not send)."""
    first = comment.split(" ", 1)[0]
    return first if first.startswith(MARKER_PREFIX) else ""


# What %N becomes while a cluster job's output paths are expanded: it names the node,
# which the cluster picks, so such a path is refused (cluster_output's refusal).
_NODE_UNKNOWN = "\0N\0"


def _cluster_path(pattern: str, job: Job) -> str:
    """One -o/-e pattern expanded as gbatch expands it (%j the gbatch id, %x the name,
    %u the gbatch user), made literal for the cluster's sbatch: one that still holds a
    '%' gets a backslash, which tells sbatch to expand nothing (sbatch(1))."""
    path = expand(pattern, job_fields(job, None))
    return f"\\{path}" if "%" in path else path


def output_file(job: Job) -> str:
    """The job's stdout file on the cluster: its -o, or gbatch-<id>.out.

    Relative to the partition's workdir unless absolute, as sbatch (run there) takes it."""
    if job.spec.output is None:
        return f"gbatch-{job.id}.out"
    return _cluster_path(job.spec.output, job)


def error_file(job: Job) -> str | None:
    """The job's stderr file on the cluster (its -e), or None: with stdout."""
    return None if job.spec.error is None else _cluster_path(job.spec.error, job)


def output_refusal(spec: JobSpec) -> str | None:
    """Why the job's -o/-e cannot be honoured on a cluster, or None."""
    fields = {"N": _NODE_UNKNOWN}
    for flag, pattern in (("-o/--output", spec.output), ("-e/--error", spec.error)):
        if pattern is not None and _NODE_UNKNOWN in expand(pattern, fields):
            return (
                f"{flag} {pattern!r} names the node (%N), which the cluster picks after "
                "the job is sent. Drop %N"
            )
    return None


def refusal(spec: JobSpec, cluster: SlurmCluster, *, array: bool = False) -> str | None:
    """Why a job of `spec` cannot go to this cluster (one line), or None when it can."""
    if spec.image is not None and not cluster.containers:
        return (
            "this partition's cluster runs no containers (its admin has not said it has "
            "pyxis/enroot). Drop the image, or submit to a partition of the lab"
        )
    if spec.image is not None and spec.mounts:
        return (
            "mounts name paths of the lab's machines; a container on a cluster partition "
            "takes none. Drop the mounts"
        )
    if spec.image is not None and not spec.command:
        return (
            "a container job on a cluster partition needs a command (pyxis runs no image "
            "entrypoint). Give one, e.g. --wrap"
        )
    if spec.interactive is not None:
        return "srun/salloc allocations cannot run on a cluster partition. Use sbatch"
    if array or spec.array_task is not None:
        return "arrays cannot run on a cluster partition yet. Submit the tasks one by one"
    if spec.dependency is not None:
        return "--dependency is not supported on a cluster partition yet. Drop it"
    if spec.reservation is not None:
        return (
            "--reservation names a reservation of the lab's nodes; a cluster partition "
            "takes none (its admin sets the cluster's own). Drop it"
        )
    if spec.secret_env:
        return "secret env values are not sent to a cluster. Drop secret_env"
    return output_refusal(spec)


def _time(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"{minutes}:{secs:02d}"


def cluster_minutes(seconds: int) -> int:
    """A time limit as the cluster keeps it: whole minutes, rounded up (Slurm's unit)."""
    return max(1, -(-seconds // 60))


def parse_time_limit(text: str) -> int | None:
    """squeue's TimeLimit ("[days-][hours:]minutes:seconds") in seconds.

    None: no limit (UNLIMITED, NOT_SET, INVALID), or unreadable."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    if days and not days.isdigit():
        return None
    numbers = [int(p) for p in parts]
    if len(numbers) == 2:
        numbers.insert(0, 0)
    hours, minutes, seconds = numbers
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def sbatch_options(job: Job, cluster: SlurmCluster, marker: str) -> list[str]:
    """sbatch's options for the job: its spec's resources, the cluster's names, the marker."""
    spec = job.spec
    options = [
        "--parsable",
        f"--job-name={spec.name}",
        f"--comment={marker} user={job.user}",
        f"--output={output_file(job)}",
    ]
    error = error_file(job)
    if error is not None:
        options.append(f"--error={error}")
    if cluster.partition:
        options.append(f"--partition={cluster.partition}")
    for name in ("account", "qos", "reservation"):
        value = getattr(cluster, name)
        if value:
            options.append(f"--{name}={value}")
    if spec.time_limit is not None:
        options.append(f"--time={_time(spec.time_limit)}")
    if spec.nodes > 1:
        options.append(f"--nodes={spec.nodes}")
    if spec.gpus:
        kind = f"{spec.gpu_type}:" if spec.gpu_type else ""
        options.append(f"--gres=gpu:{kind}{spec.gpus}")
    if spec.cpus is not None:
        options.append(f"--cpus-per-task={spec.cpus}")
    if spec.mem_mb is not None:
        options.append(f"--mem={spec.mem_mb}M")
    elif spec.mem_per_gpu_mb is not None:
        options.append(f"--mem-per-gpu={spec.mem_per_gpu_mb}M")
    elif spec.mem_per_cpu_mb is not None:
        options.append(f"--mem-per-cpu={spec.mem_per_cpu_mb}M")
    return options


def enroot_image(image: str) -> str:
    """A docker image reference as pyxis/enroot names it.

    The registry, when the reference names one (a first part with '.' or ':', or
    localhost), ends with '#' (`nvcr.io/nvidia/pytorch:24.01-py3` ->
    `nvcr.io#nvidia/pytorch:24.01-py3`)."""
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


def batch_script(job: Job) -> bytes:
    """The script sbatch reads on stdin: the job's env, then its command, exec'd.

    A container job's command runs in its image through pyxis (`srun
    --container-image`), the job's env passed into it as srun passes the rest."""
    spec = job.spec
    command = shlex.join(spec.command)
    if spec.image is not None:
        pyxis = ["srun", "--ntasks=1", f"--container-image={enroot_image(spec.image)}"]
        if spec.workdir is not None:
            pyxis.append(f"--container-workdir={spec.workdir}")
        command = f"{shlex.join(pyxis)} {command}"
    lines = [
        "#!/bin/sh",
        f"# gbatch job {job.id} of {job.user}, sent by the gbatch head",
        # Names were checked at submit; checked again, as they are not quoted.
        *(f"export {name}={shlex.quote(v)}" for name, v in spec.env if is_env_name(name)),
        f"exec {command}",
        "",
    ]
    return "\n".join(lines).encode()


def sbatch_argv(job: Job, cluster: SlurmCluster, marker: str) -> list[str]:
    """The login node's command that submits the job from the partition's workdir."""
    return [
        "sh",
        "-c",
        'd=$1; shift; mkdir -p "$d" && cd "$d" && exec sbatch "$@"',
        "sbatch",
        cluster.workdir,
        *sbatch_options(job, cluster, marker),
    ]


def parse_parsable(stdout: bytes) -> str:
    """The job id `sbatch --parsable` printed ("123" or "123;cluster")."""
    text = stdout.decode(errors="replace").strip().splitlines()
    first = text[-1].split(";", 1)[0].strip() if text else ""
    if not first.isdigit():
        raise BackendRefused(f"sbatch printed no job id: {stdout[:200]!r}")
    return first


def squeue_argv(cluster: SlurmCluster, login: str | None = None) -> list[str]:
    """One squeue for every job of the login user (or `login`), ended ones included."""
    user = login or cluster.user
    return ["squeue", "-h", "--states=all", "-u", user, "-O", SQUEUE_FORMAT]


def _wait_status(raw: str) -> tuple[int | None, int | None]:
    """squeue's exit_code is the raw wait status: (exit code, signal)."""
    try:
        status = int(raw)
    except ValueError:
        return None, None
    if status & 0x7F:
        return 0, status & 0x7F
    return status >> 8, None


def parse_squeue(stdout: bytes) -> dict[str, Observation]:
    """squeue_argv's output, by job id (lines it cannot read are left out)."""
    found: dict[str, Observation] = {}
    for line in stdout.decode(errors="replace").splitlines():
        if line.endswith("|"):
            line = line[:-1]
        parts = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS) or not parts[0].strip():
            continue
        job_id, state, reason, nodes, status, limit, comment = (p.strip() for p in parts)
        exit_code, sig = _wait_status(status) if state in SLURM_FINAL else (None, None)
        found[job_id] = Observation(
            backend_id=job_id,
            state=state,
            reason="" if reason in ("None", "(null)") else reason,
            nodes="" if nodes in ("(null)",) else nodes,
            exit_code=exit_code,
            signal=sig,
            marker=parse_marker(comment),
            time_limit=parse_time_limit(limit),
        )
    return found


def time_limit_argv(changes: Sequence[tuple[str, int]]) -> list[str]:
    """One call that sets each (cluster id, minutes) job's TimeLimit.

    It goes on past a refusal, printing "<id>|<scontrol's error>" for each job refused."""
    script = (
        'while [ "$#" -gt 1 ]; do '
        'said=$(scontrol update JobId="$1" TimeLimit="$2" 2>&1) '
        '|| printf "%s|%s\\n" "$1" "$(printf "%s" "$said" | tr "\\n" " ")"; '
        "shift 2; done"
    )
    pairs = [word for backend_id, minutes in changes for word in (backend_id, str(minutes))]
    return ["sh", "-c", script, "sh", *pairs]


def parse_refusals(stdout: bytes) -> dict[str, str]:
    """time_limit_argv's answer: cluster id -> why the cluster refused it."""
    found: dict[str, str] = {}
    for line in stdout.decode(errors="replace").splitlines():
        backend_id, bar, said = line.partition("|")
        if bar and backend_id.strip().isdigit():
            found[backend_id.strip()] = said.strip() or "refused"
    return found


# sbatch's options that say what a job needs, and so when it could start (estimate_argv).
_SIZE_OPTIONS = frozenset(
    {
        "--partition",
        "--account",
        "--qos",
        "--reservation",
        "--time",
        "--nodes",
        "--gres",
        "--cpus-per-task",
        "--mem",
        "--mem-per-gpu",
        "--mem-per-cpu",
    }
)
_STARTS_AT = re.compile(r"to start at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


def estimate_argv(jobs: Sequence[Job], cluster: SlurmCluster) -> list[str]:
    """One call that asks `sbatch --test-only` when each job would start there.

    It prints "<gbatch id>|<sbatch's answer>" per job, times in UTC (TZ=UTC: sbatch
    prints the login node's local time). Nothing is queued."""
    lines = []
    for job in jobs:
        options = [
            o for o in sbatch_options(job, cluster, "") if o.split("=", 1)[0] in _SIZE_OPTIONS
        ]
        argv = ["sbatch", "--test-only", "--wrap=true", *options]
        lines.append(
            f"printf '%s|' {int(job.id)}; TZ=UTC {shlex.join(argv)} 2>&1 | tr '\\n' ' '; echo"
        )
    return ["sh", "-c", "\n".join(lines)]


def parse_estimates(stdout: bytes) -> dict[int, float | None]:
    """estimate_argv's answer: gbatch id -> the start sbatch gave (epoch seconds), or None.

    None where it gave none: the cluster would refuse the job."""
    found: dict[int, float | None] = {}
    for line in stdout.decode(errors="replace").splitlines():
        job_id, bar, said = line.partition("|")
        if not bar or not job_id.strip().isdigit():
            continue
        at = _STARTS_AT.search(said)
        found[int(job_id)] = (
            None
            if at is None
            else float(calendar.timegm(time.strptime(at.group(1), "%Y-%m-%dT%H:%M:%S")))
        )
    return found


def sacct_argv(backend_ids: Sequence[str]) -> list[str]:
    return [
        "sacct",
        "-n",
        "-X",
        "-P",
        "--delimiter=|",
        f"--format={SACCT_FIELDS}",
        f"--jobs={','.join(backend_ids)}",
    ]


def parse_sacct(stdout: bytes) -> dict[str, Observation]:
    """sacct_argv's output: ExitCode is "code:signal", State may read "CANCELLED by 0"."""
    found: dict[str, Observation] = {}
    for line in stdout.decode(errors="replace").splitlines():
        parts = line.split("|", 5)
        if len(parts) != 6 or not parts[0].strip().isdigit():
            continue
        job_id, state, reason, nodes, code, comment = parts
        exit_code: int | None = None
        sig: int | None = None
        left, _, right = code.partition(":")
        if left.isdigit():
            exit_code = int(left)
        if right.isdigit() and int(right):
            sig = int(right)
        found[job_id] = Observation(
            backend_id=job_id,
            state=state.split(" ", 1)[0],
            reason="" if reason in ("None", "(null)") else reason,
            nodes="" if nodes in ("None assigned", "(null)") else nodes,
            exit_code=exit_code,
            signal=sig,
            marker=parse_marker(comment),
        )
    return found


# What sinfo prints of the partition's nodes, one line per group of nodes alike in all of
# these (Slurm groups them itself), fields split by '|': no padding (a letter with no
# width prints whole), the reason last since an admin's reason may hold anything. %P
# first: without a partition in the config, the cluster's default one is the line whose
# name ends in '*'.
SINFO_LETTERS = "PalDtTcmGNE"
SINFO_FORMAT = "|".join(f"%{letter}" for letter in SINFO_LETTERS)


def sinfo_argv(cluster: SlurmCluster) -> list[str]:
    """One sinfo for the nodes of the cluster's partition (its default one when unnamed)."""
    where = ["-p", cluster.partition] if cluster.partition else []
    return ["sinfo", "-h", *where, "-o", SINFO_FORMAT]


def _count(text: str) -> int | None:
    """sinfo's %c or %m: a number, or the least of a group's ('32+'); None if unsaid."""
    digits = text.strip().rstrip("+")
    return int(digits) if digits.isdigit() else None


def parse_sinfo(stdout: bytes, partition: str | None) -> tuple[ClusterNodes, ...]:
    """sinfo_argv's output: the partition's groups of nodes, in sinfo's order.

    Without `partition` (the config names none) only the default partition's lines are
    kept. Lines it cannot read are left out, and so are lines of no node."""
    groups: list[ClusterNodes] = []
    for line in stdout.decode(errors="replace").splitlines():
        parts = line.split("|", len(SINFO_LETTERS) - 1)
        if len(parts) != len(SINFO_LETTERS):
            continue
        name, avail, limit, count, state, state_long, cpus, mem, gres, nodes, reason = (
            p.strip() for p in parts
        )
        if not partition and not name.endswith("*"):
            continue
        if not count.isdigit() or int(count) == 0 or not nodes or not state:
            continue
        groups.append(
            ClusterNodes(
                names=nodes,
                count=int(count),
                state=state,
                state_long=state_long or state,
                avail=avail or "up",
                max_time=parse_time_limit(limit),
                cpus=_count(cpus),
                mem_mb=_count(mem),
                gres=gres or "(null)",
                reason="" if reason in ("none", "(null)") else reason,
            )
        )
    return tuple(groups)


class Logins(Protocol):
    """Users' links to one per-user partition, as the head's store keeps them."""

    def users(self) -> Sequence[str]:
        """The users with an unbroken link and a job open on the cluster."""
        ...

    def login(self, user: str) -> LinkedLogin | None:
        """`user`'s unbroken link, its key unsealed; None when they have none."""
        ...

    def refused(self, user: str, why: str, job_id: int | None) -> None:
        """The cluster refused `user`'s key: mark the link broken and tell them.

        On `job_id`, the job that found it, when there is one; a new link stays new."""
        ...

    def accepted(self, user: str) -> None:
        """The cluster took `user`'s new key: their link is ok from now."""
        ...


# The shared identity's connection, in the table of connections by user.
_SHARED = ""
# Seconds before a key the cluster refused is offered again (a relink, a new key, is
# offered at once): a new link waits for its user to add the key, each pass asking.
REFUSED_RETRY_SECONDS = 10.0
# Seconds a user whose own session failed (a command timed out or failed in it) is left
# out of the passes: each try may cost a call's whole timeout.
FAILING_RETRY_SECONDS = 60.0


class SlurmBackend:
    """One Slurm cluster's partition reached over SSH (the Backend of backend.py).

    Identity "shared": one connection, as the partition's `user`. "per_user": one
    connection per linked user, as the login they linked, with the key sealed for it
    (`logins`); every call about a job is made as its user."""

    @classmethod
    def of(cls, partition: Partition, logins: Logins | None = None) -> SlurmBackend:
        """The backend of a partition that has a `slurm:` block."""
        assert partition.slurm is not None
        return cls(partition.name, partition.slurm, logins)

    def __init__(self, name: str, cluster: SlurmCluster, logins: Logins | None = None) -> None:
        self.name = name
        self.cluster = cluster
        self.per_user = cluster.identity == "per_user"
        self.logins = logins
        self._lock = threading.Lock()
        # user ("" for the shared identity) -> (the link it was made with, connection).
        self._conns: dict[str, tuple[LinkedLogin | None, SshConnection]] = {}
        # Per-user identity: whose jobs the last observe saw, and whose each job is;
        # the links the cluster refused last, and when (time.monotonic()).
        self._observed: frozenset[str] = frozenset()
        self._owners: dict[str, str] = {}
        self._refused: dict[str, tuple[LinkedLogin, float]] = {}
        # user -> the link their session last failed with, and when (time.monotonic()).
        self._failing: dict[str, tuple[LinkedLogin | None, float]] = {}

    def _link(self, user: str) -> LinkedLogin:
        link = self.logins.login(user) if self.logins is not None else None
        if link is None:
            raise LinkRefused(
                f"{user} has no working link to cluster partition {self.name}. Run "
                f"`gbatch cluster link {self.name} --login NAME` (see gbatch cluster status)"
            )
        return link

    def _connection(self, user: str, job_id: int | None) -> SshConnection:
        # paramiko is imported only when the head first talks to a cluster: the CLI
        # imports this module's pure parts without it (start-up).
        import io

        import paramiko

        from gbatch.nodes.ssh import LoginRefused, SshConnection, SshTarget

        link = self._link(user) if self.per_user else None
        held = self._conns.get(user)
        if held is not None and held[0] == link and held[1].connected:
            return held[1]
        if held is not None:
            held[1].close()
            del self._conns[user]
        refused = self._refused.get(user)
        if (
            link is not None
            and refused is not None
            and refused[0] == link
            and time.monotonic() - refused[1] < REFUSED_RETRY_SECONDS
        ):
            raise LinkRefused(f"the cluster refused {user}'s linked key")
        c = self.cluster
        target = SshTarget(
            name=f"{self.name} (cluster login {c.login})",
            host=c.login,
            port=c.port,
            user=c.user if link is None else link.login,
            identity_file=c.identity_file,
            known_hosts=c.known_hosts,
            connect_timeout=c.connect_timeout,
            pkey=None
            if link is None
            else paramiko.Ed25519Key.from_private_key(io.StringIO(link.private_key)),
        )
        conn = SshConnection(target)
        try:
            conn.connect()
        except LoginRefused as err:
            if link is None or self.logins is None:
                raise BackendDown(str(err)) from None
            # The user's key, not the cluster, is at fault: their link breaks alone.
            self._refused[user] = (link, time.monotonic())
            self.logins.refused(user, str(err), job_id)
            raise LinkRefused(f"the cluster refused {user}'s linked key: {err}") from None
        except HostError as err:
            raise BackendDown(str(err)) from None
        self._refused.pop(user, None)
        if link is not None and not link.taken and self.logins is not None:
            self.logins.accepted(user)
        self._conns[user] = (link, conn)
        return conn

    def _run(
        self,
        argv: Sequence[str],
        stdin: bytes | None = None,
        *,
        user: str = _SHARED,
        job_id: int | None = None,
        again: bool = True,
    ) -> tuple[int, bytes, bytes]:
        """`argv` on the login node, as `user` (per-user identity) or the shared login.

        Per-user: a connection found dead (its sessions ended) is logged in again once
        when `again` (never for sbatch: its answer may be lost, and the marker finds
        it); a command failing on a live one is the user's (SessionFailed)."""
        who = user if self.per_user else _SHARED
        timeout = max(CALL_TIMEOUT, 3 * self.cluster.connect_timeout)
        with self._lock:
            for retry in (again, False):
                conn = self._connection(who, job_id)
                try:
                    done = conn.run(argv, timeout=timeout, stdin=stdin)
                except HostError as err:
                    lost = not conn.connected
                    conn.close()
                    if not self.per_user:
                        raise BackendDown(str(err)) from None
                    if lost and retry:
                        continue
                    if not lost:
                        self._mark_failing(who)
                    why = f"{who}'s session on the login node failed: {err}"
                    raise SessionFailed(why) from None
                self._failing.pop(who, None)
                return done.exit_status, done.stdout, done.stderr
        raise AssertionError("unreachable: the second try returns or raises")

    def _mark_failing(self, user: str) -> None:
        held = self._conns.get(user)
        self._failing[user] = (None if held is None else held[0], time.monotonic())

    def submit(self, job: Job, marker: str) -> str:
        status, out, err = self._run(
            sbatch_argv(job, self.cluster, marker),
            batch_script(job),
            user=job.user,
            job_id=job.id,
            again=False,
        )
        if status != 0:
            said = (err or out).decode(errors="replace").strip().splitlines()
            raise BackendRefused(said[-1] if said else f"sbatch exited {status}")
        cluster_id = parse_parsable(out)
        self._owners[cluster_id] = job.user
        return cluster_id

    def observe(self) -> Mapping[str, Observation]:
        if not self.per_user:
            return self._squeue(_SHARED, None)
        found: dict[str, Observation] = {}
        observed: set[str] = set()
        owners: dict[str, str] = {}
        failed: list[str] = []
        for user in self.logins.users() if self.logins is not None else ():
            try:
                link = self._link(user)
                failing = self._failing.get(user)
                if (
                    failing is not None
                    and failing[0] == link
                    and time.monotonic() - failing[1] < FAILING_RETRY_SECONDS
                ):
                    continue  # a relink (a new key) is tried at once
                seen = self._squeue(user, link.login)
            except SessionFailed as err:
                failed.append(str(err))
                continue
            except LinkRefused:
                continue  # broken now: their jobs keep their last known state
            observed.add(user)
            owners.update(dict.fromkeys(seen, user))
            found.update(seen)
        if failed and not observed:
            # Nobody's squeue works: the cluster's, not one user's, fault.
            raise BackendDown(failed[0])
        self._observed = frozenset(observed)
        self._owners = owners
        return found

    def _squeue(self, user: str, login: str | None) -> dict[str, Observation]:
        status, out, err = self._run(squeue_argv(self.cluster, login), user=user)
        if status != 0:
            said = err.decode(errors="replace").strip().splitlines()
            why = f"squeue failed: {said[-1] if said else f'exit {status}'}"
            if self.per_user:
                self._mark_failing(user)
                raise SessionFailed(f"{user}'s {why}")
            raise BackendDown(why)
        return parse_squeue(out)

    def observed_users(self) -> frozenset[str] | None:
        return self._observed if self.per_user else None

    def may_send(self, user: str) -> bool:
        if not self.per_user:
            return True
        link = self.logins.login(user) if self.logins is not None else None
        refused = self._refused.get(user)
        # A new key just refused (not on the cluster yet): its user's other jobs wait
        # as jobs, not as intents taking the partition's max_jobs from everyone.
        return link is not None and (refused is None or refused[0] != link)

    def observe_gone(self, backend_ids: Sequence[str]) -> Mapping[str, Observation]:
        if not backend_ids:
            return {}
        found: dict[str, Observation] = {}
        # Per-user identity: each user's own sacct (a cluster's PrivateData may hide
        # others' jobs), of the ids squeue forgot; the rare path (purged jobs).
        for user in sorted(self._observed) if self.per_user else [_SHARED]:
            try:
                status, out, _ = self._run(sacct_argv(backend_ids), user=user)
            except LinkRefused:
                continue
            # A cluster without accounting (slurmdbd) answers nothing: the jobs are lost.
            if status == 0:
                found.update(parse_sacct(out))
        return found

    def observe_nodes(self) -> Sequence[ClusterNodes] | None:
        # Per-user identity: sinfo says the same to everyone, so the first of the logins
        # whose squeue answered last asks; none: nobody can.
        refused = None
        for user in sorted(self._observed) if self.per_user else [_SHARED]:
            try:
                status, out, err = self._run(sinfo_argv(self.cluster), user=user)
            except LinkRefused:
                continue
            if status == 0:
                return parse_sinfo(out, self.cluster.partition)
            said = err.decode(errors="replace").strip().splitlines()
            refused = f"sinfo failed: {said[-1] if said else f'exit {status}'}"
        if refused is not None:
            raise BackendRefused(refused)
        return None

    def _by_owner(self, backend_ids: Sequence[str]) -> dict[str, list[str]]:
        if not self.per_user:
            return {_SHARED: list(backend_ids)}
        mine: dict[str, list[str]] = {}
        for backend_id in backend_ids:
            owner = self._owners.get(backend_id)
            if owner is not None:
                mine.setdefault(owner, []).append(backend_id)
        return mine

    def cancel(self, backend_ids: Sequence[str]) -> None:
        for user, ids in self._by_owner(backend_ids).items():
            try:
                self._run(["scancel", *ids], user=user)
            except LinkRefused:
                continue  # asked again on the pass after a relink

    def hold(self, backend_ids: Sequence[str], held: bool) -> None:
        # A job the cluster started meanwhile refuses a hold: the next pass sees it run.
        for user, ids in self._by_owner(backend_ids).items():
            try:
                self._run(["scontrol", "hold" if held else "release", ",".join(ids)], user=user)
            except LinkRefused:
                continue

    def set_time_limits(self, changes: Sequence[tuple[str, int]]) -> Mapping[str, str]:
        if not changes:
            return {}
        minutes = dict(changes)
        refused: dict[str, str] = {}
        for user, ids in self._by_owner(list(minutes)).items():
            try:  # per-user identity: each job's own login changes its limit
                _, out, _ = self._run(time_limit_argv([(i, minutes[i]) for i in ids]), user=user)
            except LinkRefused as err:
                refused.update(dict.fromkeys(ids, str(err)))
                continue
            refused.update(parse_refusals(out))
        return refused

    def estimate(self, jobs: Sequence[Job]) -> Mapping[int, float | None]:
        if not jobs:
            return {}
        if not self.per_user:
            _, out, _ = self._run(estimate_argv(jobs, self.cluster))
            return parse_estimates(out)
        # Per-user: each user's login asks for its own jobs (its account, its limits);
        # a user with no working link gets no estimate (their jobs stay on the lab).
        by_user: dict[str, list[Job]] = {}
        for job in jobs:
            by_user.setdefault(job.user, []).append(job)
        found: dict[int, float | None] = {}
        for user, mine in by_user.items():
            if not self.may_send(user):
                continue
            try:
                _, out, _ = self._run(estimate_argv(mine, self.cluster), user=user)
            except LinkRefused:
                continue
            found.update(parse_estimates(out))
        return found

    def read_log(self, job: Job, offset: int, limit: int) -> bytes:
        path = output_file(job).replace("\\", "")  # sbatch took it literally
        if not path.startswith("/"):
            path = f"{self.cluster.workdir}/{path}"
        try:
            _, out, _ = self._run(
                [
                    "sh",
                    "-c",
                    'tail -c "+$1" -- "$2" 2>/dev/null | head -c "$3"',
                    "sh",
                    str(offset + 1),
                    path,
                    str(limit),
                ],
                user=job.user,
            )
        except LinkRefused as err:
            raise BackendDown(str(err)) from None
        return out

    def close(self) -> None:
        with self._lock:
            conns = [conn for _, conn in self._conns.values()]
            self._conns.clear()
        for conn in conns:
            conn.close()
