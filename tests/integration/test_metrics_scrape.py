"""Metrics end to end: a real gbatchd with simulated GPUs running jobs, `gbatch api serve`
on 127.0.0.1, and /metrics scraped over HTTP, read with prometheus_client's parser,
checked by `promtool check metrics`, and scraped by a real Prometheus server whose
query API must then hold the same values. Without promtool or prometheus (Debian's
`prometheus` package: .ci/setup-prometheus.sh) those two skip locally and fail in CI."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, GBATCH, Head, make_head, service_config, token_account, wait_for
from dashboard import DASHBOARD, metric_names, queries
from prometheus_client.parser import text_string_to_metric_families
from sshd import free_port

GPU_UTIL = [87, 4]
GPU_USED_MIB = [300, 0]  # under the 512 MiB threshold: both GPUs may be handed out


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    home = tmp_path_factory.mktemp("metrics") / "home"
    h = make_head(home, config=FAST_CONFIG + service_config())
    gpus = [
        {
            "name": "Simulated GPU",
            "memory_total_mib": 81920,
            "memory_used_mib": used,
            "utilization_pct": util,
        }
        for util, used in zip(GPU_UTIL, GPU_USED_MIB, strict=True)
    ]
    (home / "simulated-gpus.json").write_text(json.dumps({"gpus": gpus}))
    h.start()
    running = h.sbatch("-G", "1", "-J", "train", "--wrap", "sleep 300")
    done = h.sbatch("-J", "quick", "--wrap", "true")
    h.sbatch("-J", "later", "--hold", "--wrap", "true")
    h.wait_state(running, "RUNNING")
    h.wait_state(done, "COMPLETED")
    yield h
    h.run("scancel", str(running))
    h.wait_state(running, "CANCELLED")
    h.stop()


def serve(head: Head, *flags: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [*GBATCH, "api", "serve", "--listen", "127.0.0.1:0", *flags],
        env=head.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once it listens
    assert "gbatch API on http://127.0.0.1:" in line, process.stderr and process.stderr.read()
    return process, line.split()[3].removesuffix("/api/v1")


@pytest.fixture(scope="module")
def api(head: Head) -> Iterator[str]:
    """The API's root URL, serving /metrics without a token to loopback too."""
    process, root = serve(head, "--local-metrics")
    yield root
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def token(head: Head) -> str:
    # Root gets no tokens of its own: one for the service account the head lists.
    args = ("--user", token_account()) if os.getuid() == 0 else ()
    return head.run("token", "--scope", "read", *args, check=True).stdout.strip()


