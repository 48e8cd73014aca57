"""The web page end to end: a real gbatchd, `gbatch api serve` on 127.0.0.1, a token
minted with the real CLI, and Debian's chromium driven headless through chromedriver
(selenium). GBATCH_UPDATE_SCREENSHOTS=1 copies the screenshots to docs/screenshots/."""

from __future__ import annotations

import html
import json
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from conftest import Head
from test_http_api import api, head, http, mint, queue, token_user  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parents[2]
XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
HELD_SCRIPT = "#!/bin/bash\n#SBATCH -J waiting-in-line\n#SBATCH --hold\necho never\n"


class Browserless:
    """urllib with a cookie jar: what a browser sends, without the browser."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, dict[str, str], str]:
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path: str, fields: dict[str, str]) -> tuple[int, dict[str, str], str]:
        data = urllib.parse.urlencode(fields).encode()
        return self._open(urllib.request.Request(self.base + path, data=data, method="POST"))

    def _open(self, request: urllib.request.Request) -> tuple[int, dict[str, str], str]:
        try:
            with self.opener.open(request, timeout=30) as reply:
                return reply.status, dict(reply.headers), reply.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read().decode()


def root_of(api_url: str) -> str:
    return api_url.removesuffix("/api/v1")


def csrf_of(page: str) -> str:
    marker = 'name="csrf" value="'
    return page[page.index(marker) + len(marker) :].split('"', 1)[0]


def test_markup_from_a_job_or_a_refused_form_is_shown_escaped_under_a_strict_csp(
    head: Head,  # noqa: F811
    api: str,  # noqa: F811
) -> None:
    token = mint(head, "--scope", "submit,read,control")
    evil = f"#!/bin/bash\n#SBATCH -J evil\n#SBATCH --hold\necho '{XSS}'\n"
    status, reply, _ = http(f"{api}/jobs", "POST", token, evil)
    assert status == 201, reply
    web = Browserless(root_of(api))
    login = csrf_of(web.get("/ui/login")[2])
    status, _, page = web.post("/ui/login", {"token": "not-a-token", "csrf": login})
    assert status == 401 and "Sign in" in page
    assert [c.name for c in web.jar] == ["gbatch_login"]
    status, headers, page = web.post("/ui/login", {"token": token, "csrf": login})
    assert status == 200 and 'id="jobs"' in page
    (cookie,) = list(web.jar)  # the session's; the login form's is spent
    assert cookie.has_nonstandard_attr("HttpOnly") and cookie.path == "/ui"
    assert "script-src 'self'" in headers["content-security-policy"]
    # The filters are squeue's: by state, by user.
    assert "No jobs." in web.get("/ui?state=RUNNING")[2]
    assert f"/ui/jobs/{reply['job_id']}" in web.get(f"/ui?state=PENDING&user={token_user()}")[2]
    assert "No jobs." in web.get("/ui?user=someone-else")[2]
    # The job's command (its script) on its page.
    status, _, page = web.get(f"/ui/jobs/{reply['job_id']}")
    assert status == 200 and XSS not in page and ESCAPED in page
    assert page.count("<script") == 1  # job.js, and nothing of the job's
    # A job name sbatch refuses, echoed back in the submit form's error and textarea.
    csrf = csrf_of(web.get("/ui/submit")[2])
    named = f"#!/bin/bash\n#SBATCH -J {XSS}\necho\n"
    status, _, page = web.post("/ui/submit", {"job": named, "csrf": csrf})
    assert status == 400 and "not a valid job name" in page
    assert XSS not in page and ESCAPED in page
    # A form without the session's CSRF token is refused, and nothing is queued.
    status, _, page = web.post("/ui/submit", {"job": HELD_SCRIPT, "csrf": "forged"})
    assert status == 403 and len(queue(head)) == 1
    # The job page's buttons post the CLI's requests; the daemon's refusal is the page's.
    job_id = reply["job_id"]
    status, _, page = web.post(f"/ui/jobs/{job_id}/release", {"csrf": "forged"})
    assert status == 403 and queue(head)[0]["state"] == "PENDING"
    status, _, page = web.post(f"/ui/jobs/{job_id}/requeue", {"csrf": csrf})
    refused = head.run("scontrol", "requeue", str(job_id)).stderr
    assert status == 409 and html.escape(refused.split("error: ", 1)[1].strip()) in page
    status, headers, _ = web.post(f"/ui/jobs/{job_id}/release", {"csrf": csrf})
    assert status == 200  # redirected back to the job's page
    head.wait_state(int(job_id), "COMPLETED")
    assert "Sign in" in Browserless(root_of(api)).get("/ui")[2]
    status, _, page = web.post("/ui/logout", {"csrf": csrf})
    assert status == 200 and "signed out" in page and [c.name for c in web.jar] == ["gbatch_login"]


def test_another_site_cannot_sign_a_browser_in_with_its_own_token(
    head: Head,  # noqa: F811
    api: str,  # noqa: F811
) -> None:
    """Login CSRF: the attacker's page posts the attacker's token to /ui/login from the
    victim's browser. The form's CSRF token is bound to a SameSite=Strict cookie that
    such a POST arrives without, and that the attacker cannot read or set."""
    attackers = mint(head, "--scope", "submit,read")
    attacker = Browserless(root_of(api))
    their_csrf = csrf_of(attacker.get("/ui/login")[2])
    victim = Browserless(root_of(api))
    cases = {
        "no form token": {"token": attackers},
        "the attacker's own form token": {"token": attackers, "csrf": their_csrf},
    }
    for what, fields in cases.items():
        status, _, page = victim.post("/ui/login", fields)  # no login cookie: cross-site
        assert status == 403 and "stale form" in page, what
        assert [c.name for c in victim.jar] == [], what
    victim.get("/ui/login")  # the victim's own login cookie, now present
    status, _, page = victim.post("/ui/login", cases["the attacker's own form token"])
    assert status == 403 and "gbatch_session" not in [c.name for c in victim.jar]
    # The attacker's form token still signs the attacker in, in the attacker's browser.
    status, _, page = attacker.post("/ui/login", cases["the attacker's own form token"])
    assert status == 200 and 'id="jobs"' in page


# -- the real browser ---------------------------------------------------------------------


def chromium_driver() -> object:
    if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must have chromium and chromedriver (.ci/setup-browser.sh)")
        pytest.skip("needs chromium and chromedriver (.ci/setup-browser.sh)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)  # no sandbox: CI runs the tests as root
    options.add_argument("--window-size=1280,860")
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


@pytest.fixture
def browser() -> Iterator[object]:
    driver = chromium_driver()
    try:
        yield driver
    finally:
        driver.quit()  # type: ignore[attr-defined]


def screenshot(driver: object, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    if os.environ.get("GBATCH_UPDATE_SCREENSHOTS") == "1":
        (REPO / "docs" / "screenshots").mkdir(parents=True, exist_ok=True)
        shutil.copy(path, REPO / "docs" / "screenshots" / path.name)


def text_of(driver: Any, element_id: str) -> str:
    """The element's text, or "" while a navigation replaces the page (the element found
    may belong to the old document: chromedriver then answers an error, not the text)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        return str(driver.find_element(By.ID, element_id).text)
    except WebDriverException:
        return ""


