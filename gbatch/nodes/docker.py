"""Docker for gbatch's jobs: command lines, parsers of docker's output, and the launch route.

The launch route, ContainerLauncher, is the one both node kinds take.

The builders and parsers are pure: they take values and return an argv (a list of
strings, never a shell string) or parsed values. Running them is the business of a
DockerHost: this machine (LocalHost) or a GPU host over SSH (nodes/ssh.SshConnection,
which quotes the argv once with `shlex.join`). Jobs run as detached containers named
`gbatch-<job>-<attempt>`; docker's refusal of a duplicate name is the last guard
against starting one attempt twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gbatch.core.gputypes import MIG_UUID_RE as MIG_UUID
from gbatch.core.model import Job, JobSpec
from gbatch.core.signals import SignalTarget
from gbatch.core.steps import step_label
from gbatch.jobspec.spec import SpecError
from gbatch.nodes.base import (
    CommandResult,
    HostError,
    LaunchError,
    job_env,
    launch_secrets,
    visible_devices,
)
from gbatch.nodes.joblog import mark_attempt_start
from gbatch.nodes.resolve import parse_resolved, resolver_argv
from gbatch.site import policy as site_policy
from gbatch.site.policy import ContainerPolicy, RunAs, check_mounts

if TYPE_CHECKING:
    from gbatch.site.config import Paths

LABEL_JOB = "gbatch.job"
LABEL_ATTEMPT = "gbatch.attempt"
LABEL_USER = "gbatch.user"
# The node (inventory name) the run was started for: a host's lease fence stops only its
# own node's runs, even on an engine that serves several (as in gbatch's tests).
LABEL_NODE = "gbatch.node"

_SIGNAL = re.compile(r"^(?:SIG)?[A-Z][A-Z0-9+-]*$|^[0-9]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# Slurm's srun inside a container job (a POSIX sh script: an image may have no python):
# it runs its command as this node's tasks, since the job's script already runs on every
# node (docs/multinode.md). Mounted read-only at each of SRUN_IN_CONTAINER, so the
# image's own PATH finds it and is kept (replacing PATH with a guess would lose conda's
# /opt/conda/bin and the like): /usr/local/bin comes before a distribution's srun in
# /usr/bin on docker's default PATH (and python's, conda's, NGC's); /usr/bin is on the
# PATH of images without /usr/local/bin (busybox's).
CONTAINER_SRUN = Path(__file__).resolve().parent / "containerbin" / "srun"
SRUN_IN_CONTAINER = ("/usr/local/bin/srun", "/usr/bin/srun")

# No mounts, the bridge network, policy.DEFAULT_CAPABILITIES.
SAFE_POLICY = ContainerPolicy()


def container_name(job_id: int, attempt: int, node_index: int = 0) -> str:
    """The one name attempt `attempt` of job `job_id` runs under on its node.

    A job across nodes runs one container per node (multinode.runs_everywhere): the
    first node's keeps the plain name, node `node_index` > 0 adds `-n<index>`, so the
    runs of one job never collide on an engine that serves several nodes."""
    if node_index:
        return f"gbatch-{job_id}-{attempt}-n{node_index}"
    return f"gbatch-{job_id}-{attempt}"


def node_index_of(name: str) -> int:
    """The node's place in its job's allocation that container `name` says.

    0 without a `-n<index>` suffix: the first node's run, or a job on one node."""
    match = _NODE_SUFFIX.search(name)
    return int(match.group(1)) if match else 0


_NODE_SUFFIX = re.compile(r"^gbatch-[0-9]+-[0-9]+-n([0-9]+)$")


