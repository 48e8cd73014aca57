"""Fair-share maths: usage decay and Slurm's classic factor `F = 2^(-U/S)`.

Usage is counted in GPU-seconds (GPUs x seconds) and decays with a half-life, so
what a user ran last month weighs less than what they ran this morning. Pure: the
caller passes the clock in.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping

# 2^(-U/S) underflows to 0.0 when one user holds nearly all usage among thousands of
# users; the factor must stay positive, so it is floored at the smallest normal float.
_SMALLEST_FACTOR = sys.float_info.min


def decay(value: float, elapsed: float, half_life: float) -> float:
    """Return `value` after `elapsed` seconds of exponential decay: value * 2^(-elapsed/half_life).

    A negative `elapsed` (clock skew between writers) is treated as 0, so decay never
    inflates usage. `half_life` is in seconds and must be positive.
    """
    if half_life <= 0:
        raise ValueError(f"half_life must be positive, got {half_life}")
    if elapsed <= 0:
        return value
    return value * math.exp2(-elapsed / half_life)


def accrue(
    stored: float, stored_at: float, gpu_seconds: float, now: float, half_life: float
) -> float:
    """Fold a finished run's `gpu_seconds` into a user's decayed total.

    `stored` is the user's usage as it stood at `stored_at`; it is decayed to `now` and
    the run is added undecayed (it is credited at `now`, when it is being recorded).
    The result is the user's usage as of `now`; store it with `stored_at = now`.
    """
    if gpu_seconds < 0:
        raise ValueError(f"gpu_seconds must not be negative, got {gpu_seconds}")
    return decay(stored, now - stored_at, half_life) + gpu_seconds


def factors(usage: Mapping[str, float], users: Iterable[str]) -> dict[str, float]:
    """Return the fair-share factor, in (0, 1], of every user considered.

    The users considered are `users` (those with pending jobs) plus every user with
    positive `usage`; each gets an equal share S = 1/n. A user's normalised usage U is
    their usage over the total usage of the users considered (0 when that total is 0;
    negative usage counts as 0). F = 2^(-U/S): 1.0 for a user with no usage, 0.5 for a
    user who used exactly their share, lower the more they used beyond it.
    """
    considered = set(users)
    considered.update(user for user, used in usage.items() if used > 0)
    if not considered:
        return {}
    clean = {user: max(usage.get(user, 0.0), 0.0) for user in considered}
    total = sum(clean.values())
    if total <= 0:
        return dict.fromkeys(considered, 1.0)
    n = len(considered)
    # U/S = (used/total) / (1/n) = used * n / total
    return {
        user: max(math.exp2(-used * n / total), _SMALLEST_FACTOR) for user, used in clean.items()
    }