def test_in_a_browser_a_user_signs_in_watches_a_log_live_and_submits_a_job(
    head: Head,  # noqa: F811
    api: str,  # noqa: F811
    browser: Any,
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    d = browser
    wait = WebDriverWait(d, 30)
    token = mint(head, "--scope", "submit,read,control")
    status, held, _ = http(f"{api}/jobs", "POST", token, HELD_SCRIPT)
    assert status == 201, held
    gate = Path(tempfile.mkdtemp(prefix="gbatch-ui-"))
    gate.chmod(0o755)
    go = gate / "go"
    live_job = {
        "name": "train-resnet",
        "workdir": "/tmp",
        "gpus": 1,
        "command": "for i in 1 2 3; do echo epoch $i loss 0.$((9 - i)); done; "
        f"while [ ! -e {go} ]; do sleep 0.1; done; echo saved checkpoint; echo done",
    }
    status, live, _ = http(f"{api}/jobs", "POST", token, json.dumps(live_job), "application/json")
    assert status == 201, live
    try:
        base = root_of(api)
        d.get(f"{base}/ui")
        wait.until(lambda _: d.find_elements(By.ID, "token"))
        d.find_element(By.ID, "token").send_keys(token)
        d.find_element(By.ID, "sign-in").click()
        wait.until(lambda _: d.find_elements(By.ID, "jobs"))
        names = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#jobs td.name")]
        assert sorted(names) == ["train-resnet", "waiting-in-line"]
        wait.until(lambda _: "RUNNING" in text_of(d, "jobs"))
        screenshot(d, tmp_path, "queue")
        d.find_element(By.LINK_TEXT, str(live["job_id"])).click()
        log = wait.until(lambda _: d.find_element(By.ID, "log"))
        wait.until(lambda _: "epoch 3" in log.text)
        assert "saved checkpoint" not in log.text  # still waiting on the gate
        screenshot(d, tmp_path, "job")
        go.touch()
        wait.until(lambda _: text_of(d, "log-status") == "ended")
        assert log.text.splitlines()[-2:] == ["saved checkpoint", "done"]
        assert text_of(d, "job-state") == "COMPLETED"
        d.find_element(By.LINK_TEXT, "Nodes").click()
        gpus = wait.until(lambda _: d.find_elements(By.CSS_SELECTOR, "#gpus tbody tr"))
        assert len(gpus) == 2
        screenshot(d, tmp_path, "nodes")
        d.find_element(By.LINK_TEXT, "Submit").click()
        box = wait.until(lambda _: d.find_element(By.ID, "job"))
        box.send_keys("#!/bin/bash\n#SBATCH -J from-the-browser\n#SBATCH --hold\necho hi\n")
        screenshot(d, tmp_path, "submit")
        d.find_element(By.ID, "submit").click()
        wait.until(lambda _: "from-the-browser" in text_of(d, "job-name"))
        # Submitted from the form, seen running and its log, cancelled from its page.
        d.find_element(By.LINK_TEXT, "Submit").click()
        box = wait.until(lambda _: d.find_element(By.ID, "job"))
        box.send_keys("#!/bin/bash\n#SBATCH -J cancel-me\necho started\nsleep 300\n")
        d.find_element(By.ID, "submit").click()
        wait.until(lambda _: "cancel-me" in text_of(d, "job-name"))
        wait.until(lambda _: "started" in text_of(d, "log"))
        wait.until(lambda _: text_of(d, "job-state") == "RUNNING")
        d.refresh()  # the buttons are a running job's
        wait.until(lambda _: d.find_elements(By.ID, "cancel")).pop().click()
        # Back on its page, whose state the log's end event confirms.
        wait.until(lambda _: text_of(d, "log-status") == "ended")
        assert text_of(d, "job-state") == "CANCELLED"
        screenshot(d, tmp_path, "cancelled")
    finally:
        shutil.rmtree(gate)
    (cancelled,) = [
        j
        for j in json.loads(head.run("sacct", "-a", "--json", check=True).stdout)["jobs"]
        if j["name"] == "cancel-me"
    ]
    assert cancelled["state"] == "CANCELLED"
    # The CLI sees what the browser submitted, as the token's user.
    (submitted,) = [j for j in queue(head) if j["name"] == "from-the-browser"]
    assert submitted["user"] == token_user() and submitted["state"] == "PENDING"
