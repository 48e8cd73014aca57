"""The seam between the head and where jobs run: submit, observe in batch, cancel, logs.

Two kinds of place sit behind it (docs/architecture.md, "Backends"):

- the fleet's nodes (gbatch/nodes/base.py `Node`): the head's own planner places a job
  on a node's GPUs, and the dispatcher starts it there (`Node.launch` is submit,
  `Node.status` observe, `Node.signal` cancel, the joined log its logs);
- a partition backed by a Slurm cluster (gbatch/nodes/cluster.py `SlurmBackend`): the
  cluster places the job itself; the head only submits it, mirrors what the cluster
  says of all its jobs in one call per pass, forwards cancels and reads its output.

A `Backend` is the second shape, which a Kubernetes backend would take too: the head
never plans onto its nodes (gbatch/head/loop/cluster.py drives it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gbatch.core.model import ClusterNodes, Job


class BackendDown(Exception):
    """The backend cannot be reached or did not answer.

    Its login node is down, or the call timed out: what it holds is unknown now, not
    lost. The message is the reason its partition shows."""


class BackendRefused(Exception):
    """The backend answered and refused the job (sbatch's error): the job's reason."""


@dataclass(frozen=True)
class Observation:
    """What the backend says of one of its jobs, in Slurm's words.

    `state` is Slurm's long state name (PENDING, RUNNING, COMPLETED, ...); `reason` its
    pending reason or why it ended; `nodes` the nodes it runs on, as the backend names
    them; `exit_code`/`signal` once it ended; `marker` the head's marker found in its
    comment ('' for a job gbatch did not submit); `time_limit` its limit there in
    seconds (None: none, or not said)."""

    backend_id: str
    state: str
    reason: str = ""
    nodes: str = ""
    exit_code: int | None = None
    signal: int | None = None
    marker: str = ""
    time_limit: int | None = None


@dataclass(frozen=True)
class LinkedLogin:
    """A user's link to a cluster partition (identity per_user): whom they are there.

    `user` is the gbatch (Unix) user, `login` their account on the cluster,
    `private_key` the OpenSSH text of the key made for it on the head (unsealed from
    the store only to connect; never logged: not in repr), `taken` whether the cluster
    has taken the key yet (a new link's refusal is no news: its user is adding it)."""

    user: str
    login: str
    private_key: str = field(repr=False)
    taken: bool = field(default=True, compare=False)


class LinkRefused(BackendRefused):
    """A user's cluster login cannot be used now: no link, or its key refused (broken).

    Not the partition's fault (it stays up) nor the job's: the job waits, or is
    refused at submit, and its user is told to (re)link."""


class SessionFailed(LinkRefused):
    """A command in a user's own session on the login node failed or timed out.

    Their login's shell start-up files are theirs to break: that user's jobs wait (and
    keep their last known state), the partition stays up for the others."""


class Backend(Protocol):
    """A place jobs run that schedules them itself (a Slurm cluster's partition)."""

    name: str  # the gbatch partition it backs

    def submit(self, job: Job, marker: str) -> str:
        """Send `job` (its attempt named by `marker`); the backend's id of it.

        BackendDown when the answer may be lost (the job may exist: find it by its
        marker), BackendRefused when it surely was not queued."""
        ...

    def observe(self) -> Mapping[str, Observation]:
        """Every job of this head the backend still knows, by backend id: one call."""
        ...

    def observe_gone(self, backend_ids: Sequence[str]) -> Mapping[str, Observation]:
        """What the backend's accounting says of jobs `observe` no longer lists.

        One call for all of them; those it has no record of are left out."""
        ...

    def observe_nodes(self) -> Sequence[ClusterNodes] | None:
        """The partition's nodes as the backend's own sinfo says them: one call.

        None when nobody could ask (per-user identity, no working login). BackendDown
        when it cannot be reached, BackendRefused when sinfo failed there."""
        ...

    def cancel(self, backend_ids: Sequence[str]) -> None:
        """Cancel those jobs (one call for all)."""
        ...

    def hold(self, backend_ids: Sequence[str], held: bool) -> None:
        """Hold (or release) those pending jobs (one call for all)."""
        ...

    def set_time_limits(self, changes: Sequence[tuple[str, int]]) -> Mapping[str, str]:
        """Set each (backend id, minutes) job's time limit (one call for all).

        The jobs it refused (a raise by a user who may not raise), with why."""
        ...

    def estimate(self, jobs: Sequence[Job]) -> Mapping[int, float | None]:
        """When each job would start there if sent now, by gbatch id: one call, nothing queued.

        Epoch seconds; None where the job would not be taken."""
        ...

    def read_log(self, job: Job, offset: int, limit: int) -> bytes:
        """Up to `limit` bytes of the job's output from `offset` (b'' when none yet)."""
        ...

    def observed_users(self) -> frozenset[str] | None:
        """Whose jobs the last `observe` saw: None, everyone's (one shared login).

        With per-user identity, the users whose own login answered; the jobs of the
        others (a broken link) keep their last known state, as in a partition down."""
        ...

    def may_send(self, user: str) -> bool:
        """Whether `user`'s jobs can be sent now (per-user identity: an unbroken link)."""
        ...

    def close(self) -> None: ...
