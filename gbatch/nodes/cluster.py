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
from typing import TYPE_CHECKING

from gbatch.core.model import Job, JobSpec
from gbatch.core.outputs import expand, job_fields
from gbatch.core.submitenv import is_env_name
from gbatch.nodes.backend import BackendDown, BackendRefused, Observation
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


def squeue_argv(cluster: SlurmCluster) -> list[str]:
    """One squeue for every job of the partition's login user, ended ones included."""
    return ["squeue", "-h", "--states=all", "-u", cluster.user, "-O", SQUEUE_FORMAT]


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


class SlurmBackend:
    """One Slurm cluster's partition reached over SSH (the Backend of backend.py)."""

    @classmethod
    def of(cls, partition: Partition) -> SlurmBackend:
        """The backend of a partition that has a `slurm:` block."""
        assert partition.slurm is not None
        return cls(partition.name, partition.slurm)

    def __init__(self, name: str, cluster: SlurmCluster) -> None:
        self.name = name
        self.cluster = cluster
        self._lock = threading.Lock()
        self._conn: SshConnection | None = None

    def _connection(self) -> SshConnection:
        # paramiko is imported only when the head first talks to a cluster: the CLI
        # imports this module's pure parts without it (start-up).
        from gbatch.nodes.ssh import SshConnection, SshTarget

        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        c = self.cluster
        target = SshTarget(
            name=f"{self.name} (cluster login {c.login})",
            host=c.login,
            port=c.port,
            user=c.user,
            identity_file=c.identity_file,
            known_hosts=c.known_hosts,
            connect_timeout=c.connect_timeout,
        )
        conn = SshConnection(target)
        try:
            conn.connect()
        except HostError as err:
            raise BackendDown(str(err)) from None
        self._conn = conn
        return conn

    def _run(self, argv: Sequence[str], stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        with self._lock:
            conn = self._connection()
            try:
                timeout = max(CALL_TIMEOUT, 3 * self.cluster.connect_timeout)
                done = conn.run(argv, timeout=timeout, stdin=stdin)
            except HostError as err:
                conn.close()
                raise BackendDown(str(err)) from None
        return done.exit_status, done.stdout, done.stderr

    def submit(self, job: Job, marker: str) -> str:
        status, out, err = self._run(sbatch_argv(job, self.cluster, marker), batch_script(job))
        if status != 0:
            said = (err or out).decode(errors="replace").strip().splitlines()
            raise BackendRefused(said[-1] if said else f"sbatch exited {status}")
        return parse_parsable(out)

    def observe(self) -> Mapping[str, Observation]:
        status, out, err = self._run(squeue_argv(self.cluster))
        if status != 0:
            said = err.decode(errors="replace").strip().splitlines()
            raise BackendDown(f"squeue failed: {said[-1] if said else f'exit {status}'}")
        return parse_squeue(out)

    def observe_gone(self, backend_ids: Sequence[str]) -> Mapping[str, Observation]:
        if not backend_ids:
            return {}
        status, out, _ = self._run(sacct_argv(backend_ids))
        # A cluster without accounting (slurmdbd) answers nothing: the jobs are lost.
        return parse_sacct(out) if status == 0 else {}

    def cancel(self, backend_ids: Sequence[str]) -> None:
        if backend_ids:
            self._run(["scancel", *backend_ids])

    def hold(self, backend_ids: Sequence[str], held: bool) -> None:
        # A job the cluster started meanwhile refuses a hold: the next pass sees it run.
        if backend_ids:
            self._run(["scontrol", "hold" if held else "release", ",".join(backend_ids)])

    def set_time_limits(self, changes: Sequence[tuple[str, int]]) -> Mapping[str, str]:
        if not changes:
            return {}
        _, out, _ = self._run(time_limit_argv(changes))
        return parse_refusals(out)

    def estimate(self, jobs: Sequence[Job]) -> Mapping[int, float | None]:
        if not jobs:
            return {}
        _, out, _ = self._run(estimate_argv(jobs, self.cluster))
        return parse_estimates(out)

    def read_log(self, job: Job, offset: int, limit: int) -> bytes:
        path = output_file(job).replace("\\", "")  # sbatch took it literally
        if not path.startswith("/"):
            path = f"{self.cluster.workdir}/{path}"
        _, out, _ = self._run(
            [
                "sh",
                "-c",
                'tail -c "+$1" -- "$2" 2>/dev/null | head -c "$3"',
                "sh",
                str(offset + 1),
                path,
                str(limit),
            ]
        )
        return out

    def close(self) -> None:
        with self._lock:
            conn = self._conn
            self._conn = None
        if conn is not None:
            conn.close()
