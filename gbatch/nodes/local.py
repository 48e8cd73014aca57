"""The embedded default node, `local`: this machine, reached without SSH.

It runs the same agent a remote host runs (as a child process instead of over an SSH
channel) and starts jobs the same two ways: a bare process under gbatch.shim, or a
detached container through the local docker CLI. Every run is known by
(job id, attempt) alone, so a restarted daemon finds it again:
- bare: RUN_DIR = $GBATCH_HOME/run/<job>.<attempt> with pids.json and exit.json;
- container: the name gbatch-<job>-<attempt>.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from gbatch.core.model import Gpu, Job
from gbatch.core.signals import WHOLE_RUN, SignalTarget
from gbatch.core.steps import Step, step_label
from gbatch.nodes import cgroups, docker, ports
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
    launch_secrets,
    step_env,
    visible_devices,
)
from gbatch.nodes.joblog import MAX_LOG_BYTES_ENV, LogFollowers, StderrChunk, StreamCut, open_log
from gbatch.nodes.outfiles import OFFSETS_FILE, OUT_FILES_ENV, open_or_say, planned
from gbatch.nodes.report import (
    NodeReport,
    RunOwner,
    container_owners,
    gbatch_container_ids,
    to_gpus,
)
from gbatch.nodes.shimserver import LOCK_FILE, ServerGone, ShimServer, lock_held
from gbatch.nodes.stepshim import LOCK_FILE as STEP_LOCK_FILE
from gbatch.nodes.stepshim import NOTICE_SIGNAL, NOTICES_FILE, STEP_MEM_ENV, signal_session
from gbatch.shim import CPUS_ENV, JOB_ENV_FILE_ENV, MEM_MB_ENV
from gbatch.site import policy as site_policy
from gbatch.site.config import Config, Paths

log = logging.getLogger(__name__)

LOCAL_NODE = "local"
JOB_ENV_FILE = "job_env.json"  # another user's job's environment, for the plain shim
STEP_DIR_PREFIX = "step."  # a step's directory in its run's: step.0, step.interactive
# What tells a bare job or step which gbatchd it belongs to, so that `gbatch srun` in it
# reaches that one (a socket of GBATCH_HOME's, a system one).
SOCKET_ENV = "GBATCH_SOCKET"
# Slurm's commands as gbatch's, first on a bare job's PATH: a batch script's `srun`,
# `sbatch`, `squeue`, `scancel`, `scontrol` and `sacct` lines work unchanged in it.
SLURM_COMMANDS = Path(__file__).resolve().parent / "slurmbin"
DOCKER_TIMEOUT = 30.0  # seconds for any one docker CLI call


def with_slurm_commands(env: dict[str, str]) -> None:
    """Put Slurm's commands (as gbatch's: SLURM_COMMANDS) first on a bare run's PATH.

    They run this interpreter's gbatch (GBATCH_PYTHON), whatever the job's PATH holds,
    so a script's `srun` is a step of its job even where Slurm is installed too."""
    path = env.get("PATH") or "/usr/local/bin:/usr/bin:/bin"
    env["PATH"] = f"{SLURM_COMMANDS}:{path}"
    env["GBATCH_PYTHON"] = sys.executable


def agent_script() -> Path:
    """The agent file: beside the package in a checkout, else the installed copy."""
    beside = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"
    if beside.exists():
        return beside
    installed = Path(sys.prefix) / "share" / "gbatch" / "agent" / "gbatch_agent.py"
    if installed.exists():
        return installed
    raise FileNotFoundError(f"the gbatch agent is neither at {beside} nor at {installed}")


def write_simulation_file(path: Path, count: int, models: Sequence[str] = ()) -> None:
    """Describe `count` simulated GPUs in `path`, unless it already describes those.

    `models` gives one per GPU ("" or none: a plain "Simulated GPU" of 80 GiB; else a
    key of gbatch/core/gputypes.py's SIMULATED_MODELS, with its MIG layout after a slash
    as parse_simulated writes it: `a100-80gb/3g.40gb+1g.10gb`). A file that describes
    that many GPUs (of those models and layouts) is kept.

    Tests edit the file while the agent runs (memory in use, processes): keep their edits.
    """
    from gbatch.core.gputypes import SIMULATED_MODELS, simulated_layout

    gpus: list[dict[str, object]] = []
    for index in range(count):
        key, layout = simulated_layout(models[index]) if index < len(models) else ("", ())
        model = SIMULATED_MODELS.get(key)
        gpu: dict[str, object] = {
            "name": "Simulated GPU" if model is None else model.name,
            "memory_total_mib": 81920 if model is None else model.memory_mib,
            "memory_used_mib": 0,
            "utilization_pct": 0,
        }
        if layout:
            gpu["mig"] = [{"profile": profile} for profile in layout]
        gpus.append(gpu)
    if path.exists():
        try:
            there = json.loads(path.read_text()).get("gpus", [])
            if len(there) == count and (
                not any(models)
                or [(g.get("name", "Simulated GPU"), _profiles(g)) for g in there]
                == [(g["name"], _profiles(g)) for g in gpus]
            ):
                return
        except (OSError, ValueError, AttributeError):
            pass
    path.write_text(json.dumps({"gpus": gpus}, indent=2) + "\n")


def _profiles(gpu: Mapping[str, object]) -> list[object]:
    """A simulated GPU's MIG layout: its slices' profiles ([] without MIG)."""
    layout = gpu.get("mig", [])
    return [d.get("profile") for d in layout] if isinstance(layout, list) else []


