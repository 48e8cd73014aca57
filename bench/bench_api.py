"""The HTTP API's throughput and latency: submits, the jobs list, and /metrics.

Run: `.venv/bin/python bench/bench_api.py [--quick] [--checkout DIR ...] [--submits-only]`.
One daemon in a temp GBATCH_HOME with one local node of 800 simulated GPUs (as many
per-GPU series as 100 nodes x 8), `gbatch api serve --local-metrics` on 127.0.0.1, and a
token minted with `gbatch token` (as root, who gets no tokens: for a robot's account made
for the run and listed in service_accounts; an older checkout's, for `nobody`). One
client, http.client on one persistent connection (keep-alive), as a CI script or a
notebook would hold it.

Figures:
  (a) durable submits over HTTP: JSON job files (`{"command": ..., "begin": ...}`, a
      begin far ahead so nothing runs), one after another: submits/s, and one
      request's latency; beside it, the same submits on the daemon's socket, and the CPU
      each process spent per submit (what bounds it);
  (b) `GET /api/v1/jobs` with 10,000 jobs pending (held, single submits: not an array,
      whose tasks would be one record): as records (the default), as columns
      (`format=columns`), and a page of 100 (`limit=100`);
  (c) `GET /metrics` over HTTP with those 10,000 jobs and the 800 GPUs;
  (d) metrics.render() in-process of a snapshot with 100 nodes x 8 GPUs made up here
      (the fleet simulates one local node only; 100 SSH hosts are not cheap), and the
      jobs rows of (c)'s real snapshot.

With several `--checkout` directories (e.g. `--checkout /work/main --checkout .`), each
checkout's code serves its own daemon and API (PYTHONPATH), and (a)'s runs alternate
between them (A, B, A, B, ...), so a busy machine weighs on both alike; (b)-(d) are timed
on the first checkout only. A checkout may name further directories after it, joined
with `:` as PYTHONPATH is (`--checkout .:/tmp/extra-site`: the branch with a package the
shared interpreter lacks). `--submits-only` stops after (a).

`--lists-only --checkout A --checkout B [--rounds N]`: (b) alone, the daemon and the API
running each checkout's code in turn (A, B, A, B, ...; PYTHONPATH) on one store whose
queue is filled once: a before/after comparison in one run.
"""

from __future__ import annotations

import argparse
import atexit
import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import (
    GBATCH,
    REPO,
    Stats,
    cpu_seconds,
    daemon_pid,
    gbatch_env,
    load_average,
    machine_note,
    median,
    quick_help,
    summarize,
    temp_home,
)

SUBMIT_GOAL = 1_000.0  # submits/s, durable, one client
LIST_GOAL_MS = 50.0  # GET /jobs at 10,000 jobs, p50
METRICS_GOAL_MS = 50.0  # GET /metrics at 100 x 8 GPUs and 10,000 jobs
QUEUE = 10_000
NODES, GPUS_PER_NODE = 100, 8
# Far ahead, so the submitted jobs wait (a job file may not say `hold`).
JOB = json.dumps({"command": "true", "name": "b", "begin": "2099-01-01T00:00:00"})


def verdict(stats: Stats, goal: float | None, higher_is_better: bool) -> str:
    if goal is None:
        return "no goal"
    met = stats.median >= goal if higher_is_better else stats.median <= goal
    sign = ">=" if higher_is_better else "<="
    return f"goal {sign} {goal:,.0f}, {'met' if met else 'MISSED'}"


def line(what: str, stats: Stats, unit: str, goal: float | None, higher_is_better: bool) -> str:
    """`what: median X unit, p90 Y, min A, max B (goal ..., met; N samples)`."""
    number = "{:,.0f}" if higher_is_better else "{:,.1f}"
    shown = [number.format(v) for v in (stats.median, stats.p90, stats.low, stats.high)]
    return (
        f"{what}: median {shown[0]} {unit}, p90 {shown[1]}, min {shown[2]}, max {shown[3]} "
        f"({verdict(stats, goal, higher_is_better)}; {stats.count} samples)"
    )


def report(
    what: str,
    samples: Sequence[float],
    unit: str,
    goal: float | None = None,
    higher_is_better: bool = False,
) -> Stats:
    stats = summarize(samples, higher_is_better)
    print(line(what, stats, unit, goal, higher_is_better), flush=True)
    return stats