def docker_run_argv(
    *,
    job_id: int,
    attempt: int,
    user: str,
    spec: JobSpec,
    gpus: Sequence[int | str],
    env_file: str | None,
    docker: str = "docker",
    node: str | None = None,
    policy: ContainerPolicy = SAFE_POLICY,
    run_as: RunAs | None = None,
    extra_options: Sequence[str] = (),
    node_index: int = 0,
    network: str | None = None,
    shm_size: str | None = None,
    create: bool = False,
    srun: str | None = None,
) -> list[str]:
    """`docker run -d` for one attempt of a job (labelled with `node` when given).

    Preconditions: `spec.image` is not None (bare-process jobs do not run in docker).
    `spec.mounts` are checked again against `policy.mount_roots` for `user` (the last
    guard after the submit check) and passed as read-only binds unless a writable root
    allows `:rw`. `run_as` gives `--user uid:gid` and `--group-add`; None leaves the
    image's user. Every container gets `--cap-drop ALL` and `--cap-add` for
    `policy.capabilities` only, and `--network policy.network` (or the job's `network`,
    if among `policy.networks`). `extra_options` (the
    node's admin-vetted docker_options) go right after `docker run`. A job across nodes:
    `node_index` names its run on this node (container_name), `network` (the node's
    multinode_network, the admin's) replaces the policy's, and `shm_size` (the node's
    multinode_shm_size) is its /dev/shm unless the job sets one. `create`: `docker
    create` with the same options (started later by docker_start_argv).
    `spec.cpus` gives `--cpus`, `spec.memory_mb` `--memory` (and as much `--memory-swap`:
    no swap); a job that asked for neither gets no limit. `srun`: the node's path of
    CONTAINER_SRUN's script, mounted read-only at each of SRUN_IN_CONTAINER (over the
    image's, not over a mount of the job's own there).
    `env_file` is a path on the node, written 0600 from `env_file_text`, so values never
    appear in argv or process listings. No `--gpus` at all when `gpus` is empty; a MIG
    slice is named by its UUID (base.visible_devices).
    Raises ValueError when the image is missing or looks like an option, a mount is
    outside the roots or would expose the docker socket, or the options would break an
    invariant: never `--privileged`, never `--userns=host`, never the docker socket.
    """
    if spec.image is None:
        raise ValueError(f"job {job_id} has no image; only container jobs run in docker")
    if not spec.image or spec.image.startswith("-"):
        raise ValueError(f"job {job_id}: {spec.image!r} is not an image name")
    try:
        mounts = check_mounts(spec.mounts, user, policy.mount_roots)
        if network is None:
            network = policy.network_for(spec)
        else:
            # The admin's choice for jobs across nodes: the invariants allow it too.
            policy = replace(policy, networks=(*policy.networks, network))
    except (SpecError, ValueError) as err:
        raise ValueError(f"job {job_id}: {err}") from None
    argv = [
        docker,
        "create" if create else "run",
        *extra_options,
        *([] if create else ["-d"]),
        "--name",
        container_name(job_id, attempt, node_index),
        "--label",
        f"{LABEL_JOB}={job_id}",
        "--label",
        f"{LABEL_ATTEMPT}={attempt}",
        "--label",
        f"{LABEL_USER}={user}",
        *(["--label", f"{LABEL_NODE}={node}"] if node is not None else []),
        # gbatch decides about retries; an engine restart must not revive a job behind
        # the scheduler's back.
        "--restart=no",
        # A PID 1 that reaps zombies and forwards SIGTERM, so stop and time limits work
        # for commands that ignore signals as PID 1.
        "--init",
        "--network",
        network,
        "--cap-drop",
        "ALL",
    ]
    for capability in policy.capabilities:
        argv += ["--cap-add", capability]
    if run_as is not None:
        argv += ["--user", f"{run_as.uid}:{run_as.gid}"]
        for group in run_as.groups:
            argv += ["--group-add", str(group)]
    if gpus:
        argv += ["--gpus", gpus_option_value(gpus)]
    if spec.shm_size is not None or shm_size is not None:
        argv += ["--shm-size", spec.shm_size or shm_size or ""]
    if spec.cpus is not None:
        argv += ["--cpus", str(spec.cpus)]
    memory = spec.memory_mb
    if memory is not None:
        # Swap as much as memory (none beyond it), as Slurm's cgroup limit does by default.
        argv += ["--memory", f"{memory}m", "--memory-swap", f"{memory}m"]
    for mount in mounts:
        source, target, mode = mount.split(":")
        # --mount, not -v: a missing source is an error, not a directory docker creates
        # as root on the node.
        readonly = ",readonly" if mode == "ro" else ""
        argv += ["--mount", f"type=bind,source={source},target={target}{readonly}"]
    if srun is not None:
        if not srun.startswith("/") or "," in srun:
            raise ValueError(f"job {job_id}: srun's path on the node must be absolute: {srun!r}")
        targets = {mount.split(":")[1] for mount in mounts}
        for target in SRUN_IN_CONTAINER:
            if target not in targets:
                argv += ["--mount", f"type=bind,source={srun},target={target},readonly"]
    if spec.workdir is not None:
        argv += ["-w", spec.workdir]
    if env_file is not None:
        argv += ["--env-file", env_file]
    argv += ["--security-opt", "no-new-privileges"]
    _check_invariants(argv, policy)
    return [*argv, spec.image, *spec.run_command]


