"""The store's reads that dependencies and job-id targets are decided on.

The state and run times of the jobs named, an array's tasks by index (its tail's too),
singletons' namesakes.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from gbatch.core import arrays
from gbatch.core.dependency import RefJob
from gbatch.core.model import JobState, TaskArray
from gbatch.head.store.rows import (
    _ACTIVE_SQL,
    _IN_CHUNK,
    _STATE_NAMED,
    _chunks,
    _marks,
    _tail_by_id,
)
from gbatch.head.store.tails import Tails


class Dependencies(Tails):
    """What dependencies and job-id targets are decided on, each one read."""

    def ref_jobs(self, ids: Collection[int]) -> dict[int, RefJob]:
        """State and run times of those of `ids` that name a job, by id.

        What the daemon evaluates dependencies on, for a whole queue in one read (by
        primary key). A task still in an array's tail answers too, with no start time.
        """
        found: dict[int, RefJob] = {}
        ordered = sorted(ids)
        with self._lock:
            for part in _chunks(ordered):
                for job_id, state, start, end in self._db.execute(
                    "SELECT id, state, start_time, end_time FROM jobs"
                    f" WHERE id IN ({_marks(part)})",
                    part,
                ):
                    found[job_id] = RefJob(_STATE_NAMED[state], start, end)
        for job_id, job in self._tail_tasks(set(ids) - found.keys()).items():
            found[job_id] = RefJob(job.state, None, job.end_time)
        return found

    def array_tasks(self, array_id: int, most: int) -> dict[int, int] | None:
        """{task index: job id} of the array `array_id`, or None when it is not an array.

        An array's id is its first task's: None when that job is not an array's first
        task. An array's tasks have consecutive ids, so the read stops at the first job
        past its end (`most`: the largest array there can be).
        """
        found = self._array_tasks(array_id, most, one_per_tail=False)
        return None if found is None else found[0]

    def array_tasks_sampled(self, array_id: int, most: int) -> tuple[dict[int, int], bool] | None:
        """array_tasks' answer with one task standing for the tail, and whether there is one.

        The array's tail (its pending tasks that are not rows yet: one state, one end
        time) is stood for by its first task. What a dependency on the whole array (N_*)
        decides on: the tail's tasks answer alike, so one answers for all, and the read
        costs the array's rows.
        """
        return self._array_tasks(array_id, most, one_per_tail=True)

    def _array_tasks(
        self, array_id: int, most: int, *, one_per_tail: bool
    ) -> tuple[dict[int, int], bool] | None:
        tasks: dict[int, int] = {}
        with self._lock:
            cursor = self._db.execute(
                "SELECT id, json_extract(spec, '$.array_task'),"
                " coalesce(json_extract(spec, '$.array_pos'), 0)"
                " FROM jobs WHERE id BETWEEN ? AND ? ORDER BY id",
                (array_id, array_id + most - 1),
            )
            for job_id, task, pos in cursor:
                if task is None or job_id - pos != array_id:
                    break
                tasks[int(task)] = job_id
            cursor.close()
            tail = _tail_by_id(self._db, array_id) if tasks else None
        if not tasks:
            return None
        if tail is None or not tail.positions:
            return tasks, False
        if one_per_tail:
            pos = tail.positions[0][0]
            tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
            return tasks, True
        for first, last in tail.positions:
            for pos in range(first, last + 1):
                tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
        return tasks, True

    def array_tasks_in(
        self, array_id: int, index_spans: Sequence[tuple[int, int]], most: int
    ) -> dict[int, int]:
        """{task index: job id} of the array `array_id`'s tasks whose index is in `index_spans`.

        `index_spans` are inclusive (N_K, N_[K-M]); empty when `array_id` is not an
        array's id. array_tasks' answer cut to those indices, at the cost of those tasks:
        the rows of their ids and the tail's positions among them, never the whole array
        (one task of a 100,000-task array is one task's work).
        """
        return self.array_tasks_at(array_id, index_spans, most) or {}

    def array_tasks_at(
        self, array_id: int, index_spans: Sequence[tuple[int, int]], most: int
    ) -> dict[int, int] | None:
        """array_tasks_in's answer, but None when `array_id` is not an array's id.

        None as array_tasks answers, so that an array none of whose tasks is named ({})
        tells apart from a plain job: what dependencies on N_K and aftercorr read.
        """
        tasks: dict[int, int] = {}
        with self._lock:
            head = self._db.execute(
                "SELECT json_extract(spec, '$.array'), json_extract(spec, '$.array_task'),"
                " coalesce(json_extract(spec, '$.array_pos'), 0) FROM jobs WHERE id = ?",
                (array_id,),
            ).fetchone()
            if head is None or head[1] is None or head[2] != 0:
                return None
            array = None if head[0] is None else TaskArray.of_text(head[0])
            wanted = arrays.overlap(arrays.position_spans(array, index_spans), ((0, most - 1),))
            for first, last in wanted:
                for job_id, task, pos in self._db.execute(
                    "SELECT id, json_extract(spec, '$.array_task'),"
                    " coalesce(json_extract(spec, '$.array_pos'), 0)"
                    " FROM jobs WHERE id BETWEEN ? AND ?",
                    (array_id + first, array_id + last),
                ):
                    if task is not None and job_id - pos == array_id:
                        tasks[int(task)] = job_id
            tail = _tail_by_id(self._db, array_id) if wanted else None
        if tail is not None:
            for first, last in arrays.overlap(tail.positions, wanted):
                for pos in range(first, last + 1):
                    tasks[arrays.index_at(tail.spec, pos)] = array_id + pos
        named = arrays.position_spans(None, index_spans)  # the indices, merged
        return {task: job_id for task, job_id in tasks.items() if arrays.contains(named, task)}

    def array_ends(self, ids: Collection[int], most: int) -> dict[int, int]:
        """{array id: its last task's id} for those of `ids` that are an array's id.

        An array's id is its first task's: `scancel N` and `squeue -j N` name the whole
        array, as in Slurm.
        """
        heads: list[int] = []
        ordered = sorted(ids)
        with self._lock:
            for part in _chunks(ordered):
                heads.extend(
                    int(row[0])
                    for row in self._db.execute(
                        f"SELECT id FROM jobs WHERE id IN ({_marks(part)})"
                        " AND json_extract(spec, '$.array_task') IS NOT NULL"
                        " AND coalesce(json_extract(spec, '$.array_pos'), 0) = 0",
                        part,
                    )
                )
        ends = {tail.array_id: tail.last_id for tail in self.tails() if tail.array_id in heads}
        for head in heads:
            if head in ends:
                continue
            tasks = self.array_tasks(head, most)
            if tasks:
                ends[head] = max(tasks.values())
        return ends

    def active_named(self, names: Collection[str]) -> list[tuple[int, str, str, JobState]]:
        """(id, user, name, state) of the jobs not yet ended that have one of `names`.

        What singleton dependencies decide on; read through the state index.
        """
        found: list[tuple[int, str, str, JobState]] = []
        ordered = sorted(names)
        with self._lock:
            for start in range(0, len(ordered), _IN_CHUNK):
                part = ordered[start : start + _IN_CHUNK]
                for job_id, user, name, state in self._db.execute(
                    f"SELECT id, user, name, state FROM jobs WHERE state IN ({_ACTIVE_SQL})"
                    f" AND name IN ({_marks(part)})",
                    part,
                ):
                    found.append((job_id, user, name, _STATE_NAMED[state]))
        return found
