"""Bare jobs' CPUs and memory held by the kernel: one cgroup per run, v2 or v1.

The daemon's side. At start, `set_up` looks at what this host allows and returns a
Tree, or None and the one line that says why there is none (bare jobs then keep CPU
affinity and RLIMIT_DATA, gbatch/shim.py's Limits). `Tree.create` makes a run's cgroup
with its limits before its shim starts; `Tree.remove` kills what the run left in it and
removes it when the run is cleaned up; `Tree.reap` removes those a crashed daemon left.

Where the cgroups go, `<instance>` naming this daemon (a hash of its run directory, so
that two daemons on one host never touch each other's):
- v2 (unified: cgroup.controllers at the mount's top): `BASE/gbatch/<instance>/job_N.A`,
  BASE the highest cgroup above the daemon's own that it may write (the root for root;
  the delegated subtree for a user, e.g. systemd's user@UID.service). Not inside the
  daemon's own cgroup: v2 gives a cgroup with processes no children with controllers.
- v1 (a hierarchy per controller): `OWN/gbatch/<instance>/job_N.A` in each of the
  memory, cpu and cpuset hierarchies, OWN the daemon's own cgroup there (v1 has no such
  rule, and the daemon's own limits then hold its jobs too).

The memory controller is required; cpu and cpuset are used where present.

The shim's side (this module is on every bare job's start path: stdlib only, no
dataclasses or typing at run time). The daemon hands the shim a JobCgroup in
CGROUP_ENV; the shim moves itself into it for the fork of the job (`entered`), so the
job starts inside with no moment outside, and back out at once, so that the shim's own
memory and life are not the job's; after the job ends it asks `oom_killed`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence

# The JobCgroup of a run (JSON), from the daemon to the shim alone.
CGROUP_ENV = "GBATCH_SHIM_CGROUP"
CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT = "gbatch"
CONTROLLERS = ("memory", "cpu", "cpuset")
CPU_PERIOD_US = 100_000  # cpu.max's period, and v1's cpu.cfs_period_us
REMOVE_TIMEOUT = 10.0  # seconds to wait for what a run left behind to die


class CgroupError(Exception):
    """A run's cgroup could not be made."""


# -- parsing (pure) ------------------------------------------------------------------


class Mount:
    """One cgroup file system mount of /proc/self/mountinfo."""

    __slots__ = ("fstype", "options", "point", "root")

    def __init__(self, point: str, root: str, fstype: str, options: frozenset[str]) -> None:
        self.point = point
        self.root = root  # the cgroup the mount shows at `point`
        self.fstype = fstype
        self.options = options  # the mount's and the super block's options together

    def __repr__(self) -> str:
        return f"Mount({self.point!r}, {self.root!r}, {self.fstype!r})"


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 for a space) undone."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup (v1) and cgroup2 mounts of a /proc/PID/mountinfo text."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if dash < 6 or len(fields) < dash + 4:
            continue
        fstype = fields[dash + 1]
        if fstype not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(fields[5].split(",")) | frozenset(fields[dash + 3].split(","))
        mounts.append(Mount(_unescape(fields[4]), _unescape(fields[3]), fstype, options))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """A process's cgroup per controller from /proc/PID/cgroup; v2's under "".

    "4:memory:/a" gives {"memory": "/a"}; "2:cpu,cpuacct:/b" one entry per controller;
    "0::/c" gives {"": "/c"}. Named hierarchies (name=systemd) are left out.
    """
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            found[""] = path
            continue
        for name in controllers.split(","):
            if name and not name.startswith("name="):
                found[name] = path
    return found