def _check_invariants(options: Sequence[str], policy: ContainerPolicy) -> None:
    """The options before the image never grant what no gbatch job may have, whoever
    added them (this module, the node's docker_options or a later edit)."""
    for index, option in enumerate(options):
        name, _, value = option.partition("=")
        if not value and index + 1 < len(options):
            value = options[index + 1]
        if name == "--privileged":
            raise ValueError("docker run options may not contain --privileged")
        if name == "--userns" and value == "host":
            raise ValueError("docker run options may not contain --userns=host")
        if name in ("--network", "--net") and (
            value.startswith("container:")
            or (value == "host" and "host" not in (policy.network, *policy.networks))
        ):
            raise ValueError(f"docker run options may not set {name} {value}")
        if name == "--cap-add" and value.upper().removeprefix("CAP_") not in policy.capabilities:
            raise ValueError(f"docker run options may not add capability {value}")
        if "docker.sock" in option:
            raise ValueError("docker run options may not mention the docker socket")
    if "--cap-drop" not in options or options[options.index("--cap-drop") + 1] != "ALL":
        raise ValueError("docker run options must drop every capability first")


def gpus_option_value(gpus: Sequence[int | str]) -> str:
    """The value of `--gpus` for these devices, e.g. `"device=0,1"` quotes included.

    A device is a card's index or a MIG slice's UUID (`"device=MIG-4f1c..."`). docker
    reads the value as CSV: unquoted, `device=0,1` is two fields and the engine refuses
    it ("cannot set both Count and DeviceIDs"). The double quotes are part of the argv
    element, not shell quoting.
    """
    if not gpus:
        raise ValueError("no GPU indices given")
    for device in gpus:
        if isinstance(device, str):
            if not MIG_UUID.fullmatch(device):
                raise ValueError(f"{device!r} is not a MIG device's UUID")
        elif device < 0:
            raise ValueError(f"negative GPU index in {list(gpus)}")
    return '"device=' + ",".join(str(device) for device in gpus) + '"'


def docker_exec_argv(
    name: str,
    argv: Sequence[str],
    *,
    tty: bool,
    run_as: RunAs | None,
    env_file: str | None,
    workdir: str | None = None,
    docker: str = "docker",
    visible_gpus: Sequence[int] | None = None,
) -> list[str]:
    """`docker exec` of a step in the running container `name`, as the job runs there.

    As the job's user (`run_as`, None: the image's, where root_in_containers keeps it),
    stdin kept open, with a terminal of its own inside when `tty` (docker then follows
    its own terminal's size, the step shim's pseudo-terminal). The step's variables come
    in the 0600 `env_file`, never in argv. No --privileged: the step has the job's
    rights in the job's container, nothing more. `visible_gpus`: the container's own
    indices of the step's GPUs (srun -G inside the job), as CUDA_VISIBLE_DEVICES (which
    an env-file may not set: gbatch sets it, from the allocation).
    """
    if not argv:
        raise ValueError("a step needs a command")
    options = [docker, "exec", "-i"]
    if tty:
        options.append("-t")
    if run_as is not None:
        options += ["--user", f"{run_as.uid}:{run_as.gid}"]
    if workdir is not None:
        options += ["-w", workdir]
    if env_file is not None:
        options += ["--env-file", env_file]
    if visible_gpus is not None:
        options += ["-e", "CUDA_VISIBLE_DEVICES=" + ",".join(str(int(g)) for g in visible_gpus)]
    return [*options, name, *argv]


def docker_start_argv(name: str, *, docker: str = "docker") -> list[str]:
    """Start a created container (a no-op for one already running)."""
    return [docker, "start", name]


def docker_wait_argv(name: str, *, docker: str = "docker") -> list[str]:
    """Blocks until the container stops; prints its exit code (see parse_wait)."""
    return [docker, "wait", name]


def docker_kill_argv(name: str, signal: str, *, docker: str = "docker") -> list[str]:
    """Send `signal` ("TERM", "SIGKILL", "9") to the container's PID 1."""
    if not _SIGNAL.match(signal):
        raise ValueError(f"{signal!r} is not a signal name or number")
    return [docker, "kill", "--signal", signal, name]