@dataclass(frozen=True)
class Settings:
    reps: int  # repetitions of the submit run
    submits: int  # HTTP submits per repetition
    queue: int  # jobs pending for the list and the scrape
    samples: int  # GETs of the list and of /metrics
    gpus: int  # simulated GPUs of the daemon's one node
    # whose code the daemons and APIs run: each a PYTHONPATH (a checkout, maybe more)
    checkouts: tuple[str, ...] = (str(REPO),)
    submits_only: bool = False  # (a) alone
    lists_only: bool = False  # (b) alone, each checkout in turn on one store
    rounds: int = 1  # --lists-only: rounds over the checkouts


def parse_args(argv: Sequence[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help("1 x 20 submits, 100 jobs listed, 3 GETs of each"),
    )
    parser.add_argument(
        "--checkout",
        action="append",
        default=[],
        help="run the daemon and the API from this checkout (repeat: (a) alternates them)",
    )
    parser.add_argument("--submits-only", action="store_true", help="(a) alone")
    parser.add_argument(
        "--lists-only",
        action="store_true",
        help="(b) alone, with each --checkout's code in turn (default: this checkout)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="with --lists-only")
    args = parser.parse_args(argv)
    checkouts = tuple(
        os.pathsep.join(str(Path(part).resolve()) for part in path.split(os.pathsep))
        for path in args.checkout
    ) or (str(REPO),)
    if args.quick:
        settings = Settings(reps=1, submits=20, queue=100, samples=3, gpus=NODES * GPUS_PER_NODE)
    else:
        settings = Settings(
            reps=5, submits=1_000, queue=QUEUE, samples=40, gpus=NODES * GPUS_PER_NODE
        )
    return replace(
        settings,
        checkouts=checkouts,
        submits_only=args.submits_only,
        lists_only=args.lists_only,
        rounds=args.rounds if args.lists_only else 1,
    )


def synthetic_nodes(nodes: int, gpus: int) -> list[dict[str, Any]]:
    """`nodes` nodes of `gpus` GPUs each, half of them held, as the Metrics reply's
    `nodes` (codec.node_to_wire's shape)."""
    return [
        {
            "name": f"gpu{n:03d}",
            "state": "mixed",
            "reason": "",
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{n:04x}{i:04x}-0000-0000-0000-000000000000",
                    "name": "NVIDIA H100 80GB HBM3",
                    "memory_total_mib": 81559,
                    "memory_used_mib": 40000 if i % 2 else 0,
                    "utilization_pct": 90 if i % 2 else 0,
                    "foreign_processes": 0,
                    "simulated": False,
                }
                for i in range(gpus)
            ],
            "allocations": {str(i): 1000 + n * gpus + i for i in range(1, gpus, 2)},
            "address": f"gpu{n:03d}.lab",
            "partitions": ["gpu"],
        }
        for n in range(nodes)
    ]


API_SERVE = [str(GBATCH), "api", "serve", "--listen", "127.0.0.1:0", "--local-metrics"]


def checkout_env(home: Path, checkout: str, simulate_gpus: int = 2) -> dict[str, str]:
    """gbatch_env, running `checkout`'s code (a PYTHONPATH)."""
    env = gbatch_env(home, simulate_gpus)
    env["PYTHONPATH"] = checkout
    return env


def knows_service_accounts(checkout: str) -> bool:
    """Whether `checkout`'s gbatch mints another's token only for a listed service account."""
    return (Path(checkout.split(os.pathsep)[0]) / "gbatch" / "site" / "accounts.py").exists()


_ACCOUNTS: list[str] = []


