"""The web page names an array's tasks as squeue does (issue 35): task K of array N reads
`N_K` (not its own id with `_K`, which names task K of another array), the record that
stands for an array's pending tail `N_[K-M]`, and the job page's buttons act on the task
itself, by its own id."""

from __future__ import annotations

import re

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