# Run by `sh -c` inside a job's container (docker_signal_argv): $1 the signal's number,
# $2 1 to reach the batch shell's process group (--init's tini is PID 1 and the shell its
# child, leading a group), then the GBATCH_STEP prefixes of the steps to reach: each
# process whose environment holds one of them (a step's processes inherit it).
_SIGNAL_SCRIPT = r"""sig=$1; batch=$2; shift 2
if [ "$batch" = 1 ]; then
  for p in $(cat /proc/1/task/1/children 2>/dev/null); do kill -"$sig" -"$p" 2>/dev/null; done
fi
[ $# -gt 0 ] || exit 0
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  [ "$p" = "$$" ] && continue
  e=$(tr '\0' '\n' 2>/dev/null < "$d/environ") || continue
  for want in "$@"; do
    case "$want" in *.) pat="GBATCH_STEP=$want";; *) pat="GBATCH_STEP=$want
";; esac
    case "
$e
" in *"
$pat"*) kill -"$sig" "$p" 2>/dev/null; break;; esac
  done
done
exit 0"""
_STEP_PREFIX = re.compile(r"^[0-9]+\.(?:[0-9]+|interactive|batch)?$")


def docker_signal_argv(
    name: str,
    signum: int,
    *,
    batch: bool,
    steps: Sequence[str],
    run_as: RunAs | None,
    docker: str = "docker",
) -> list[str]:
    """`docker exec` of a shell that sends `signum` to some of a job's processes in `name`.

    `batch`: the batch shell's process group; `steps`: GBATCH_STEP values ("12.0": that
    step) or prefixes ending in a dot ("12.": every step of job 12). As the job's user
    (`run_as`), so it reaches nothing the job could not signal itself. Values go as the
    shell's arguments, never into its text."""
    if not isinstance(signum, int) or not 0 < signum < 128:
        raise ValueError(f"{signum!r} is not a signal number")
    for step in steps:
        if not _STEP_PREFIX.match(step):
            raise ValueError(f"{step!r} is not a step label")
    options = [docker, "exec"]
    if run_as is not None:
        options += ["--user", f"{run_as.uid}:{run_as.gid}"]
    return [
        *options,
        name,
        "sh",
        "-c",
        _SIGNAL_SCRIPT,
        "sh",
        str(signum),
        "1" if batch else "0",
        *steps,
    ]


def container_signal_argv(
    job: Job,
    name: str,
    signum: int,
    target: SignalTarget,
    run_as: RunAs | None,
    *,
    docker: str = "docker",
) -> list[str]:
    """The command that sends `signum` to the processes `target` names in `job`'s container.

    The batch shell alone (scancel -b): `docker kill` (PID 1, --init's tini, forwards it
    to the shell alone). Anything else: docker_signal_argv's shell, as the job's user."""
    if target.shell_only and target.steps == ():
        return docker_kill_argv(name, str(signum), docker=docker)
    if target.steps is None:
        steps = [f"{job.id}."]
    else:
        steps = [f"{job.id}.{step_label(step)}" for step in target.steps]
    return docker_signal_argv(
        name, signum, batch=target.batch, steps=steps, run_as=run_as, docker=docker
    )


def docker_rm_argv(name: str, *, docker: str = "docker") -> list[str]:
    """Remove the container, killing it first if it still runs."""
    return [docker, "rm", "-f", name]


def docker_logs_argv(name: str, follow: bool, *, docker: str = "docker") -> list[str]:
    """The container's stdout and stderr (on the command's stdout and stderr)."""
    return [docker, "logs", *(["--follow"] if follow else []), name]


def engine_check_argv(*, docker: str = "docker") -> list[str]:
    """Prints the engine's version; fails when the engine does not answer."""
    return [docker, "version", "--format", "{{.Server.Version}}"]


def parse_wait(output: str) -> int:
    """The exit code `docker wait` printed."""
    try:
        return int(output.strip())
    except ValueError:
        raise ValueError(f"docker wait printed {output.strip()!r}, not an exit code") from None


# One JSON object per container per line; docker renders it, so a value can never
# break the framing.
_INSPECT_FORMAT = (
    '{"name":{{json .Name}},"state":{{json .State.Status}},'
    '"exit_code":{{json .State.ExitCode}},"oom_killed":{{json .State.OOMKilled}},'
    '"started_at":{{json .State.StartedAt}},"finished_at":{{json .State.FinishedAt}},'
    '"error":{{json .State.Error}},"labels":{{json .Config.Labels}}}'
)


