"""A GPU host reached over SSH: its agent's report stream and its docker engine.

One persistent SSH connection per host (gbatch/nodes/ssh.py) carries everything: a
long-lived channel running the agent's `watch` (one JSON report per interval, and
at once when poked), `docker run -d` for each job, `docker logs -f` copied into the
head's log, and the signals and clean-ups. Jobs on a host always run in containers.
A lost connection is retried with backoff; while it is down the node reports nothing
and the planner sees it as down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

from gbatch.core.model import Gpu, Job
from gbatch.core.multinode import node_index, runs_everywhere
from gbatch.core.signals import SignalTarget
from gbatch.core.steps import Step
from gbatch.nodes import docker, ports
from gbatch.nodes.backoff import Backoff
from gbatch.nodes.base import (
    HostError,
    LaunchError,
    PortError,
    PortStream,
    Reports,
    RunStatus,
    StepLaunch,
    StepStatus,
    container_step_gpus,
    finished_container_status,
    job_env,
    step_env,
)
from gbatch.nodes.inventory import NodeConfig
from gbatch.nodes.joblog import TASKS_OFFSET_FILE, LogFollowers, NodeJoins
from gbatch.nodes.outfiles import OFFSETS_FILE, open_or_say
from gbatch.nodes.report import (
    NodeReport,
    ReportError,
    RunOwner,
    container_owners,
    gbatch_container_ids,
    parse_report_line,
    to_gpus,
)
from gbatch.nodes.ssh import (
    RemoteError,
    RemoteStream,
    SshConnection,
    SshTarget,
    StreamPool,
    TunnelRefused,
)
from gbatch.nodes.steprelay import StepRelay
from gbatch.site.config import Config, Paths

log = logging.getLogger("gbatchd")
COMMAND_TIMEOUT = 30.0  # seconds for any one remote docker call
AGENT_FILE = "gbatch_agent.py"
RELAY_STOP_SECONDS = 5.0  # the most a stop waits for step relays to tell their clients


def host_path(path: str) -> str:
    """A path as remote commands and SFTP take it: `~/x` becomes `x` and `~` becomes `.`.

    Both start in the login's home (and a quoted `~` would not expand). Every host path
    in an argv or SFTP call goes through here.
    """
    if path == "~" or path.startswith("~/"):
        return path[1:].lstrip("/") or "."
    return path


def agent_path(config: NodeConfig) -> str:
    return f"{host_path(config.agent_dir).rstrip('/')}/{AGENT_FILE}"


def agent_probe_argv(config: NodeConfig) -> list[str]:
    argv = [config.agent_python, agent_path(config), "probe", "--docker", config.docker]
    if config.simulation_file:
        argv += ["--simulation-file", config.simulation_file]
    return argv


def install_agent(config: NodeConfig, agent_file: Path) -> str:
    """Copy the agent to the host over SFTP, check that it runs there, and return a summary.

    The summary is one line. Raises RemoteError (HostKeyError for an untrusted host),
    also when the agent does not run.
    """
    with SshConnection(target_of(config)) as conn:
        conn.connect()
        conn.put_file(agent_file, agent_path(config), 0o755)
        result = conn.run(agent_probe_argv(config), timeout=COMMAND_TIMEOUT)
    if result.exit_status != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines() or ["no output"]
        raise RemoteError(
            f"the agent did not run on {config.name}: {detail[-1]}. "
            f"Check agent_python ({config.agent_python}) in the inventory"
        )
    try:
        report = parse_report_line(result.stdout)
    except ReportError as err:
        raise RemoteError(f"the agent on {config.name} printed a bad report: {err}") from err
    gpus = f"{len(report.gpus)} GPUs ({report.source})"
    note = f"; {report.note}" if report.note else ""
    docker = f"; docker: {report.docker_note}" if report.docker_note else ""
    return f"{config.name}: agent at {config.agent_dir}/{AGENT_FILE}, {gpus}{note}{docker}"


def target_of(config: NodeConfig) -> SshTarget:
    return SshTarget(
        name=config.name,
        host=config.host,
        port=config.port,
        user=config.user,
        identity_file=config.identity_file,
        known_hosts=config.known_hosts,
        connect_timeout=config.connect_timeout,
    )


def agent_watch_argv(config: NodeConfig, interval: float, lease: float) -> list[str]:
    argv = [
        config.agent_python,
        agent_path(config),
        "watch",
        "--interval",
        str(interval),
        "--docker",
        config.docker,
        "--log-dir",
        host_path(config.agent_dir),
        "--lease",
        str(lease),
        "--node",
        config.name,
    ]
    if config.simulation_file:
        argv += ["--simulation-file", config.simulation_file]
    return argv


def _until_end(stream: RemoteStream) -> Iterator[bytes]:
    """Every line of a stream until it ends, however long it stays quiet."""
    while True:
        line = stream.readline(timeout=60.0)
        if line is None:
            continue
        if not line:
            return
        yield line


class RemoteNode:
    runs_bare_processes = False
    fences_runs = True
    # A step is `docker exec` into the job's container over an SSH channel, relayed by
    # gbatchd (gbatch/nodes/steprelay.py; docs/architecture.md, "Steps").
    runs_steps = True

    def __init__(
        self,
        node: NodeConfig,
        paths: Paths,
        config: Config,
        on_change: Callable[[], None],
        joins: NodeJoins | None = None,
    ) -> None:
        self.name = node.name
        self.address = f"{node.user}@{node.host}:{node.port}"
        self.peer_address = node.reached_by_peers_at
        self.node = node
        self.paths = paths
        self.config = config
        self._on_change = on_change
        self._lock = threading.Lock()
        self._conn = SshConnection(target_of(node))
        self._launcher = docker.ContainerLauncher(
            host=self._conn,
            node=node.name,
            docker=node.docker,
            policy=config.container_policy,
            paths=paths,
            where=f" on {node.name}",
            label_node=True,
            extra_options=node.docker_options,
            mps=node.mps,
            timeout=COMMAND_TIMEOUT,
            python=node.agent_python,
            multinode_network=node.multinode_network,
            multinode_shm_size=node.multinode_shm_size,
        )
        # Each run's `docker logs -f` and `docker wait`: on connections of their own, as
        # sshd allows only so many channels on one (see gbatch/nodes/ssh.py).
        self._streams = StreamPool(target_of(node))
        self._agent: RemoteStream | None = None
        self._reports = Reports(on_change)
        self._stopping = threading.Event()
        self._retry_now = threading.Event()
        self._log_followers = LogFollowers(paths, on_change, config.max_log_bytes, joins)
        # (job, attempt) -> (exit code, when `docker wait` returned it)
        self._exits: dict[tuple[int, int], tuple[int, float]] = {}
        self._waiters: dict[tuple[int, int], threading.Thread] = {}
        # Connections made so far, and the one each run's log follower started on: a
        # follower cut off with its connection is started again to replay the output.
        self._generation = 0
        self._followed_on: dict[tuple[int, int], int] = {}
        # The steps this gbatchd relays, by (job, step id): None while relayed, then how
        # each ended, until the loop has read it (step_status).
        # A step's tasks (srun across nodes) are keyed apart: (job, step id, rank).
        self._steps: dict[tuple[int, int, int | None], StepStatus | None] = {}
        self._relays: dict[tuple[int, int, int | None], threading.Thread] = {}
        # The same steps' relays, by (job, step, rank): who tells their clients (tell_step).
        self._tellers: dict[tuple[int, int, int | None], StepRelay] = {}
        # (connection generation, absolute path) of srun for container jobs on the host.
        self._srun: tuple[int, str] | None = None

    # -- the connection and the agent ------------------------------------------------

    def start(self) -> None:
        threading.Thread(target=self._keep_reporting, name=f"node-{self.name}", daemon=True).start()

    def _keep_reporting(self) -> None:
        backoff = Backoff()
        while not self._stopping.is_set():
            try:
                if not self._conn.connected:
                    self._conn.connect()
                stream = self._conn.stream(
                    agent_watch_argv(
                        self.node, self.config.report_interval, self.config.node_lease_seconds
                    )
                )
                with self._lock:
                    self._agent = stream
                    self._generation += 1
                backoff.reset()
                self._read_reports(stream)
                problem = f"the agent stopped (exit status {stream.exit_status})"
            except (RemoteError, OSError) as err:
                if self._stopping.is_set():
                    return  # stop() closed the stream under us
                problem = str(err)
            with self._lock:
                self._agent = None
            self._reports.lost(problem)
            if not self._stopping.is_set():
                log.warning("node %s: %s; retrying", self.name, problem)
                self._conn.close()
                self._streams.close()  # their streams end: followers restart on reconnect
                self._retry_now.wait(backoff.next_delay())
                self._retry_now.clear()

    def retry_now(self) -> None:
        """Reconnect at once instead of after the backoff (the agent was just installed)."""
        self._retry_now.set()

    def _read_reports(self, stream: RemoteStream) -> None:
        # A silent agent is as good as a lost one: give it a few intervals.
        idle = max(10.0, 5 * self.config.report_interval)

        def renew_lease(report: NodeReport) -> None:
            # Answered before the report counts as heard (Reports.read): the host's
            # lease then never runs past what the head reckons from its last report.
            if report.seq is not None:
                with contextlib.suppress(RemoteError, OSError):
                    stream.write(b"renew %d\n" % report.seq)

        self._reports.read(stream.lines(idle_timeout=idle), on_report=renew_lease)

    @property
    def report_seq(self) -> int:
        return self._reports.seq

    def last_heard(self) -> float | None:
        return self._reports.heard_at

    def report(self) -> tuple[NodeReport | None, str]:
        return self._reports.latest()

    def round_trip(self) -> tuple[float, float] | None:
        return self._conn.round_trip

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return to_gpus(
            report,
            gbatch_sessions=(),
            gbatch_containers=gbatch_container_ids(report),
            type_rules=self.config.gpu_types,
        )

    def run_owners(self, report: NodeReport) -> dict[tuple[int, int], RunOwner]:
        return container_owners(report, self.name)  # a host runs containers only

    def poke(self) -> None:
        self._reports.want()  # the loop waits on it, even if it repeats the last
        with self._lock:
            agent = self._agent
        if agent is not None:
            with contextlib.suppress(RemoteError, OSError):
                agent.write(b"\n")

    def stop(self) -> None:
        self._stopping.set()
        self._retry_now.set()
        with self._lock:
            agent = self._agent
        if agent is not None:
            with contextlib.suppress(RemoteError, OSError):
                agent.close()
        self._conn.close()
        self._streams.close()
        # Their channels are closed: each relay tells its client why before gbatchd exits.
        with self._lock:
            relays = list(self._relays.values())
        deadline = time.monotonic() + RELAY_STOP_SECONDS
        for relay in relays:
            relay.join(max(0.0, deadline - time.monotonic()))

    def docker_problem(self, now: float) -> str | None:
        report, problem = self.report()
        if report is None:
            return problem
        # A note beside listed containers names ones it could not read: docker answers.
        return (report.docker_note or None) if not report.containers else None

    # -- runs ---------------------------------------------------------------------------

    def _run(self, argv: Sequence[str]) -> tuple[int, str]:
        result = self._conn.run(argv, timeout=COMMAND_TIMEOUT)
        return result.exit_status, result.stderr.decode(errors="replace")

    def _env_file(self, job_id: int, attempt: int, index: int = 0) -> str:
        part = f".n{index}" if index else ""
        return f"{host_path(self.node.agent_dir).rstrip('/')}/run/{job_id}.{attempt}{part}.env"

    def _index(self, job: Job) -> int:
        """This node's place in the job's allocation: its run's container name says it."""
        return node_index(job, self.name)

    def launch(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        env: Mapping[str, str] | None = None,
        *,
        hold: bool = False,
    ) -> None:
        report, _ = self.report()
        index = self._index(job)
        self._launcher.launch(
            job,
            attempt,
            gpus,
            self._env_file(job.id, attempt, index),
            disk_free_bytes=report.disk_free_bytes if report is not None else None,
            env=env,
            node_index=index,
            hold=hold,
            # Jobs across nodes only: their scripts run on every node, and `srun` there is
            # how a Slurm script starts its tasks (docs/multinode.md). A one-node job on a
            # host is left as it was: no file of the host's mounted into its container.
            srun=self._container_srun() if job.spec.nodes > 1 else None,
        )
        if not hold:
            self._follow(job, attempt)

    def _container_srun(self) -> str:
        """The absolute path of srun for container jobs (docker.CONTAINER_SRUN) here.

        Written into agent_dir/bin at the first launch on each connection (so a host
        installed before it, or wiped since, has it), atomically: a running job's srun
        never reads half a file. A bind mount wants an absolute path; agent_dir may be
        under `~`. Raises LaunchError when it cannot be written."""
        with self._lock:
            generation, known = self._generation, self._srun
        if known is not None and known[0] == generation:
            return known[1]
        path = f"{host_path(self.node.agent_dir).rstrip('/')}/bin/srun"
        try:
            self._conn.put_bytes(
                docker.CONTAINER_SRUN.read_bytes(), path, 0o755, timeout=COMMAND_TIMEOUT
            )
            if not path.startswith("/"):
                found = self._conn.run(["realpath", "--", path], timeout=COMMAND_TIMEOUT)
                absolute = found.stdout.decode(errors="replace").strip()
                if found.exit_status != 0 or not absolute.startswith("/"):
                    raise RemoteError(f"realpath {path}: {found.stderr.decode().strip()}")
                path = absolute
        except HostError as err:
            raise LaunchError(
                f"cannot write srun for container jobs on {self.name}: {err}", node_busy=err.busy
            ) from err
        with self._lock:
            self._srun = (generation, path)
        return path

    def start_held(self, job: Job, attempt: int) -> None:
        self._launcher.start_held(job.id, attempt, self._index(job))
        self._follow(job, attempt)

    def _follow(self, job: Job, attempt: int) -> None:
        """Copy the run's output to the head and learn its exit the moment it happens
        (`docker wait` on the open connection), not at the next report."""
        job_id = job.id
        self._follow_log(job, attempt)
        key = (job_id, attempt)
        with self._lock:
            waiter = self._waiters.get(key)
            if waiter is not None and waiter.is_alive():
                return
            waiter = threading.Thread(
                target=self._wait_exit,
                args=(job_id, attempt, self._index(job)),
                name=f"wait-{job_id}.{attempt}",
                daemon=True,
            )
            self._waiters[key] = waiter
        waiter.start()

    def _follow_log(self, job: Job, attempt: int) -> None:
        job_id = job.id
        key = (job_id, attempt)
        with self._lock:
            stale = self._followed_on.get(key) != self._generation
            self._followed_on[key] = self._generation
        if stale:
            # A follower from an earlier connection ended with it: forget it, so a new
            # one replays the whole output (LogFollowers truncates to the attempt's start).
            self._log_followers.forget(job_id, attempt)
        index = self._index(job)
        # A job run on every node: each node's output is its part, joined line by line
        # into the job's one log and -o file (joblog.NodeJoin); the first node's run
        # opens the -o file.
        part = (index, len(job.node_names)) if runs_everywhere(job.spec) else None
        opener = None
        if not index:
            run_dir = self.paths.run_dir(job_id, attempt)
            opener = partial(open_or_say, job, attempt, self.name, run_dir)
        self._log_followers.follow(
            job_id, attempt, partial(self._docker_logs, job_id, attempt, index), opener, part=part
        )

    def _complete_log(self, job: Job, attempt: int) -> bool:
        """Before a run is final, make its log whole: output copied on a connection that
        has since broken, or by an earlier daemon, is replayed from the container.

        False while the copy still runs (LogFollowers.settled): the run is reported
        running till the next pass."""
        job_id = job.id
        with self._lock:
            current = self._followed_on.get((job_id, attempt)) == self._generation
        if not current:
            self._follow_log(job, attempt)
        self._log_followers.wait(job_id, attempt)
        return self._log_followers.settled(job_id, attempt)

    def _wait_exit(self, job_id: int, attempt: int, index: int = 0) -> None:
        name = docker.container_name(job_id, attempt, index)
        try:
            with self._streams.stream(
                docker.docker_wait_argv(name, docker=self.node.docker)
            ) as stream:
                line = b""
                while not line:
                    line = stream.readline(timeout=3600.0) or b""
                    if stream.exit_status is not None and not line:
                        break
        except (RemoteError, OSError):
            return  # the report stream or a later status() call will tell
        try:
            code = docker.parse_wait(line.decode(errors="replace"))
        except ValueError:
            return
        with self._lock:
            self._exits[(job_id, attempt)] = (code, time.time())
        self._on_change()

    @contextlib.contextmanager
    def _docker_logs(self, job_id: int, attempt: int, index: int = 0) -> Iterator[Iterator[bytes]]:
        name = docker.container_name(job_id, attempt, index)
        with self._streams.stream(
            docker.docker_logs_argv(name, follow=True, docker=self.node.docker),
            combine_stderr=True,
        ) as stream:
            yield _until_end(stream)

    def status(self, job: Job, attempt: int) -> RunStatus:
        name = docker.container_name(job.id, attempt, self._index(job))
        report, _ = self.report()
        if report is None:
            return RunStatus("unknown")  # cannot tell while the node is silent
        with self._lock:
            waited = self._exits.pop((job.id, attempt), None)
        # 137 is SIGKILL, also the OOM killer's: inspect to tell them apart.
        if waited is not None and waited[0] != 137:
            if not self._complete_log(job, attempt):
                return RunStatus("running")  # its output is still on the way: next pass
            return RunStatus("exited", waited[0], 0, waited[1])
        container = {c.name: c for c in report.containers}.get(name)
        ended = None
        if container is not None:
            ended = finished_container_status(
                container.state, container.exit_code, container.finished_at, container.oom_killed
            )
        if ended is not None:
            if not self._complete_log(job, attempt):
                return RunStatus("running")
            return ended
        if container is None or waited or self._log_followers.ended(job.id, attempt):
            # Not listed yet (just started), or its output just ended: ask docker now
            # rather than wait for the next report.
            return self._inspect(job, attempt)
        self._follow(job, attempt)  # after a daemon restart: re-attach
        return RunStatus("running")

    def _inspect(self, job: Job, attempt: int) -> RunStatus:
        name = docker.container_name(job.id, attempt, self._index(job))
        try:
            result = self._conn.run(
                docker.docker_inspect_argv([name], docker=self.node.docker),
                timeout=COMMAND_TIMEOUT,
            )
        except RemoteError:
            return RunStatus("unknown")
        found = docker.parse_inspect(result.stdout.decode(errors="replace"))
        if not found:
            gone = b"No such" in result.stderr
            return RunStatus("vanished") if gone else RunStatus("unknown")
        status = found[0]
        ended = finished_container_status(
            status.state, status.exit_code, status.finished_at, status.oom_killed
        )
        if ended is not None:
            if not self._complete_log(job, attempt):
                return RunStatus("running")
            return ended
        self._follow(job, attempt)
        return RunStatus("running")

    def tell_step(self, job: Job, step: Step, lines: Sequence[str]) -> None:
        """Show `lines` on the step's client: its relay (in gbatchd) sends them.

        A step of several tasks is told through its task 0 (on the job's first node)."""
        if step.fans_out and step.rank is None:
            step = step.task(0)
        with self._lock:
            relay = self._tellers.get((job.id, step.step_id, step.rank))
        if relay is not None:
            relay.tell(lines)

    def signal(
        self, job: Job, attempt: int, sig: signal.Signals, target: SignalTarget | None = None
    ) -> None:
        """`docker kill` for a stop (None); else what docker.container_signal_argv says."""
        name = docker.container_name(job.id, attempt, self._index(job))
        with contextlib.suppress(RemoteError, ValueError):
            if target is None:
                self._run(docker.docker_kill_argv(name, sig.name, docker=self.node.docker))
            else:
                run_as = self._launcher.run_as(job)
                self._run(
                    docker.container_signal_argv(
                        job, name, int(sig), target, run_as, docker=self.node.docker
                    )
                )

    def cleanup(self, job: Job, attempt: int) -> None:
        """Remove the run's container and env-file in the background, and forget the run.

        In the background because the loop has the next job to start, and `docker rm`
        on the host is a wait it need not make.
        """
        threading.Thread(
            target=self._remove,
            args=(job.id, attempt, self._index(job)),
            name=f"cleanup-{job.id}",
            daemon=True,
        ).start()
        with self._lock:
            self._waiters.pop((job.id, attempt), None)
            self._exits.pop((job.id, attempt), None)
            self._followed_on.pop((job.id, attempt), None)
            for key in [k for k, v in self._steps.items() if k[0] == job.id and v is not None]:
                del self._steps[key]
        run_dir = self.paths.run_dir(job.id, attempt)
        with contextlib.suppress(FileNotFoundError):
            (run_dir / "log_offset").unlink()
        with contextlib.suppress(FileNotFoundError):
            (run_dir / OFFSETS_FILE).unlink()
        with contextlib.suppress(FileNotFoundError):
            (run_dir / TASKS_OFFSET_FILE).unlink()
        with contextlib.suppress(OSError):
            run_dir.rmdir()

    # -- steps ----------------------------------------------------------------------

    def _steps_dir(self, job_id: int, attempt: int) -> str:
        return f"{host_path(self.node.agent_dir).rstrip('/')}/run/{job_id}.{attempt}.steps"

    def start_step(self, job: Job, step: Step, launch: StepLaunch, client_fd: int) -> None:
        """Start `step` as `docker exec` into the job's container, relayed to `client_fd`.

        Its variables go in a 0600 env-file on the host (removed when it ends); the
        command runs on a channel of the node's stream connections, with a terminal of
        sshd's (`get_pty`) when the client asked for one, and a thread of its own relays
        it (StepRelay) from then on."""
        name = docker.container_name(job.id, step.attempt, self._index(job))
        here = job.on_node(self.name) or job  # a job across nodes: its GPUs on this one
        env = {
            **job_env(here, step.attempt, here.gpus, self.name),
            **step_env(here, step, self.name),
            **launch.task_env,
        }
        env_file = f"{self._steps_dir(job.id, step.attempt)}/{step.job_id}.{step.task_label}.env"
        try:
            run_as = self._launcher.run_as(job)
            self._conn.put_bytes(docker.env_file_text(env).encode(), env_file, 0o600)
        except (ValueError, RemoteError) as err:
            raise LaunchError(f"cannot prepare the step on {self.name}: {err}") from err
        argv = docker.docker_exec_argv(
            name,
            launch.argv,
            tty=launch.pty is not None,
            run_as=run_as,
            env_file=env_file,
            workdir=job.spec.workdir,
            docker=self.node.docker,
            visible_gpus=container_step_gpus(here, step),
        )
        pty = None
        if launch.pty is not None:
            term = launch.env.get("TERM") or "xterm"
            pty = (term, launch.pty[0] or 24, launch.pty[1] or 80)
        key = (job.id, step.step_id, step.rank)
        try:
            channel = self._streams.attach(argv, pty=pty)
        except RemoteError as err:
            self._forget_env_file(env_file)
            raise LaunchError(f"docker exec on {self.name} did not start: {err}") from err
        with self._lock:
            self._steps[key] = None
        client = socket.socket(fileno=os.dup(client_fd))
        relay = StepRelay(
            client,
            channel,
            label=step.label,
            pty=pty is not None,
            deliver=partial(self._signal_step, job, step),
            ended=partial(self._step_ended, job, step, env_file),
            lost_reason=partial(self._lost_reason, step),
        )
        with self._lock:
            self._tellers[key] = relay
            self._relays[key] = relay.start()

    def _lost_reason(self, step: Step) -> str:
        why = "gbatchd is stopping" if self._stopping.is_set() else "the SSH connection was lost"
        return f"{why}: step {step.label}'s relay to {self.name} ended, and the step was hung up"

    def _signal_step(self, job: Job, step: Step, sig: int) -> None:
        """Send `sig` to the step's processes in the container (off the relay's thread)."""
        target = SignalTarget(steps=(step.step_id,))
        threading.Thread(
            target=self.signal,
            args=(job, step.attempt, signal.Signals(sig), target),
            name=f"signal-{step.label}",
            daemon=True,
        ).start()

    def _step_ended(self, job: Job, step: Step, env_file: str, status: StepStatus) -> None:
        with self._lock:
            self._steps[(job.id, step.step_id, step.rank)] = status
            self._relays.pop((job.id, step.step_id, step.rank), None)
            self._tellers.pop((job.id, step.step_id, step.rank), None)
        if self._stopping.is_set():
            return  # the next gbatchd hangs it up (step_status: vanished)
        if status.hangup:
            self.hang_up_step(job, step)
        else:
            self._forget_env_file(env_file)
        self._on_change()

    def _forget_env_file(self, env_file: str) -> None:
        with contextlib.suppress(RemoteError):
            self._run(["rm", "-f", "--", env_file])

    def hang_up_step(self, job: Job, step: Step) -> None:
        """Hang up what is left of `step` in its container, in the background.

        SIGHUP to its processes, SIGKILL after kill_grace_seconds. Tried again while the
        host is out of reach (the agent's lease stops the container should it stay so)."""
        threading.Thread(
            target=self._hang_up, args=(job, step), name=f"hangup-{step.label}", daemon=True
        ).start()

    def _hang_up(self, job: Job, step: Step) -> None:
        name = docker.container_name(job.id, step.attempt, self._index(job))
        target = SignalTarget(steps=(step.step_id,))
        env_file = f"{self._steps_dir(job.id, step.attempt)}/{step.job_id}.{step.task_label}.env"
        backoff = Backoff()
        deadline = time.monotonic() + max(60.0, 2 * self.config.node_lease_seconds)
        for sig in (signal.SIGHUP, signal.SIGKILL):
            while not self._stopping.is_set():
                try:
                    run_as = self._launcher.run_as(job)
                    argv = docker.container_signal_argv(
                        job, name, int(sig), target, run_as, docker=self.node.docker
                    )
                    self._run(argv)
                    break
                except ValueError:
                    return
                except RemoteError as err:
                    if time.monotonic() >= deadline:
                        log.warning("step %s: not hung up on %s: %s", step.label, self.name, err)
                        return
                    self._stopping.wait(backoff.next_delay())
            if sig == signal.SIGHUP:
                self._stopping.wait(self.config.kill_grace_seconds)
        self._forget_env_file(env_file)

    def step_status(self, job: Job, step: Step) -> StepStatus:
        """How a step this gbatchd relays stands (running, or how it ended).

        One it never relayed (an earlier gbatchd's, whose relay ended with it) is gone:
        vanished, with `hangup`, for the loop to record and hang up."""
        key = (job.id, step.step_id, step.rank)
        with self._lock:
            if key not in self._steps:
                return StepStatus(
                    "vanished",
                    hangup=True,
                    error=f"its relay to {self.name} ended with an earlier gbatchd; hung up",
                )
            status = self._steps[key]
            if status is None:
                return StepStatus("running")
            del self._steps[key]
        return status

    def open_port(self, job: Job, port: int, timeout: float) -> PortStream:
        """A direct-tcpip channel through this host's SSH connection to `port` in `job`.

        To its container's address on its network; the host's loopback for one on the
        host's network, where its own user listens (gbatch/nodes/ports.py)."""
        network = ports.container_network(
            self._conn, job, docker=self.node.docker, timeout=min(timeout, COMMAND_TIMEOUT)
        )
        uids = {job.uid}
        if network.shares_host:
            with contextlib.suppress(ValueError):
                run_as = self._launcher.run_as(job)
                if run_as is not None:
                    uids.add(run_as.uid)
        address = ports.port_address(job, port, network, partial(self._proc_net_tcp, job), uids)
        try:
            channel: PortStream = self._conn.open_tunnel(address, port, timeout=timeout)
        except TunnelRefused as err:
            raise PortError(ports.nothing_listens(job, port), "not_found") from err
        except RemoteError as err:
            raise PortError(f"cannot reach job {job.id}'s port {port}: {err}") from err
        return channel

    def _proc_net_tcp(self, job: Job) -> list[str]:
        """The host's /proc/net/tcp and tcp6, read over SSH."""
        try:
            result = self._conn.run(["cat", *ports.PROC_NET_TCP], timeout=COMMAND_TIMEOUT)
        except RemoteError as err:
            raise PortError(f"cannot tell who listens in job {job.id}: {err}") from err
        return [result.stdout.decode("ascii", errors="replace")]

    def _remove(self, job_id: int, attempt: int, index: int = 0) -> None:
        name = docker.container_name(job_id, attempt, index)
        with contextlib.suppress(RemoteError):
            self._run(docker.docker_rm_argv(name, docker=self.node.docker))
            self._run(["rm", "-f", self._env_file(job_id, attempt, index)])
            self._run(["rm", "-rf", "--", self._steps_dir(job_id, attempt)])
