"""Bare jobs in cgroups of their own, on this machine's real kernel, through the real CLI
and a root daemon (gbatch/nodes/cgroups.py).

The kernel here mounts cgroup v1 (memory, cpu, cpuset hierarchies), so that is what
these prove end to end: the kernel kills a job over its --mem and sacct reads
OUT_OF_MEMORY; a -c job's cgroup has its CPU quota, its CPUs and its memory limit, and
its steps run in it; the cgroup is gone once the job has ended; a restarted daemon
removes one an earlier daemon left; a daemon that cannot make cgroups says so once and
keeps affinity and RLIMIT_DATA. cgroup v2 is exercised only against a directory laid
out as a v2 tree (tests/unit/test_cgroups.py). Every cgroup these tests make is removed
however they end (conftest.kill_leftover_jobs).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from asuser import as_user, preload, run_cli, temp_users
from conftest import (
    FAST_CONFIG,
    Head,
    is_gone,
    kill_leftover_jobs,
    make_head,
    require_root,
    shared_home,
    wait_for,
)

from gbatch.nodes import cgroups

PY = sys.executable
# What the job prints of its own cgroups (v1): each controller's path and files.
SHOW_CGROUPS = """\
import json, resource
own = {}
for line in open("/proc/self/cgroup"):
    _, names, path = line.strip().split(":", 2)
    for name in names.split(","):
        own[name] = path
def read(controller, name):
    return open(f"/sys/fs/cgroup/{controller}{own[controller]}/{name}").read().strip()
