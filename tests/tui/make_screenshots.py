"""Write the TUI screenshots (docs/tui-*.svg, shown by docs/tui.md and the README) from the
snapshot tests' lab.

    .venv/bin/python tests/tui/make_screenshots.py [OUT_DIR]   # default: docs/

The same fake lab, fixed clock and UTC time stamps as tests/tui/test_tui_snapshots.py,
at sizes that read well on a web page; the SVGs are deterministic, so running this
again changes no file unless the TUI's look changed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import scenes
from fakelab import lab_app, utc_time_zone
from textual.pilot import Pilot

SIZE = (120, 32)
JOB_SIZE = (120, 40)  # tall enough that the job's record shows its events
ROOT = Path(__file__).resolve().parents[2]


async def queue_with_a_pending_job_selected(pilot: Pilot[None]) -> None:
    await scenes.all_users_queue(pilot)
    await pilot.press(*["down"] * 5)  # job 106, pending on Resources


SHOTS: dict[str, tuple[str, scenes.Scene, tuple[int, int]]] = {
    "tui-queue.svg": ("gbatch tui: the queue (all users)", queue_with_a_pending_job_selected, SIZE),
    "tui-job.svg": ("gbatch tui: a job, its events and its log", scenes.job_view, JOB_SIZE),
    "tui-nodes.svg": ("gbatch tui: nodes and GPUs", scenes.nodes_view, SIZE),
    "tui-finished.svg": ("gbatch tui: jobs that ended (f)", scenes.finished_jobs, SIZE),
}


async def screenshot(scene: scenes.Scene, title: str, size: tuple[int, int]) -> str:
    app = lab_app()
    async with app.run_test(size=size) as pilot:
        await scene(pilot)
        await pilot.pause(0.1)
        await pilot.wait_for_scheduled_animations()
        return app.export_screenshot(title=title)


def main(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.pop("NO_COLOR", None)  # textual would drop every colour
    with utc_time_zone():
        for name, (title, scene, size) in SHOTS.items():
            path = out_dir / name
            path.write_text(asyncio.run(screenshot(scene, title, size)), encoding="utf-8")
            print(path)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs")
