"""Time gbatch.head.scheduler.plan() on a large queue.

Run from anywhere: `python bench/bench_plan.py [--runs N] [--seed S] [--pending N]`.
Prints one line per scenario with the median and p90 of the runs against the goal
(<= 20 ms). The third scenario limits every user (max_running_jobs 4, max_gpus 8;
gbatch/core/limits.py). `--pending` sets the queue (default 10,000; the issue's case is
100,000). `--types` and `--shares` (issue 30) mix GPU models and shares of a GPU in.

`--loop` adds what the daemon's loop does per tick: Daemon.schedule() over a real store
(a SQLite file in a temporary directory) holding `--pending` jobs of 50 users, with the
local node up (its agent reporting 8 simulated GPUs) and all 8 taken by running jobs
with a one-hour time limit, so every pass plans the queue against a full node (one job
holds a reservation) and starts nothing. That includes reading the pending jobs from
the store, the dependency, begin-time and throttle filters, the node views, usage, the
planner's pass and the reasons written. It reports apart the first read of the loop's
window (50 users x 1,000 jobs at 100,000): its passes (spread over passes of about
WINDOW_ROWS_PER_PASS rows each, as gbatch/head/loop/schedule.py does; one pass before that),
the first and the longest, the longest of those before the one that plans and of those
that plan and write the reasons (where the checkout writes them over passes of
REASONS_PER_PASS: until Daemon.caught_up), the time until the window was planned (every
reason written) and the CPU it took; then the pass after it (which takes what the first
wrote), the daemon's RSS before and after them, and then the same for a restarted
loop over the same store (its reasons already written). `--loop-only` skips the plan()
scenarios. With `--checkout DIR` (repeated) the loop is timed in a fresh process per
checkout that imports that checkout's code, `--rounds` times in turn (A, B, A, B, ...),
e.g. `--checkout /work/main --checkout .`.

A pass here is Daemon.schedule() and, where the checkout has it, the loop's share of the
cyclic GC after it (Daemon.collector.after_pass(); started as run_loop starts it). Every
full (generation 2) collection is timed (gc.callbacks), in a pass or not: for each part
its count and the longest. Then `--churn` passes (default 300) with 10 submits (random
users) and 10 cancels (random jobs of the window) before each, as a busy queue has them:
their median, p90 and longest, the full collections among them, the RSS growth, and at
the end what a whole collection still finds (the cyclic garbage the heap held) and how
long it took; then as many again with also a new user's 1,000 jobs before every 20th (a
new window each: the heap grows as a lab's queue does, and the collector's full
collections come due), with the passes that read a newcomer's jobs before one plans them
(a checkout with READ_ALONE_ROWS: those that read them; with a bounded read of the change
feed, over passes of WINDOW_ROWS_PER_PASS) and the passes that plan them told apart.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import quick_help  # before the line below: a checkout's gbatch comes first

# A child timing another checkout (--checkout) imports that checkout's gbatch.
sys.path.insert(0, os.environ.get("GBATCH_BENCH_CHECKOUT") or str(Path(__file__).parent.parent))

from gbatch.core.limits import Use, UserLimits
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.head.scheduler import Planner, plan

if TYPE_CHECKING:
    from gbatch.head.daemon import Daemon
    from gbatch.head.store import Store

GOAL_MS = 20.0
PLAN_WINDOW = 1000  # the daemon's PLAN_JOBS_PER_USER
JOBS = 10_000
USERS = 50
NODES = 100
GPUS_PER_NODE = 8
GPU_MIX = (1, 1, 1, 2, 4, 8)
NOW = 1_700_000_000.0
# --types: each node's GPUs are half A100s, half RTX 4090s, and this share of the jobs asks
# for one of the two types (GPU_MIX up to 4: as many as a node has of one), where the
# checkout knows GPU types (issue 30); a checkout that does not gets the same jobs untyped.
TYPED_SHARE = 0.3
GPU_TYPES = ("a100", "rtx4090")
SIMULATED_MODELS = ("a100-80gb",) * 4 + ("rtx4090",) * 4
TYPES = {"on": False}  # set by --types
KNOWS_TYPES = "gpu_type" in JobSpec.__dataclass_fields__
# --shares: this part of the jobs asks a share of one GPU (--gpu-mem, issue 30) of one of
# these sizes (MiB), and every GPU (an 80 GB A100's memory) is shareable, where the
# checkout knows shares; a checkout that does not gets the same jobs as 1 whole GPU.
SHARED_PART = 0.2
SHARE_SIZES = (10 * 1024, 20 * 1024, 40 * 1024)
CARD_MIB = 81920
SHARES = {"on": False}  # set by --shares
KNOWS_SHARES = "gpu_mem_mb" in JobSpec.__dataclass_fields__


def make_jobs(rng: random.Random, count: int = JOBS) -> list[Job]:
    jobs = []
    for job_id in range(1, count + 1):
        spec = JobSpec(
            name=f"job{job_id}",
            command=("python", "train.py"),
            gpus=rng.choice(GPU_MIX),
            time_limit=rng.choice((600, 3600, 4 * 3600, 24 * 3600, None)),
            priority=rng.choice((0, 0, 0, 10)),
            nice=rng.choice((0, 0, 5)),
        )
        if TYPES["on"] and rng.random() < TYPED_SHARE:
            gpus, kind = min(spec.gpus, 4), rng.choice(GPU_TYPES)
            spec = replace(spec, gpus=gpus, **({"gpu_type": kind} if KNOWS_TYPES else {}))
        if SHARES["on"] and rng.random() < SHARED_PART:
            share = rng.choice(SHARE_SIZES)
            spec = replace(spec, gpus=1, **({"gpu_mem_mb": share} if KNOWS_SHARES else {}))
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
        view = NodeView(
            name=f"gpu{n:03d}",
            gpus_total=GPUS_PER_NODE,
            free_gpus=free,
            available=rng.random() > 0.03,
            releases=tuple(releases),
        )
        if TYPES["on"] and KNOWS_TYPES:  # releases by type: the busy GPUs' types, in order
            types = [GPU_TYPES[g * 2 // GPUS_PER_NODE] for g in range(GPUS_PER_NODE)]
            busy = iter(types[g] for g in range(GPUS_PER_NODE) if g not in free)
            typed = [(when, next(busy)) for when, count in releases for _ in range(count)]
            view = replace(
                view,
                gpu_types=tuple(enumerate(types)),
                features=frozenset(GPU_TYPES),
                typed_releases=tuple((when, kind, 1) for when, kind in typed),
            )
        if SHARES["on"] and KNOWS_SHARES:  # every GPU shareable; the free ones have room
            view = replace(
                view,
                shareable=tuple((g, CARD_MIB) for g in range(GPUS_PER_NODE)),
                share_room=tuple((g, CARD_MIB, float("-inf")) for g in free),
            )
        nodes.append(view)
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
    parser.add_argument("--pending", type=int, default=JOBS, help="jobs in the queue")
    parser.add_argument("--loop", action="store_true", help="also time Daemon.schedule()")
    parser.add_argument("--loop-only", action="store_true", help="time Daemon.schedule() only")
    parser.add_argument("--checkout", type=Path, action="append", default=[])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--churn", type=int, default=300, help="passes with submits/cancels")
    parser.add_argument(
        "--types", action="store_true", help="GPUs of two types; a share of jobs asks a type"
    )
    parser.add_argument(
        "--shares", action="store_true", help="shareable GPUs; 20%% of jobs ask --gpu-mem"
    )
    parser.add_argument(
        "--window",
        action="store_true",
        help="time a loop pass and a Planner pass with one reservation's window ahead "
        "against none (their medians and the ratio) instead",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help("3 runs over 500 pending, the loop too (--loop), 10 churn passes"),
    )
    args = parser.parse_args()
    if args.quick:
        args.runs, args.pending, args.churn, args.loop = 3, 500, 10, True
    TYPES["on"] = args.types
    SHARES["on"] = args.shares
    if args.checkout:
        loop_checkouts(args)
        return
    rng = random.Random(args.seed)
    if args.window:
        jobs = make_jobs(rng, args.pending)
        usage = make_usage(rng)
        full = make_nodes(rng, busy_per_node=GPUS_PER_NODE)
        measure_window(jobs, full, usage, args.runs, rng)
        return
    if args.loop_only:  # the jobs only in the store: the RSS figures are the daemon's
        measure_loop(make_jobs(rng, args.pending), args.runs, args.churn, rng)
        return
    jobs = make_jobs(rng, args.pending)
    usage = make_usage(rng)
    half = make_nodes(rng, busy_per_node=GPUS_PER_NODE // 2)
    full = make_nodes(rng, busy_per_node=GPUS_PER_NODE)
    plan(jobs, half, usage, NOW)  # warm-up: imports, allocator
    measure("half occupied", jobs, half, usage, args.runs)
    measure("all full", jobs, full, usage, args.runs)
    limits = make_limits(rng)
    measure("half occupied, every user limited", jobs, half, usage, args.runs, limits)
    measure_incremental("half occupied", jobs, half, usage, args.runs, rng)
    measure_incremental("all full", jobs, full, usage, args.runs, rng)
    if args.loop:
        measure_loop(jobs, args.runs, args.churn, rng)


def measure_incremental(
    label: str,
    jobs: list[Job],
    nodes: list[NodeView],
    usage: dict[str, float],
    runs: int,
    rng: random.Random,
) -> None:
    """Planner.plan() per pass, after a first full one, with what a busy tick brings
    between passes: 10 jobs submitted, the jobs the last pass started gone (each
    node then as it was: as many GPUs freed by ends elsewhere), usage grown, the clock
    on. The result is checked against plan() on the same queue once, at the end."""
    planner = Planner()
    for job in jobs:
        planner.put(job)
    queue = {job.id: job for job in jobs}
    next_id = max(queue) + 1
    now = NOW
    planner.plan(nodes, usage, now)
    samples = []
    started = 0
    for _ in range(runs):
        for _ in range(10):
            (job,) = make_jobs(rng, 1)
            job = replace(job, id=next_id, spec=replace(job.spec, name=f"job{next_id}"))
            queue[job.id] = job
            planner.put(job)
            next_id += 1
        usage = {user: used * 1.001 + 10 for user, used in usage.items()}
        now += 1.0
        begin = time.perf_counter()
        result = planner.plan(nodes, usage, now)
        samples.append((time.perf_counter() - begin) * 1000)
        started = len(result.assignments)
        for assignment in result.assignments:
            planner.discard(assignment.job_id)
            del queue[assignment.job_id]
    last = planner.plan(nodes, usage, now)
    full = plan(list(queue.values()), nodes, usage, now)
    if planner.reasons != full.reasons or last.assignments != full.assignments:
        raise SystemExit("Planner.plan() differs from plan(): a bug")
    samples.sort()
    median = statistics.median(samples)
    p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
    print(
        f"Planner.plan() (incremental): {len(queue)} pending, {len(nodes)} nodes x "
        f"{GPUS_PER_NODE} GPUs, {label}, 10 submits and the last starts gone per pass: "
        f"median {median:.1f} ms, p90 {p90:.1f} ms (goal <= {GOAL_MS:.0f} ms) "
        f"[{started} started]"
    )


def measure_window(
    jobs: list[Job], nodes: list[NodeView], usage: dict[str, float], runs: int, rng: random.Random
) -> None:
    """The cost of a reservation's window (issue 33): a pass with one window ahead (two
    GPUs of one node, from a day on) against a pass with none, the same queue.

    Planner.plan() over the 100 full nodes (10 submits a pass, as measure_incremental),
    and Daemon.schedule() over a real store (as measure_loop: the local node's 8 GPUs
    all taken), each alternating window and none: `runs` times each, the second pass
    after the change timed (the first reckons every job's reason again)."""
    from gbatch.head.scheduler import Window

    ahead = [Window("demo", NOW + 86_400, NOW + 90_000, gpus=((nodes[0].name, (0, 1)),))]
    planner_window_passes(jobs, nodes, usage, runs, rng, ahead, "all full")
    # The window's two GPUs free now: the backfill before it plans the jobs that fit.
    freed = [replace(nodes[0], free_gpus=(0, 1)), *nodes[1:]]
    planner_window_passes(jobs, freed, usage, runs, rng, ahead, "the window's 2 GPUs free")
    loop_window_passes(jobs, runs)


def planner_window_passes(
    jobs: list[Job],
    nodes: list[NodeView],
    usage: dict[str, float],
    runs: int,
    rng: random.Random,
    ahead: list[Any],
    label: str,
) -> None:
    """Planner.plan() passes with the window `ahead` and without, alternating."""
    planner = Planner()
    for job in jobs:
        planner.put(job)
    next_id = max(job.id for job in jobs) + 1
    times: dict[str, list[float]] = {"none": [], "window": []}
    now = NOW
    planner.plan(nodes, usage, now)
    for turn in range(4 * runs):
        kind = "window" if turn // 2 % 2 else "none"
        for _ in range(10):
            (job,) = make_jobs(rng, 1)
            planner.put(replace(job, id=next_id, spec=replace(job.spec, name=f"job{next_id}")))
            next_id += 1
        now += 1.0
        begin = time.perf_counter()
        result = planner.plan(nodes, usage, now, windows=ahead if kind == "window" else ())
        if turn % 2:  # the second pass since the window came or went
            times[kind].append((time.perf_counter() - begin) * 1000)
        for assignment in result.assignments:
            planner.discard(assignment.job_id)
    print(
        f"Planner.plan(): {len(planner)} pending, {len(nodes)} nodes x {GPUS_PER_NODE} GPUs "
        f"{label}, 10 submits a pass, the second pass after the window came or went: "
        f"{window_figures(times)}",
        flush=True,
    )


def window_figures(times: dict[str, list[float]]) -> str:
    none, window = statistics.median(times["none"]), statistics.median(times["window"])
    return (
        f"no window median {none:.1f} ms, one window ahead median {window:.1f} ms "
        f"(x{window / none:.1f})"
    )


def queue_behind_busy_gpus(store: Store, jobs: list[Job]) -> None:
    """Queue `jobs` (one submit per user) and take every simulated GPU with a running
    job, so that passes plan and nothing starts."""
    by_user: dict[str, list[Job]] = {}
    for job in jobs:
        by_user.setdefault(job.user, []).append(job)
    for user, mine in by_user.items():
        store.submit([job.spec for job in mine], mine[0].uid, user, NOW)
    busy = store.submit(
        [JobSpec(name="busy", command=("true",), gpus=1, time_limit=3600)] * GPUS_PER_NODE,
        999,
        "busy",
        NOW,
    )
    for gpu, job_id in enumerate(busy):
        store.set_state(job_id, JobState.CONFIGURING, "", NOW, node="local", gpus=(gpu,))
        store.set_state(job_id, JobState.RUNNING, "", NOW, start_time=NOW)


def loop_window_passes(jobs: list[Job], runs: int) -> None:
    """Daemon.schedule() passes, with a reservation's window ahead and without."""
    from gbatch.core.reservations import Reservation
    from gbatch.head.daemon import Daemon
    from gbatch.head.store import Store
    from gbatch.site.config import Paths

    times: dict[str, list[float]] = {"none": [], "window": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp))
        store = Store(paths.store)
        daemon = Daemon(paths, loop_config(), store)
        try:
            queue_behind_busy_gpus(store, jobs)
            daemon.fleet.start()
            wait_for_gpus(daemon)
            first_read(daemon)
            one_pass(daemon)
            start = time.time() + 86_400
            demo = Reservation("demo", start, start + 3600, users=("user00",))
            demo = replace(demo, gpus=(("local", (6, 7)),), gpu_count=2)
            for turn in range(2 * runs):
                kind = "window" if turn % 2 else "none"
                if kind == "window":
                    store.put_reservation(demo, "bench", time.time())
                else:
                    store.delete_reservation("demo", "bench", time.time())
                one_pass(daemon)  # the pass that sees the change (every reason anew)
                times[kind].append(one_pass(daemon))
        finally:
            daemon.fleet.stop()
            daemon.committer.close()
            store.close()
    print(
        f"Daemon.schedule(): {len(jobs)} pending in the store, the node's 8 GPUs all taken, "
        f"the second pass after the window came or went: {window_figures(times)}",
        flush=True,
    )


