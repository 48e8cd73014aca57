"""Bare jobs' cgroups (gbatch/nodes/cgroups.py): the parsers, and the v2 layout written
into a temporary directory laid out as a cgroup v2 tree.

v2 is exercised only this way here: this machine's kernel mounts v1 (its real-kernel
tests are tests/integration/test_bare_cgroups.py). A FakeKernel stands in for what the
kernel does on a cgroup2 mount: a new directory gets the interface files, a controller
enabled in a parent's subtree_control is offered to its children, and a cgroup is
removed with its files.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from gbatch.nodes import cgroups
from gbatch.nodes.cgroups import CGROUP_ENV, JobCgroup, Tree

MOUNTINFO_V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
PROC_CGROUP_V1 = """\
9:name=systemd:/
4:memory:/process_api/abc
3:cpuset:/
2:cpuacct:/
1:cpu,cpuacct:/
0::/
"""
CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"


def test_mountinfo_gives_the_cgroup_mounts_with_their_options() -> None:
    text = MOUNTINFO_V1 + (
        "50 31 0:40 /docker/x /sys/fs/cgroup\\040v2 ro,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    mounts = cgroups.parse_mountinfo(text)
    assert [(m.point, m.fstype) for m in mounts] == [
        ("/sys/fs/cgroup/cpu", "cgroup"),
        ("/sys/fs/cgroup/cpuacct", "cgroup"),
        ("/sys/fs/cgroup/cpuset", "cgroup"),
        ("/sys/fs/cgroup/memory", "cgroup"),
        ("/sys/fs/cgroup/systemd", "cgroup"),
        ("/sys/fs/cgroup/unified", "cgroup2"),
        ("/sys/fs/cgroup v2", "cgroup2"),
    ]
    assert "memory" in mounts[3].options and "ro" in mounts[-1].options
    assert mounts[-1].root == "/docker/x"


def test_proc_cgroup_gives_each_controllers_cgroup_and_v2s_under_the_empty_name() -> None:
    assert cgroups.parse_proc_cgroup(PROC_CGROUP_V1) == {
        "memory": "/process_api/abc",
        "cpuset": "/",
        "cpuacct": "/",
        "cpu": "/",
        "": "/",
    }
    assert cgroups.parse_proc_cgroup("0::/user.slice/user-1000.slice\n") == {
        "": "/user.slice/user-1000.slice"
    }


def test_keyed_files_and_cpu_values() -> None:
    events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n"
    assert cgroups.parse_keyed(events)["oom_kill"] == 1
    assert cgroups.parse_keyed("oom_kill_disable 0\nunder_oom 0\n").get("oom_kill") is None
    assert cgroups.cpu_max(2) == "200000 100000"
    assert cgroups.cpu_list([3, 0, 1, 2, 6, 8, 9]) == "0-3,6,8-9"
    assert cgroups.cpu_list([5]) == "5"
    assert cgroups.run_name(12, 3) == "job_12.3"
    assert cgroups.parse_run_name("job_12.3") == (12, 3)
    assert cgroups.parse_run_name("job_x.3") is None
    assert cgroups.parse_run_name("cgroup.procs") is None


def test_the_shim_takes_the_run_cgroup_out_of_the_jobs_environment() -> None:
    held = JobCgroup(1, (("/cg/memory/job_1.1", "/cg/memory"),), "/cg/memory/job_1.1", True)
    environ = {CGROUP_ENV: held.to_env(), "HOME": "/home/alice"}
    assert JobCgroup.take_from(environ) == held
    assert environ == {"HOME": "/home/alice"}
    assert JobCgroup.take_from(environ) is None


class FakeKernel:
    """What a cgroup2 mount does, on a plain directory (see the module's docstring)."""

    def __init__(self, root: Path, controllers: str = CONTROLLERS) -> None:
        self.root = root
        root.mkdir()
        self._fill(root, controllers)

    def _fill(self, path: Path, offered: str) -> None:
        files = {
            "cgroup.controllers": offered,
            "cgroup.subtree_control": "",
            "cgroup.procs": "",
            "cgroup.kill": "",
        }
        if path != self.root:
            files.update(
                {
                    "memory.max": "max",
                    "memory.swap.max": "max",
                    "memory.events": "oom 0\noom_kill 0\n",
                    "cpu.max": "max 100000",
                    "cpuset.cpus": "",
                }
            )
        for name, text in files.items():
            (path / name).write_text(text)

    def mkdir(self, path: str | os.PathLike[str], mode: int = 0o777) -> None:
        path = Path(path)
        os.mkdir(path, mode)
        self._fill(path, (path.parent / "cgroup.subtree_control").read_text())

    def rmdir(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        if any(p.is_dir() for p in path.iterdir()) or (path / "cgroup.procs").read_text():
            raise OSError(16, "Device or resource busy")
        for each in path.iterdir():
            each.unlink()
        os.rmdir(path)

    def write(self, path: Path, value: str) -> None:
        if path.name == "cgroup.subtree_control":
            offered = (path.parent / "cgroup.controllers").read_text().split()
            now = set(path.read_text().split())
            name = value.lstrip("+")
            if name not in offered:
                raise OSError(2, "No such file or directory")
            now.add(name)
            value = " ".join(c for c in offered if c in now)
        if not path.exists():
            raise OSError(13, "Permission denied")
        path.write_text(value)

    def mountinfo(self, options: str = "rw,nosuid") -> str:
        return f"30 23 0:26 / {self.root} {options} - cgroup2 cgroup2 rw,nsdelegate\n"


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeKernel:
    fake = FakeKernel(tmp_path / "cgroup")
    monkeypatch.setattr(cgroups, "_mkdir", fake.mkdir)
    monkeypatch.setattr(cgroups, "_rmdir", fake.rmdir)
    monkeypatch.setattr(cgroups, "_write", fake.write)
    return fake


def daemon_in(kernel: FakeKernel, *parts: str) -> str:
    """/proc/self/cgroup of a daemon in cgroup `parts` (made, with its process)."""
    path = kernel.root
    for part in parts:
        path = path / part
        if not path.exists():
            kernel.mkdir(path)
    (path / "cgroup.procs").write_text("")
    return "0::/" + "/".join(parts) + "\n"


def v2_tree(kernel: FakeKernel, runs: Path) -> tuple[Tree | None, str]:
    return cgroups.set_up(
        runs,
        root=kernel.root,
        mountinfo=kernel.mountinfo(),
        self_cgroup=daemon_in(kernel, "system.slice", "gbatchd.service"),
    )


def test_v2_runs_go_under_the_root_with_memory_cpu_and_cpuset_enabled_down_to_them(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    tree, line = v2_tree(kernel, tmp_path / "run")
    assert tree is not None, line
    top = kernel.root / "gbatch" / cgroups.instance_name(tmp_path / "run")
    assert line.startswith("bare jobs: held by cgroup v2 (memory, cpu, cpuset)")
    assert str(top) in line
    for level in (kernel.root, kernel.root / "gbatch", top):
        assert (level / "cgroup.subtree_control").read_text() == "cpuset cpu memory"

    held = tree.create(7, 2, cpus=2, cpu_set=(1, 2), memory_mb=64)
    run = top / "job_7.2"
    assert (run / "memory.max").read_text() == str(64 << 20)
    assert (run / "memory.swap.max").read_text() == "0"  # the limit is RAM
    assert (run / "cpu.max").read_text() == "200000 100000"
    assert (run / "cpuset.cpus").read_text() == "1-2"
    home = kernel.root / "system.slice" / "gbatchd.service"
    assert held == JobCgroup(2, ((str(run), str(home)),), str(run), True)
    assert tree.existing(7, 2, holds_memory=True) == held
    assert tree.existing(7, 3, holds_memory=True) is None


def test_v2_without_limits_the_run_cgroup_keeps_the_kernels_defaults(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    tree, _ = v2_tree(kernel, tmp_path / "run")
    assert tree is not None
    held = tree.create(8, 1, cpus=None, memory_mb=None)
    run = Path(held.memory)
    assert (run / "memory.max").read_text() == "max"
    assert (run / "memory.swap.max").read_text() == "max"
    assert (run / "cpu.max").read_text() == "max 100000"
    assert not held.holds_memory


def test_the_shim_enters_the_run_cgroup_for_the_fork_and_goes_back_home(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    tree, _ = v2_tree(kernel, tmp_path / "run")
    assert tree is not None
    held = tree.create(9, 1, cpus=1, memory_mb=128)
    run, home = (Path(p) for p in held.moves[0])
    with held.entered() as problem:
        assert problem is None
        assert (run / "cgroup.procs").read_text() == str(os.getpid())
    assert (home / "cgroup.procs").read_text() == str(os.getpid())

    assert not held.oom_killed(0)
    (run / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert held.oom_killed(0)

    gone = JobCgroup(2, ((str(tmp_path / "nowhere"), str(home)),), str(run), True)
    with gone.entered() as problem:
        assert problem is not None and problem.startswith(f"cannot enter {tmp_path}/nowhere")


def test_v2_a_run_cgroup_is_removed_and_stale_ones_are_reaped(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    tree, _ = v2_tree(kernel, tmp_path / "run")
    assert tree is not None
    for job in (1, 2, 3):
        tree.create(job, 1, cpus=None, memory_mb=None)
    assert tree.remove(1, 1)
    assert tree.runs() == {(2, 1), (3, 1)}
    assert tree.reap(lambda job, attempt: job == 3) == [(3, 1)]
    assert tree.runs() == {(2, 1)}
    assert not tree.remove_parents()  # run 2 is still there
    assert tree.remove_all()
    assert not (kernel.root / "gbatch").exists()


def test_v2_a_busy_run_cgroup_is_killed_through_cgroup_kill(
    kernel: FakeKernel, tmp_path: Path
) -> None:
    tree, _ = v2_tree(kernel, tmp_path / "run")
    assert tree is not None
    run = Path(tree.create(4, 1, cpus=None, memory_mb=None).memory)
    (run / "cgroup.procs").write_text("999999\n")
    clock = iter(range(100))
    tree._monotonic = lambda: float(next(clock))  # the deadline passes at once
    tree._sleep = lambda _: None
    assert not tree.remove(4, 1, timeout=3)  # a process that does not die: left
    assert (run / "cgroup.kill").read_text() == "1"


def test_v2_a_delegated_subtree_is_used_when_the_root_is_not_writable(
    kernel: FakeKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delegated = kernel.root / "user.slice" / "user@1000.service"
    own = daemon_in(kernel, "user.slice", "user@1000.service", "app.slice", "gbatchd.scope")
    real_access = os.access
    monkeypatch.setattr(
        os,
        "access",
        lambda path, mode: (
            real_access(path, mode) and (mode != os.W_OK or str(path).startswith(str(delegated)))
        ),
    )
    # systemd offers the delegated subtree memory and cpu, not cpuset.
    (kernel.root / "user.slice" / "cgroup.subtree_control").write_text("cpu memory pids")
    (delegated / "cgroup.controllers").write_text("cpu memory pids")
    tree, line = cgroups.set_up(
        tmp_path / "run", root=kernel.root, mountinfo=kernel.mountinfo(), self_cgroup=own
    )
    assert tree is not None, line
    assert tree.hierarchies[0].top.parent == delegated / "gbatch"
    assert line.startswith("bare jobs: held by cgroup v2 (memory, cpu): ")
    assert "CPUs (affinity: no cpuset)" in line
    held = tree.create(1, 1, cpus=1, cpu_set=(0,), memory_mb=32)
    assert (Path(held.memory) / "cpuset.cpus").read_text() == ""  # not written


def test_v2_falls_back_in_one_line_saying_why(
    kernel: FakeKernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "run"
    own = daemon_in(kernel, "system.slice", "gbatchd.service")
    tail = ": their CPUs are held by affinity and their memory by RLIMIT_DATA"

    tree, line = cgroups.set_up(
        runs, root=kernel.root, mountinfo=kernel.mountinfo("ro,nosuid"), self_cgroup=own
    )
    assert tree is None
    assert line == f"bare jobs: no cgroups (cgroup v2 at {kernel.root} is mounted read-only){tail}"

    tree, line = cgroups.set_up(runs, False, root=kernel.root)
    assert (tree, line) == (None, f"bare jobs: no cgroups (bare_job_cgroups: false){tail}")

    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: m != os.W_OK and real_access(p, m))
    tree, line = cgroups.set_up(
        runs, root=kernel.root, mountinfo=kernel.mountinfo(), self_cgroup=own
    )
    assert tree is None
    assert f"no cgroup from {kernel.root} down to {kernel.root}/system.slice/" in line
    assert "(none is delegated to it)" in line
    monkeypatch.setattr(os, "access", real_access)

    (kernel.root / "cgroup.controllers").write_text("cpu io pids")  # no memory offered
    tree, line = cgroups.set_up(
        runs, root=kernel.root, mountinfo=kernel.mountinfo(), self_cgroup=own
    )
    assert tree is None
    assert "the memory controller cannot be enabled" in line
    assert not (kernel.root / "gbatch").exists()  # nothing left behind

    tree, line = cgroups.set_up(runs, root=tmp_path / "none", mountinfo="", self_cgroup="")
    assert (
        line == f"bare jobs: no cgroups (no cgroup file system is mounted at {tmp_path}/none){tail}"
    )


def test_v1_oom_reads_the_kill_counter_and_an_old_kernel_the_failcnt(tmp_path: Path) -> None:
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    held = JobCgroup(1, (), str(tmp_path), True)
    assert held.oom_killed(0)
    (tmp_path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    (tmp_path / "memory.failcnt").write_text("5\n")
    assert held.oom_killed(signal.SIGKILL)
    assert not held.oom_killed(0)
    (tmp_path / "memory.failcnt").write_text("0\n")
    assert not held.oom_killed(signal.SIGKILL)


def test_the_run_cgroup_env_is_json_the_shim_reads_without_the_daemon() -> None:
    held = JobCgroup(2, (("/a/job_1.1", "/a"),), "/a/job_1.1", False)
    assert json.loads(held.to_env()) == {
        "version": 2,
        "moves": [["/a/job_1.1", "/a"]],
        "memory": "/a/job_1.1",
        "holds_memory": False,
    }


def test_a_process_is_known_by_its_runs_cgroup_whatever_its_session() -> None:
    instance = "0123456789ab"
    v1 = (
        "12:pids:/user.slice\n"
        f"4:memory:/gbatch/{instance}/job_17.2\n"
        "1:name=systemd:/user.slice/session-1.scope\n"
    )
    assert cgroups.run_of_process(v1, instance) == (17, 2)
    assert cgroups.run_of_process(f"0::/system.slice/gbatch/{instance}/job_5.1\n", instance) == (
        5,
        1,
    )
    # Another daemon's runs, the instance folder itself, other cgroups: none.
    assert cgroups.run_of_process("0::/gbatch/fedcba987654/job_5.1\n", instance) is None
    assert cgroups.run_of_process(f"0::/gbatch/{instance}\n", instance) is None
    assert cgroups.run_of_process("0::/user.slice/job_5.1\n", instance) is None
    assert cgroups.run_of_process("garbage", instance) is None
