"""The web page's pictures end to end.

The GPU timeline (/ui/timeline): a real gbatchd with two simulated GPUs runs a fixed lab
(a finished run, a running one, one waiting for both GPUs), and Debian's chromium draws
the page: each known job's bar is on its GPU's lane at its start and end, links to its
page, and the pending line counts the waiting job. A running job's page charts its GPU's
utilisation and memory from simulated NVML samples, and seff says the same peak.
GBATCH_UPDATE_SCREENSHOTS=1 copies the screenshots to docs/screenshots/."""

from __future__ import annotations

import json
import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, service_config, wait_for
from fixedlab import DAY_RUNS, IDLE_RUN, MAINT, Lab, seed_lab
from test_http_api import api, http, mint  # noqa: F401 (fixtures)
from test_web_ui import Browserless, browser, csrf_of, root_of, screenshot, text_of  # noqa: F401


@pytest.fixture
def seeded(tmp_path: Path) -> tuple[Head, Lab]:
    """test_http_api's head over four simulated GPUs, not started, its store holding a
    fixed lab (fixedlab.py): a day of four users' runs on it and on a node-b since gone,
    two weeks of their usage before."""
    from gbatch.core.paths import resolve_paths

    config = FAST_CONFIG + "token_leeway_seconds: 0.2\n" + service_config()
    h = make_head(tmp_path / "home", gpus=4, config=config)
    paths = resolve_paths(h.env)
    return h, seed_lab(paths.store, paths.gpu_history, time.time())


@pytest.fixture
def head(seeded: tuple[Head, Lab]) -> Iterator[Head]:
    h, _ = seeded
    h.start()
    yield h
    h.stop()
    kill_leftover_jobs(h.home)


@pytest.fixture
def lab(seeded: tuple[Head, Lab]) -> Lab:
    return seeded[1]


def record(job_id: int, on: Head) -> dict[str, Any]:
    """The job's wire record (id, node, gpus, start and end times, spec)."""
    found = on.polled(job_id)
    assert found is not None
    return found