@dataclass(frozen=True)
class ContainerStatus:
    """A container as `docker inspect` describes it.

    `state` is docker's: created, running, paused, restarting, removing, exited, dead.
    `exit_code` is meaningful once exited (0 before). Times are epoch seconds, None
    when docker has not recorded them. docker stamps the two ends from different
    clocks: for a very short run `finished_at` may precede `started_at` slightly.
    """

    name: str
    state: str
    exit_code: int
    oom_killed: bool
    started_at: float | None
    finished_at: float | None
    labels: Mapping[str, str] = field(default_factory=dict)
    error: str = ""  # the engine's reason when the container could not start


def docker_inspect_argv(names: Sequence[str], *, docker: str = "docker") -> list[str]:
    """Inspect containers; the output is for parse_inspect.

    docker exits 1 when any name does not exist but still prints the others: treat a
    name missing from the parsed result as a container that no longer exists.
    """
    if not names:
        raise ValueError("no container names given")
    return [docker, "inspect", "--type", "container", "--format", _INSPECT_FORMAT, *names]


def parse_inspect(output: str) -> list[ContainerStatus]:
    """Parse the stdout of docker_inspect_argv's command (blank lines ignored)."""
    statuses = []
    for line in output.splitlines():
        if not line.strip():
            continue
        raw = json.loads(line)
        statuses.append(
            ContainerStatus(
                name=str(raw["name"]).removeprefix("/"),
                state=str(raw["state"]),
                exit_code=int(raw["exit_code"]),
                oom_killed=bool(raw["oom_killed"]),
                started_at=parse_docker_time(raw.get("started_at") or ""),
                finished_at=parse_docker_time(raw.get("finished_at") or ""),
                labels={str(k): str(v) for k, v in (raw.get("labels") or {}).items()},
                error=str(raw.get("error") or ""),
            )
        )
    return statuses


_DOCKER_TIME = re.compile(
    r"^(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?(?P<tz>Z|[+-]\d\d:\d\d)$"
)


def parse_docker_time(text: str) -> float | None:
    """Epoch seconds from docker's RFC 3339 time with nanoseconds.

    None for docker's "never" (the year 1) or an empty string. Raises ValueError for
    anything else.
    """
    if not text or text.startswith("0001-01-01"):
        return None
    match = _DOCKER_TIME.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a docker timestamp")
    tz = "+00:00" if match["tz"] == "Z" else match["tz"]
    seconds = datetime.fromisoformat(match["base"] + tz).timestamp()
    return seconds + float("0." + (match["frac"] or "0"))


# Set by the engine from the allocation; a job that set them could escape its GPUs.
_RESERVED_ENV = re.compile(r"^NVIDIA_|_VISIBLE_DEVICES$")


def env_file_text(env: Mapping[str, str]) -> str:
    """The contents of a docker `--env-file` holding exactly `env`.

    docker reads an env-file line by line and takes each value literally (no quoting or
    escapes), so a value with a newline or carriage return cannot be carried: ValueError.
    Also refused: names that are not shell identifiers (docker would misread `#...`,
    blank or `=`-containing ones) or that are reserved for GPU assignment (`NVIDIA_*`,
    `*_VISIBLE_DEVICES`), and NUL in values. Write the file 0600: values are secrets.
    """
    lines = []
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not valid")
        if _RESERVED_ENV.search(name):
            raise ValueError(f"environment variable {name} is set by gbatch from the allocation")
        if "\n" in value or "\r" in value:
            raise ValueError(
                f"environment variable {name}: docker env-files cannot carry a value with "
                "a line break; pass it in a mounted file instead"
            )
        if "\0" in value:
            raise ValueError(f"environment variable {name}: value contains a NUL byte")
        lines.append(f"{name}={value}\n")
    return "".join(lines)


def error_line(stderr: str, fallback: str) -> str:
    """The line of docker's stderr that says what went wrong; `fallback` when none does.

    Not simply the last one: the CLI ends most errors with a hint ("Run 'docker run
    --help' for more information", older clients "See 'docker run --help'.").
    """
    lines = [
        line.strip()
        for line in stderr.splitlines()
        if line.strip() and not _HELP_HINT.match(line.strip())
    ]
    return lines[-1] if lines else fallback


_HELP_HINT = re.compile(r"^(?:Run|See) 'docker [^']*--help'")

