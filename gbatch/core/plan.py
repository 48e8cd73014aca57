"""The planner's values: a node at one instant, a job placed, a pass's plan.

NodeView is what the planner (gbatch/head/scheduler.py) reads of a node, Assignment a
job it placed, Plan what one pass decided. The daemon's alone: no command builds them,
so they are not in gbatch/core/model.py, whose dataclasses every command pays for at
start (bench/bench_startup.py). Pure values only, as the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeView:
    """What the planner needs to know about one node, at one instant.

    `free_gpus` are the indices that may be handed out now: not allocated to a gbatch
    job, memory released, and no compute process outside gbatch. `releases` lists,
    for each allocated job, when its time limit frees its GPUs (inf: no limit), so the
    planner can reserve for a blocked job and backfill around it.
    """

    name: str
    gpus_total: int
    free_gpus: tuple[int, ...]
    available: bool = True  # False when down or drained
    unavailable_reason: str = ""
    # False while its docker engine does not answer: jobs with an image wait for it.
    runs_containers: bool = True
    releases: tuple[tuple[float, int], ...] = ()  # (time, number of GPUs freed)
    # The partitions the node is in: a job with a partition runs only on its nodes.
    partitions: frozenset[str] = frozenset()
    # CPUs and memory (MiB) the node reported (None: unknown, e.g. an older agent: not
    # counted, anything fits) and what gbatch's allocated jobs leave of them.
    cpus_total: int | None = None
    free_cpus: int = 0
    mem_total_mb: int | None = None
    free_mem_mb: int = 0
    # The type of each of its GPUs that has one (gbatch/core/gputypes.py), as (index,
    # type); a GPU left out has none and goes only to a job asking for any GPU. Its MIG
    # slices are here too (`a100_1g.10gb`), and only here: `gpus_total`, `free_gpus`
    # and `releases` count whole cards alone, what a job asking no type may get.
    gpu_types: tuple[tuple[int, str], ...] = ()
    # What -C/--constraint may ask of it: its inventory features and its GPUs' types.
    features: frozenset[str] = frozenset()
    # `releases` by GPU type, for a typed job's reservation: (time, type, GPUs freed).
    typed_releases: tuple[tuple[float, str, int], ...] = ()
    # Its MIG slices free now (the same test as free_gpus'): only a job asking their type
    # (or their profile) gets one.
    free_slices: tuple[int, ...] = ()
    # Its shareable GPUs (gbatch/core/shares.py) as (index, the largest share it could
    # ever take: its memory less the headroom), whatever runs there now.
    shareable: tuple[tuple[int, int], ...] = ()
    # The shareable GPUs that may take a share now, as (index, MiB a share may take:
    # shares.room, the time its shares end: -inf with none, inf if one has no time
    # limit). Not those an exclusive job holds. One holding shares is not free.
    share_room: tuple[tuple[int, int, float], ...] = ()
    # Some gbatch job is allocated on it (one of no GPUs too): an --exclusive job
    # does not start there. `whole`: an --exclusive job holds it, and nothing else
    # starts there.
    busy: bool = False
    whole: bool = False


@dataclass(frozen=True)
class Assignment:
    job_id: int
    node: str
    gpus: tuple[int, ...]
    # A job across nodes (spec.nodes > 1): its other nodes and their GPUs (Job.peers).
    peers: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class Plan:
    assignments: tuple[Assignment, ...] = ()
    # Pending reason for every considered job that was not assigned.
    reasons: Mapping[int, str] = field(default_factory=dict)
    # The expected start (epoch seconds) of the job holding the plan's reservation, if
    # any: squeue --start's START_TIME. Other waiting jobs have no estimate.
    starts: Mapping[int, float] = field(default_factory=dict)
    # Running jobs to preempt (gbatch/head/scheduler.py preemptions): victim id -> the
    # pending job they make room for.
    preemptions: Mapping[int, int] = field(default_factory=dict)
    # The jobs a reservation's window holds back (reason Reservation or ReqNodeNotAvail,
    # Reserved for maintenance) -> that reservation's name (scontrol show job's event
    # "held for reservation NAME").
    held_for: Mapping[int, str] = field(default_factory=dict)