def test_the_timeline_draws_known_runs_on_their_gpus_at_their_times(
    head: Head,
    lab: Lab,
    api: str,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    done = head.sbatch("-G", "1", "-J", "finished-run", "--wrap", "sleep 1")
    head.wait_state(done, "COMPLETED")
    running = head.sbatch("-G", "1", "-J", "long-run", "--wrap", "sleep 300")
    head.wait_state(running, "RUNNING")
    serving = head.sbatch("-G", "2", "-J", "serve-demo", "--wrap", "sleep 300")
    head.wait_state(serving, "RUNNING")
    waiting = head.sbatch("-G", "4", "-J", "needs-all", "--wrap", "true")
    # A maintenance window on now over the node (its jobs carry on: IGNORE_JOBS).
    head.run(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=maint",
        "StartTime=now",
        "Duration=60",
        f"Users={pwd.getpwuid(os.getuid()).pw_name}",
        "Nodes=local",
        "Flags=MAINT,IGNORE_JOBS",
        check=True,
    )
    try:
        token = mint(head, "--scope", "read")
        d = browser
        wait = WebDriverWait(d, 30)
        d.get(f"{root_of(api)}/ui/login")
        wait.until(lambda _: d.find_elements(By.ID, "token"))
        d.find_element(By.ID, "token").send_keys(token)
        d.find_element(By.ID, "sign-in").click()
        wait.until(lambda _: d.find_elements(By.ID, "jobs"))
        d.find_element(By.LINK_TEXT, "Nodes").click()
        wait.until(lambda _: d.find_elements(By.ID, "timeline-link")).pop().click()
        svg = wait.until(lambda _: d.find_element(By.ID, "timeline"))
        first, last = float(svg.get_attribute("data-start")), float(svg.get_attribute("data-end"))
        left = float(svg.get_attribute("data-plot-left"))
        right = float(svg.get_attribute("data-plot-right"))
        now = float(svg.get_attribute("data-now"))
        assert first < now < last  # the range, and an eighth of it ahead

        def x_of(stamp: float) -> float:
            return left + (right - left) * (stamp - first) / (last - first)

        for job_id in (done, running):
            job = record(job_id, head)
            (bar,) = d.find_elements(By.CSS_SELECTOR, f'g.bar[data-job="{job_id}"]')
            (gpu,) = job["gpus"]
            assert (bar.get_attribute("data-node"), bar.get_attribute("data-gpu")) == (
                job["node"],
                str(gpu),
            )
            lane = d.find_element(By.ID, f"lane-{job['node']}-{gpu}")
            rect = bar.find_element(By.TAG_NAME, "rect")
            assert float(rect.get_attribute("y")) == float(lane.get_attribute("data-y")) + 1
            # From its start to its end (a running one: to now), at least 3 px, drawn
            # back from its end.
            end_x = x_of(job["end_time"] if job["end_time"] is not None else now)
            start_x = min(x_of(job["start_time"]), end_x - 3.0)
            assert abs(float(rect.get_attribute("x")) - start_x) < 0.2
            width = float(rect.get_attribute("width"))
            assert abs(float(rect.get_attribute("x")) + width - end_x) < 0.2
            title = bar.find_element(By.TAG_NAME, "title").get_attribute("textContent")
            assert f"{job_id} {job['spec']['name']}" in title and f"GPU {gpu}" in title
        # The lab's runs: a bar on each of their GPUs, the requeued job's two runs on
        # their own node's lanes (fixedlab.py).
        for _, name, node, gpus, *_ in DAY_RUNS:
            bars = d.find_elements(By.CSS_SELECTOR, f'g.bar[data-job="{lab.ids[name]}"]')
            assert sorted(
                (b.get_attribute("data-node"), b.get_attribute("data-gpu")) for b in bars
            ) == [(node, str(g)) for g in gpus]
        twice = d.find_elements(By.CSS_SELECTOR, f'g.bar[data-job="{lab.ids["llm-pretrain"]}"]')
        assert sorted(
            (b.get_attribute("data-node"), b.get_attribute("data-gpu")) for b in twice
        ) == [("local", "2"), ("local", "3"), ("node-b", "0"), ("node-b", "1")]
        seeded = sum(len(gpus) for _, _, _, gpus, *_ in DAY_RUNS) + 1 + 4  # + vision-2, llm-
        assert len(d.find_elements(By.CSS_SELECTOR, "g.bar")) == seeded + 1 + 1 + 2  # + ours
        # Its idle stretch: a strip on its GPU, from 9 h to 6 h ago.
        (idle,) = d.find_elements(By.CSS_SELECTOR, "rect.idle")
        assert idle.get_attribute("data-job") == str(lab.ids[IDLE_RUN])
        assert (idle.get_attribute("data-node"), idle.get_attribute("data-gpu")) == ("node-b", "2")
        assert abs(float(idle.get_attribute("x")) - x_of(now - 9 * 3600)) < 2
        shaded = d.find_elements(By.CSS_SELECTOR, "rect.window.maint")
        titles = [r.get_attribute("textContent") for r in shaded]
        # each GPU of the node, from now on; node-b's past window on each of its GPUs
        assert sum("reservation maint (MAINT)" in t for t in titles) == 4
        assert sum(f"reservation {MAINT[0]} (MAINT" in t for t in titles) == 4
        assert len(shaded) == 8
        assert text_of(d, "pending-now").startswith("now 1,")  # needs-all waits
        screenshot(d, tmp_path, "timeline")  # the last 24 h, the default
        # The range picker, then a bar's link: its job's page.
        from selenium.webdriver.support.ui import Select

        Select(d.find_element(By.ID, "range")).select_by_value("1h")
        d.find_element(By.CSS_SELECTOR, "#range-picker button").click()
        wait.until(lambda _: "range=1h" in d.current_url)
        d.find_element(By.CSS_SELECTOR, f'a[href="/ui/jobs/{running}"] rect').click()
        wait.until(lambda _: "long-run" in text_of(d, "job-name"))
        # The range picker; a range it does not offer is refused with the page's message.
        web = Browserless(root_of(api))
        login = csrf_of(web.get("/ui/login")[2])
        web.post("/ui/login", {"token": token, "csrf": login})
        status, _, page = web.get("/ui/timeline?range=30d")
        assert status == 200 and "selected>last 30d" in page and f'data-job="{done}"' in page
        status, _, page = web.get("/ui/timeline?range=1y")
        assert status == 400 and "range: pick one of 1h, 6h, 24h, 3d, 7d, 30d" in page
    finally:
        head.run("scancel", str(running), str(serving), str(waiting))
        head.wait_state(running, "CANCELLED")
        head.wait_state(serving, "CANCELLED")


def test_a_running_jobs_page_charts_its_gpus_utilisation_from_nvml_samples(
    head: Head,
    api: str,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    running = head.sbatch("-G", "1", "-J", "busy-run", "--wrap", "sleep 300")
    job = head.wait_state(running, "RUNNING")
    (gpu,) = job["gpus"]  # type: ignore[misc]
    simulation = head.home / "simulated-gpus.json"
    described = json.loads(simulation.read_text())
    try:
        token = mint(head, "--scope", "read")

        def sampled(util: int) -> bool:
            """The head's history holds `util` on the job's GPU for its last two seconds (a
            second's slot keeps its latest report: one alone may be overwritten)."""
            t = time.time()
            where = f"node=local&gpu={gpu}&start={t - 60:.0f}&end={t + 1:.0f}&points=61"
            series: Any = http(f"{api}/gpus/history?{where}", token=token)[1]["series"]
            points = series[0]["points"] if series else []
            return len(points) >= 2 and points[-1][2] == points[-2][2] == util

        # A run that warms up to its peak: each reading in the history in turn.
        for util, mem in ((20, 8_000), (45, 15_000), (70, 24_000), (87, 30_000)):
            described["gpus"][gpu].update(utilization_pct=util, memory_used_mib=mem)
            simulation.write_text(json.dumps(described))  # the agent reads it at each report
            wait_for(lambda util=util: sampled(util), 30, f"a sample of {util}%")
        web = Browserless(root_of(api))
        web.post("/ui/login", {"token": token, "csrf": csrf_of(web.get("/ui/login")[2])})
        wait_for(
            lambda: 'data-util-peak="87"' in web.get(f"/ui/jobs/{running}")[2],
            30,
            "the job's chart to show a sample of 87%",
        )
        d = browser
        wait = WebDriverWait(d, 30)
        d.get(f"{root_of(api)}/ui/login")
        wait.until(lambda _: d.find_elements(By.ID, "token"))
        d.find_element(By.ID, "token").send_keys(token)
        d.find_element(By.ID, "sign-in").click()
        wait.until(lambda _: d.find_elements(By.ID, "jobs"))
        d.get(f"{root_of(api)}/ui/jobs/{running}")
        chart = wait.until(lambda _: d.find_element(By.ID, f"job-chart-local-{gpu}"))
        assert chart.get_attribute("data-util-peak") == "87"
        assert int(chart.get_attribute("data-mem-peak")) == 30_000
        assert int(chart.get_attribute("data-samples")) >= 1
        util = chart.find_element(By.CSS_SELECTOR, "polyline.util").get_attribute("points")
        assert util.strip()  # a line was drawn
        assert "87" in text_of(d, "job-gpus")
        screenshot(d, tmp_path, "job-gpu-chart")
        # The Nodes page: the same GPU's last hour, beside its row.
        d.find_element(By.LINK_TEXT, "Nodes").click()
        small = wait.until(lambda _: d.find_element(By.ID, f"chart-local-{gpu}"))
        assert small.get_attribute("data-util-peak") == "87"
        # seff says it in numbers (the run's own GPU record, folded from the same reports).
        seff = head.run("seff", str(running), check=True).stdout
        assert "max 87%" in seff
    finally:
        head.run("scancel", str(running))
        head.wait_state(running, "CANCELLED")


def test_the_usage_chart_totals_what_sreport_says_for_a_lab_of_finished_runs(
    head: Head,
    api: str,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from datetime import datetime

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    lab = [
        head.sbatch("-G", "1", "-J", "one-gpu", "--wrap", "sleep 2"),
        head.sbatch("-G", "2", "-J", "two-gpus", "--wrap", "sleep 3"),
        head.sbatch("-G", "1", "-J", "short", "--wrap", "true"),
    ]
    for job_id in lab:
        head.wait_state(job_id, "COMPLETED")
    token = mint(head, "--scope", "read")
    d = browser
    wait = WebDriverWait(d, 30)
    d.get(f"{root_of(api)}/ui/login")
    wait.until(lambda _: d.find_elements(By.ID, "token"))
    d.find_element(By.ID, "token").send_keys(token)
    d.find_element(By.ID, "sign-in").click()
    wait.until(lambda _: d.find_elements(By.ID, "jobs"))
    d.find_element(By.LINK_TEXT, "Usage").click()
    svg = wait.until(lambda _: d.find_element(By.ID, "usage-by-user"))
    first, last = float(svg.get_attribute("data-start")), float(svg.get_attribute("data-end"))
    assert last - first >= 29 * 86400  # the last 30 days by default, to now
    # sreport over the same period, as an admin (the daemon's own user) sees every user.
    period = ("-S", datetime.fromtimestamp(first).isoformat(), "-E")
    period += (datetime.fromtimestamp(last).isoformat(),)
    said = json.loads(head.run("sreport", "-a", "--json", *period, check=True).stdout)
    expected = {row["name"]: row["gpu_seconds"] for row in said["rows"]}
    me = pwd.getpwuid(os.getuid()).pw_name
    assert expected[me] >= 2 + 2 * 3  # the lab's runs, at least their sleeps
    rows = d.find_elements(By.CSS_SELECTOR, "#usage-users tbody tr")
    shown = {r.get_attribute("data-name"): float(r.get_attribute("data-gpu-seconds")) for r in rows}
    assert shown.keys() == expected.keys()
    for name, seconds in expected.items():
        assert abs(shown[name] - seconds) < 0.01
        # Each user's segments add up to their row (the bars are the same numbers).
        segments = d.find_elements(
            By.CSS_SELECTOR, f'#usage-by-user rect.segment[data-name="{name}"]'
        )
        assert (
            abs(sum(float(s.get_attribute("data-gpu-seconds")) for s in segments) - seconds) < 0.01
        )
    # The partitions' chart is sreport --partition's, and sums to the same whole.
    said = json.loads(head.run("sreport", "--partition", "--json", *period, check=True).stdout)
    by_partition = {row["name"]: row["gpu_seconds"] for row in said["rows"]}
    parts = d.find_elements(By.CSS_SELECTOR, "#usage-partitions tbody tr")
    shown = {
        p.get_attribute("data-name"): float(p.get_attribute("data-gpu-seconds")) for p in parts
    }
    assert shown.keys() == by_partition.keys()
    assert all(abs(shown[name] - seconds) < 0.01 for name, seconds in by_partition.items())
    assert abs(sum(shown.values()) - sum(expected.values())) < 0.01
    # The fair-share factor is beside each user.
    factor = d.find_element(By.CSS_SELECTOR, f'#usage-users tr[data-name="{me}"] td:last-child')
    assert 0 < float(factor.text) <= 1
    screenshot(d, tmp_path, "usage")
    # A period it does not offer is refused with the page's message.
    web = Browserless(root_of(api))
    web.post("/ui/login", {"token": token, "csrf": csrf_of(web.get("/ui/login")[2])})
    status, _, page = web.get("/ui/usage?period=1y")
    assert status == 400 and "period: pick one of 14d, 30d, 12w, 26w" in page
    status, _, page = web.get("/ui/usage?period=12w")
    assert status == 200 and "selected>last 12w" in page and "week of" in page


def test_the_http_api_serves_the_timeline_gpu_history_and_usage_as_json(
    head: Head,
    api: str,  # noqa: F811
) -> None:
    running = head.sbatch("-G", "1", "-J", "api-run", "--wrap", "sleep 300")
    job = head.wait_state(running, "RUNNING")
    (gpu,) = job["gpus"]  # type: ignore[misc]
    token = mint(head, "--scope", "read")
    try:
        status, reply, _ = http(f"{api}/timeline", token=token)
        assert status == 200 and reply["end"] - reply["start"] == 86400
        (run,) = [r for r in reply["runs"] if r["id"] == running]  # type: ignore[union-attr]
        assert run["placements"] == [["local", [gpu]]] and run["name"] == "api-run"
        wait_for(
            lambda: http(f"{api}/gpus/history?node=local&gpu={gpu}&points=10", token=token)[1][
                "series"
            ][0]["points"],
            30,
            "a sample of the job's GPU",
        )
        status, reply, _ = http(f"{api}/gpus/history?node=local&gpu={gpu}&points=10", token=token)
        (series,) = reply["series"]  # type: ignore[misc]
        assert (series["node"], series["index"]) == ("local", gpu)
        assert 1 <= len(series["points"]) <= 10
        status, reply, _ = http(f"{api}/usage?step=7200", token=token)
        assert status == 200 and len(reply["edges"]) == 30 * 12 + 1  # type: ignore[arg-type]
        assert any(user == job["user"] for user, _ in reply["users"])  # type: ignore[union-attr]
        # Bad input: a 400 naming the field; no token: 401.
        status, reply, _ = http(f"{api}/timeline?start=yesterday", token=token)
        assert status == 400 and reply["error"].startswith("start: 'yesterday'")  # type: ignore[union-attr]
        status, reply, _ = http(f"{api}/usage?start=2000&end=1000", token=token)
        assert status == 400 and str(reply["error"]).startswith("end: give a time after start")
        status, reply, _ = http(f"{api}/usage?step=60", token=token)
        assert status == 400 and "more than 400 steps" in str(reply["error"])
        status, reply, _ = http(f"{api}/gpus/history?points=5000", token=token)
        assert status == 400 and "gpu_history.points" in str(reply["error"])
        status, _, _ = http(f"{api}/timeline")
        assert status == 401
    finally:
        head.run("scancel", str(running))
        head.wait_state(running, "CANCELLED")


def test_each_run_of_a_requeued_job_is_a_bar_of_its_own(
    head: Head,
    api: str,  # noqa: F811
) -> None:
    import re

    job_id = head.sbatch("-G", "1", "-J", "twice", "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING")
    first = record(job_id, head)
    head.run("scontrol", "requeue", str(job_id), check=True)
    wait_for(
        lambda: (
            (record(job_id, head).get("attempt") or 0) > first["attempt"]
            and record(job_id, head)["state"] == "RUNNING"
        ),
        60,
        "the requeued job to run again",
    )
    try:
        token = mint(head, "--scope", "read")
        web = Browserless(root_of(api))
        web.post("/ui/login", {"token": token, "csrf": csrf_of(web.get("/ui/login")[2])})
        status, _, page = web.get("/ui/timeline?range=1h")
        assert status == 200
        bars = re.findall(rf'<g class="bar" data-job="{job_id}" data-attempt="(\d+)"', page)
        assert sorted(int(a) for a in bars) == [first["attempt"], first["attempt"] + 1]
        assert "requeued (" in page  # the first run's bar says why it ended
    finally:
        head.run("scancel", str(job_id))
        head.wait_state(job_id, "CANCELLED")
