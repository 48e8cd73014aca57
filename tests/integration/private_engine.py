"""A docker engine of the test's own: its own dockerd (and the containerd it manages),
socket, data and exec roots under one short temp dir, so a test may crash and restart
it without touching the machine's main engine, which other tests and people use.

    with private_engine() as engine:          # started, gbatch-test:latest loaded
        engine.crash(); engine.start()       # SIGKILL, as a crash; then up again
        engine.stop(); engine.start()        # SIGTERM, a clean restart
        engine.docker("ps")                  # the docker CLI aimed at it
        engine.client_script                 # a one-word docker command for config.yaml

dockerd runs in a network namespace of its own (`unshare --net`) with no bridge, no
iptables rules and no IP forwarding: it cannot touch the host's network. That matters:
a dockerd started with `--bridge=none` in the host's namespace deletes the host's
`docker0` on start-up (moby's removeDefaultBridgeInterface), which breaks the main
engine's networking. Its unix socket is a file, so it answers from any namespace.
`close()` (the context manager's exit) always tears everything down: it removes the
containers (starting the engine again if it is down, so docker cleans up after
itself), stops dockerd, kills any containerd shim or container left behind, unmounts
what dockerd mounted under its roots, and removes the directory.

Plain functions, no fixtures: nothing starts unless called. Locally a missing dockerd
(or not being root, which dockerd needs) skips the test; in CI (env CI == "true") it
fails it. `.ci/setup-docker.sh` installs dockerd and the stand-in GPU hook.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerenv import TEST_IMAGE

# The stand-in nvidia-container-runtime-hook: `docker run --gpus` needs it on dockerd's
# PATH on a machine without NVIDIA's (see .ci/setup-docker.sh).
HOOK_DIR = Path("/opt/gbatch-test-hook")
_START_WAIT_S = 30.0
_STOP_WAIT_S = 30.0  # dockerd gives each container up to 10 s to stop on SIGTERM
_CLI_TIMEOUT_S = 30


def find_dockerd() -> list[str]:
    """The argv prefix that starts dockerd in a network namespace of its own. Skips
    the test without dockerd or unshare (fails it in CI), or when not root."""
    dockerd, unshare = _which("dockerd"), _which("unshare")
    if dockerd is None or unshare is None:
        _skip_or_fail(
            "a private docker engine needs dockerd and unshare (util-linux); "
            "run .ci/setup-docker.sh as root"
        )
    if os.geteuid() != 0:
        _skip_or_fail("a private docker engine needs root (dockerd runs as root)")
    assert dockerd is not None and unshare is not None
    return [unshare, "--net", "--", dockerd]


def _which(program: str) -> str | None:
    """On PATH, else in the sbin directories a non-login PATH may lack."""
    return shutil.which(program) or next(
        (
            path
            for path in (f"/usr/sbin/{program}", f"/usr/bin/{program}", f"/sbin/{program}")
            if os.access(path, os.X_OK)
        ),
        None,
    )


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


class PrivateEngine:
    """One private dockerd; see the module's docstring. Not thread-safe."""

    def __init__(self, dockerd: list[str], root: Path) -> None:
        self.dockerd = dockerd  # argv prefix: unshare --net -- dockerd
        self.root = root  # short: unix socket paths are limited to 107 bytes
        self.socket = root / "docker.sock"
        self.data_root = root / "data"
        self.exec_root = root / "exec"
        self.pidfile = root / "dockerd.pid"
        self.log = root / "dockerd.log"
        self.config = root / "daemon.json"
        self.config.write_text("{}\n")  # never the machine's /etc/docker/daemon.json
        self.client = ["docker", "-H", f"unix://{self.socket}"]
        self.client_script = root / "docker"
        self.client_script.write_text(
            "#!/bin/sh\n# the docker CLI, aimed at the private engine\n"
            f'exec docker -H "unix://{self.socket}" "$@"\n'
        )
        self.client_script.chmod(0o755)
        self.process: subprocess.Popen[bytes] | None = None
        # Every container start the engine reported, in order, over all its lives:
        # a container that came back to life shows up twice.
        self.container_starts: list[str] = []
        self._events: list[subprocess.Popen[str]] = []

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start dockerd; return once it answers. Raises RuntimeError (with the log's
        tail) when it exits or does not answer in time."""
        if self.running():
            raise RuntimeError("the private engine is already running")
        env = dict(os.environ, PATH=f"{HOOK_DIR}:{os.environ.get('PATH', '')}")
        # The events of this life from its first moment on (engines keep them in
        # memory, so each life starts with none): a start during restore is seen too.
        since = f"{time.time() - 1:.3f}"
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    *self.dockerd,
                    "--config-file",
                    str(self.config),
                    "--data-root",
                    str(self.data_root),
                    "--exec-root",
                    str(self.exec_root),
                    "--pidfile",
                    str(self.pidfile),
                    "--host",
                    f"unix://{self.socket}",
                    # Its own namespace has no docker0 to make or delete; no NAT either.
                    "--bridge=none",
                    "--iptables=false",
                    "--ip6tables=false",
                    "--ip-masq=false",
                    "--ip-forward=false",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # a ^C to pytest must not hit it before close()
            )
        deadline = time.monotonic() + _START_WAIT_S
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"dockerd did not answer in {_START_WAIT_S:g} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        self._record_container_starts(since)

    def _record_container_starts(self, since: str) -> None:
        """Follow this life's start events into container_starts; the follower ends
        by itself when dockerd goes away."""
        events = subprocess.Popen(
            [
                *self.client,
                "events",
                "--since",
                since,
                "--filter",
                "type=container",
                "--filter",
                "event=start",
                "--format",
                "{{.Actor.Attributes.name}}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._events.append(events)

        def follow() -> None:
            assert events.stdout is not None
            for line in events.stdout:
                self.container_starts.append(line.strip())

        threading.Thread(target=follow, name="engine-events", daemon=True).start()

    def crash(self) -> None:
        """SIGKILL dockerd, as a crash would; its containerd dies with it, the
        containers' shims (and so the containers) live on. Returns once both are gone:
        a dockerd started while the old containerd's pid still exists (a zombie waiting
        for init to reap it) takes it for a live containerd, waits on it and gives up."""
        containerd_config = str(self.exec_root / "containerd" / "containerd.toml").encode()
        containerd = [pid for pid, cmdline in _processes() if containerd_config in cmdline]
        self._signal_and_wait(signal.SIGKILL)
        deadline = time.monotonic() + _STOP_WAIT_S
        while any(Path(f"/proc/{pid}").exists() for pid in containerd):
            if time.monotonic() > deadline:
                raise RuntimeError("the private engine's containerd outlived its dockerd")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM dockerd, a clean shutdown: it stops every container first."""
        self._signal_and_wait(signal.SIGTERM)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def answers(self) -> bool:
        try:
            done = self.docker("version", "--format", "{{.Server.Version}}", timeout=5)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and bool(done.stdout.strip())

    def _signal_and_wait(self, sig: signal.Signals) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=_STOP_WAIT_S)

    # -- using it ---------------------------------------------------------------------

    def docker(
        self, *args: str, check: bool = False, timeout: float = _CLI_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this engine."""
        done = subprocess.run(
            [*self.client, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} -> {done.returncode}: {done.stderr}")
        return done

    def load_image(self, image: str = TEST_IMAGE) -> None:
        """Copy `image` from the main engine into this one (no registry involved)."""
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        assert save.stdout is not None
        load = subprocess.run(
            [*self.client, "load"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        save.stdout.close()
        if save.wait(timeout=120) != 0 or load.returncode != 0:
            raise RuntimeError(f"loading {image} into the private engine failed: {load.stderr}")

    def container_pid(self, name: str) -> int:
        """The pid (in this machine's namespace) of container `name`'s first process:
        it outlives a crashed engine under its shim, and is gone once the container ends."""
        pid = int(self.docker("inspect", "-f", "{{.State.Pid}}", name, check=True).stdout)
        assert pid > 0, f"{name} is not running"
        return pid

    def running_names(self) -> set[str]:
        """Names of the containers running now (empty while the engine is down)."""
        done = self.docker("ps", "--format", "{{.Names}}")
        return set(done.stdout.split()) if done.returncode == 0 else set()

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"

    # -- teardown ---------------------------------------------------------------------

    def close(self) -> None:
        """Tear everything down; safe to call in any state, and more than once."""
        if self.root.exists():
            self._remove_containers()
            self.stop()
            for events in self._events:
                with contextlib.suppress(ProcessLookupError):
                    events.kill()
                events.wait(timeout=_CLI_TIMEOUT_S)
            self._kill_leftover_processes()
            _unmount_under(self.root)
            shutil.rmtree(self.root, ignore_errors=True)

    def _remove_containers(self) -> None:
        """Through docker itself, so it unmounts and cleans cgroups: start the engine
        again if it is down (best effort; _kill_leftover_processes is the fallback)."""
        if not self.running():
            with contextlib.suppress(RuntimeError, OSError):
                self.start()
        if not self.running():
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            ids = self.docker("ps", "-aq").stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, timeout=60)

    def _kill_leftover_processes(self) -> None:
        """containerd and the shims (with their containers) that name our exec root.
        A container's init is its shim's child; killing it ends its pid namespace."""
        ours = str(self.exec_root).encode()
        mine = [pid for pid, cmdline in _processes() if ours in cmdline]
        for pid in mine:
            for child in _children(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in mine) and time.monotonic() < deadline:
            time.sleep(0.05)


@contextlib.contextmanager
def private_engine(image: str | None = TEST_IMAGE) -> Iterator[PrivateEngine]:
    """A started private engine with `image` loaded (None: none), torn down on exit."""
    engine = PrivateEngine(find_dockerd(), Path(tempfile.mkdtemp(prefix="gbe-", dir="/tmp")))
    try:
        engine.start()
        if image is not None:
            engine.load_image(image)
        yield engine
    finally:
        engine.close()


def _processes() -> Iterator[tuple[int, bytes]]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                yield int(entry.name), (entry / "cmdline").read_bytes()


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name may hold spaces or parentheses: split after the last ')'.
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                children.append(int(entry.name))
    return children


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _unmount_under(root: Path) -> None:
    """Unmount everything mounted at or below `root`, deepest first. dockerd bind-mounts
    its data root onto itself and mounts overlays and network namespaces below it;
    mounts may be stacked, so repeat until none is left (lazily as a last resort)."""
    for attempt in range(5):
        mounted = _mount_points_under(root)
        if not mounted:
            return
        for point in sorted(mounted, key=lambda p: p.count("/"), reverse=True):
            flags = ["-l"] if attempt >= 3 else []
            subprocess.run(["umount", *flags, point], capture_output=True, check=False)


def _mount_points_under(root: Path) -> list[str]:
    prefix = str(root)
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # Field 5 is the mount point, with space, tab, newline and backslash escaped.
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return points
