"""Time gbatch.head.scheduler.plan() on a large queue.

Run from anywhere: `python bench/bench_plan.py [--runs N] [--seed S]`. Prints one line
per scenario with the median and p90 of the runs against the goal (<= 20 ms). The last
scenario limits every user (max_running_jobs 4, max_gpus 8; gbatch/limits.py).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gbatch.head.scheduler import plan
from gbatch.limits import Use, UserLimits
from gbatch.model import Job, JobSpec, JobState, NodeView

GOAL_MS = 20.0
JOBS = 10_000
USERS = 50
NODES = 100
GPUS_PER_NODE = 8
GPU_MIX = (1, 1, 1, 2, 4, 8)
NOW = 1_700_000_000.0


def make_jobs(rng: random.Random) -> list[Job]:
    jobs = []
    for job_id in range(1, JOBS + 1):
        spec = JobSpec(
            name=f"job{job_id}",
            command=("python", "train.py"),
            gpus=rng.choice(GPU_MIX),
            time_limit=rng.choice((600, 3600, 4 * 3600, 24 * 3600, None)),
            priority=rng.choice((0, 0, 0, 10)),
            nice=rng.choice((0, 0, 5)),
        )
        jobs.append(
            Job(
                id=job_id,
                uid=1000 + job_id % USERS,
                user=f"user{job_id % USERS:02d}",
                spec=spec,
                state=JobState.PENDING,
                submit_time=NOW - rng.uniform(0, 86_400),
                held=rng.random() < 0.02,
            )
        )
    return jobs


def make_nodes(rng: random.Random, busy_per_node: int) -> list[NodeView]:
    nodes = []
    for n in range(NODES):
        free = tuple(sorted(rng.sample(range(GPUS_PER_NODE), GPUS_PER_NODE - busy_per_node)))
        # The busy GPUs are held by running jobs of 1-2 GPUs, some without a limit.
        releases = []
        left = busy_per_node
        while left:
            count = min(left, rng.choice((1, 2)))
            when = rng.choice((NOW + rng.uniform(60, 86_400), float("inf")))
            releases.append((when, count))
            left -= count
        nodes.append(
            NodeView(
                name=f"gpu{n:03d}",
                gpus_total=GPUS_PER_NODE,
                free_gpus=free,
                available=rng.random() > 0.03,
                releases=tuple(releases),
            )
        )
    return nodes


def make_usage(rng: random.Random) -> dict[str, float]:
    return {f"user{u:02d}": rng.uniform(0, 5e6) for u in range(USERS) if rng.random() < 0.8}


def make_limits(rng: random.Random) -> tuple[dict[str, UserLimits], dict[str, Use]]:
    """Every user limited (4 jobs, 8 GPUs at once), each already holding some."""
    limits = {f"user{u:02d}": UserLimits(max_running_jobs=4, max_gpus=8) for u in range(USERS)}
    use = {user: Use(rng.randint(0, 4), rng.randint(0, 8)) for user in limits}
    return limits, use


def measure(
    label: str,
    jobs: list[Job],
    nodes: list[NodeView],
    usage: dict[str, float],
    runs: int,
    limits: tuple[dict[str, UserLimits], dict[str, Use]] | None = None,
) -> None:
    samples = []
    caps, use = limits or (None, None)
    for _ in range(runs):
        start = time.perf_counter()
        result = plan(jobs, nodes, usage, NOW, caps, use)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    median = statistics.median(samples)
    p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
    print(
        f"plan(): {len(jobs)} pending, {len(nodes)} nodes x {GPUS_PER_NODE} GPUs, {label}: "
        f"median {median:.1f} ms, p90 {p90:.1f} ms (goal <= {GOAL_MS:.0f} ms) "
        f"[{len(result.assignments)} started]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    jobs = make_jobs(rng)
    usage = make_usage(rng)
    half = make_nodes(rng, busy_per_node=GPUS_PER_NODE // 2)
    full = make_nodes(rng, busy_per_node=GPUS_PER_NODE)
    plan(jobs, half, usage, NOW)  # warm-up: imports, allocator
    measure("half occupied", jobs, half, usage, args.runs)
    measure("all full", jobs, full, usage, args.runs)
    limits = make_limits(rng)
    measure("half occupied, every user limited", jobs, half, usage, args.runs, limits)


if __name__ == "__main__":
    main()
