"""A host cut off from the head (its sshd frozen: the head hears nothing, the host
runs on): for less than the grace period the job finishes there and its result is
collected on reconnect; for longer, the host's lease fence kills the run and only then
is the job requeued, exactly once, with no overlap between the old run and the new.

The ground truth is a ledger outside gbatch: each run appends ticks stamped with the
kernel's clock (/proc/uptime, the same in every container) to a file in a shared dir.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import FAST_CONFIG, TMP_MOUNTS_CONFIG, wait_for
from fleet import Fleet, build_fleet, teardown_fleet
from hosts import Host

from gbatch.nodes.docker import container_name

pytestmark = pytest.mark.docker

# Short enough for a test, long enough for a loaded machine not to lose a host by chance.
SHORT_CUT_CONFIG = (
    FAST_CONFIG + TMP_MOUNTS_CONFIG + "node_down_seconds: 30\nnode_lease_seconds: 25\n"
)
LONG_CUT_CONFIG = FAST_CONFIG + TMP_MOUNTS_CONFIG + "node_down_seconds: 4\nnode_lease_seconds: 3\n"

# Ticks every 0.2 s to the ledger, then a last "end" line; the job's output says the same.
TICKER = (
    "i=0; while [ $i -lt {ticks} ]; do "
    't=$(cut -d" " -f1 /proc/uptime); '
    'echo "$GBATCH_JOB_ID $GBATCH_ATTEMPT $GBATCH_NODE tick $t" >> /ledger/ledger; '
    'echo "tick $i"; sleep 0.2; i=$((i+1)); done; '
    'echo "$GBATCH_JOB_ID $GBATCH_ATTEMPT $GBATCH_NODE end $t" >> /ledger/ledger; '
    "exit {code}"
)


def job_file(ledger_dir: Path, image: str, ticks: int, code: int, requeue: bool = True) -> str:
    path = ledger_dir.parent / f"job-{ticks}-{code}-{requeue}.yaml"
    spec = {
        "image": image,
        "gpus": 1,
        "mounts": [f"{ledger_dir}:/ledger"],
        "command": TICKER.format(ticks=ticks, code=code),
        "requeue": requeue,
    }
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def freeze_sshd(host: Host, sig: signal.Signals) -> None:
    """SIGSTOP (cut the host off: connections hang, the agent and fence run on) or
    SIGCONT every sshd in the host, from outside: its sshd is the container's PID 1,
    which ignores signals sent from inside its own namespace."""
    container = host.container.get_wrapped_container().id
    top = subprocess.run(
        ["docker", "top", container, "-eo", "pid,comm"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()[1:]
    for pid, comm in (line.split(None, 1) for line in top):
        if comm.strip() == "sshd":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), sig)


def runs(ledger: Path) -> dict[tuple[int, int], dict[str, object]]:
    """(job, attempt) -> node, tick times, whether it wrote its end."""
    found: dict[tuple[int, int], dict[str, object]] = {}
    for line in ledger.read_text().splitlines():
        job, attempt, node, kind, stamp = line.split()
        run = found.setdefault((int(job), int(attempt)), {"node": node, "ticks": [], "end": False})
        if kind == "end":
            run["end"] = True
        else:
            run["ticks"].append(float(stamp))  # type: ignore[attr-defined]
    return found


def sinfo_state(fleet: Fleet, node: str) -> str:
    out = fleet.head.run("sinfo", "--gpus", "-h", check=True).stdout
    return {line.split()[0]: line.split()[2] for line in out.splitlines()}[node]


def events(fleet: Fleet, job_id: int) -> list[tuple[str, str]]:
    record = fleet.head.job(job_id)
    return [(str(e["state"]), str(e["reason"])) for e in record["events"]]  # type: ignore[attr-defined]


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    path.mkdir()
    path.chmod(0o777)
    return path


@pytest.fixture
def short_cut_fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = build_fleet(tmp_path, {"gpu01": 1}, config=SHORT_CUT_CONFIG)
    yield fleet
    freeze_sshd(fleet.hosts["gpu01"], signal.SIGCONT)
    teardown_fleet(fleet)


@pytest.fixture
def long_cut_fleet(tmp_path: Path) -> Iterator[Fleet]:
    # gpu02 has no GPU until the cut, so both jobs start on gpu01.
    fleet = build_fleet(tmp_path, {"gpu01": 2, "gpu02": 0}, config=LONG_CUT_CONFIG)
    yield fleet
    freeze_sshd(fleet.hosts["gpu01"], signal.SIGCONT)
    teardown_fleet(fleet)


def test_a_short_cut_leaves_the_job_running_and_collects_its_exit_on_reconnect(
    short_cut_fleet: Fleet, ledger_dir: Path
) -> None:
    fleet = short_cut_fleet
    job_id = fleet.head.sbatch(job_file(ledger_dir, fleet.image, ticks=20, code=3))
    fleet.head.wait_state(job_id, "RUNNING", timeout=60)
    freeze_sshd(fleet.hosts["gpu01"], signal.SIGSTOP)
    try:
        wait_for(lambda: sinfo_state(fleet, "gpu01") == "suspect", 20, "gpu01 to be suspect")
        # The run goes on and ends while the head cannot see it.
        wait_for(lambda: runs(ledger_dir / "ledger")[(job_id, 1)]["end"], 30, "the run's end")
        assert fleet.head.state(job_id) == "RUNNING"
    finally:
        freeze_sshd(fleet.hosts["gpu01"], signal.SIGCONT)
    record = fleet.head.wait_state(job_id, "FAILED", timeout=60)
    assert (record["exit_code"], record["attempt"]) == (3, 1)
    assert [state for state, _ in events(fleet, job_id)].count("PENDING") == 1  # submitted
    # The output printed during the cut was fetched on reconnect: the log is whole.
    log = fleet.head.run("logs", str(job_id), check=True).stdout
    assert log.split() == [w for i in range(20) for w in ("tick", str(i))]
    assert sinfo_state(fleet, "gpu01") == "idle"


def test_a_long_cut_fences_the_run_then_requeues_it_once_without_overlap(
    long_cut_fleet: Fleet, ledger_dir: Path
) -> None:
    fleet = long_cut_fleet
    requeued = fleet.head.sbatch(job_file(ledger_dir, fleet.image, ticks=40, code=0))
    stays_down = fleet.head.sbatch(
        "--no-requeue", job_file(ledger_dir, fleet.image, ticks=40, code=0)
    )
    for job_id in (requeued, stays_down):
        assert fleet.head.wait_state(job_id, "RUNNING", timeout=60)["node"] == "gpu01"
    wait_for(lambda: len(runs(ledger_dir / "ledger")) == 2, 20, "both runs to tick")
    fleet.set_gpus("gpu02", [{}])
    cut_at = time.monotonic()
    freeze_sshd(fleet.hosts["gpu01"], signal.SIGSTOP)
    try:
        record = fleet.head.wait_state(stays_down, "NODE_FAIL", timeout=60)
        assert "not requeued" in str(record["reason"])
        record = fleet.head.wait_state(requeued, "COMPLETED", timeout=60)
        # gpu01 is still cut off: the job ran again elsewhere.
        assert (record["node"], record["attempt"]) == ("gpu02", 2)
        assert sinfo_state(fleet, "gpu01") == "down"
        assert time.monotonic() - cut_at >= 3 + 5, "requeued before the lease ran out"
    finally:
        freeze_sshd(fleet.hosts["gpu01"], signal.SIGCONT)

    ledger = runs(ledger_dir / "ledger")
    first, second = ledger[(requeued, 1)], ledger[(requeued, 2)]
    assert (first["node"], second["node"]) == ("gpu01", "gpu02")
    assert not first["end"] and second["end"], "the fence did not stop the first run"
    assert max(first["ticks"]) < min(second["ticks"]), "the two runs overlapped"  # type: ignore[type-var,call-overload]
    assert set(ledger) == {(requeued, 1), (requeued, 2), (stays_down, 1)}
    assert not ledger[(stays_down, 1)]["end"]
    reasons = [reason for state, reason in events(fleet, requeued) if state == "PENDING"]
    assert len(reasons) == 2 and "stopped by the lease; requeued" in reasons[1]
    fence_log = (fleet.agent_dirs["gpu01"] / "fence.log").read_text()
    assert "lease expired: killed 2 container(s)" in fence_log

    # gpu01 back: the head removes the fenced containers and uses the node again.
    wait_for(lambda: sinfo_state(fleet, "gpu01") == "idle", 60, "gpu01 to come back")
    stale = {container_name(requeued, 1), container_name(stays_down, 1)}

    def stale_left() -> set[str]:
        listed = subprocess.run(
            ["docker", "ps", "-a", "--format", "{{.Names}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return stale & set(listed)

    wait_for(lambda: not stale_left(), 30, f"the fenced containers to be removed: {stale_left()}")


def test_a_host_that_cannot_write_its_lease_gets_no_new_jobs_and_sinfo_says_why(
    tmp_path: Path,
) -> None:
    # A host whose agent cannot write the renewed lease (a failing disk, often
    # remounted read-only) would have its fence stop any run once the old lease ran
    # out: the head must place nothing there, say why, and use it again once fixed.
    # A directory in the lease file's place makes every write of it fail (EISDIR,
    # whoever the agent runs as), with no other effect on the host.
    fleet = build_fleet(tmp_path, {"gpu01": 1}, config=FAST_CONFIG + TMP_MOUNTS_CONFIG)
    try:
        head = fleet.head
        lease = fleet.agent_dirs["gpu01"] / "lease.json"

        def sinfo() -> str:
            return head.run("sinfo", "--gpus", "-h", check=True).stdout

        wait_for(lambda: sinfo_state(fleet, "gpu01") == "idle" and lease.is_file(), 30, "up")

        def lease_is_a_directory() -> bool:
            with contextlib.suppress(FileNotFoundError):
                lease.unlink()  # the agent may put the file back in between
            with contextlib.suppress(FileExistsError):
                lease.mkdir()
            return lease.is_dir()

        wait_for(lease_is_a_directory, 10, "a directory where the lease file was")
        wait_for(lambda: sinfo_state(fleet, "gpu01") == "suspect", 30, "gpu01 suspect")
        line = sinfo()
        assert "lease not renewed (cannot renew the lease file" in line, line
        assert os.strerror(errno.EISDIR) in line, line
        job = head.sbatch("--image", fleet.image, "--wrap", "echo fine")
        record = head.wait_planned(job)
        assert (record["state"], record["reason"], record["attempt"]) == ("PENDING", "NodeDown", 0)

        lease.rmdir()  # fixed: the next renewal writes the file again
        head.wait_state(job, "COMPLETED", timeout=60)
        assert head.run("logs", str(job), check=True).stdout == "fine\n"
        wait_for(lambda: sinfo_state(fleet, "gpu01") == "idle", 30, "gpu01 idle again")
        assert lease.is_file()
    finally:
        teardown_fleet(fleet)
