"""Slurm's time formats: parse a job's time limit, print durations and timestamps.

Pure functions over the standard library, cheap to import: squeue and sacct use them
on every call. `format_timestamp` reads the local time zone, nothing else. `re` is
imported by the parsers that use it, not here: squeue's everyday listing prints
durations and imports no `re` (with the enum and functools it loads, a start-up cost).
"""

from __future__ import annotations

import math
import time

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from re import Pattern

ACCEPTED_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, or UNLIMITED"

# A year covers every real batch job; anything longer is almost certainly a typo
# (minutes where hours were meant), and UNLIMITED says "no limit" on purpose.
MAX_TIME_LIMIT_S = 365 * 86400

_UNLIMITED_WORDS = frozenset({"unlimited", "infinite"})
# ASCII digits only: `\d` would accept other scripts' digits, which int() then reads.
# Patterns for re.fullmatch (whose cache keeps them compiled), `(?a)`: ASCII.
_TIME_PATTERN = r"(?a)(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?"
_MAX_TEXT_LEN = 32  # longer than any real limit; keeps int() away from huge digit runs


class TimeLimitError(ValueError):
    """A time limit that cannot be read; `str(err)` is `"<field>: <message>"`.

    `message` says what is wrong and what to do; `str(err)` is ready for an error line.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def parse_time_limit(value: str | int, *, field: str = "time_limit") -> int | None:
    """Read a Slurm time limit and return it in seconds, or None for UNLIMITED.

    Accepts "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", a bare integer
    (an int or a digit string: minutes, as in Slurm) and "UNLIMITED"/"infinite" in any
    case. The leading field may be as large as wanted ("90:00" is 90 minutes); the
    fields after it must stay under 60 (24 for hours after a day). Raises
    TimeLimitError (a ValueError) naming `field` for zero, negative, over a year, or
    anything else.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _bad(field, value)
    if isinstance(value, int):
        return _checked_total(field, value, value * 60)
    text = value.strip()
    if text.lower() in _UNLIMITED_WORDS:
        return None
    groups = _time_groups(text) if len(text) <= _MAX_TEXT_LEN else None
    if groups is None:
        raise _bad(field, value)
    day_text, *rest = groups
    parts = [int(p) for p in rest if p is not None]
    if day_text is None:
        # MM / MM:SS / HH:MM:SS: pad on the left to (hours, minutes, seconds).
        units = {1: ("minutes",), 2: ("minutes", "seconds"), 3: ("hours", "minutes", "seconds")}
        names = units[len(parts)]
        days = 0
    else:
        names = ("hours", "minutes", "seconds")[: len(parts)]
        days = int(day_text)
    fields = dict(zip(names, parts, strict=True))
    _check_ranges(field, value, fields, has_days=day_text is not None)
    total = (
        days * 86400
        + fields.get("hours", 0) * 3600
        + fields.get("minutes", 0) * 60
        + fields.get("seconds", 0)
    )
    return _checked_total(field, value, total)


_DIGITS = frozenset("0123456789")


def _time_groups(text: str) -> tuple[str | None, ...] | None:
    """re.fullmatch(_TIME_PATTERN, text).groups(), or None where it does not match: read
    without re (its import is most of an everyday sbatch's start-up with -t)."""
    day: str | None = None
    head, dash, body = text.partition("-")
    if dash:
        if not _all_digits(head):
            return None
        day = head
    else:
        body = text
    parts = body.split(":")
    if len(parts) > 3 or not all(map(_all_digits, parts)):
        return None
    return (day, *parts, *(None,) * (3 - len(parts)))


def _all_digits(text: str) -> bool:
    return bool(text) and all(char in _DIGITS for char in text)


def _check_ranges(field: str, value: str, fields: dict[str, int], *, has_days: bool) -> None:
    """Refuse "10:75" and "1-30": only the leading field may overflow its unit."""
    leading = "days" if has_days else next(iter(fields))
    limits = {"hours": 24, "minutes": 60, "seconds": 60}
    for name, number in fields.items():
        if name != leading and number >= limits[name]:
            raise TimeLimitError(
                field,
                f"{show_value(value)} is not a time limit: {name} must be under {limits[name]}. "
                f"Use {ACCEPTED_FORMS}",
            )


