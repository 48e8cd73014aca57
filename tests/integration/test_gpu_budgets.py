"""GPU memory budgets on a real daemon and its local node's agent: a job's own process
(by its pid, in the simulation file the agent reads at every report) using more GPU
memory than its --gpu-mem is warned, then stopped OUT_OF_MEMORY with reason
OutOfGpuMemoryBudget (squeue while completing, sacct, its events, its webhook told); a
job under its budget is left alone; under gpu_mem_policy warn a job is only warned."""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head, require_root, wait_for

from gbatch.site.config import Config

# kill_grace_seconds long enough to see the stopped job COMPLETING (it ignores SIGTERM).
BASE = "tick_seconds: 0.2\nreport_interval: 0.2\nkill_grace_seconds: 4\n"
# Shares need a shareable card once placement knows them (the shares part's setting).
SHARES = "share_gpus: true\n" if "share_gpus" in Config.__dataclass_fields__ else ""
# The job records its pid, then ignores SIGTERM: only the grace's SIGKILL ends it.
HOLD = "echo $$ > {pidfile}; trap '' TERM; exec sleep 300"


class Recorder(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, object]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[str, list[dict[str, object]]]]:
    received: list[dict[str, object]] = []
    handler = type("Hook", (Recorder,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook/", received
    server.shutdown()
    server.server_close()


@pytest.fixture
def heads() -> Iterator[list[Head]]:
    made: list[Head] = []
    yield made
    for head in made:
        head.stop()
        kill_leftover_jobs(head.home)


def start_head(home: Path, config: str, heads: list[Head]) -> Head:
    head = make_head(home, config=BASE + SHARES + config)
    heads.append(head)
    head.start()
    return head


def holding_job(head: Head, name: str, budget: str, *options: str) -> tuple[int, int]:
    """A running job with a GPU memory budget, and the pid of its process."""
    pidfile = head.home / f"{name}.pid"
    job = head.sbatch(
        "-J", name, f"--gpu-mem={budget}", *options, "--wrap", HOLD.format(pidfile=pidfile)
    )
    head.wait_state(job, "RUNNING")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what=f"{name}'s pid")
    return job, int(pidfile.read_text())


def uses(head: Head, usage: dict[int, tuple[int, int]]) -> None:
    """The agent's next reports list each job's process using `usage[job] = (pid, MiB)`
    on that job's GPU."""
    sim = head.home / "simulated-gpus.json"
    data = json.loads(sim.read_text())
    for gpu in data["gpus"]:
        gpu["processes"], gpu["memory_used_mib"] = [], 0
    for job, (pid, mib) in usage.items():
        (index,) = head.job(job)["gpus"]  # type: ignore[misc]
        data["gpus"][index]["processes"].append({"pid": pid, "used_memory_mib": mib})
        data["gpus"][index]["memory_used_mib"] += mib
    sim.write_text(json.dumps(data))


def shown(head: Head, job: int) -> str:
    return head.run("scontrol", "show", "job", str(job), check=True).stdout


def test_a_job_over_its_budget_is_warned_then_stopped_out_of_memory_with_the_reason(
    tmp_path: Path, hook: tuple[str, list[dict[str, object]]], heads: list[Head]
) -> None:
    url, received = hook
    config = f"gpu_mem_grace_seconds: 3\nwebhook_prefixes_allowed: ['{url}']\n"
    head = start_head(tmp_path / "home", config, heads)
    greedy, greedy_pid = holding_job(
        head, "greedy", "1G", "--retries=2", "--notify", f"{url}greedy,GPU_MEM_BUDGET,FAIL"
    )
    modest, modest_pid = holding_job(head, "modest", "4G")
    uses(head, {greedy: (greedy_pid, 1536), modest: (modest_pid, 1024)})

    # Warned first: its reason while it runs, an event, its webhook told.
    def reason(job: int) -> str:
        return head.run("squeue", "-h", "-j", str(job), "-o", "%T %r", check=True).stdout.strip()

    # The reason of the read that saw the warning: a loaded machine may pass the 3 s grace
    # between two reads.
    warned = str(
        wait_for(
            lambda: (now := reason(greedy)).startswith("RUNNING GpuMemOverBudget: ") and now,
            30,
            "warning",
        )
    )
    assert "its processes use 1536M of its 1G GPU memory budget since " in warned
    assert "; stopped if still over after 3 s" in warned
    assert re.search(r"^   GpuMemUsed=1536M GpuMemPeak=1536M$", shown(head, greedy), re.M)

    # Then stopped: COMPLETING with the reason (it ignores SIGTERM, so for a while) ...
    wait_for(lambda: reason(greedy).startswith("COMPLETING "), 30, "the stop")
    stopping = reason(greedy)
    assert stopping.startswith(
        "COMPLETING OutOfGpuMemoryBudget: its processes used 1536M of its 1G GPU memory budget for "
    )
    # ... and OUT_OF_MEMORY, not retried (--retries=2) and not requeued.
    ended = head.wait_state(greedy, "OUT_OF_MEMORY", timeout=60)
    assert (ended["reason"], ended["attempt"]) == ("OutOfGpuMemoryBudget", 1)
    acct = head.run(
        "sacct", "-X", "-j", str(greedy), "-P", "-n", "-o", "State,Reason,MaxGpuMem", check=True
    )
    assert acct.stdout == "OUT_OF_MEMORY|OutOfGpuMemoryBudget|1536M\n"
    assert "(OutOfGpuMemoryBudget)" in head.run("squeue", "-t", "all", "-j", str(greedy)).stdout
    events = shown(head, greedy)
    history = [
        line.split()[1:3] for line in events.split("Events:\n")[1].splitlines() if line.strip()
    ]
    assert history[-3:] == [
        ["RUNNING", "GpuMemOverBudget:"],
        ["COMPLETING", "OutOfGpuMemoryBudget:"],
        ["OUT_OF_MEMORY", "OutOfGpuMemoryBudget"],
    ], events
    assert "GpuMemPeak=1536M" in events and "GpuMemUsed=" not in events

    # Its owner was told: the warning, then the end (FAIL) with state and reason.
    wait_for(lambda: len(received) >= 2, 30, "the webhooks")
    told = [(e["kind"], e["job"]["state"], e["job"]["reason"]) for e in received]  # type: ignore[index]
    assert told[0][:2] == ("GPU_MEM_BUDGET", "RUNNING")
    assert str(told[0][2]).startswith("GpuMemOverBudget: ")
    assert told[1] == ("FAIL", "OUT_OF_MEMORY", "OutOfGpuMemoryBudget")

    # The job under its budget, seen in the same reports, is left alone.
    kept = head.job(modest)
    assert (kept["state"], kept["reason"]) == ("RUNNING", "None")  # as squeue %r
    assert "GpuMemUsed=1G GpuMemPeak=1G" in shown(head, modest)
    head.run("scancel", str(modest), check=True)
    head.wait_state(modest, "CANCELLED", timeout=60)


def test_under_the_warn_policy_a_job_over_its_budget_is_warned_and_runs_on(
    tmp_path: Path, heads: list[Head]
) -> None:
    head = start_head(tmp_path / "home", "gpu_mem_policy: warn\ngpu_mem_grace_seconds: 1\n", heads)
    job, pid = holding_job(head, "over", "1G")
    uses(head, {job: (pid, 2048)})
    wait_for(lambda: str(head.job(job)["reason"]).startswith("GpuMemOverBudget: "), 30, "warning")
    warned_at = time.time()
    assert "stopped if" not in str(head.job(job)["reason"])
    # Well past the grace (the clock, read, not slept on), a newer report is sampled ...
    wait_for(lambda: time.time() > warned_at + 3, 10, "the grace to pass")
    uses(head, {job: (pid, 3072)})
    wait_for(lambda: "GpuMemUsed=3G" in shown(head, job), 30, "a report after the grace")
    # ... and the job runs on, still flagged.
    still = head.job(job)
    assert still["state"] == "RUNNING" and str(still["reason"]).startswith("GpuMemOverBudget: ")
    head.run("scancel", str(job), check=True)
    head.wait_state(job, "CANCELLED", timeout=60)


def test_a_process_the_job_moved_to_a_session_of_its_own_still_counts_in_its_cgroup(
    tmp_path: Path, heads: list[Head]
) -> None:
    """`setsid` takes a process out of its job's session, not out of its run's cgroup: where
    bare runs have cgroups (a root daemon here), its memory still counts against its job's
    budget, and its card is not read as taken by a stranger."""
    require_root("to give bare runs cgroups")
    head = start_head(tmp_path / "home", "gpu_mem_grace_seconds: 1\n", heads)
    if "bare jobs: held by cgroup" not in (head.home / "gbatchd.log").read_text():
        pytest.skip("this host gives bare runs no cgroups (see the daemon's start line)")
    pidfile = head.home / "escaped.pid"
    escape = f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & wait"
    job = head.sbatch("-J", "escaper", "--gpu-mem=1G", "--wrap", escape)
    head.wait_state(job, "RUNNING")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="the escaped pid")
    uses(head, {job: (int(pidfile.read_text()), 2048)})
    ended = head.wait_state(job, "OUT_OF_MEMORY", timeout=60)
    assert str(ended["reason"]).startswith("OutOfGpuMemoryBudget"), ended