print(json.dumps({
    "paths": {c: own[c] for c in ("memory", "cpu", "cpuset")},
    "limit": read("memory", "memory.limit_in_bytes"),
    "memsw": read("memory", "memory.memsw.limit_in_bytes"),
    "quota": read("cpu", "cpu.cfs_quota_us"),
    "period": read("cpu", "cpu.cfs_period_us"),
    "cpus": read("cpuset", "cpuset.cpus"),
    "rlimit_data": resource.getrlimit(resource.RLIMIT_DATA)[0],
}))
"""


def tree_of(head: Head) -> cgroups.Tree:
    found = cgroups.find(head.home / "run")
    assert not isinstance(found, str), found
    return found


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    """A root daemon on a host where it may make cgroups (v1 here)."""
    if os.geteuid() != 0:
        pytest.skip("a daemon makes cgroups as root here (v1 delegates nothing)")
    found = cgroups.find(tmp_path / "home" / "run")
    if isinstance(found, str) or found.version != 1:
        pytest.skip(f"needs a writable cgroup v1 host: {found}")
    made = make_head(tmp_path / "home")
    made.start()
    try:
        yield made
    finally:
        made.stop()
        kill_leftover_jobs(made.home)


def start_lines(head: Head) -> list[str]:
    return [
        line
        for line in (head.home / "gbatchd.log").read_text().splitlines()
        if "bare jobs: " in line
    ]


def test_a_bare_job_over_its_memory_is_killed_by_the_kernel_and_reads_out_of_memory(
    head: Head,
) -> None:
    job_id = head.sbatch("--mem", "64M", "--wrap", "python3 -c 'bytearray(256 << 20)'")
    head.wait_state(job_id, "OUT_OF_MEMORY", timeout=60)
    state = head.run("sacct", "-j", str(job_id), "-n", "-P", "-o", "State", check=True)
    assert state.stdout.splitlines()[0] == "OUT_OF_MEMORY"
    listed = head.run("squeue", "-t", "OOM", "-h", "-o", "%i %T", check=True).stdout
    assert listed.split() == [str(job_id), "OUT_OF_MEMORY"]
    log = head.run("logs", str(job_id), check=True).stdout
    assert "MemoryError" not in log  # the kernel's kill, not a refused allocation


def test_a_bare_jobs_cgroup_holds_its_cpus_and_memory_and_is_gone_after_it(
    head: Head, tmp_path: Path
) -> None:
    script = tmp_path / "show.py"
    script.write_text(SHOW_CGROUPS)
    job_id = head.sbatch("-c", "1", "--mem", "100M", "--wrap", f"python3 {script}")
    head.wait_state(job_id, "COMPLETED", timeout=60)
    seen = json.loads(head.run("logs", str(job_id), check=True).stdout.splitlines()[-1])
    instance = cgroups.instance_name(head.home / "run")
    for controller, path in seen["paths"].items():
        assert path.endswith(f"/gbatch/{instance}/job_{job_id}.1"), (controller, path)
    assert seen["limit"] == seen["memsw"] == str(100 << 20)  # RAM, no swap beyond it
    assert (seen["quota"], seen["period"]) == ("100000", "100000")  # one CPU's time
    assert seen["cpus"].isdigit()  # one CPU
    assert seen["rlimit_data"] == -1  # the cgroup holds memory: no RLIMIT_DATA
    tree = tree_of(head)
    wait_for(lambda: (job_id, 1) not in tree.runs(), 30, "the run's cgroup to be removed")
    assert not any((h.top / f"job_{job_id}.1").exists() for h in tree.hierarchies)


def test_a_step_runs_in_its_jobs_cgroup(head: Head) -> None:
    job_id = head.sbatch(
        "--mem", "100M", "--wrap", f"{PY} -m gbatch srun grep memory /proc/self/cgroup"
    )
    head.wait_state(job_id, "COMPLETED", timeout=60)
    log = head.run("logs", str(job_id), check=True).stdout
    instance = cgroups.instance_name(head.home / "run")
    assert f"/gbatch/{instance}/job_{job_id}.1" in log, log


def test_a_job_cannot_widen_its_cpus_past_its_cpuset(head: Head, tmp_path: Path) -> None:
    script = tmp_path / "widen.py"
    script.write_text(
        "import os\n"
        "os.sched_setaffinity(0, range(os.cpu_count()))\n"
        "print(sorted(os.sched_getaffinity(0)))\n"
    )
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to tell one from all")
    job_id = head.sbatch("-c", "1", "--wrap", f"python3 {script}")
    head.wait_state(job_id, "COMPLETED", timeout=60)
    cpus = json.loads(head.run("logs", str(job_id), check=True).stdout.splitlines()[-1])
    assert len(cpus) == 1, cpus  # affinity alone would have let it take them all


def test_what_a_job_leaves_running_is_killed_when_it_ends(head: Head) -> None:
    starts = (
        "python3 -c 'import subprocess; "
        'print(subprocess.Popen(["sleep", "300"], start_new_session=True).pid)\''
    )
    job_id = head.sbatch("--wrap", starts)
    head.wait_state(job_id, "COMPLETED", timeout=60)
    left = int(head.run("logs", str(job_id), check=True).stdout.split()[-1])
    try:
        wait_for(lambda: is_gone(left), 30, "the job's left-behind sleep to be killed")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)


def test_a_students_job_cannot_raise_its_limit_or_leave_its_cgroup() -> None:
    require_root("to make a user and run a root daemon for them")
    found = cgroups.find(Path("/nonexistent/run"))
    if isinstance(found, str) or found.version != 1:
        pytest.skip(f"needs a writable cgroup v1 host: {found}")
    preload()
    with temp_users("gbcg", ["student"]) as users, shared_home("gbatch-cgroup-") as head:
        student = users["student"]
        jobs = head.home.parent / "jobs"
        jobs.mkdir()
        os.chown(jobs, student.uid, student.gid)
        head.start()
        try:

            def submit() -> dict[str, object]:
                os.chdir(jobs)
                return run_cli(head.home, "sbatch", "--parsable", "--mem", "64M", "--wrap", ESCAPE)

            done = as_user(student, submit)
            assert done["rc"] == 0, done["err"]
            job_id = int(str(done["out"]))
            head.wait_state(job_id, "COMPLETED", timeout=60)
            log = (head.home / "logs" / f"{job_id}.log").read_text().splitlines()
            raised, left, limit = log[-3:]
            assert raised.startswith("raise=") and raised != "raise=0", log  # refused
            assert left.startswith("leave=") and left != "leave=0", log
            assert limit == str(64 << 20)
        finally:
            head.stop()
            kill_leftover_jobs(head.home)


# A student's job tries to raise its own memory limit and to move itself out of its cgroup.
ESCAPE = """own=/sys/fs/cgroup/memory$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
(echo 1073741824 > $own/memory.limit_in_bytes) 2>/dev/null; echo raise=$?
(echo $$ > /sys/fs/cgroup/memory/cgroup.procs) 2>/dev/null; echo leave=$?
cat $own/memory.limit_in_bytes
"""


def test_a_restarted_daemon_reaps_a_stale_run_cgroup_and_what_is_in_it(head: Head) -> None:
    head.stop()
    tree = tree_of(head)
    assert cgroups.prepare(tree) is None
    stale = tree.create(99, 1, cpus=1, memory_mb=64)
    left = subprocess.Popen(["sleep", "300"])
    try:
        for inside, _ in stale.moves:
            Path(inside, "cgroup.procs").write_text(str(left.pid))
        head.start()
        wait_for(lambda: (99, 1) not in tree.runs(), 30, "the stale cgroup to be reaped")
        left.wait(timeout=30)
        assert is_gone(left.pid)
        log = (head.home / "gbatchd.log").read_text()
        assert "removed the cgroup of run 99.1 left by an earlier daemon" in log
    finally:
        left.kill()
        left.wait()


def test_the_daemon_says_once_at_start_what_holds_bare_jobs(head: Head) -> None:
    for _ in range(2):
        head.wait_state(head.sbatch("--mem", "32M", "--wrap", "true"), "COMPLETED")
    lines = [line for line in start_lines(head) if "held by" in line]
    assert len(lines) == 1, lines
    assert "bare jobs: held by cgroup v1 (memory, cpu, cpuset)" in lines[0]


def test_without_cgroups_the_daemon_says_so_once_and_keeps_affinity_and_rlimit(
    tmp_path: Path,
) -> None:
    head = make_head(tmp_path / "home", config=FAST_CONFIG + "bare_job_cgroups: false\n")
    head.start()
    try:
        script = tmp_path / "show.py"
        script.write_text("import resource; print(resource.getrlimit(resource.RLIMIT_DATA)[0])")
        job_id = head.sbatch("--mem", "64M", "--wrap", f"python3 {script}; cat /proc/self/cgroup")
        head.wait_state(job_id, "COMPLETED", timeout=60)
        log = head.run("logs", str(job_id), check=True).stdout
        assert log.splitlines()[0] == str(64 << 20)
        assert "/gbatch/" not in log
        (line,) = start_lines(head)
        assert line.endswith(
            "bare jobs: no cgroups (bare_job_cgroups: false): their CPUs are held by "
            "affinity and their memory by RLIMIT_DATA"
        )
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


def test_a_daemon_that_is_not_root_finds_no_cgroup_it_may_write(tmp_path: Path) -> None:
    """On this kernel's v1 hierarchies nothing is delegated to a plain user: set_up, run
    as one, makes nothing and gives the start line."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")

    def probe() -> list[object]:
        tree, line = cgroups.set_up(tmp_path / "run")
        return [tree is None, line]

    with temp_users("gbcg", ["plain"]) as users:
        found, line = as_user(users["plain"], probe)
    assert found is True
    assert str(line).startswith("bare jobs: no cgroups (cgroup v1: "), line
    assert f"is not writable by uid {users['plain'].uid})" in str(line)
