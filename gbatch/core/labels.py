"""How ids and user-given text are shown, in one leaf every output uses.

Printable text, task spans (`1-3,5`) and an array's folded label (`N_[4-15%2]`).

A leaf (it imports nothing) so that squeue's start-up path (gbatch/render/squeue_brief.py),
which builds no Job, shows them with the same code as every other output.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Iterable


def printable(text: str) -> str:
    """`text` with each control character read '?', as `ls` shows them.

    A control character is a terminal escape in a job name, say: shown as it is, one
    user's job could repaint another user's terminal.
    """
    if text.isprintable():  # the common case, without a loop per character
        return text
    return "".join(c if c.isprintable() else "?" for c in text)


def format_spans(spans: Iterable[tuple[int, int]]) -> str:
    """`[(1, 3), (5, 5)]` -> `1-3,5`."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def spans_of(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indices as inclusive runs: [4, 5, 6, 9] -> [(4, 6), (9, 9)]."""
    spans: list[tuple[int, int]] = []
    for index in sorted(indices):
        if spans and index == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], index)
        else:
            spans.append((index, index))
    return spans


def merge_spans(*groups: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Several span lists as one (overlapping or adjacent runs joined)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(run for group in groups for run in group):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return tuple(out)


def folded_label(array: int, spans: Iterable[tuple[int, int]], throttle: int | None) -> str:
    """Array `array`'s tasks `spans` as one label, `N_[4-15]`, the spans merged.

    Slurm's `%MAX` is added when the array's running tasks are throttled.
    """
    limit = f"%{throttle}" if throttle is not None else ""
    return f"{array}_[{format_spans(merge_spans(spans))}{limit}]"


def memory_text(mib: int | None) -> str:
    """A size in MiB as scontrol writes one: 16G, 1500M, or 0 when none was asked."""
    if mib is None:
        return "0"
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def shown_partition(partition: str, alternate: str | None, pending: bool) -> str:
    """The partition as squeue shows it: `gpu,uni` while a job of `-p gpu,uni` waits."""
    return f"{partition},{alternate}" if pending and alternate is not None else partition