def bench_account() -> str:
    """A robot's account the bench mints for as root, made once and removed at exit."""
    if not _ACCOUNTS:
        name = f"gbbench-{os.getpid()}"
        subprocess.run(
            ["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True
        )
        atexit.register(subprocess.run, ["userdel", name], capture_output=True)
        _ACCOUNTS.append(name)
    return _ACCOUNTS[0]


def token_user(checkout: str) -> tuple[str, ...]:
    """`gbatch token`'s --user for the bench's token from `checkout`'s daemon.

    Root gets no tokens of its own: a service account (an older checkout's gbatch:
    nobody). Anyone else mints their own."""
    if os.getuid() != 0:
        return ()
    return ("--user", bench_account() if knows_service_accounts(checkout) else "nobody")


def allow_token(home: Path, checkout: str) -> None:
    """config.yaml in `home` listing token_user's account, where `checkout` needs it.

    Before the daemon starts; an older checkout's gets none (it knows no such key)."""
    config = home / "config.yaml"
    config.unlink(missing_ok=True)
    if os.getuid() == 0 and knows_service_accounts(checkout):
        config.write_text(f"service_accounts: [{bench_account()}]\n")


@contextmanager
def checkout_daemon(checkout: str, gpus: int) -> Iterator[Path]:
    """`checkout`'s daemon in a fresh GBATCH_HOME (yielded), stopped afterwards."""
    with temp_home() as home:
        allow_token(home, checkout)
        env = checkout_env(home, checkout, gpus)
        run = [str(GBATCH), "daemon"]
        # cwd: `python -m gbatch` (the daemon) puts its directory first on sys.path,
        # before PYTHONPATH; run from another checkout, it would run that code.
        cwd = checkout.split(os.pathsep)[0]
        subprocess.run([*run, "start"], env=env, check=True, stdout=subprocess.DEVNULL, cwd=cwd)
        try:
            yield home
        finally:
            subprocess.run([*run, "stop"], env=env, check=True, stdout=subprocess.DEVNULL, cwd=cwd)


@contextmanager
def api_server(home: Path, checkout: str = str(REPO)) -> Iterator[tuple[int, int]]:
    """`gbatch api serve --local-metrics` on a free loopback port: (port, its pid)."""
    process = subprocess.Popen(
        # One user's share lifted: this measures the API, not the per-user limits.
        [*API_SERVE, "--user-rate", "1000000", "--user-burst", "1000000"],
        env=checkout_env(home, checkout),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        said = process.stdout.readline()  # printed once it listens
        if "http://127.0.0.1:" not in said:
            raise RuntimeError(f"gbatch api serve said {said!r}")
        port = int(said.split("http://127.0.0.1:")[1].split("/")[0])
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def mint(home: Path, checkout: str = str(REPO)) -> str:
    """A token for the bench's requests from `checkout`'s daemon (allow_token set it up)."""
    done = subprocess.run(
        [str(GBATCH), "token", "--scope", "submit,read", *token_user(checkout)],
        env=checkout_env(home, checkout),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


class Http:
    """One keep-alive connection; every request must answer `expect`."""

    def __init__(self, port: int, token: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.headers = {"Authorization": f"Bearer {token}"}

    def request(self, method: str, path: str, body: str | None = None, expect: int = 200) -> bytes:
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Type"] = "application/json"
        self.connection.request(method, path, body=body, headers=headers)
        reply = self.connection.getresponse()
        data = reply.read()
        if reply.status != expect:
            raise RuntimeError(f"{method} {path} -> {reply.status}: {data[:300]!r}")
        return data


def socket_submits(home: Path, count: int) -> float:
    """`count` JSON-job submits on the daemon's socket, one connection: submits/s."""
    from gbatch.jobspec.submit import request_for_text
    from gbatch.protocol import requests
    from gbatch.protocol.client import Client

    request = requests.Submit(**request_for_text(JOB, "api").fields())
    with Client(home / "gbatchd.sock") as client:
        client.call(request)
        start = time.perf_counter()
        for _ in range(count):
            client.call(request)
        return count / (time.perf_counter() - start)


def fill_queue(home: Path, count: int) -> None:
    """Single held submits on the socket (an array's tasks would be one record)."""
    from gbatch.core.model import JobSpec
    from gbatch.protocol import requests
    from gbatch.protocol.client import Client

    spec = JobSpec(name="q", command=("/bin/true",)).to_dict()
    with Client(home / "gbatchd.sock", timeout=60) as client:
        for _ in range(count):
            client.call(requests.Submit(spec=spec, held=True))


def timed_gets(
    client: Http, path: str, samples: int, pids: tuple[int, int] | None = None
) -> tuple[list[float], int]:
    """(each GET's seconds, the body's bytes), after two warm-up GETs. With `pids` (the
    API process's, gbatchd's), also prints the CPU each spent per GET: a steadier figure
    than the wall time on a busy machine."""
    for _ in range(2):
        client.request("GET", path)
    before = [cpu_seconds(pid) for pid in pids] if pids else []
    seconds: list[float] = []
    size = 0
    for _ in range(samples):
        start = time.perf_counter()
        size = len(client.request("GET", path))
        seconds.append(time.perf_counter() - start)
    if pids:
        api, daemon = (
            (cpu_seconds(pid) - b) / samples * 1e3 for pid, b in zip(pids, before, strict=True)
        )
        print(f"{path}: CPU per GET: API process {api:.1f} ms, daemon {daemon:.1f} ms")
    return seconds, size


@dataclass
class Stack:
    """One checkout's daemon and API, and what (a) measured of it."""

    checkout: str
    home: Path
    daemon: int  # pid
    api: int  # pid
    client: Http
    token: str
    port: int
    rates: list[float]
    latencies: list[float]
    socket_rates: list[float]
    api_cpu: float = 0.0
    daemon_cpu: float = 0.0


def submit_run(stack: Stack, submits: int) -> None:
    """`submits` HTTP submits on `stack`, one after another: their rate, latencies, CPU."""
    client = stack.client
    # A fresh connection: the API closes one idle for 5 s (timeout_keep_alive), as this
    # one may have been while the other checkouts ran.
    client.connection.close()
    client.request("POST", "/api/v1/jobs", JOB, expect=201)
    api_before, daemon_before = cpu_seconds(stack.api), cpu_seconds(stack.daemon)
    start = time.perf_counter()
    for _ in range(submits):
        before = time.perf_counter()
        client.request("POST", "/api/v1/jobs", JOB, expect=201)
        stack.latencies.append(time.perf_counter() - before)
    stack.rates.append(submits / (time.perf_counter() - start))
    stack.api_cpu += cpu_seconds(stack.api) - api_before
    stack.daemon_cpu += cpu_seconds(stack.daemon) - daemon_before


LISTS = (
    ("/api/v1/jobs", "records (the default), every job"),
    ("/api/v1/jobs?format=columns", "format=columns, every job"),
    ("/api/v1/jobs?limit=100", "a page of 100 (limit=100)"),
)


def lists_only(settings: Settings) -> None:
    """(b) with each checkout's daemon and API in turn, on one store filled once."""
    seconds: dict[tuple[str, str], list[float]] = {}
    with temp_home() as home:
        for round_ in range(settings.rounds):
            for checkout in settings.checkouts:
                allow_token(home, checkout)
                env = checkout_env(home, checkout, settings.gpus)
                # cwd: `python -m gbatch` (the daemon) puts its directory first on sys.path,
                # before PYTHONPATH; run from another checkout, it would run that code.
                subprocess.run(
                    [str(GBATCH), "daemon", "start"],
                    env=env,
                    check=True,
                    cwd=checkout.split(os.pathsep)[0],
                )
                try:
                    if round_ == 0 and checkout == settings.checkouts[0]:
                        fill_queue(home, settings.queue)
                        time.sleep(1.0)
                    with api_server(home, checkout) as (port, api_pid):
                        client = Http(port, mint(home, checkout))
                        pids = (api_pid, daemon_pid(home))
                        print(f"round {round_ + 1}, {checkout}, load {load_average()}")
                        for path, _ in LISTS:
                            taken, _size = timed_gets(client, path, settings.samples, pids)
                            seconds.setdefault((checkout, path), []).extend(taken)
                finally:
                    subprocess.run(
                        [str(GBATCH), "daemon", "stop"],
                        env=env,
                        check=True,
                        cwd=checkout.split(os.pathsep)[0],
                    )
    for checkout in settings.checkouts:
        for path, what in LISTS:
            report(
                f"(b) {checkout}: GET /api/v1/jobs, {what}, {settings.queue:,} pending",
                [s * 1000 for s in seconds[(checkout, path)]],
                "ms",
                LIST_GOAL_MS,
            )


def main(argv: Sequence[str] | None = None) -> None:
    settings = parse_args(argv)
    print(machine_note())
    print(f"# load average before: {load_average()}", flush=True)
    if settings.lists_only:
        lists_only(settings)
        print(f"# load average after: {load_average()}", flush=True)
        return
    with ExitStack() as resources:
        stacks: list[Stack] = []
        for checkout in settings.checkouts:
            home = resources.enter_context(checkout_daemon(checkout, settings.gpus))
            port, api_pid = resources.enter_context(api_server(home, checkout))
            token = mint(home, checkout)
            client = Http(port, token)
            client.request("POST", "/api/v1/jobs", JOB, expect=201)  # warm both processes
            stacks.append(
                Stack(checkout, home, daemon_pid(home), api_pid, client, token, port, [], [], [])
            )
        for _ in range(settings.reps):
            for stack in stacks:
                submit_run(stack, settings.submits)
        for _ in range(settings.reps):
            for stack in stacks:
                stack.socket_rates.append(socket_submits(stack.home, settings.submits))
        total = settings.reps * settings.submits
        for stack in stacks:
            of = f" [{stack.checkout}]" if len(stacks) > 1 else ""
            report(
                f"(a) HTTP submits, 1 client, keep-alive, JSON ({settings.submits} per run){of}",
                stack.rates,
                "submits/s",
                SUBMIT_GOAL,
                higher_is_better=True,
            )
            report(f"(a) latency of one HTTP submit{of}", [s * 1000 for s in stack.latencies], "ms")
            print(
                f"(a) CPU per submit: API process {stack.api_cpu / total * 1e6:,.0f} us, "
                f"daemon {stack.daemon_cpu / total * 1e6:,.0f} us; wall per submit "
                f"{1e6 / median(stack.rates):,.0f} us{of}",
                flush=True,
            )
            report(
                f"(a) the same JSON submits on the daemon's socket, no HTTP{of}",
                stack.socket_rates,
                "submits/s",
                higher_is_better=True,
            )
        print(f"# load average after (a): {load_average()}", flush=True)
        if settings.submits_only:
            return
        first = stacks[0]
        home, token, port = first.home, first.token, first.port
        # The submits above are pending too (begin in 2099): top up to the queue.
        already = 1 + total + settings.reps * (settings.submits + 1)
        fill_queue(home, max(0, settings.queue - already))
        time.sleep(1.0)  # let the loop's wake-up for the burst pass
        # A new connection: the API closes one idle for 5 s (timeout_keep_alive).
        client = Http(port, token)
        pids = (first.api, first.daemon)
        seconds, size = timed_gets(client, "/api/v1/jobs", settings.samples, pids)
        listed = len(json.loads(client.request("GET", "/api/v1/jobs"))["jobs"])
        report(
            f"(b) GET /api/v1/jobs, {listed:,} jobs pending ({size / 1e6:.1f} MB)",
            [s * 1000 for s in seconds],
            "ms",
            LIST_GOAL_MS,
        )
        for path, what in (
            ("/api/v1/jobs?format=columns", "format=columns, every job"),
            ("/api/v1/jobs?limit=100", "a page of 100 (limit=100)"),
        ):
            seconds, size = timed_gets(client, path, settings.samples, pids)
            report(
                f"(b) GET /api/v1/jobs, {what}, of {listed:,} ({size / 1e3:,.0f} kB)",
                [s * 1000 for s in seconds],
                "ms",
                LIST_GOAL_MS,
            )
        seconds, size = timed_gets(client, "/metrics", settings.samples, pids)
        report(
            f"(c) GET /metrics over HTTP, {listed:,} jobs, 1 node of {settings.gpus} "
            f"simulated GPUs ({size / 1e3:.0f} kB)",
            [s * 1000 for s in seconds],
            "ms",
            METRICS_GOAL_MS,
        )
        snapshot = real_snapshot(home, settings.samples)
    render_figure(snapshot, settings.samples)
    print(f"# load average after: {load_average()}", flush=True)


def real_snapshot(home: Path, samples: int) -> dict[str, Any]:
    """The daemon's Metrics reply, and the time its request takes on the socket."""
    from gbatch.protocol import requests
    from gbatch.protocol.client import Client

    seconds: list[float] = []
    with Client(home / "gbatchd.sock") as client:
        snapshot: dict[str, Any] = client.call(requests.Metrics())
        for _ in range(samples):
            start = time.perf_counter()
            client.call(requests.Metrics())
            seconds.append(time.perf_counter() - start)
    report("(c) of which the Metrics request on the socket", [s * 1000 for s in seconds], "ms")
    return snapshot


def render_figure(snapshot: dict[str, Any], samples: int) -> None:
    """(d): render() of `snapshot` with its nodes replaced by 100 x 8 made-up GPUs."""
    from gbatch.api.metrics import render

    made_up = {**snapshot, "nodes": synthetic_nodes(NODES, GPUS_PER_NODE)}
    render(made_up)
    seconds: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        render(made_up)
        seconds.append(time.perf_counter() - start)
    report(
        f"(d) metrics.render(), {NODES} nodes x {GPUS_PER_NODE} GPUs made up, in-process",
        [s * 1000 for s in seconds],
        "ms",
        METRICS_GOAL_MS,
    )


if __name__ == "__main__":
    main()
