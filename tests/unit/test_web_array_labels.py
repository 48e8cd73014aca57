"""The web page names an array's tasks as squeue does (issue 35): task K of array N reads
`N_K` (not its own id with `_K`, which names task K of another array), the record that
stands for an array's pending tail `N_[K-M]`, and the job page's buttons act on the task
itself, by its own id."""

from __future__ import annotations

import re
from typing import Any

from gbatch.api.web import Web
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import codec

NOW = 1_800_000_000.0
SPEC = JobSpec(name="sweep", command=("true",), partition="gpu")  # the daemon sets one


def task(pos: int, more: tuple[tuple[int, int], ...] = ()) -> Job:
    """Task `pos` (index 10 * pos) of array 40, whose own id is 40 + pos."""
    return Job(
        id=40 + pos,
        uid=1000,
        user="alice",
        spec=SPEC.replace(array_task=10 * pos, array_pos=pos),
        state=JobState.PENDING,
        submit_time=NOW,
        array_more=more,
    )


def test_the_queue_page_labels_array_tasks_and_a_tail_as_squeue() -> None:
    page = (
        Web(None)
        .templates.get_template("queue.html")
        .render(
            csrf="",
            signed_in=True,
            jobs=[codec.job_to_wire(job, brief=True) for job in (task(0), task(2, ((30, 90),)))],
            user="",
            state="",
            history=False,
            states=(),
        )
    )
    links = re.findall(r'<a href="/ui/jobs/(\d+)">([^<]*)</a>', page)
    assert links == [("40", "40_0"), ("42", "40_[20,30-90]")]


def test_the_job_pages_buttons_act_on_the_task_by_its_own_id() -> None:
    page = (
        Web(None)
        .templates.get_template("job.html")
        .render(csrf="", signed_in=True, job=codec.job_to_wire(task(3)), events=[])
    )
    targets = set(re.findall(r'/ui/jobs/([^/"]+)/', page))
    assert targets == {"43"}
    assert "40_30" in page  # its name as squeue gives it


class _Api:
    """The API's `ask` as the web page uses it: each ListJobs asked for answered with a
    page of the jobs 1..total, as the daemon pages them (after, limit, next)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.asked: list[Any] = []

    async def ask(self, token: str, request: Any) -> dict[str, Any]:
        self.asked.append(request)
        first = (request.after or 0) + 1
        last = min(self.total, first + request.limit - 1)
        jobs = [codec.job_to_wire(plain(job_id), brief=True) for job_id in range(first, last + 1)]
        return {"jobs": jobs, "next": last if last < self.total else None}


def plain(job_id: int) -> Job:
    return Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=JobSpec(name="j", command=("true",), partition="gpu"),
        state=JobState.PENDING,
        submit_time=NOW,
    )


def test_the_queue_page_shows_a_page_of_jobs_and_links_the_next_with_its_filters() -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from gbatch.api.web import COOKIE, QUEUE_PAGE

    api = _Api(QUEUE_PAGE + 7)
    client = TestClient(Starlette(routes=Web(api).routes()))
    client.cookies.set(COOKIE, "token")
    first = client.get("/ui?user=alice&state=PENDING")
    assert first.status_code == 200
    assert first.text.count("<tr data-job=") == QUEUE_PAGE
    (following,) = re.findall(r'id="next-page" href="([^"]+)"', first.text)
    assert following == f"/ui?user=alice&amp;state=PENDING&amp;after={QUEUE_PAGE}"
    last = client.get(following.replace("&amp;", "&"))
    assert last.text.count("<tr data-job=") == 7
    assert 'id="next-page"' not in last.text
    assert 'id="first-page" href="/ui?user=alice&amp;state=PENDING"' in last.text
    assert [(r.after, r.limit, r.users) for r in api.asked] == [
        (None, QUEUE_PAGE, ("alice",)),
        (QUEUE_PAGE, QUEUE_PAGE, ("alice",)),
    ]
    assert client.get("/ui?after=x").status_code == 400