def _checked_total(field: str, value: object, total: int) -> int:
    if total <= 0:
        raise TimeLimitError(
            field,
            f"{show_value(value)} is not a time limit: it must be longer than zero. "
            f"Use {ACCEPTED_FORMS} (UNLIMITED for no limit)",
        )
    if total > MAX_TIME_LIMIT_S:
        raise TimeLimitError(
            field,
            f"{show_value(value)} is longer than the longest limit gbatch accepts "
            f"({format_duration(MAX_TIME_LIMIT_S)}). Shorten it, or use UNLIMITED for no limit",
        )
    return total


def _bad(field: str, value: object) -> TimeLimitError:
    return TimeLimitError(field, f"{show_value(value)} is not a time limit. Use {ACCEPTED_FORMS}")


def show_value(value: object) -> str:
    """Echo a user's value in an error message: strings quoted, one line, short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if len(text) > 60:
        text = text[:57] + "..."
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return f'"{text}"' if isinstance(value, str) else text


def format_duration(seconds: float | None) -> str:
    """Slurm's TIME/TIME_LIMIT style: "0:00", "5:07", "1:02:03", "1-02:03:04".

    None or infinity -> "UNLIMITED" (a limit that is not set); NaN -> "INVALID", as
    Slurm prints for nonsense. Fractions are dropped and negative values (clock skew
    between hosts) print as "0:00" so a table never breaks.
    """
    if seconds is None or seconds == math.inf:
        return "UNLIMITED"
    if math.isnan(seconds):
        return "INVALID"
    days, hours, minutes, secs = _split(seconds)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def format_elapsed_fixed(seconds: float) -> str:
    """sacct's Elapsed style: "00:05:07", "01:02:03", "1-02:03:04" (days only when > 0).

    Fractions are dropped; negative values print as "00:00:00"; NaN and infinity
    print as "INVALID" because an elapsed time is always finite.
    """
    if not math.isfinite(seconds):
        return "INVALID"
    days, hours, minutes, secs = _split(seconds)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def _split(seconds: float) -> tuple[int, int, int, int]:
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return days, hours, minutes, secs


def format_timestamp(epoch: float | None) -> str:
    """`epoch` in Slurm's timestamp style in local time, "2026-12-02T11:04:05".

    "Unknown" for None or a value that is not a representable time.
    """
    if epoch is None or not math.isfinite(epoch):
        return "Unknown"
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))
    except (OverflowError, OSError, ValueError):
        return "Unknown"


# ------------------------------------------------------------------------ --begin

BEGIN_FORMS = (
    "YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS], now+N[seconds|minutes|hours|days|weeks], "
    "midnight, noon, teatime, today or tomorrow"
)
_BEGIN_UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400, "weeks": 604800}
_NOW_PATTERN = r"(?a)now(?:([+-])([0-9]{1,9})([a-z]*))?"
_DATE_PATTERN = r"(?a)([0-9]{4})-([0-9]{2})-([0-9]{2})(?:T([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?)?"
_CLOCK_PATTERN = r"(?a)([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?"
# Slurm's named times of day: the next one to come (today's, or tomorrow's once past).
_NAMED_HOURS = {"midnight": 0, "noon": 12, "teatime": 16}


def parse_begin(text: str, now: float, *, field: str = "--begin", past: bool = False) -> float:
    """Read Slurm's `--begin` time and return it as epoch seconds, in the local time zone.

    `now` is the current time (epoch seconds). Forms: "YYYY-MM-DD[THH:MM[:SS]]",
    "HH:MM[:SS]" (today, or tomorrow when that time of day has passed), "now" and
    "now+N[unit]" (unit seconds, the default as in Slurm, minutes, hours, days or weeks,
    singular or plural; "now-N[unit]" only with `past`), "midnight", "noon", "teatime" (16:00; the
    next one to come; with `past`, as sacct -S/-E read them, the last one that came),
    "today" (00:00 today) and "tomorrow" (00:00 tomorrow). A time already past is
    accepted: the job is eligible at once. TimeLimitError (naming `field`) otherwise.
    """
    now_form, clock_form, date_form = _begin_patterns()
    word = text.strip().lower()
    if match := now_form.fullmatch(word):
        sign, count, unit = match.groups()
        if count is None:
            return now
        if sign == "-" and not past:  # a start time in the past says nothing: a typo
            raise TimeLimitError(
                field, f"{show_value(text)} is not a begin time. Use {BEGIN_FORMS}"
            )
        seconds = _begin_unit(unit, text, field)
        return now + (-1 if sign == "-" else 1) * int(count) * seconds
    # A date first: the API's and a job file's form, read without today's date.
    if match := date_form.fullmatch(text.strip()):
        year, month, day, hour, minute, second = (int(part or 0) for part in match.groups())
        date = time.struct_time((year, month, day, 0, 0, 0, 0, 0, -1))
        at = _local(date, 0, hour, minute, second, text, field)
        if time.localtime(at)[:3] != (year, month, day):  # 2026-02-30 is no date
            raise TimeLimitError(field, f"{show_value(text)} is not a date. Use {BEGIN_FORMS}")
        return at
    today = time.localtime(now)
    if word in ("today", "tomorrow"):
        return _local(today, 1 if word == "tomorrow" else 0, 0, 0, 0, text, field)
    if word in _NAMED_HOURS:
        hour = _NAMED_HOURS[word]
        return _next_or_last(today, hour, 0, 0, now, past, text, field)
    if match := clock_form.fullmatch(word):
        hour, minute, second = (int(part or 0) for part in match.groups())
        return _next_or_last(today, hour, minute, second, now, past, text, field)
    raise TimeLimitError(field, f"{show_value(text)} is not a begin time. Use {BEGIN_FORMS}")


_compiled_begin_forms: tuple[Pattern[str], Pattern[str], Pattern[str]] | None = None


def _begin_patterns() -> tuple[Pattern[str], Pattern[str], Pattern[str]]:
    """parse_begin's forms (now+N, HH:MM, a date), compiled on first use and kept (re's
    cache was looked up for each) and the date tried first, which reads a date faster."""
    global _compiled_begin_forms
    if _compiled_begin_forms is None:
        import re  # deferred: the start-up of commands that read no time

        forms = (_NOW_PATTERN, _CLOCK_PATTERN, _DATE_PATTERN)
        _compiled_begin_forms = (re.compile(forms[0]), re.compile(forms[1]), re.compile(forms[2]))
    return _compiled_begin_forms


def _next_or_last(
    today: time.struct_time,
    hour: int,
    minute: int,
    second: int,
    now: float,
    past: bool,
    text: str,
    field: str,
) -> float:
    """Today's hour:minute:second, or tomorrow's once past (`past`: yesterday's while
    still to come)."""
    at = _local(today, 0, hour, minute, second, text, field)
    if past:
        return at if at <= now else _local(today, -1, hour, minute, second, text, field)
    return at if at > now else _local(today, 1, hour, minute, second, text, field)


def _begin_unit(unit: str, text: str, field: str) -> int:
    if not unit:
        return 1
    for name, seconds in _BEGIN_UNITS.items():
        if unit in (name, name[:-1]):
            return seconds
    raise TimeLimitError(
        field,
        f"{show_value(text)}: {show_value(unit)} is not a unit. Use seconds, minutes, hours, "
        "days or weeks, e.g. now+2hours",
    )


def _local(
    day: time.struct_time, add_days: int, hour: int, minute: int, second: int, text: str, field: str
) -> float:
    """Epoch seconds of `hour:minute:second` local time, `add_days` after `day`'s date."""
    if not (hour < 24 and minute < 60 and second < 60 and 1 <= day.tm_mon <= 12):
        raise TimeLimitError(field, f"{show_value(text)} is not a time of day. Use {BEGIN_FORMS}")
    if not 1 <= day.tm_mday <= 31:
        raise TimeLimitError(field, f"{show_value(text)} is not a date. Use {BEGIN_FORMS}")
    # mktime normalises day overflow (Jan 32 -> Feb 1) and finds DST itself (isdst -1).
    parts = (day.tm_year, day.tm_mon, day.tm_mday + add_days, hour, minute, second, 0, 0, -1)
    try:
        return time.mktime(time.struct_time(parts))
    except (OverflowError, ValueError) as err:
        raise TimeLimitError(
            field, f"{show_value(text)} is out of range. Use {BEGIN_FORMS}"
        ) from err
