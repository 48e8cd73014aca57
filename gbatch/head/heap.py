"""Giving the daemon's freed memory back to the system after a large reply (issue 16).

A listing of 100,000 jobs builds a few hundred MB of objects, freed once its reply is
written. CPython hands objects over 512 bytes (a job's spec text, a row's dict) to the
C library's malloc, and glibc gives freed memory back to the system only from the top
of its heaps: one block still in use above them (anything allocated meanwhile, by any
thread) keeps every freed page below it resident, so gbatchd stayed at its peak for good.
glibc's malloc_trim(0) releases every whole free page of every heap, wherever it lies
(madvise; glibc >= 2.8); called only after a large reply, its few milliseconds are
nothing beside that reply's. Without glibc (musl has no malloc_trim) this does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache

# A reply at least this long (bytes on the wire) is followed by release_free_memory():
# a few thousand jobs' listing. Smaller ones free too little to be worth the call.
TRIM_AFTER_BYTES = 4 * 1024 * 1024


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # this process's libc
    except (OSError, AttributeError):
        return None
    return trim


def release_free_memory() -> bool:
    """Give freed heap pages back to the system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