# `docker run` says the first before it pulls, the second once a pull got the image,
# the third when told not to pull (`--pull never`) and the image is not there.
_NOT_LOCAL = re.compile(r"Unable to find image '([^']+)' locally")
_PULLED = "Status: Downloaded newer image"
_NO_SUCH_IMAGE = re.compile(r"No such image: (\S+?)\.?$", re.MULTILINE)


def missing_image(stderr: str) -> str | None:
    """The image a failed `docker run` could not find and could not pull, from its stderr.

    None when the run failed for another reason (a pull that worked and a container the
    engine then refused is not a missing image).
    """
    if (match := _NOT_LOCAL.search(stderr)) is not None and _PULLED not in stderr:
        return match[1]
    if (match := _NO_SUCH_IMAGE.search(stderr)) is not None:
        return match[1]
    return None


# -- the launch route -----------------------------------------------------------------


class DockerHost(Protocol):
    """The machine a node's docker CLI runs on, as a launch needs it.

    Both calls raise HostError when they fail or their answer is lost.
    """

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult: ...

    def put_bytes(self, data: bytes, remote_path: str, mode: int, *, timeout: float = 60.0) -> None:
        """Write `data` to the path with `mode`; readers never see a part of it."""


class LocalHost:
    """This machine as a DockerHost: commands as child processes, files written here."""

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        try:
            done = subprocess.run(list(argv), capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise HostError(f"{argv[0]} did not answer within {timeout:g} s") from err
        except OSError as err:
            raise HostError(f"cannot run {argv[0]}: {err}", answer_lost=False) from err
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def put_bytes(self, data: bytes, remote_path: str, mode: int, *, timeout: float = 60.0) -> None:
        temporary = f"{remote_path}.{os.getpid()}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, remote_path)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise HostError(f"cannot write {remote_path}: {err}", answer_lost=False) from err


# Below this much free space on a host, a failed env-file write is put down to a full disk
# (SFTP says only "Failure").
_FULL_DISK_BYTES = 1 << 20


@dataclass(frozen=True)
class ContainerLauncher:
    """Starts a node's container jobs: the launch route of every node kind.

    `where` names the node in messages ("" on the embedded local node, " on gpu01");
    `label_node` labels each container with `node` (a host's lease fence stops only its
    own node's runs); `extra_options` are the node's admin-vetted docker_options."""

    host: DockerHost
    node: str
    docker: str
    policy: ContainerPolicy
    paths: Paths  # the head's: where the attempt's output starts in the job's log
    where: str = ""
    label_node: bool = False
    extra_options: tuple[str, ...] = ()
    # The host runs CUDA MPS: a shared job's budget is set as its MPS memory limit.
    mps: bool = False
    timeout: float = 30.0  # seconds for any one command on the host
    python: str = sys.executable  # the node's Python, to resolve mount paths there
    # A job across nodes: the network its containers join here (`host`: NCCL and the
    # rendezvous reach the host's fabric) and their /dev/shm, as the admin set them
    # (inventory multinode_network, multinode_shm_size); None: as any job's.
    multinode_network: str | None = None
    multinode_shm_size: str | None = None

    def launch(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        env_file: str,
        *,
        disk_free_bytes: int | None = None,
        env: Mapping[str, str] | None = None,
        node_index: int = 0,
        hold: bool = False,
        srun: str | None = None,
    ) -> None:
        """Start attempt `attempt` of `job` on `gpus` as a detached container.

        It returns once `docker run -d` has created it. Raises LaunchError (maybe_started
        when docker's answer was lost, node_busy when the host could not take a command
        now).

        Precondition: CONFIGURING for this attempt is committed, and `env_file`'s
        directory on the host is the node's own. In order: the policy's last check (a
        refusal leaves nothing behind), the attempt's start in the job's log, the 0600
        env-file, `docker run -d`. An env-file holding secrets is removed as soon as
        docker has returned (it has read the file by then); any other goes with the
        node's cleanup. `disk_free_bytes` (the host's last report) explains a failed
        env-file write. A job across nodes: `env` (its layout's variables for this node,
        multinode.run_env) goes over the job's, and `node_index` names this node's run;
        only the first node's marks the attempt's start in the job's log. `hold`: only
        create it (`docker create`: its image pulled, its name taken), for start_held.
        `srun`: where the node holds CONTAINER_SRUN's script (docker_run_argv).
        """
        env = {
            **job_env(job, attempt, gpus, self.node, mps=self.mps),
            **(env or {}),
            **launch_secrets(job),
        }
        across = job.spec.nodes > 1
        try:
            argv = docker_run_argv(
                job_id=job.id,
                attempt=attempt,
                user=job.user,
                spec=self._spec_at_start(job),
                gpus=visible_devices(gpus, job.gpu_uuids),
                env_file=env_file,
                docker=self.docker,
                node=self.node if self.label_node else None,
                policy=self.policy,
                run_as=self.run_as(job),
                extra_options=self.extra_options,
                node_index=node_index,
                network=self.multinode_network if across else None,
                shm_size=self.multinode_shm_size if across else None,
                create=hold,
                srun=srun,
            )
            env_text = env_file_text(env)
        except (ValueError, SpecError) as err:
            raise LaunchError(f"refused by the container policy{self.where}: {err}") from err
        if not node_index:
            mark_attempt_start(self.paths, job.id, attempt)
        try:
            self.host.put_bytes(env_text.encode(), env_file, 0o600)
        except HostError as err:
            full = (
                f"; the disk of {os.path.dirname(env_file)} is full: No space left on device "
                f"({disk_free_bytes} bytes free)"
                if disk_free_bytes is not None and disk_free_bytes < _FULL_DISK_BYTES
                else ""
            )
            raise LaunchError(
                f"cannot write its env-file{self.where}: {err}{full}", node_busy=err.busy
            ) from err
        try:
            result = self.host.run(argv, timeout=self.timeout)
        except HostError as err:
            raise LaunchError(
                f"docker run{self.where} failed: {err}",
                maybe_started=err.answer_lost,
                node_busy=err.busy,
            ) from err
        finally:
            if job.spec.secret_env:
                # Secrets leave the disk now; cleanup removes the file again should this fail.
                with contextlib.suppress(HostError):
                    self.host.run(["rm", "-f", "--", env_file], timeout=self.timeout)
        if result.exit_status != 0:
            stderr = result.stderr.decode(errors="replace")
            error = error_line(stderr, f"exit status {result.exit_status}")
            image = missing_image(stderr)
            if image is not None:
                # Docker's last line names the registry, not the image: say which.
                raise LaunchError(
                    f"image {image} not found{self.where} and it cannot be pulled ({error})"
                )
            raise LaunchError(f"docker run{self.where} failed: {error}")

    def start_held(self, job_id: int, attempt: int, node_index: int = 0) -> None:
        """Start the container launch(hold=True) created; nothing for one that runs.

        Raises LaunchError as launch does."""
        name = container_name(job_id, attempt, node_index)
        try:
            argv = docker_start_argv(name, docker=self.docker)
            result = self.host.run(argv, timeout=self.timeout)
        except HostError as err:
            raise LaunchError(
                f"docker start{self.where} failed: {err}",
                maybe_started=err.answer_lost,
                node_busy=err.busy,
            ) from err
        if result.exit_status != 0:
            stderr = result.stderr.decode(errors="replace")
            error = error_line(stderr, f"exit status {result.exit_status}")
            raise LaunchError(f"docker start{self.where} failed: {error}")

    def run_as(self, job: Job) -> RunAs | None:
        """Whom the job's container runs as: its submitter, or None (the image's user).

        None where root_in_containers lets this container keep its image's user.
        ValueError when the submitter's uid is unknown here."""
        if self.policy.keeps_image_user(job.spec, self.node):
            return None
        return site_policy.submitter_identity(job.uid)

    def _spec_at_start(self, job: Job) -> JobSpec:
        """The job's spec with its mounts checked again, following symlinks as they are
        now on the host, with the submitter's rights (gbatch.nodes.resolve, one
        command): a path may have become one since submit."""
        if not job.spec.mounts:
            return job.spec
        paths = site_policy.paths_to_resolve(job.spec, job.user, self.policy)
        try:
            run_as = site_policy.submitter_identity(job.uid)
        except ValueError as err:
            raise LaunchError(f"cannot resolve the job's mount paths{self.where}: {err}") from err
        try:
            result = self.host.run(resolver_argv(self.python, run_as, paths), timeout=self.timeout)
            resolved = parse_resolved(result, paths)
        except HostError as err:
            raise LaunchError(
                f"cannot resolve the job's mount paths{self.where}: {err}", node_busy=err.busy
            ) from err
        return site_policy.mounts_at_start(job.spec, job.user, self.policy, resolved)
