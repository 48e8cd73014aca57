"""The daemon SIGKILLed at every named crash point of dispatch and completion, twice in
a row (the restarted daemon dies again at the same point, while reconciling what the
first left behind): after a clean restart, every accepted job ends exactly once, none
is lost and none runs twice.

A ledger outside gbatch (a file each job appends to) is the ground truth, as in
Jepsen's set test: see tests/ledger.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Head, is_gone, kill_leftover_jobs, make_head, wait_for
from ledger import check, ledger_command

from gbatch.core.crashpoints import POINTS

CRASHES_PER_POINT = 2
JOBS = 4  # on 2 GPUs: some still to dispatch and to finish after each crash


def wait_for_crash(head: Head, point: str, crash: int, earlier: int | None = None) -> int:
    """Wait for the daemon started last to die; its pid. A pid equal to `earlier`
    means no new daemon ever took the lock (so it cannot have crashed at `point`)."""
    pid = head.daemon_pid()
    assert pid != earlier, f"no new daemon started for crash {crash} at {point}"
    wait_for(lambda: is_gone(pid), 30, f"crash {crash} at {point} (pid {pid})")
    return pid


@pytest.mark.parametrize("point", POINTS)
def test_crashes_at_each_point_lose_nothing_and_run_nothing_twice(
    tmp_path: Path, point: str
) -> None:
    head: Head = make_head(tmp_path / "home")
    ledger = tmp_path / "ledger"
    head.env["GBATCH_CRASH_AT"] = point
    head.start()
    try:
        # Held first, so that all are accepted before the first dispatch kills the daemon.
        accepted = [
            head.sbatch("--hold", "--gpus", "1", "--wrap", ledger_command(ledger, 0.3))
            for _ in range(JOBS)
        ]
        head.run("scontrol", "release", *map(str, accepted), check=True)
        pid = wait_for_crash(head, point, 1)
        for crash in range(2, CRASHES_PER_POINT + 1):
            # Still armed: the restarted daemon meets the point again while it adopts,
            # finishes or requeues what the dead one left. It may die before its
            # socket answers, so `daemon start` may fail here.
            head.run("daemon", "start")
            pid = wait_for_crash(head, point, crash, earlier=pid)
        del head.env["GBATCH_CRASH_AT"]
        head.start()
        for job_id in accepted:
            head.wait_state(job_id, "COMPLETED", timeout=60)
        result = check(ledger, accepted)
        print(f"after {CRASHES_PER_POINT} crashes at {point}: {result.summary()}")
        assert result.ok, f"lost or duplicated runs after {point}: {result.summary()}"
        assert result.incomplete == (), f"runs that never ended: {result.summary()}"
        assert result.runs == len(accepted), f"a job ran more than once: {result.summary()}"
        # Nothing the dead daemons left half done stays behind.
        wait_for(lambda: not any((head.home / "run").iterdir()), 10, "run dirs cleaned up")
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


def test_a_launch_lost_in_a_crash_does_not_use_up_the_jobs_retry(tmp_path: Path) -> None:
    head: Head = make_head(tmp_path / "home")
    ledger = tmp_path / "ledger"
    head.env["GBATCH_CRASH_AT"] = "dispatch.after_configuring"
    head.start()
    try:
        job_id = head.sbatch(
            "--hold", "--retries", "1", "--wrap", f"echo $GBATCH_ATTEMPT >> {ledger}; exit 1"
        )
        head.run("scontrol", "release", str(job_id), check=True)
        wait_for_crash(head, "dispatch.after_configuring", 1)
        del head.env["GBATCH_CRASH_AT"]
        head.start()
        record = head.wait_state(job_id, "FAILED", timeout=60)
        # Attempt 1 never started; attempt 2 failed and was retried as attempt 3.
        assert ledger.read_text().split() == ["2", "3"]
        assert record["attempt"] == 3
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
