"""The daemon SIGKILLed at every named crash point of dispatch and completion: after
a restart, every accepted job ends exactly once, none is lost and none runs twice.

A ledger outside gbatch (a file each job appends to) is the ground truth, as in
Jepsen's set test: lost = accepted - finished, duplicates = jobs started twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head, wait_for

from gbatch.crashpoints import POINTS

JOB = 'echo "$GBATCH_JOB_ID $GBATCH_ATTEMPT" >> {ledger}; sleep 0.3'


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_point_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, point: str
) -> None:
    head: Head = make_head(tmp_path / "home")
    ledger = tmp_path / "ledger"
    head.env["GBATCH_CRASH_AT"] = point
    head.start()
    try:
        # Held first, so that all are accepted before the first dispatch kills the daemon.
        accepted = [
            head.sbatch("--hold", "--gpus", "1", "--wrap", JOB.format(ledger=ledger))
            for _ in range(3)
        ]
        pid = head.daemon_pid()
        head.run("scontrol", "release", *map(str, accepted), check=True)
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), 30, f"the crash at {point}")
        del head.env["GBATCH_CRASH_AT"]
        head.start()
        for job_id in accepted:
            head.wait_state(job_id, "COMPLETED", timeout=60)
        started = [int(line.split()[0]) for line in ledger.read_text().splitlines()]
        assert sorted(started) == accepted, f"lost or duplicated runs after {point}: {started}"
        # Nothing the dead daemon left half done stays behind.
        wait_for(lambda: not any((head.home / "run").iterdir()), 10, "run dirs cleaned up")
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
