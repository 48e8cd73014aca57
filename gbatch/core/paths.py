"""Where the calling user's gbatch keeps its files, and which socket reaches a daemon.

Every command resolves these at start, so this module stays small: no dataclasses, no
config, no policy (they slow every start: bench/bench_startup.py; and only the daemon
reads config.yaml).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from gbatch.core import constants
from gbatch.core.datadir import user_data_dir

# Where a system-wide gbatchd (deploy/systemd/gbatchd.service) listens: clients with no
# GBATCH_SOCKET or GBATCH_HOME use it when it exists.
SYSTEM_SOCKET = Path(constants.SYSTEM_SOCKET)


class Paths:
    """Where one user's gbatch keeps its files and which socket reaches a daemon; frozen.

    `socket_file`: the socket when it is not the one in `home` (GBATCH_SOCKET, the system
    socket, or the daemon's `socket_path`); `socket_from` says which chose it: "home",
    "env" or "system". Not a dataclass: importing dataclasses slows every command's start
    (bench/bench_startup.py).
    """

    __slots__ = ("home", "socket_file", "socket_from")
    home: Path
    socket_file: Path | None
    socket_from: str

    def __init__(
        self, home: Path, socket_file: Path | None = None, socket_from: str = "home"
    ) -> None:
        object.__setattr__(self, "home", home)
        object.__setattr__(self, "socket_file", socket_file)
        object.__setattr__(self, "socket_from", socket_from)

    def with_socket(self, socket_file: Path | None, socket_from: str) -> Paths:
        """These paths with another socket (and who chose it)."""
        return Paths(self.home, socket_file, socket_from)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Paths is frozen: cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Paths is frozen: cannot delete {name}")

    def _key(self) -> tuple[Path, Path | None, str]:
        return (self.home, self.socket_file, self.socket_from)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Paths:
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Paths(home={self.home!r}, socket_file={self.socket_file!r}, "
            f"socket_from={self.socket_from!r})"
        )

    @property
    def config_file(self) -> Path:
        return self.home / "config.yaml"

    @property
    def store(self) -> Path:
        return self.home / "gbatch.db"

    @property
    def socket(self) -> Path:
        return self.socket_file or self.home_socket

    @property
    def home_socket(self) -> Path:
        return self.home / "gbatchd.sock"

    @property
    def lock(self) -> Path:
        return self.home / "gbatchd.lock"

    @property
    def daemon_log(self) -> Path:
        return self.home / "gbatchd.log"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def runs(self) -> Path:
        return self.home / "run"

    @property
    def gpu_history(self) -> Path:
        """The GPUs' sample history: one ring file per GPU (head/gpuhistory.py)."""
        return self.home / "gpu-history"

    def job_log(self, job_id: int) -> Path:
        return self.logs / f"{job_id}.log"

    def task_log(self, job_id: int) -> Path:
        """The output of the job's steps of several tasks, each line with its rank.

        What `gbatch logs --label` shows (gbatch/head/stepfanout.py writes it)."""
        return self.logs / f"{job_id}.tasks.log"

    def run_dir(self, job_id: int, attempt: int) -> Path:
        return self.runs / f"{job_id}.{attempt}"

    def make_run_dir(self, job_id: int, attempt: int) -> Path:
        """The run's directory, made if missing, it and `runs` the owner's alone.

        `runs` is made with its own mode: mkdir's parents=True would leave it to the umask.
        """
        run_dir = self.run_dir(job_id, attempt)
        self.runs.mkdir(mode=0o700, parents=True, exist_ok=True)
        run_dir.mkdir(mode=0o700, exist_ok=True)
        return run_dir

    @property
    def simulation_file(self) -> Path:
        return self.home / "simulated-gpus.json"


def resolve_paths(environ: Mapping[str, str], system_socket: Path = SYSTEM_SOCKET) -> Paths:
    """The files of the calling user's gbatch, and the socket to reach a daemon on.

    The socket is GBATCH_SOCKET, else GBATCH_HOME's, else `system_socket` when it exists
    (a lab's shared daemon), else the one in the user's data dir (the embedded default).
    """
    socket = environ.get("GBATCH_SOCKET")
    home = environ.get("GBATCH_HOME")
    if home:
        paths = Paths(Path(home).expanduser().absolute())
    else:
        paths = Paths(Path(user_data_dir()))
        if not socket and system_socket.exists():
            return paths.with_socket(system_socket, "system")
    if socket:
        return paths.with_socket(Path(socket).expanduser().absolute(), "env")
    return paths
