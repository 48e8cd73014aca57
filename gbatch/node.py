"""What the daemon needs of a node, whatever reaches it: the embedded local node
(gbatch/localnode.py) or a GPU host over SSH.

A run is known by (job id, attempt) alone, so a restarted daemon finds it again.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gbatch.model import Gpu, Job
from gbatch.protocol import NodeReport

# What report() says of a node that has not yet reported nor failed to.
STARTING = "starting"


class LaunchError(Exception):
    """A run could not be started; the message is for the job's reason."""


@dataclass(frozen=True)
class RunStatus:
    state: Literal["running", "exited", "vanished"]
    exit_code: int | None = None
    signal: int | None = None
    end_time: float | None = None
    oom: bool = False


class Node(Protocol):
    name: str
    # Reports received so far: a released GPU is handed out again only after a later
    # report shows it clean.
    report_seq: int
    # Whether jobs without an image (bare processes) can run here.
    runs_bare_processes: bool

    def start(self) -> None:
        """Begin receiving reports (in the background); return at once."""

    def stop(self) -> None: ...

    def report(self) -> tuple[NodeReport | None, str]:
        """The latest report, or None and why there is none (the node is down)."""

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        """The report's GPUs, with processes gbatch did not start counted as foreign."""

    def poke(self) -> None:
        """Ask for a report now (a GPU was just released)."""

    def docker_problem(self, now: float) -> str | None:
        """None when a docker engine answers on the node, else why not."""

    def launch(self, job: Job, attempt: int, gpus: Sequence[int]) -> None:
        """Start the run; return once it exists. Raises LaunchError.

        Precondition: CONFIGURING for this attempt is committed.
        """

    def status(self, job: Job, attempt: int) -> RunStatus: ...

    def signal(self, job: Job, attempt: int, sig: signal.Signals) -> None:
        """Send `sig` to the run's whole process group, or its container."""

    def cleanup(self, job: Job, attempt: int) -> None:
        """Forget a finished run (its container, its run directory)."""
