"""Named places where the daemon may die or fail, for fault-injection tests.

Each step of dispatch and completion that commits to the store and acts on a node has
a name here. With GBATCH_CRASH_AT=<name> in its environment, the daemon kills itself
(SIGKILL, no clean-up) the first time it reaches that place, so a test can prove the
restart reconciles: a job is adopted, finished or requeued, never started twice and
never forgotten. With GBATCH_FAULT_AT=request.<op>, every request of that op fails as
a bug would (InjectedFault), so a test can see how the daemon reports a bug hit again
and again (core/loglines.InternalErrors). Unset (always, outside tests) each costs one
comparison.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "dispatch.after_configuring",  # CONFIGURING committed; no run started yet
    "dispatch.after_launch",  # the run exists; RUNNING not committed
    "finish.before_commit",  # the run has exited; its end not yet recorded
    "finish.after_commit",  # its end recorded; container/run dir not yet cleaned up
)
# Reached by container runs only (their output is copied by the head), so kept apart
# from POINTS, which every run passes.
CONTAINER_POINTS = (
    "logs.mid_copy",  # part of a container's output copied into the head's log
)
# Reached by the outbox worker only (gbatch/head/outbox.py).
NOTIFY_POINTS = (
    "notify.after_send",  # a notification was taken by its server; not yet marked delivered
)
# Reached by jobs of a Slurm cluster's partition only (gbatch/head/loop/cluster.py).
CLUSTER_POINTS = (
    "cluster.after_sbatch",  # sbatch answered with the cluster's id; the id not yet recorded
)
_KNOWN = POINTS + CONTAINER_POINTS + NOTIFY_POINTS + CLUSTER_POINTS

_ARMED = os.environ.get("GBATCH_CRASH_AT", "")
if _ARMED and _ARMED not in _KNOWN:
    raise SystemExit(f"GBATCH_CRASH_AT={_ARMED!r} names no crash point; known: {_KNOWN}")


def crash_point(name: str) -> None:
    assert name in _KNOWN, name
    if name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)


_FAULT = os.environ.get("GBATCH_FAULT_AT", "")
if _FAULT and not _FAULT.startswith("request."):
    raise SystemExit(f"GBATCH_FAULT_AT={_FAULT!r} names no fault point; known: request.<op>")
_FAULT_OP = _FAULT.removeprefix("request.") if _FAULT else None


class InjectedFault(RuntimeError):
    """The bug a test asked for with GBATCH_FAULT_AT."""


def request_fault(op: str) -> None:
    """Fail as a bug would when GBATCH_FAULT_AT names this request's `op`."""
    if op == _FAULT_OP:
        raise InjectedFault(f"injected at request.{op} (GBATCH_FAULT_AT)")