class LocalNode:
    name = LOCAL_NODE
    address = "this machine"
    # The embedded node is a fleet of one: never a peer of another in a job.
    peer_address = "127.0.0.1"
    runs_bare_processes = True
    runs_steps = True
    # Head and node are one machine: the node is never lost while the head runs.
    fences_runs = False

    def __init__(self, paths: Paths, config: Config, on_change: Callable[[], None]) -> None:
        self.paths = paths
        self.config = config
        self._on_change = on_change  # wakes the daemon loop
        self._agent: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._reports = Reports(on_change)
        self._lock = threading.Lock()
        self._shims: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
        self._log_followers = LogFollowers(paths, on_change, config.max_log_bytes)
        self._host = docker.LocalHost()  # every docker call goes through it
        self._launcher = docker.ContainerLauncher(
            host=self._host,
            node=LOCAL_NODE,
            docker=config.docker,
            policy=config.container_policy,
            paths=paths,
            mps=config.mps,
            timeout=DOCKER_TIMEOUT,
        )
        self._engine_checked: tuple[float, str | None] = (0.0, None)
        # Bare jobs' cgroups (set up by start(); None where this host gives none).
        self._cgroups: cgroups.Tree | None = None
        self._run_dirs = RunDirRemover(before_removal=self._remove_run_cgroup)
        # Forks each bare job's shim; the plain `python -m gbatch.shim` when it cannot.
        self._shim_server = ShimServer(on_change)
        # Container steps whose client went away, hung up in their container already.
        self._hung_up: set[tuple[int, int]] = set()

    # -- the agent ----------------------------------------------------------------

    def start(self) -> None:
        self._set_up_cgroups()
        threading.Thread(target=self._keep_reporting, name="agent", daemon=True).start()
        self._shim_server.start()

    def _set_up_cgroups(self) -> None:
        """Find and prepare bare jobs' cgroups, say in one line what holds bare jobs, and
        remove the run cgroups an earlier daemon left (their run directory is gone)."""
        self._cgroups, line = cgroups.set_up(self.paths.runs, self.config.bare_job_cgroups)
        log.info("%s", line)
        if self._cgroups is not None:
            for job_id, attempt in self._cgroups.reap(
                lambda job_id, attempt: not self.paths.run_dir(job_id, attempt).exists()
            ):
                log.info(
                    "removed the cgroup of run %d.%d left by an earlier daemon", job_id, attempt
                )

    def _remove_run_cgroup(self, run_dir: Path) -> None:
        """Kill what the ended run left in its cgroup and remove it (before its directory)."""
        job_text, _, attempt_text = run_dir.name.partition(".")
        tree = self._cgroups
        if tree is None or not (job_text.isdigit() and attempt_text.isdigit()):
            return
        if not tree.remove(int(job_text), int(attempt_text)):
            log.warning(
                "cannot remove the cgroup of run %s: a process in it does not die; the "
                "next start of gbatchd tries again",
                run_dir.name,
            )

    def _agent_argv(self) -> list[str]:
        argv = [
            sys.executable,
            str(agent_script()),
            "watch",
            "--interval",
            str(self.config.report_interval),
            "--log-dir",
            str(self.paths.logs),
            # gbatch's own containers, so their GPU processes are not "foreign"
            "--docker",
            self.config.docker,
        ]
        if self.config.simulate_gpus is not None:
            write_simulation_file(
                self.paths.simulation_file,
                self.config.simulate_gpus,
                self.config.simulated_models,
            )
            argv += ["--simulation-file", str(self.paths.simulation_file)]
        return argv

    def _keep_reporting(self) -> None:
        """Run the agent; if it dies, say so and start it again after a backoff."""
        backoff = Backoff()
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                agent = subprocess.Popen(
                    self._agent_argv(),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as err:
                self._reports.lost(f"cannot start the agent: {err}")
            else:
                with self._lock:
                    self._agent = agent
                assert agent.stdout is not None
                self._reports.read(agent.stdout)
                agent.wait()
                self._reports.lost(f"the agent exited (status {agent.returncode})")
            if time.monotonic() - started > 60:
                backoff.reset()  # it ran a good while: this is a new failure
            self._stopping.wait(backoff.next_delay())

    @property
    def report_seq(self) -> int:
        return self._reports.seq

    def last_heard(self) -> float | None:
        return self._reports.heard_at

    def poke(self) -> None:
        """Ask the agent for a report now (a GPU was just released)."""
        self._reports.want()  # the loop waits on it, even if it repeats the last
        with self._lock:
            agent = self._agent
        if agent is not None and agent.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                agent.stdin.write(b"\n")
                agent.stdin.flush()

    def round_trip(self) -> tuple[float, float] | None:
        return None  # reached without SSH

    def report(self) -> tuple[NodeReport | None, str]:
        """The latest report, or None and why there is none."""
        return self._reports.latest()

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return to_gpus(
            report,
            gbatch_sessions=self._gbatch_sessions(),
            gbatch_containers=gbatch_container_ids(report),
            type_rules=self.config.gpu_types,
            gbatch_pids={pid for pids in self._cgroup_pids(report).values() for pid in pids},
        )

    def _cgroup_pids(self, report: NodeReport) -> dict[tuple[int, int], frozenset[int]]:
        """The report's GPU processes that are in a bare run's cgroup, by run.

        A job's process that left its session (setsid) is known this way, where runs have
        cgroups (gbatch/nodes/cgroups.py): its memory counts against its job's budget, and
        its GPU is not taken for a stranger's. The agent runs on this host: its pids are ours.
        """
        tree = self._cgroups
        if tree is None:
            return {}
        instance = tree.instance
        found: dict[tuple[int, int], set[int]] = {}
        processes = [p for gpu in report.gpus for p in gpu.processes]
        processes += [p for gpu in report.gpus for device in gpu.mig for p in device.processes]
        for process in processes:
            try:
                text = Path(f"/proc/{process.pid}/cgroup").read_text()
            except OSError:
                continue  # gone, or not ours to read
            run = cgroups.run_of_process(text, instance)
            if run is not None:
                found.setdefault(run, set()).add(process.pid)
        return {run: frozenset(pids) for run, pids in found.items()}

    def _gbatch_sessions(self) -> set[int]:
        return {sid for sessions in self._run_sessions().values() for sid in sessions}

    def _run_sessions(self) -> dict[tuple[int, int], frozenset[int]]:
        """Each bare run's sessions, by (job id, attempt): its shim's and its steps'."""
        found: dict[tuple[int, int], frozenset[int]] = {}
        for run_dir in self.paths.runs.glob("*.*"):
            job, _, attempt = run_dir.name.partition(".")
            if not (job.isdigit() and attempt.isdigit()):
                continue
            sessions: set[int] = set()
            # A shim is a session leader: its pid is the session of every process of its job.
            pids = _read_json(run_dir / "pids.json")
            if pids:
                sessions.add(int(pids["shim"]))
            # A step's process leads its own session (gbatch/nodes/stepshim.py).
            try:
                step_dirs = list(run_dir.glob(f"{STEP_DIR_PREFIX}*"))
            except OSError:
                continue  # removed since listed (the remover runs on its own thread)
            for step_dir in step_dirs:
                step_pids = _read_json(step_dir / "pids.json")
                if step_pids:
                    sessions.add(int(step_pids["session"]))
            if sessions:
                found[(int(job), int(attempt))] = frozenset(sessions)
        return found

    def run_owners(self, report: NodeReport) -> dict[tuple[int, int], RunOwner]:
        owners = container_owners(report, self.name)
        for run, sessions in self._run_sessions().items():
            had = owners.get(run, RunOwner())
            owners[run] = RunOwner(had.sessions | sessions, had.containers, had.pids)
        for run, pids in self._cgroup_pids(report).items():
            had = owners.get(run, RunOwner())
            owners[run] = RunOwner(had.sessions, had.containers, had.pids | pids)
        return owners

    def stop(self) -> None:
        self._stopping.set()
        self._run_dirs.flush()
        if self._cgroups is not None:
            self._cgroups.remove_parents()  # only where no run's cgroup is left
        self._shim_server.stop()
        with self._lock:
            agent = self._agent
        if agent is None:
            return
        with contextlib.suppress(OSError):
            assert agent.stdin is not None
            agent.stdin.close()
        try:
            agent.wait(timeout=5)
        except subprocess.TimeoutExpired:
            agent.kill()

    # -- runs -----------------------------------------------------------------------

    def docker_problem(self, now: float) -> str | None:
        """None when a docker engine answers, else why not (cached for 10 s)."""
        checked_at, problem = self._engine_checked
        if now - checked_at < 10.0:
            return problem
        try:
            result = self._host.run(
                docker.engine_check_argv(docker=self.config.docker), timeout=DOCKER_TIMEOUT
            )
            problem = (
                None
                if result.exit_status == 0
                else docker.error_line(
                    result.stderr.decode(errors="replace"), "docker version failed"
                )
            )
        except HostError as err:
            problem = (
                f"the docker engine did not answer within {DOCKER_TIMEOUT:g} s"
                if err.answer_lost
                else f"the docker CLI ({self.config.docker}) is not installed"
            )
        self._engine_checked = (now, problem)
        return problem

    def launch(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        env: Mapping[str, str] | None = None,
        *,
        hold: bool = False,
    ) -> None:
        """Start attempt `attempt` of `job` on `gpus`; return once it exists.

        Precondition: CONFIGURING for this attempt is committed, so a crash from
        here on is found again by reconcile. `env`: variables over the job's (those of
        a job across nodes; the embedded node is a fleet of one, so only ever its first,
        and `hold`, which only a job's other nodes ask, never comes).
        """
        # A path is never reused (each start counts a new attempt); if one ever were,
        # its old directory must be gone before the new run writes into it.
        self._run_dirs.wait_gone(self.paths.run_dir(job.id, attempt))
        run_dir = self.paths.make_run_dir(job.id, attempt)
        if job.spec.image is None:
            self._launch_process(job, attempt, gpus, run_dir, env or {})
        else:
            self._launch_container(job, attempt, gpus, run_dir, env or {})

    def _launch_process(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        run_dir: Path,
        layout_env: Mapping[str, str],
    ) -> None:
        switch = _switch_to_submitter(job)
        env = _daemon_env() if switch is None else _login_env(switch)
        env.update(job_env(job, attempt, gpus, self.name, mps=self.config.mps))
        env.update(layout_env)
        if switch is not None:
            # Who the job is comes from the system, not from the exported shell.
            env["USER"] = env["LOGNAME"] = switch.pw_name
        # Secrets go in the process environment: /proc/PID/environ is readable by the
        # job's own user and root only, and `ps` shows argv, not the environment.
        env.update(launch_secrets(job))
        # NVML and nvidia-smi number GPUs in PCI order; CUDA's default order differs.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, visible_devices(gpus, job.gpu_uuids)))
        env[SOCKET_ENV] = str(self.paths.socket)
        with_slurm_commands(env)
        # Another user's job without a workdir starts in their HOME (or /, without one).
        workdir = job.spec.workdir or ("" if switch is not None else "/")
        identity = (
            []
            if switch is None
            else [
                "--as",
                str(switch.pw_uid),
                str(switch.pw_gid),
                ",".join(str(g) for g in site_policy.identity_of(switch).groups),
                workdir,
            ]
        )
        env[MAX_LOG_BYTES_ENV] = str(self.config.max_log_bytes)  # for the shim alone
        env.update(bare_limits_env(job))
        try:
            job_log = open_log(self.paths.job_log(job.id))
        except OSError as err:
            raise LaunchError(f"cannot open its log: {err}") from err
        env.update(self._run_cgroup(job, attempt, job_log))
        # Opened by the shim, as the job's user: never on this loop (outfiles).
        files = planned(job, attempt, self.name)
        if files is not None:
            env[OUT_FILES_ENV] = json.dumps(files)
        argv = [str(run_dir), *identity, "--", *job.spec.run_command]
        # Another user's workdir is entered by the job itself, as that user.
        cwd = workdir if switch is None else "/"
        try:
            try:
                self._shim_server.start_run(run_dir, argv, env, cwd, job_log.fileno())
                return  # the server tells the daemon of the run's end
            except ServerGone as gone:
                log.debug("job %d: the plain shim starts it: %s", job.id, gone)
            shim = self._start_plain_shim(argv, env, cwd, job_log, switch, run_dir)
        finally:
            job_log.close()
        with self._lock:
            self._shims[(job.id, attempt)] = shim
        threading.Thread(
            target=self._reap, args=(job.id, attempt, shim), name=f"reap-{job.id}", daemon=True
        ).start()

    def _run_cgroup(self, job: Job, attempt: int, job_log: Any) -> dict[str, str]:
        """Make the run's cgroup; what tells the shim of it (nothing where there is none).

        A cgroup that cannot be made leaves the run to its shim's Limits, said on its log.
        """
        if self._cgroups is None:
            return {}
        spec = job.spec
        try:
            made = self._cgroups.create(
                job.id,
                attempt,
                cpus=spec.cpus,
                cpu_set=chosen_cpus(job),
                memory_mb=spec.memory_mb,
            )
        except cgroups.CgroupError as err:
            log.warning("job %d: %s; affinity and RLIMIT_DATA hold it instead", job.id, err)
            with contextlib.suppress(OSError):
                job_log.write(
                    f"gbatch: {err}: its CPUs and memory are held by affinity and "
                    "RLIMIT_DATA\n".encode()
                )
            return {}
        return {cgroups.CGROUP_ENV: made.to_env()}

    @staticmethod
    def _start_plain_shim(
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        log: Any,
        switch: pwd.struct_passwd | None,
        run_dir: Path,
    ) -> subprocess.Popen[bytes]:
        """`python -m gbatch.shim ARGV`, a fresh interpreter: when the shim server is
        unavailable. A shim that starts another user's job runs as the daemon's user
        with the daemon's environment, and takes the job's from a 0600 file: what the
        user exported (PYTHONPATH, LD_PRELOAD, ...) must not reach that interpreter."""
        if switch is not None:
            env = _daemon_env() | {JOB_ENV_FILE_ENV: _write_job_env(run_dir, env)}
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "gbatch.shim", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as err:
            raise LaunchError(f"cannot start the job: {err}") from err

    def _reap(self, job_id: int, attempt: int, shim: subprocess.Popen[bytes]) -> None:
        shim.wait()
        with self._lock:
            self._shims.pop((job_id, attempt), None)
        self._on_change()

    def _launch_container(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        run_dir: Path,
        layout_env: Mapping[str, str],
    ) -> None:
        try:
            self._launcher.launch(
                job,
                attempt,
                gpus,
                str(run_dir / "env"),
                env=layout_env,
                srun=str(docker.CONTAINER_SRUN),
            )
        except LaunchError:
            # The engine may have just gone away: let the next docker_problem() (the
            # submit check) ask it again rather than trust a cached "answers".
            self._engine_checked = (0.0, None)
            raise
        self.follow_container_log(job, attempt)

    def start_held(self, job: Job, attempt: int) -> None:
        """Nothing to start: launch never holds a run here (see launch)."""

    def follow_container_log(self, job: Job, attempt: int) -> None:
        """Copy the container's output into the job's log, and its output file, until it exits."""
        self._log_followers.follow(
            job.id,
            attempt,
            partial(self._docker_logs, job.id, attempt, job.spec.error is not None),
            partial(open_or_say, job, attempt, self.name, self.paths.run_dir(job.id, attempt)),
        )

    @contextlib.contextmanager
    def _docker_logs(
        self, job_id: int, attempt: int, split: bool = False
    ) -> Iterator[Iterator[bytes]]:
        """The container's output; with `split`, what it wrote on stderr comes as
        StderrChunk (docker logs gives the two on its own stdout and stderr)."""
        # Through a pipe, not straight into the file: if this daemon dies, the
        # follower loses its reader instead of writing on beside the next one.
        name = docker.container_name(job_id, attempt)
        follower = subprocess.Popen(
            docker.docker_logs_argv(name, follow=True, docker=self.config.docker),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if split else subprocess.STDOUT,
        )
        assert follower.stdout is not None
        fd = follower.stdout.fileno()
        try:
            if follower.stderr is None:
                yield iter(partial(os.read, fd, 65536), b"")
            else:
                yield _both_pipes(fd, follower.stderr.fileno())
        finally:
            follower.stdout.close()
            if follower.stderr is not None:
                follower.stderr.close()
            code = follower.wait()
        if code != 0:
            # docker logs failed (the engine went away under it): what it gave is not the
            # whole output, and its last words are docker's, not the job's.
            raise StreamCut(f"docker logs exited {code}")

    def status(self, job: Job, attempt: int) -> RunStatus:
        if job.spec.image is None:
            return self._process_status(job.id, attempt)
        return self._container_status(job, attempt)

    def _process_status(self, job_id: int, attempt: int) -> RunStatus:
        run_dir = self.paths.run_dir(job_id, attempt)
        ended = _exit_status(run_dir)
        if ended is not None:
            return ended
        with self._lock:
            if (job_id, attempt) in self._shims:
                return RunStatus("running")
        if lock_held(run_dir):
            # A shim the shim server forked (or is forking): no `gbatch.shim` in /proc.
            return _exit_status(run_dir) or RunStatus("running")
        pids = _read_json(run_dir / "pids.json")
        if pids is not None and _is_shim_of(int(pids["shim"]), run_dir):
            return RunStatus("running")
        if _find_shim(run_dir) is not None:
            return RunStatus("running")
        # Check once more: the shim may have written exit.json as it ended.
        return _exit_status(run_dir) or RunStatus("vanished")

    def _container_status(self, job: Job, attempt: int) -> RunStatus:
        job_id = job.id
        name = docker.container_name(job_id, attempt)
        try:
            result = self._host.run(
                docker.docker_inspect_argv([name], docker=self.config.docker),
                timeout=DOCKER_TIMEOUT,
            )
        except HostError:
            return RunStatus("unknown")  # cannot tell: ask again later
        if result.exit_status != 0:
            if b"No such" in result.stderr:
                return RunStatus("vanished")
            return RunStatus("unknown")  # the engine does not answer
        statuses = docker.parse_inspect(result.stdout.decode(errors="replace"))
        if not statuses:
            return RunStatus("vanished")
        status = statuses[0]
        ended = finished_container_status(
            status.state, status.exit_code, status.finished_at, status.oom_killed
        )
        if ended is not None:
            if not self._log_followers.copying(job_id, attempt):
                # It ended while no daemon copied its output (this one started after):
                # replay it whole from the container before the run is final.
                self.follow_container_log(job, attempt)
            if not self._log_followers.wait(job_id, attempt):
                # The engine went away under the copy (a stop or crash): it answers
                # again, so replay the output whole, in place of the broken copy.
                self.follow_container_log(job, attempt)
                self._log_followers.wait(job_id, attempt)
            if not self._log_followers.settled(job_id, attempt):
                return RunStatus("running")  # its output is still on the way: next pass
            return ended
        if status.state == "created":
            return RunStatus("running")
        self.follow_container_log(job, attempt)
        return RunStatus("running")

    def signal(
        self, job: Job, attempt: int, sig: signal.Signals, target: SignalTarget | None = None
    ) -> None:
        """Send `sig` to the run's processes that `target` names (None: as a stop does).

        A bare run: its batch shell leads a process group (the shell alone for
        `shell_only`, the group for `batch`); each step is a session of its own. A
        container: `docker kill` for a stop and for the batch shell alone (--init
        forwards it to its child); the rest is reached from inside the container, as the
        job's user (docker.container_signal_argv)."""
        if job.spec.image is not None:
            self._signal_container(job, attempt, sig, target)
            return
        target = target or WHOLE_RUN
        run_dir = self.paths.run_dir(job.id, attempt)
        self._signal_steps(run_dir, sig, target.steps)  # each a session of its own
        if not (target.batch or target.shell_only):
            return
        pids = _read_json(run_dir / "pids.json")
        if pids is None:
            return  # not started yet; the next tick tries again
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if target.batch:
                os.killpg(int(pids["pgid"]), sig)
            else:
                os.kill(int(pids["pgid"]), sig)  # the shell leads its group

    def _signal_container(
        self, job: Job, attempt: int, sig: int, target: SignalTarget | None
    ) -> None:
        name = docker.container_name(job.id, attempt)
        with contextlib.suppress(HostError, ValueError):
            if target is None:
                argv = docker.docker_kill_argv(
                    name, signal.Signals(sig).name, docker=self.config.docker
                )
            else:
                run_as = self._launcher.run_as(job)
                argv = docker.container_signal_argv(
                    job, name, int(sig), target, run_as, docker=self.config.docker
                )
            self._host.run(argv, timeout=DOCKER_TIMEOUT)

    def cleanup(self, job: Job, attempt: int) -> None:
        """Forget a finished run: its steps' left-overs, its container, its run directory.

        What is left of its steps is killed, its container removed, its run directory
        handed to the remover.

        A step ends with its allocation: its session is killed here, as the run has
        ended. The remover works off the loop's thread, which a removal on a slow disk
        would hold up.
        """
        self._signal_steps(self.paths.run_dir(job.id, attempt), signal.SIGKILL)
        if job.spec.image is not None:
            with contextlib.suppress(HostError):
                self._host.run(
                    docker.docker_rm_argv(
                        docker.container_name(job.id, attempt), docker=self.config.docker
                    ),
                    timeout=DOCKER_TIMEOUT,
                )
        self._run_dirs.remove(self.paths.run_dir(job.id, attempt))

    # -- steps ----------------------------------------------------------------------

    def step_dir(self, job_id: int, attempt: int, step: Step | int) -> Path:
        """A step's directory in its run's (`step.0`), or one task's of it (`step.0.2`)."""
        label = step.task_label if isinstance(step, Step) else step_label(step)
        return self.paths.run_dir(job_id, attempt) / f"{STEP_DIR_PREFIX}{label}"

    def _signal_steps(self, run_dir: Path, sig: int, only: tuple[int, ...] | None = None) -> None:
        """Send `sig` to the sessions of the run's steps that have not ended (`only`:
        of the steps with these ids; None: of every one)."""
        if only is None:
            step_dirs = list(run_dir.glob(f"{STEP_DIR_PREFIX}*"))
        else:
            step_dirs = [
                path
                for s in only
                for pattern in (
                    f"{STEP_DIR_PREFIX}{step_label(s)}",
                    f"{STEP_DIR_PREFIX}{step_label(s)}.*",
                )
                for path in run_dir.glob(pattern)
            ]  # a step's own directory, or its tasks' (step.0.R)
        for step_dir in step_dirs:
            pids = _read_json(step_dir / "pids.json")
            if pids is not None and not (step_dir / "exit.json").exists():
                signal_session(int(pids["session"]), sig)

    def start_step(self, job: Job, step: Step, launch: StepLaunch, client_fd: int) -> None:
        """Start `step` under a step shim that relays it to the client on `client_fd`.

        The shim (gbatch/nodes/stepshim.py) is forked by the shim server, else started as
        `python -m gbatch.nodes.stepshim`. A bare job's step runs beside its run as its
        user, with its GPUs, CPUs and memory cap; a container job's, `docker exec` in
        its container."""
        step_dir = self.step_dir(job.id, step.attempt, step)
        try:
            step_dir.mkdir(mode=0o700)  # a step's number is never reused
        except OSError as err:
            raise LaunchError(f"cannot make the step's directory: {err}") from err
        switch: pwd.struct_passwd | None = None
        if job.spec.image is None:
            switch = _switch_to_submitter(job)
            argv, env, identity = self._bare_step(job, step, launch, switch)
        else:
            argv, env, identity = self._container_step(job, step, launch, step_dir), {}, []
        pty = [] if launch.pty is None else ["--pty", str(launch.pty[0]), str(launch.pty[1])]
        grace = ["--grace", f"{self.config.kill_grace_seconds:g}"]
        shim_argv = [str(step_dir), *identity, *pty, *grace, "--", *argv]
        try:
            job_log = open_log(self.paths.job_log(job.id))
        except OSError as err:
            raise LaunchError(f"cannot open the job's log: {err}") from err
        try:
            try:
                self._shim_server.start_step(step_dir, shim_argv, env, job_log.fileno(), client_fd)
                return
            except ServerGone as gone:
                log.debug("step %s: the plain step shim starts it: %s", step.label, gone)
            shim = self._start_plain_step(shim_argv, env, job_log, switch, step_dir, client_fd)
        finally:
            job_log.close()
        threading.Thread(target=self._reap_step, args=(shim,), daemon=True).start()

    def _bare_step(
        self, job: Job, step: Step, launch: StepLaunch, switch: pwd.struct_passwd | None
    ) -> tuple[list[str], dict[str, str], list[str]]:
        """A bare step's argv, environment and --as: the job's run's, with the caller's
        variables under the job's and the step's."""
        env = _daemon_env() if switch is None else _login_env(switch)
        env.update(launch.env)
        env.update(job_env(job, step.attempt, job.gpus, self.name, mps=self.config.mps))
        env.update(step_env(job, step, self.name))
        env.update(launch.task_env)
        if switch is not None:
            env["USER"] = env["LOGNAME"] = switch.pw_name
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        devices = visible_devices(job.gpus, job.gpu_uuids)
        if step.gpus is not None:  # the step's own of the job's (srun -G inside it)
            by_index = dict(zip(job.gpus, devices, strict=False))
            devices = [by_index[g] for g in step.gpus if g in by_index]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
        env[SOCKET_ENV] = str(self.paths.socket)
        with_slurm_commands(env)
        env.update(step_limits_env(job, step))
        if self._cgroups is not None:
            held = self._cgroups.existing(
                job.id, step.attempt, holds_memory=job.spec.memory_mb is not None
            )
            if held is not None:
                env[cgroups.CGROUP_ENV] = held.to_env()
        workdir = launch.cwd or job.spec.workdir or ""
        if switch is None:
            # The daemon's own user's: it enters its workdir itself, as the switched step
            # does (a workdir that is gone is the step's failure, said on its terminal).
            identity = ["--cwd", workdir or os.environ.get("HOME", "/")]
        else:
            identity = [
                "--as",
                str(switch.pw_uid),
                str(switch.pw_gid),
                ",".join(str(g) for g in site_policy.identity_of(switch).groups),
                workdir,
            ]
        return list(launch.argv), env, identity

    def _container_step(
        self, job: Job, step: Step, launch: StepLaunch, step_dir: Path
    ) -> list[str]:
        """`docker exec` of the step in the job's container, as the job's user, its
        variables in a 0600 env-file in the step's directory."""
        env = {
            **job_env(job, step.attempt, job.gpus, self.name, mps=self.config.mps),
            **step_env(job, step, self.name),
            **launch.task_env,
        }
        env_file = step_dir / "env"
        try:
            fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with open(fd, "w") as handle:
                handle.write(docker.env_file_text(env))
            run_as = self._launcher.run_as(job)
        except (OSError, ValueError) as err:
            raise LaunchError(f"cannot prepare the step: {err}") from err
        return docker.docker_exec_argv(
            docker.container_name(job.id, step.attempt),
            launch.argv,
            tty=launch.pty is not None,
            run_as=run_as,
            env_file=str(env_file),
            workdir=job.spec.workdir,
            docker=self.config.docker,
            visible_gpus=container_step_gpus(job, step),
        )

    @staticmethod
    def _start_plain_step(
        argv: list[str],
        env: dict[str, str],
        log: Any,
        switch: pwd.struct_passwd | None,
        step_dir: Path,
        client_fd: int,
    ) -> subprocess.Popen[bytes]:
        """`python -m gbatch.nodes.stepshim CLIENT ARGV`, a fresh interpreter holding the
        step's lock, when the shim server is unavailable (as _start_plain_shim)."""
        if switch is not None:
            env = _daemon_env() | {JOB_ENV_FILE_ENV: _write_job_env(step_dir, env)}
        lock = os.open(step_dir / STEP_LOCK_FILE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return subprocess.Popen(
                [sys.executable, "-m", "gbatch.nodes.stepshim", str(client_fd), *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd="/",
                pass_fds=(client_fd, lock),
                start_new_session=True,
            )
        except OSError as err:
            raise LaunchError(f"cannot start the step: {err}") from err
        finally:
            os.close(lock)

    def _reap_step(self, shim: subprocess.Popen[bytes]) -> None:
        shim.wait()
        self._on_change()

    def tell_step(self, job: Job, step: Step, lines: Sequence[str]) -> None:
        """Append `lines` to the step's notices and wake its shim to relay them.

        A step of several tasks is told through its task 0 (on the job's first node)."""
        if step.fans_out and step.rank is None:
            step = step.task(0)
        step_dir = self.step_dir(job.id, step.attempt, step)
        pids = _read_json(step_dir / "pids.json")
        if pids is None or (step_dir / "exit.json").exists():
            return  # not started, or ended: nobody to tell
        text = "".join(line.replace("\n", " ") + "\n" for line in lines).encode()
        try:
            fd = os.open(
                step_dir / NOTICES_FILE,
                os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                0o600,
            )
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
        except OSError as err:
            log.warning("step %s: cannot write its notices: %s", step.label, err)
            return
        if lock_held(step_dir, STEP_LOCK_FILE):  # its shim lives: the pid is still its
            with contextlib.suppress(ProcessLookupError, PermissionError, KeyError, ValueError):
                os.kill(int(pids["shim"]), NOTICE_SIGNAL)

    def open_port(self, job: Job, port: int, timeout: float) -> PortStream:
        """A connection to `port` in `job`, made from this machine (gbatch/nodes/ports.py)."""
        network = None
        uids = {job.uid}
        if job.spec.image is not None:
            network = ports.container_network(
                self._host, job, docker=self.config.docker, timeout=min(timeout, DOCKER_TIMEOUT)
            )
            try:
                run_as = self._launcher.run_as(job)
            except ValueError as err:
                raise PortError(str(err)) from err
            if run_as is not None:
                uids.add(run_as.uid)
        address = ports.port_address(job, port, network, ports.read_proc_net_tcp, uids)
        return ports.connect(address, port, job, timeout)

    def hang_up_step(self, job: Job, step: Step) -> None:
        """Hang up what is left of a container job's `step` in its container, in the background.

        A bare step's shim hangs its session up itself. A container step's shim ends only
        its `docker exec` client, whose process in the container outlives it: SIGHUP to
        the step's processes there, SIGKILL after kill_grace_seconds."""
        if job.spec.image is None:
            return
        threading.Thread(
            target=self._hang_up_container_step,
            args=(job, step),
            name=f"hangup-{step.label}",
            daemon=True,
        ).start()

    def _hang_up_container_step(self, job: Job, step: Step) -> None:
        target = SignalTarget(steps=(step.step_id,))
        self.signal(job, step.attempt, signal.SIGHUP, target)
        if not self._stopping.wait(self.config.kill_grace_seconds):
            self.signal(job, step.attempt, signal.SIGKILL, target)

    def step_status(self, job: Job, step: Step) -> StepStatus:
        step_dir = self.step_dir(job.id, step.attempt, step)
        ended = _step_exit(step_dir)
        if ended is not None:
            if ended.hangup and (job.id, step.step_id) not in self._hung_up:
                self._hung_up.add((job.id, step.step_id))  # told once: the loop asks again
                self.hang_up_step(job, step)
            return ended
        if lock_held(step_dir, STEP_LOCK_FILE):
            return _step_exit(step_dir) or StepStatus("running")
        return _step_exit(step_dir) or StepStatus("vanished")


class RunDirRemover:
    """Removes finished runs' directories on a thread of its own, in the order given.

    `before_removal(run_dir)` runs first, on the same thread (the run's cgroup).
    A crash before a removal ends leaves the directory (or part of it) for the next
    daemon's sweep of finished runs, as a crash between a run's end and its cleanup
    always did: a run directory's name alone says whose run it was.
    """

    def __init__(self, before_removal: Callable[[Path], None] = lambda _: None) -> None:
        self._before_removal = before_removal
        self._changed = threading.Condition()
        self._queued: list[Path] = []
        self._removing: Path | None = None
        self._worker: threading.Thread | None = None

    def remove(self, run_dir: Path) -> None:
        with self._changed:
            self._queued.append(run_dir)
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._work, name="run-dir-cleanup", daemon=True
                )
                self._worker.start()
            self._changed.notify_all()

    def wait_gone(self, run_dir: Path) -> None:
        """Return once `run_dir` is neither queued nor being removed."""
        with self._changed:
            self._changed.wait_for(
                lambda: run_dir != self._removing and run_dir not in self._queued
            )

    def flush(self) -> None:
        """Return once everything queued so far is removed."""
        with self._changed:
            self._changed.wait_for(lambda: self._removing is None and not self._queued)

    def _work(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._queued))
                self._removing = self._queued.pop(0)
                run_dir = self._removing
            try:
                self._before_removal(run_dir)
                remove_run_dir(run_dir)
            except Exception:
                # The next daemon's sweep tries again; this thread must carry on.
                log.exception("cannot remove run directory %s", run_dir)
            finally:
                with self._changed:
                    self._removing = None
                    self._changed.notify_all()


def remove_run_dir(run_dir: Path) -> None:
    """Remove what a run and its steps leave in its directory, then the directory."""
    for step_dir in run_dir.glob(f"{STEP_DIR_PREFIX}*"):
        for name in ("exit.json", "pids.json", "env", STEP_LOCK_FILE, JOB_ENV_FILE, NOTICES_FILE):
            with contextlib.suppress(FileNotFoundError):
                (step_dir / name).unlink()
        with contextlib.suppress(OSError):
            step_dir.rmdir()
    for name in (
        "exit.json",
        "pids.json",
        "env",
        "log_offset",
        OFFSETS_FILE,
        LOCK_FILE,
        JOB_ENV_FILE,
    ):
        with contextlib.suppress(FileNotFoundError):
            (run_dir / name).unlink()
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def chosen_cpus(job: Job, allowed: Sequence[int] | None = None) -> tuple[int, ...]:
    """The CPUs a bare job runs on: `spec.cpus` of the daemon's own; () for any of them.

    Of `allowed` (default: the daemon's affinity), starting at an offset from the job id
    so that concurrent jobs spread over the machine rather than share its first CPUs.
    Pinning (and a cgroup's cpuset) bounds the job's CPUs; it does not keep other jobs
    off them.
    """
    cpus = job.spec.cpus
    if cpus is None:
        return ()
    pool = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if cpus >= len(pool):
        return ()
    start = (job.id * cpus) % len(pool)
    return tuple(sorted(pool[(start + i) % len(pool)] for i in range(cpus)))


def bare_limits_env(job: Job, allowed: Sequence[int] | None = None) -> dict[str, str]:
    """What tells the shim to hold a bare job to its -c and --mem (see shim.Limits).

    The CPUs are chosen_cpus'; the memory cap is dropped by a shim whose run's cgroup
    holds the memory.
    """
    env: dict[str, str] = {}
    spec = job.spec
    chosen = chosen_cpus(job, allowed)
    if chosen:
        env[CPUS_ENV] = ",".join(map(str, chosen))
    if spec.memory_mb is not None:
        env[MEM_MB_ENV] = str(spec.memory_mb)
    return env


def step_limits_env(job: Job, step: Step, allowed: Sequence[int] | None = None) -> dict[str, str]:
    """What holds a bare job's step: its job's -c and --mem, or its own share of them.

    A step's -c: that many of the job's CPUs (of `allowed` where the job has none of its
    own), spread by step number so that concurrent steps start on different ones; its
    --mem: its RLIMIT_DATA (stepshim.STEP_MEM_ENV), inside the job's cgroup too.
    """
    env = bare_limits_env(job, allowed)
    if step.cpus is not None:
        pool = chosen_cpus(job, allowed) or tuple(
            sorted(os.sched_getaffinity(0) if allowed is None else allowed)
        )
        if step.cpus < len(pool):
            start = (max(step.step_id, 0) * step.cpus) % len(pool)
            picked = sorted(pool[(start + i) % len(pool)] for i in range(step.cpus))
            env[CPUS_ENV] = ",".join(map(str, picked))
    if step.mem_mb is not None:
        env[MEM_MB_ENV] = env[STEP_MEM_ENV] = str(step.mem_mb)
    return env


def _both_pipes(out: int, err: int) -> Iterator[bytes]:
    """Chunks from the pipes `out` and `err` as they come, err's as StderrChunk, until
    both have ended."""
    import selectors  # deferred: only a container job with -e apart needs it

    with selectors.DefaultSelector() as selector:
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        open_pipes = 2
        while open_pipes:
            for key, _ in selector.select():
                chunk = os.read(int(key.fd), 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    open_pipes -= 1
                else:
                    yield StderrChunk(chunk) if key.fd == err else chunk


def _switch_to_submitter(job: Job) -> pwd.struct_passwd | None:
    """The passwd entry a bare job must switch to, or None when it runs as the daemon's
    own user (the submitter is that user, or root's job under a root daemon). Raises
    LaunchError when it cannot run as its submitter: a daemon that is not root cannot
    switch (the submit check refuses such jobs; this catches one queued before)."""
    if job.uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise LaunchError(
            f"it would run as the daemon's user, not as its submitter {job.user} (uid "
            f"{job.uid}): only a root daemon starts processes as other users"
        )
    try:
        return pwd.getpwuid(job.uid)
    except KeyError:
        raise LaunchError(f"its submitter's uid {job.uid} has no entry in passwd here") from None


def _daemon_env() -> dict[str, str]:
    """The daemon's environment less what gbatch sets for a job."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GBATCH_", "NVIDIA_")) and not key.endswith("_VISIBLE_DEVICES")
    }


def _write_job_env(run_dir: Path, env: dict[str, str]) -> str:
    """Write the job's environment where the shim reads it (JOB_ENV_FILE); its path."""
    path = run_dir / JOB_ENV_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(fd, "w") as handle:
            json.dump(env, handle)
    except OSError as err:
        raise LaunchError(f"cannot write its environment file: {err}") from err
    return str(path)


def _login_env(entry: pwd.struct_passwd) -> dict[str, str]:
    """What a login of the submitter starts with, instead of the root daemon's own
    environment (its paths, sockets and credentials are not the job's)."""
    env = {
        "HOME": entry.pw_dir,
        "USER": entry.pw_name,
        "LOGNAME": entry.pw_name,
        "SHELL": entry.pw_shell or "/bin/sh",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    for key in ("LANG", "LC_ALL", "TZ"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _exit_status(run_dir: Path) -> RunStatus | None:
    """The run's end as its shim recorded it in exit.json, if it has ended."""
    ended = _read_json(run_dir / "exit.json")
    if ended is None:
        return None
    return RunStatus(
        "exited",
        int(ended["exit_code"]),
        int(ended["signal"]),
        float(ended["end_time"]),
        oom=bool(ended.get("oom", False)),  # the kernel killed it for memory (its cgroup)
    )


def _step_exit(step_dir: Path) -> StepStatus | None:
    """The step's end as its shim recorded it in exit.json, if it has ended."""
    ended = _read_json(step_dir / "exit.json")
    if ended is None:
        return None
    return StepStatus(
        "exited",
        int(ended["exit_code"]),
        int(ended["signal"]),
        float(ended["end_time"]),
        hangup=bool(ended.get("hangup", False)),
        error=str(ended.get("error", "")),
    )


def _is_shim_of(pid: int, run_dir: Path) -> bool:
    """Is `pid` alive and the shim of `run_dir`? (pids are reused.)"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(run_dir).encode() in cmdline and b"gbatch.shim" in cmdline


def _find_shim(run_dir: Path) -> int | None:
    """A shim that is starting has not written pids.json yet: look for it in /proc."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _is_shim_of(int(entry.name), run_dir):
            return int(entry.name)
    return None
