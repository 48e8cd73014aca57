"""The rows of sprio and sreport as the daemon sends them and the CLI prints them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True, slots=True)
class JobPriority:
    """One sprio row: a pending job and what orders it in the planner.

    The order (see head.scheduler.queue_order): its user's fair-share factor, then
    priority - nice + its QOS's priority weight, then submit time, then id. `rank`: its
    place (1 first) in that order among the jobs in the same reply.
    """

    id: int
    user: str
    partition: str | None
    array_job_id: int | None
    array_task: int | None
    priority: int
    nice: int
    fairshare: float
    submit_time: float
    held: bool
    rank: int
    # Its QOS and that QOS's priority weight (sprio's QOS factor).
    qos: str = "normal"
    qos_priority: int = 0

    @property
    def effective_priority(self) -> int:
        return self.priority - self.nice + self.qos_priority

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> JobPriority:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One user's (or group's) GPU-seconds inside a period and how many jobs gave them."""

    name: str
    gpu_seconds: float
    jobs: int

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> UsageRow:
        return cls(name=data["name"], gpu_seconds=data["gpu_seconds"], jobs=data["jobs"])