def loop_checkouts(args: argparse.Namespace) -> None:
    """The loop measure, in a fresh process per checkout, in turn, `args.rounds` times."""
    for round_ in range(args.rounds):
        for checkout in args.checkout:
            env = dict(os.environ, GBATCH_BENCH_CHECKOUT=str(checkout.resolve()))
            with open("/proc/loadavg") as loadavg:
                load = loadavg.read().split()[0]
            print(f"round {round_ + 1}, {checkout} (load {load}):", flush=True)
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--loop-only",
                    f"--pending={args.pending}",
                    f"--runs={args.runs}",
                    f"--seed={args.seed}",
                    f"--churn={args.churn}",
                    *(["--types"] if args.types else []),
                    *(["--shares"] if args.shares else []),
                ],
                env=env,
                check=True,
            )


def cold_store_caches() -> None:
    """Empty the store's caches of decoded rows, wherever the checkout keeps them (one
    module before issue 28, the store package's rows and window after)."""
    for name in ("gbatch.head.store", "gbatch.head.store.rows", "gbatch.head.store.window"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for cache in ("_SPEC_CACHE", "_JOB_CACHE", "_PLANNING_SPECS"):
            getattr(module, cache, {}).clear()


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class FullCollections:
    """Every full (generation 2) collection's ms, the objects it freed and whether it
    came in a pass, from gc.callbacks, in order."""

    passing = False  # set by one_pass while it times a pass

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.freed: list[int] = []
        self.in_pass: list[bool] = []
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.ms.append((time.perf_counter() - self._began) * 1000)
            self.freed.append(info["collected"])
            self.in_pass.append(FullCollections.passing)

    def since(self, mark: int) -> str:
        if len(self.ms) == mark:
            return "no full collection"
        told = []
        for where, passing in (("in passes", True), ("between passes", False)):
            taken = [
                ms
                for ms, p in zip(self.ms[mark:], self.in_pass[mark:], strict=True)
                if p == passing
            ]
            freed = sum(
                n
                for n, p in zip(self.freed[mark:], self.in_pass[mark:], strict=True)
                if p == passing
            )
            if taken:
                told.append(
                    f"{len(taken)} full collections {where}, the longest {max(taken):.1f} ms, "
                    f"{freed} objects freed"
                )
        return ", ".join(told)

    def close(self) -> None:
        gc.callbacks.remove(self._callback)


def start_collector(daemon: Daemon) -> None:
    """What run_loop does before its first pass, where the checkout has it."""
    collector = getattr(daemon, "collector", None)
    if collector is not None:
        collector.start()


def one_pass(daemon: Daemon) -> float:
    """One pass's ms: schedule() and the loop's share of the GC after it, if any."""
    collector = getattr(daemon, "collector", None)
    FullCollections.passing = True
    start = time.perf_counter()
    daemon.schedule(time.time())
    if collector is not None:
        collector.after_pass()
    took = (time.perf_counter() - start) * 1000
    FullCollections.passing = False
    return took


def between_passes(daemon: Daemon) -> None:
    """What run_loop does after a step with no wake-up waiting, where the checkout has
    it: the whole collection when it is due (not timed as a pass)."""
    collector = getattr(daemon, "collector", None)
    if collector is not None:
        collector.full_when_due()


def loop_state(daemon: Daemon) -> Any:
    """What holds the schedule step's window and `unread`: the Daemon's schedule step
    (gbatch/head/loop/schedule.py), or in an older checkout the Daemon itself."""
    return getattr(daemon, "scheduling", daemon)


def unread(daemon: Daemon, default: bool) -> bool:
    """The last pass planned nothing (`default` where the checkout does not tell)."""
    state = loop_state(daemon)
    return bool(getattr(state, "unread", getattr(state, "_unread", default)))


def loop_window(daemon: Daemon) -> Any:
    """The loop's window (RunnableWindow) of this checkout's Daemon."""
    state = loop_state(daemon)
    window = getattr(state, "window", None)
    return state._window if window is None else window


def first_read(daemon: Daemon) -> tuple[list[float], float, float, list[float]]:
    """The passes of a loop's first read of its window, until it planned: each pass's
    ms, the wall ms and the CPU ms of them all, and the ms of those that planned (where
    the checkout tells: its reasons written over passes; else the last)."""
    passes: list[float] = []
    plans: list[float] = []
    began, cpu = time.perf_counter(), time.process_time()
    while True:
        passes.append(one_pass(daemon))
        if unread(daemon, True) is False:
            plans.append(passes[-1])
        # Until the window is planned whole and every reason the plan gave written
        # (Daemon.caught_up; before it, the window complete; before the spread read,
        # one pass).
        if getattr(daemon, "caught_up", getattr(loop_window(daemon), "complete", True)):
            break
    wall, cpu = (time.perf_counter() - began) * 1000, (time.process_time() - cpu) * 1000
    return passes, wall, cpu, plans or passes[-1:]


def told(
    what: str, read: tuple[list[float], float, float, list[float]], after: float, fulls: str
) -> str:
    passes, wall, cpu, plans = read
    reads = passes[: len(passes) - len(plans)]
    return (
        f"{what}: {len(passes)} passes, the first {passes[0]:.1f} ms, median "
        f"{statistics.median(passes):.1f} ms, the longest {max(passes):.1f} ms (of the "
        f"{len(reads)} before the one that plans: {max(reads, default=0.0):.1f} ms; of the "
        f"{len(plans)} that plan and write the reasons: {max(plans):.1f} ms), planned "
        f"after {wall:.0f} ms ({cpu:.0f} ms of CPU; {fulls}); the pass after {after:.1f} ms"
    )


def churn(
    daemon: Daemon,
    store: Store,
    passes: int,
    rng: random.Random,
    fulls: FullCollections,
    newcomers: int = 0,
) -> str:
    """`passes` passes, 10 submits and 10 cancels before each, and with `newcomers` a
    new user's 1,000 jobs before every `newcomers`-th (each a new window of 1,000): their
    figures, the RSS growth, and what a whole collection still finds at the end."""
    spec = JobSpec(name="churn", command=("python", "train.py"), gpus=1, time_limit=3600)
    samples = []
    arrivals: list[float] = []  # the passes that read a newcomer's jobs, planning nothing
    afters: list[float] = []  # the pass that plans them, after those
    reading = False  # a newcomer's jobs not planned yet
    rss_before = rss_mib()
    mark = len(fulls.ms)
    joined = 0
    for n in range(passes):
        for _ in range(10):
            user = rng.randrange(USERS)
            store.submit([spec], 1000 + user, f"user{user:02d}", time.time())
        if newcomers and n % newcomers == 0:
            uid = 5000 + len(loop_window(daemon)._keys) + joined
            store.submit([spec] * PLAN_WINDOW, uid, f"newcomer{uid}", time.time())
            joined += 1
        # Not window.jobs(): the list it keeps would be one more object for a pass's GC.
        gone = rng.sample(sorted(loop_window(daemon)._jobs), 10)
        store.cancel_pending(gone, "churn", time.time())
        samples.append(one_pass(daemon))
        if newcomers and n % newcomers == 0:
            reading = True
        if reading:
            # Until a pass plans (a checkout without unread: the pass that reads them).
            planned = not unread(daemon, False)
            (afters if planned else arrivals).append(samples[-1])
            reading = not planned
        between_passes(daemon)
    rss_after = rss_mib()
    in_passes = fulls.since(mark)
    collector = getattr(daemon, "collector", None)
    began, cpu = time.perf_counter(), time.thread_time()
    if collector is not None:  # its periodic whole collection, as run_loop makes it
        before = collector.collected
        collector.full_seconds, period = 0.0, collector.full_seconds
        collector.full_when_due()
        collector.full_seconds = period
        found = collector.collected - before
    else:
        found = gc.collect()
    whole, whole_cpu = (time.perf_counter() - began) * 1000, (time.thread_time() - cpu) * 1000
    samples.sort()
    return (
        f"{passes} passes after 10 submits and 10 cancels each"
        f"{f' and a new user of {PLAN_WINDOW:,} jobs every {newcomers}' if newcomers else ''}: "
        f"median "
        f"{statistics.median(samples):.1f} ms, p90 "
        f"{samples[round(0.9 * (len(samples) - 1))]:.1f} ms, the longest {samples[-1]:.1f} ms "
        f"({in_passes}); "
        + (
            f"those reading a newcomer's jobs before the one that plans them: "
            f"{len(arrivals) / len(afters):.1f} a newcomer, median "
            f"{statistics.median(arrivals):.1f} ms, the longest {max(arrivals):.1f} ms; "
            f"the passes that plan them: median {statistics.median(afters):.1f} ms, the "
            f"longest {max(afters):.1f} ms; "
            if arrivals and afters
            else ""
        )
        + f"RSS {rss_before:.0f} -> {rss_after:.0f} MiB; a whole collection then found "
        f"{found} objects in {whole:.1f} ms (CPU {whole_cpu:.1f} ms)"
    )


def measure_loop(jobs: list[Job], runs: int, churn_passes: int, rng: random.Random) -> None:
    """Daemon.schedule() per tick, `jobs` queued in a real store, every GPU taken: the
    first read's passes and the one after apart, then `runs` passes, then `churn_passes`
    with submits and cancels; then a restarted loop's first read and the pass after."""
    from gbatch.head.daemon import Daemon
    from gbatch.head.store import Store
    from gbatch.site.config import Paths

    pending = len(jobs)
    fulls = FullCollections()
    with tempfile.TemporaryDirectory() as tmp:
        paths = Paths(Path(tmp))
        store = Store(paths.store)
        daemon = Daemon(paths, loop_config(), store)
        try:
            queue_behind_busy_gpus(store, jobs)
            daemon.fleet.start()  # the node is up: its agent reports its GPUs
            del jobs
            gc.collect()
            wait_for_gpus(daemon)
            start_collector(daemon)
            rss_before = rss_mib()
            # The first read builds the window and writes every reason; the pass after
            # takes what it wrote.
            mark = len(fulls.ms)
            first = first_read(daemon)
            first_fulls = fulls.since(mark)
            if not daemon.expected_starts:
                raise SystemExit("no reservation: the node is not up, or not full")
            second = one_pass(daemon)
            mark = len(fulls.ms)
            samples = [one_pass(daemon) for _ in range(runs)]
            samples_fulls = fulls.since(mark)
            rss_after = rss_mib()
            churned = churn(daemon, store, churn_passes, rng, fulls)
            grown = churn(daemon, store, churn_passes, rng, fulls, newcomers=20)
            if len(store.jobs_in((JobState.CONFIGURING, JobState.RUNNING))) != GPUS_PER_NODE:
                raise SystemExit("a pass started a job: the measure is not what it says")
            # A restart: a new daemon's loop over the same store, its reasons written,
            # with the store module's caches cold, as in a new process.
            daemon.fleet.stop()
            daemon.committer.close()
            cold_store_caches()
            daemon = Daemon(paths, loop_config(), store)
            daemon.fleet.start()
            wait_for_gpus(daemon)
            start_collector(daemon)
            mark = len(fulls.ms)
            restart_first = first_read(daemon)
            restart_fulls = fulls.since(mark)
            if not daemon.expected_starts:
                raise SystemExit("no reservation after the restart")
            restart_second = one_pass(daemon)
        finally:
            daemon.fleet.stop()
            daemon.committer.close()
            store.close()
            fulls.close()
    samples.sort()
    median = statistics.median(samples)
    p90 = samples[min(len(samples) - 1, round(0.9 * (len(samples) - 1)))]
    typed = (
        f" ({TYPED_SHARE:.0%} of them asking a100 or rtx4090, the node 4 of each)"
        if TYPES["on"] and KNOWS_TYPES
        else " (--types: the same jobs, untyped: this checkout has no GPU types)"
        if TYPES["on"]
        else ""
    )
    if SHARES["on"]:
        typed += (
            f" ({SHARED_PART:.0%} asking --gpu-mem of 10, 20 or 40G, every GPU shareable)"
            if KNOWS_SHARES
            else " (--shares: the same jobs as 1 whole GPU: this checkout has no shares)"
        )
    print(
        f"Daemon.schedule(): {pending} pending in the store{typed}, the node's 8 GPUs all taken: "
        f"{told('first read', first, second, first_fulls)}; then median {median:.1f} ms, "
        f"p90 {p90:.1f} ms, the longest {samples[-1]:.1f} ms ({samples_fulls}) "
        f"(goal <= {GOAL_MS:.0f} ms a pass); RSS {rss_before:.0f} MiB before the first "
        f"pass, {rss_after:.0f} MiB after the passes; {churned}; {grown}; "
        f"{told('a restart', restart_first, restart_second, restart_fulls)}",
        flush=True,
    )


def loop_config() -> Any:
    """The loop's daemon's config: 8 simulated GPUs, of two models with --types where the
    checkout knows them, shareable with --shares where it knows shares."""
    from gbatch.site.config import Config

    config = Config(simulate_gpus=GPUS_PER_NODE)
    if TYPES["on"] and "simulated_models" in Config.__dataclass_fields__:
        config = replace(config, simulated_models=SIMULATED_MODELS)
    if SHARES["on"] and "share_gpus" in Config.__dataclass_fields__:
        config = replace(config, share_gpus=True)
    return config


def wait_for_gpus(daemon: Daemon) -> None:
    """Until the local node's agent has reported its GPUs (the node is up)."""
    deadline = time.monotonic() + 60
    while not daemon.fleet.node_view(
        daemon.fleet.nodes["local"], [], set(), now=time.time()
    ).gpus_total:
        if time.monotonic() > deadline:
            raise SystemExit("the local node never reported its GPUs")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