def parse_keyed(text: str) -> dict[str, int]:
    """A flat keyed file ("oom_kill 3" a line: memory.events, memory.oom_control)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


def cpu_max(cpus: int, period: int = CPU_PERIOD_US) -> str:
    """v2's cpu.max for `cpus` CPUs' worth of time: "QUOTA PERIOD"."""
    return f"{cpus * period} {period}"


def cpu_list(cpus: Sequence[int]) -> str:
    """A cpuset's list ("0-3,6") of `cpus`."""
    ranges: list[str] = []
    for cpu in sorted(set(cpus)):
        if ranges and "-" in ranges[-1] and int(ranges[-1].split("-")[1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        elif ranges and "-" not in ranges[-1] and int(ranges[-1]) == cpu - 1:
            ranges[-1] = f"{ranges[-1]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def run_name(job_id: int, attempt: int) -> str:
    """A run's cgroup's name: job_N.A."""
    return f"job_{job_id}.{attempt}"


def parse_run_name(name: str) -> tuple[int, int] | None:
    """(job, attempt) of a run's cgroup's name; None for any other name."""
    if not name.startswith("job_"):
        return None
    job, _, attempt = name[4:].partition(".")
    if not (job.isdigit() and attempt.isdigit()):
        return None
    return int(job), int(attempt)


def run_of_process(proc_cgroup: str, instance: str) -> tuple[int, int] | None:
    """The run (job, attempt) whose cgroup a process is in, from its /proc/PID/cgroup text.

    None when it is in none of daemon `instance`'s run cgroups. A process a job put in
    a session of its own (setsid) is still in its run's cgroup: this is how it is known.
    """
    for path in parse_proc_cgroup(proc_cgroup).values():
        parts = path.rstrip("/").split("/")
        if len(parts) >= 2 and parts[-2] == instance:
            run = parse_run_name(parts[-1])
            if run is not None:
                return run
    return None


def instance_name(runs_dir: Path) -> str:
    """The name of one daemon's cgroups: a hash of its run directory (12 hex digits)."""
    import hashlib  # deferred: the daemon's side only

    return hashlib.sha256(str(runs_dir).encode()).hexdigest()[:12]


def _inside(mount: Mount, path: str) -> str | None:
    """`path` (of /proc/self/cgroup) relative to what `mount` shows; None if outside it."""
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    return path[len(root) :].lstrip("/")


# -- the shim's side -----------------------------------------------------------------


# The file system calls that make and remove cgroups, named so that a test can stand in
# for the kernel (which fills a new cgroup with its files) on a plain directory.
_mkdir = os.mkdir
_rmdir = os.rmdir


def _write(path: Path, value: str) -> None:
    # One write(2), no O_CREAT: a cgroup's files are the kernel's.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    with open(path) as handle:
        return handle.read()


class JobCgroup:
    """A run's cgroup as the shim sees it: where to move, and where its memory is counted.

    `moves`: (the run's cgroup, the daemon's own to go back to), one pair a hierarchy.
    `memory`: the run's cgroup of the memory controller; `holds_memory`: whether a
    limit (--mem) was written there, so that RLIMIT_DATA is not needed.
    """

    __slots__ = ("holds_memory", "memory", "moves", "version")

    def __init__(
        self,
        version: int,
        moves: tuple[tuple[str, str], ...],
        memory: str,
        holds_memory: bool,
    ) -> None:
        self.version = version
        self.moves = moves
        self.memory = memory
        self.holds_memory = holds_memory

    def __eq__(self, other: object) -> bool:
        return type(other) is JobCgroup and self.to_env() == other.to_env()

    def __repr__(self) -> str:
        return f"JobCgroup({self.to_env()})"

    def to_env(self) -> str:
        """The JSON that CGROUP_ENV carries."""
        return json.dumps(
            {
                "version": self.version,
                "moves": [list(m) for m in self.moves],
                "memory": self.memory,
                "holds_memory": self.holds_memory,
            }
        )

    @classmethod
    def take_from(cls, environ: MutableMapping[str, str]) -> JobCgroup | None:
        """The run's cgroup named in `environ` (CGROUP_ENV, taken out); None without one."""
        text = environ.pop(CGROUP_ENV, "")
        if not text:
            return None
        data = json.loads(text)
        return cls(
            int(data["version"]),
            tuple((str(a), str(b)) for a, b in data["moves"]),
            str(data["memory"]),
            bool(data["holds_memory"]),
        )

    @contextlib.contextmanager
    def entered(self) -> Iterator[str | None]:
        """This process inside the run's cgroup for the block, then back where it was.

        Yields None once inside, or why it could not enter (it is then where it was):
        a child forked in the block starts in the run's cgroup.
        """
        pid = str(os.getpid())
        done: list[tuple[str, str]] = []
        problem = None
        for inside, home in self.moves:
            try:
                _write(Path(inside) / "cgroup.procs", pid)
            except OSError as err:
                problem = f"cannot enter {inside}: {err.strerror or err}"
                break
            done.append((inside, home))
        try:
            yield problem
        finally:
            for _, home in done:
                with contextlib.suppress(OSError):
                    _write(Path(home) / "cgroup.procs", pid)

    def oom_kills(self) -> int | None:
        """How many of the run's processes the kernel killed for memory; None: unknown."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            return parse_keyed(_read(Path(self.memory) / name)).get("oom_kill")
        except OSError:
            return None

    def oom_killed(self, killed_by: int) -> bool:
        """Whether the run ended for memory: the kernel killed one of its processes for it.

        A v1 kernel before 4.13 counts no kills: the limit reached (memory.failcnt) and
        the job killed by SIGKILL stand in.
        """
        kills = self.oom_kills()
        if kills is not None:
            return kills > 0
        if self.version != 1 or killed_by != signal.SIGKILL:
            return False
        try:
            return int(_read(Path(self.memory) / "memory.failcnt")) > 0
        except (OSError, ValueError):
            return False


# -- the daemon's side ---------------------------------------------------------------


class Hierarchy:
    """Where one hierarchy's run cgroups go, and the controllers they get there.

    `top`: BASE/gbatch/<instance>, the runs' parent. `home`: the daemon's own cgroup,
    where its shims go back to.
    """

    __slots__ = ("controllers", "home", "top")

    def __init__(self, top: Path, home: Path, controllers: frozenset[str]) -> None:
        self.top = top
        self.home = home
        self.controllers = controllers

    def __repr__(self) -> str:
        return f"Hierarchy({str(self.top)!r}, {sorted(self.controllers)})"


class Tree:
    """This daemon's run cgroups on this host: made, found, removed.

    `sleep` and `monotonic` are parameters so tests need not wait.
    """

    def __init__(
        self,
        version: int,
        hierarchies: Sequence[Hierarchy],
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.version = version
        self.hierarchies = tuple(hierarchies)
        self._sleep = sleep
        self._monotonic = monotonic

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset().union(*(h.controllers for h in self.hierarchies))

    @property
    def instance(self) -> str:
        """This daemon's instance name (instance_name): the folder its run cgroups are in."""
        return self.hierarchies[0].top.name

    def describe(self) -> str:
        """What holds bare jobs here, in the start line's words."""
        have = [c for c in CONTROLLERS if c in self.controllers]
        held = []
        if "memory" in have:
            held.append("memory")
        if "cpu" in have:
            held.append("CPU time")
        held.append("CPUs (cpuset)" if "cpuset" in have else "CPUs (affinity: no cpuset)")
        where = self.hierarchies[0].top if self.version == 2 else self._v1_where()
        return (
            f"bare jobs: held by cgroup v{self.version} ({', '.join(have)}): their "
            f"{', '.join(held)}, one cgroup per run under {where}"
        )

    def _v1_where(self) -> str:
        tops = sorted(str(h.top) for h in self.hierarchies)
        return tops[0] if len(tops) == 1 else "{" + ", ".join(tops) + "}"

    def _dirs(self, job_id: int, attempt: int) -> list[tuple[Hierarchy, Path]]:
        name = run_name(job_id, attempt)
        return [(h, h.top / name) for h in self.hierarchies]

    def create(
        self,
        job_id: int,
        attempt: int,
        *,
        cpus: int | None,
        cpu_set: Sequence[int] = (),
        memory_mb: int | None,
    ) -> JobCgroup:
        """Make the run's cgroup with its limits; CgroupError (nothing left) if it cannot.

        `cpus`: -c (CPU time: cpus periods a period), `cpu_set`: the CPUs it may run on
        (empty: its parent's), `memory_mb`: --mem (in RAM: no swap beyond it).
        """
        made: list[Path] = []
        try:
            for hierarchy, path in self._dirs(job_id, attempt):
                with contextlib.suppress(FileExistsError):  # a crashed launch's: reused
                    _mkdir(path)
                made.append(path)
                self._limit(hierarchy, path, cpus, cpu_set, memory_mb)
        except OSError as err:
            for path in made:
                with contextlib.suppress(OSError):
                    _rmdir(path)
            raise CgroupError(f"cannot make its cgroup: {err}") from err
        return self.job_cgroup(job_id, attempt, holds_memory=memory_mb is not None)

    def _limit(
        self,
        hierarchy: Hierarchy,
        path: Path,
        cpus: int | None,
        cpu_set: Sequence[int],
        memory_mb: int | None,
    ) -> None:
        have = hierarchy.controllers
        if self.version == 2:
            if memory_mb is not None:
                _write(path / "memory.max", str(memory_mb << 20))
                if (path / "memory.swap.max").exists():
                    _write(path / "memory.swap.max", "0")
            if cpus is not None and "cpu" in have:
                _write(path / "cpu.max", cpu_max(cpus))
            if cpu_set and "cpuset" in have:
                _write(path / "cpuset.cpus", cpu_list(cpu_set))
            return
        if "memory" in have and memory_mb is not None:
            _write(path / "memory.limit_in_bytes", str(memory_mb << 20))
            # memory + swap: the same, so no swap (after the limit: memsw may not be less).
            if (path / "memory.memsw.limit_in_bytes").exists():
                _write(path / "memory.memsw.limit_in_bytes", str(memory_mb << 20))
        if "cpu" in have and cpus is not None:
            _write(path / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(path / "cpu.cfs_quota_us", str(cpus * CPU_PERIOD_US))
        if "cpuset" in have:
            # v1 takes no process into a cpuset without CPUs and memory nodes.
            cpus_text = cpu_list(cpu_set) if cpu_set else _read(path.parent / "cpuset.cpus")
            _write(path / "cpuset.cpus", cpus_text.strip())
            _write(path / "cpuset.mems", _read(path.parent / "cpuset.mems").strip())

    def job_cgroup(self, job_id: int, attempt: int, holds_memory: bool) -> JobCgroup:
        """What the shim needs of the run's cgroup (it need not exist: see `existing`)."""
        dirs = self._dirs(job_id, attempt)
        memory = next(str(p) for h, p in dirs if "memory" in h.controllers)
        moves = tuple((str(p), str(h.home)) for h, p in dirs)
        return JobCgroup(self.version, moves, memory, holds_memory)

    def existing(self, job_id: int, attempt: int, holds_memory: bool) -> JobCgroup | None:
        """The run's cgroup if it exists (a step of the run joins it), else None."""
        if not all(path.is_dir() for _, path in self._dirs(job_id, attempt)):
            return None
        return self.job_cgroup(job_id, attempt, holds_memory)

    def remove(self, job_id: int, attempt: int, timeout: float = REMOVE_TIMEOUT) -> bool:
        """Kill what is left in the run's cgroup and remove it; whether it is gone.

        Called once the run has ended: what remains are processes it left behind.
        """
        return self._remove([path for _, path in self._dirs(job_id, attempt)], timeout)

    def _remove(self, paths: list[Path], timeout: float) -> bool:
        paths = [p for p in paths if p.is_dir()]
        deadline = self._monotonic() + timeout
        while True:
            left = [p for p in paths if _kill_members(p)]
            if not left or self._monotonic() > deadline:
                break
            self._sleep(0.05)
        gone = True
        for path in paths:
            try:
                _rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone

    def runs(self) -> set[tuple[int, int]]:
        """(job, attempt) of every run cgroup of this daemon's there is."""
        found: set[tuple[int, int]] = set()
        for hierarchy in self.hierarchies:
            with contextlib.suppress(OSError):
                for entry in os.scandir(hierarchy.top):
                    run = parse_run_name(entry.name)
                    if run is not None and entry.is_dir(follow_symlinks=False):
                        found.add(run)
        return found

    def reap(self, is_stale: Callable[[int, int], bool]) -> list[tuple[int, int]]:
        """Remove the run cgroups for which `is_stale(job, attempt)`: those removed."""
        removed = []
        for run in sorted(self.runs()):
            if is_stale(*run) and self.remove(*run):
                removed.append(run)
        return removed

    def remove_all(self, timeout: float = REMOVE_TIMEOUT) -> bool:
        """Kill everything in this daemon's cgroups and remove them all (tests, clean-up)."""
        gone = all([self.remove(*run, timeout=timeout) for run in sorted(self.runs())])
        return self.remove_parents() and gone

    def remove_parents(self) -> bool:
        """Remove this daemon's gbatch/<instance> (and gbatch/) where empty; whether gone."""
        gone = True
        for hierarchy in self.hierarchies:
            for path in (hierarchy.top, hierarchy.top.parent):
                try:
                    _rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    if path == hierarchy.top:
                        gone = False
                    break
        return gone


def _kill_members(path: Path) -> bool:
    """SIGKILL every process in the cgroup at `path`; whether it had any."""
    try:
        members = _read(path / "cgroup.procs").split()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    if not members:
        return False
    if (path / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            _write(path / "cgroup.kill", "1")
            return True
    for pid in members:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    return True


# -- finding what the host allows ----------------------------------------------------


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK) and os.access(path / "cgroup.procs", os.W_OK)


def find(
    runs_dir: Path,
    *,
    root: Path = CGROUP_ROOT,
    mountinfo: str | None = None,
    self_cgroup: str | None = None,
) -> Tree | str:
    """This daemon's Tree on this host (nothing made yet), or why there can be none.

    `mountinfo` and `self_cgroup`: /proc/self/mountinfo's and /proc/self/cgroup's text
    (read here when None).
    """
    if mountinfo is None:
        mountinfo = _read(Path("/proc/self/mountinfo"))
    if self_cgroup is None:
        self_cgroup = _read(Path("/proc/self/cgroup"))
    mounts = parse_mountinfo(mountinfo)
    own = parse_proc_cgroup(self_cgroup)
    instance = instance_name(runs_dir)
    unified = next((m for m in mounts if m.fstype == "cgroup2" and m.point == str(root)), None)
    if unified is not None and (root / "cgroup.controllers").exists():
        return _find_v2(root, unified, own, instance)
    v1 = [m for m in mounts if m.fstype == "cgroup"]
    if v1:
        return _find_v1(v1, own, instance)
    return f"no cgroup file system is mounted at {root}"


def _find_v2(root: Path, mount: Mount, own: Mapping[str, str], instance: str) -> Tree | str:
    where = f"cgroup v2 at {root}"
    if "ro" in mount.options:
        return f"{where} is mounted read-only"
    relative = _inside(mount, own.get("", ""))
    if relative is None:
        return f"{where}: this process's cgroup {own.get('')!r} is outside the mount"
    home = root / relative if relative else root
    parts = Path(relative).parts
    # From the top down: the first writable is the highest (a delegated subtree's top).
    candidates = [root.joinpath(*parts[:depth]) for depth in range(len(parts) + 1)]
    base = next(
        (
            c
            for c in candidates
            if _writable(c) and os.access(c / "cgroup.subtree_control", os.W_OK)
        ),
        None,
    )
    if base is None:
        return (
            f"{where}: no cgroup from {root} down to {home} is writable by uid "
            f"{os.geteuid()} (none is delegated to it)"
        )
    return Tree(2, [Hierarchy(base / PARENT / instance, home, frozenset())])


def _find_v1(mounts: list[Mount], own: Mapping[str, str], instance: str) -> Tree | str:
    hierarchies: dict[str, Hierarchy] = {}
    for controller in CONTROLLERS:
        mount = next((m for m in mounts if controller in m.options), None)
        if mount is None:
            if controller == "memory":
                return "cgroup v1: no memory hierarchy is mounted"
            continue
        relative = _inside(mount, own.get(controller, "/"))
        home = Path(mount.point) / relative if relative else Path(mount.point)
        if relative is None or not _writable(home):
            if controller != "memory":
                continue
            if "ro" in mount.options:
                return f"cgroup v1: {mount.point} is mounted read-only"
            return (
                f"cgroup v1: this process's memory cgroup {home} is not writable by uid "
                f"{os.geteuid()}"
            )
        if mount.point in hierarchies:
            held = hierarchies[mount.point]
            held.controllers = held.controllers | {controller}
        else:
            top = home / PARENT / instance
            hierarchies[mount.point] = Hierarchy(top, home, frozenset({controller}))
    return Tree(1, list(hierarchies.values()))


def prepare(tree: Tree) -> str | None:
    """Make the tree's parents (gbatch/<instance>) with its controllers; None, or why not.

    v2: each level, from BASE down, enables in its subtree_control the controllers it
    is offered; memory must come through. v1: a cpuset level takes its parent's CPUs and
    memory nodes. What this made is removed again when it fails.
    """
    for hierarchy in tree.hierarchies:
        problem = _prepare_v2(hierarchy) if tree.version == 2 else _prepare_v1(hierarchy)
        if problem is not None:
            tree.remove_parents()
            return problem
    return None


def _prepare_v1(hierarchy: Hierarchy) -> str | None:
    for level in (hierarchy.top.parent, hierarchy.top):
        try:
            if not level.is_dir():
                _mkdir(level)
            if "cpuset" in hierarchy.controllers:
                for name in ("cpuset.cpus", "cpuset.mems"):
                    if not _read(level / name).strip():
                        _write(level / name, _read(level.parent / name).strip())
        except OSError as err:
            return f"cgroup v1: cannot make {level}: {err.strerror or err}"
    return None


def _prepare_v2(hierarchy: Hierarchy) -> str | None:
    """Enable memory, cpu and cpuset from BASE down to the runs' parent where offered;
    record in `hierarchy` what the runs get."""
    last_error = ""
    for level in (hierarchy.top.parent.parent, hierarchy.top.parent, hierarchy.top):
        try:
            if not level.is_dir():
                _mkdir(level)
            offered = set(_read(level / "cgroup.controllers").split())
        except OSError as err:
            return f"cgroup v2: cannot make {level}: {err.strerror or err}"
        for controller in CONTROLLERS:
            if controller not in offered:
                continue
            try:
                _write(level / "cgroup.subtree_control", f"+{controller}")
            except OSError as err:
                last_error = f" ({level}/cgroup.subtree_control: {err.strerror or err})"
    enabled = set(_read(hierarchy.top / "cgroup.subtree_control").split())
    hierarchy.controllers = frozenset(c for c in CONTROLLERS if c in enabled)
    if "memory" not in hierarchy.controllers:
        return (
            f"cgroup v2: the memory controller cannot be enabled for {hierarchy.top}"
            f"{last_error or ' (not offered to it)'}"
        )
    return None


def set_up(
    runs_dir: Path,
    enabled: bool = True,
    *,
    root: Path = CGROUP_ROOT,
    mountinfo: str | None = None,
    self_cgroup: str | None = None,
) -> tuple[Tree | None, str]:
    """The Tree this daemon's bare jobs run in, made ready, or None; and the start line.

    `enabled`: the config's bare_job_cgroups. The rest as find()'s, for tests.
    """
    fallback = "their CPUs are held by affinity and their memory by RLIMIT_DATA"
    if not enabled:
        return None, f"bare jobs: no cgroups (bare_job_cgroups: false): {fallback}"
    try:
        found = find(runs_dir, root=root, mountinfo=mountinfo, self_cgroup=self_cgroup)
    except OSError as err:
        found = f"cannot read this process's cgroups: {err}"
    if isinstance(found, str):
        return None, f"bare jobs: no cgroups ({found}): {fallback}"
    problem = prepare(found)
    if problem is not None:
        return None, f"bare jobs: no cgroups ({problem}): {fallback}"
    return found, found.describe()
