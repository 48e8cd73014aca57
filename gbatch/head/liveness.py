"""Whether a node is up, suspect or down, and when its runs count as stopped: pure.

A node that has not reported for a few intervals is *suspect*: it gets no new jobs, and
its runs are left alone (a short partition must not cost a job). Silent for the grace
period (`node_down_seconds`), it is *down*. Its runs count as stopped only once the
host's own lease has surely run out: the agent's fence kills a host's gbatch containers
when the head has not renewed its lease for `node_lease_seconds`, reckoned from the
emission of the last report the head answered (agent/README.md, "Lease"). The head
heard that report no earlier than it was emitted, so `lease + FENCE_MARGIN_SECONDS`
after the last report it heard, the old run is dead: a requeue cannot run a job twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Time the fence may take to see the lease run out and kill the containers (it polls
# every 0.5 s; `docker kill` takes well under a second), with room to spare.
FENCE_MARGIN_SECONDS = 5.0
# Reports that may be missed before a node is suspect; never under this many seconds.
SUSPECT_AFTER_REPORTS = 5
SUSPECT_AFTER_MIN_SECONDS = 5.0


@dataclass(frozen=True)
class Liveness:
    state: Literal["up", "suspect", "down"]
    silent_seconds: float  # since the last report (or since the head began watching)
    runs_stopped: bool  # its runs are known dead: the host's lease has run out

    def describe(self, problem: str) -> str:
        """Why the node is not up, for sinfo and pending reasons."""
        silence = f"no report for {self.silent_seconds:.0f} s"
        return f"{silence}: {problem}" if problem else silence


def node_liveness(
    *,
    last_heard: float | None,
    watching_since: float,
    reporting: bool,
    now: float,
    report_interval: float,
    down_after: float,
    lease: float,
    fences_runs: bool,
) -> Liveness:
    """Whether a node is up, suspect or down, and whether its runs count as stopped.

    All times on one monotonic clock. `last_heard` None: no report since the head
    began watching at `watching_since` (a restarted head: an earlier one may have renewed
    the lease up to then). `reporting` False: the connection or the agent is known lost,
    so the node is at least suspect however recent its last report; one never heard
    that is not reporting is down (nothing says it was ever up), though its runs still
    count as stopped only after the lease.
    """
    heard = last_heard if last_heard is not None else watching_since
    silent = max(0.0, now - heard)
    suspect_after = max(SUSPECT_AFTER_REPORTS * report_interval, SUSPECT_AFTER_MIN_SECONDS)
    state: Literal["up", "suspect", "down"]
    if silent >= down_after or (last_heard is None and not reporting):
        state = "down"
    elif silent >= suspect_after or not reporting:
        state = "suspect"
    else:
        state = "up"
    stopped = state == "down" and fences_runs and silent >= lease + FENCE_MARGIN_SECONDS
    return Liveness(state, silent, stopped)