def get(url: str, token: str | None = None) -> tuple[int, str, str]:
    """(status, body, content type)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("Content-Type", "")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found[(name, frozenset(labels.items()))]


def scrape(api: str, token: str) -> str:
    status, body, content_type = get(f"{api}/metrics", token)
    assert status == 200, body
    assert content_type.startswith("text/plain; version=0.0.4")
    return body


def test_a_scrape_shows_the_queue_the_gpus_and_the_daemons_counters(
    head: Head, api: str, token: str
) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name  # whose the fixture's jobs are
    found = samples(scrape(api, token))
    # Jobs by state, user and partition: the running one, the held one pending.
    jobs = {
        (dict(labels)["state"], dict(labels)["user"]): n
        for (name, labels), n in found.items()
        if name == "gbatch_jobs"
    }
    assert jobs == {("RUNNING", user): 1, ("PENDING", user): 1}
    assert value(found, "gbatch_jobs_by_state", state="RUNNING") == 1
    assert value(found, "gbatch_jobs_submitted_total") == 3
    assert value(found, "gbatch_runs_ended_total", state="COMPLETED") == 1
    assert value(found, "gbatch_job_queue_wait_seconds_count") == 2
    assert value(found, "gbatch_job_run_seconds_count") == 1
    assert value(found, "gbatch_loop_duration_seconds_count") > 0
    # GPUs of the one node, and each GPU as NVIDIA's DCGM exporter names it.
    assert value(found, "gbatch_node_gpus", node="local") == 2
    assert value(found, "gbatch_node_gpus_allocated", node="local") == 1
    assert value(found, "gbatch_node_gpus_free", node="local") == 1
    assert value(found, "gbatch_node_state", node="local", state="mixed") == 1
    for index, (util, used) in enumerate(zip(GPU_UTIL, GPU_USED_MIB, strict=True)):
        (labels,) = [
            dict(ls)
            for name, ls in found
            if name == "DCGM_FI_DEV_GPU_UTIL" and dict(ls)["gpu"] == str(index)
        ]
        assert labels["Hostname"] == "local" and labels["device"] == f"nvidia{index}"
        assert labels["UUID"]
        assert value(found, "DCGM_FI_DEV_GPU_UTIL", **labels) == util
        assert value(found, "DCGM_FI_DEV_FB_USED", **labels) == used
        assert value(found, "DCGM_FI_DEV_FB_FREE", **labels) == 81920 - used
    assert value(found, "gbatch_fairshare_usage_gpu_seconds", user=user) > 0


def test_metrics_need_a_token_except_from_loopback_when_served_so(
    head: Head, api: str, token: str
) -> None:
    assert get(f"{api}/metrics")[0] == 200  # --local-metrics, and we are on 127.0.0.1
    assert get(f"{api}/metrics", "not-a-token")[0] == 401  # a token given is checked
    process, plain = serve(head)
    try:
        status, body, _ = get(f"{plain}/metrics")
        assert status == 401 and "gbatch token" in body
        assert get(f"{plain}/metrics", token)[0] == 200
    finally:
        process.terminate()
        process.wait(timeout=30)


def require(program: str) -> str:
    """The program's path; a skip locally, a failure in CI, when it is missing."""
    found = shutil.which(program)
    if found is None:
        why = f"{program} is missing (Debian's prometheus package: .ci/setup-prometheus.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found


def test_promtool_finds_the_exposition_valid_and_lint_clean(api: str, token: str) -> None:
    promtool = require("promtool")
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=scrape(api, token),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_real_prometheus_scrapes_it_with_a_bearer_token(
    api: str, token: str, tmp_path: Path
) -> None:
    prometheus = require("prometheus")
    (tmp_path / "token").write_text(token)
    target = urllib.parse.urlsplit(api).netloc
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gbatch\n"
        f"    authorization: {{credentials_file: {tmp_path / 'token'}}}\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n"
    )
    port = free_port()  # Prometheus cannot report a port it picked itself
    with (tmp_path / "prometheus.log").open("w") as log:
        server = subprocess.Popen(
            [
                prometheus,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )

    def query(expr: str) -> list[dict[str, object]] | None:
        url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(expr)}"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                result: list[dict[str, object]] = json.load(reply)["data"]["result"]
                return result or None
        except (urllib.error.URLError, ConnectionError):
            return None

    try:
        up = wait_for(lambda: query('up{job="gbatch"} == 1'), 60, "Prometheus to scrape gbatch")
        assert up
        (gpus,) = wait_for(lambda: query('gbatch_node_gpus{node="local"}'), 30)  # type: ignore[misc]
        assert gpus["value"][1] == "2"
        (util,) = wait_for(lambda: query('DCGM_FI_DEV_GPU_UTIL{gpu="0"}'), 30)  # type: ignore[misc]
        assert util["value"][1] == str(GPU_UTIL[0])
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert server.returncode == 0, (tmp_path / "prometheus.log").read_text()[-2000:]


def test_every_metric_the_shipped_dashboard_reads_is_in_a_real_scrape(api: str, token: str) -> None:
    """deploy/grafana/gbatch.json against what a running daemon serves: each name its
    queries read is a sample of the scrape or a family it declares (`# TYPE`), as a
    family with nothing to count yet (no SSH node: no round trip) still is."""
    text = scrape(api, token)
    served = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    histograms = {f"{name}{end}" for name in declared for end in ("_bucket", "_sum", "_count")}
    read = {n for expr in queries(json.loads(DASHBOARD.read_text())) for n in metric_names(expr)}
    assert read and read - (served | declared | histograms) == set()
