"""Date/time values as the capture trigger writes them, and their text forms.

Trigger forms (PostgreSQL's internal representation, exact):
date: int days since 2000-01-01; time: int microseconds since midnight;
timestamp/timestamptz: int microseconds since 2000-01-01 00:00 (UTC for tz);
interval: [months, days, microseconds]. Infinities are the int32/int64 limits.
"""

import re
from datetime import UTC, datetime

from pgshovel2.errors import EncodeError
from pgshovel2.wire import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

DAYS_2000 = 10957                       # days from 1970-01-01 to 2000-01-01
MICROS_2000 = DAYS_2000 * 86_400_000_000
_US_DAY = 86_400_000_000


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day), proleptic Gregorian, of days since 1970-01-01."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """Inverse of civil_from_days."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _date_text(days_1970: int) -> str:
    y, m, d = civil_from_days(days_1970)
    if y <= 0:  # PostgreSQL writes 1 BC as "0001-.. BC"
        return f"{1 - y:04d}-{m:02d}-{d:02d} BC"
    return f"{y:04d}-{m:02d}-{d:02d}"


def _time_text(us: int) -> str:
    s, frac = divmod(us, 1_000_000)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.{frac:06d}"


def date_to_avro(v: int) -> int:
    """Trigger date -> Avro ``date`` (days since 1970; infinities kept as int limits)."""
    return v if v in (INT32_MIN, INT32_MAX) else v + DAYS_2000


def date_to_json(v: int) -> str:
    """Trigger date -> "YYYY-MM-DD" (or "infinity"/"-infinity")."""
    if v == INT32_MAX:
        return "infinity"
    if v == INT32_MIN:
        return "-infinity"
    return _date_text(v + DAYS_2000)


def timestamp_to_avro(v: int) -> int:
    """Trigger timestamp -> microseconds since 1970 (infinities kept as int64 limits).

    Raises ValueError for a timestamp after 294247-01-10 04:00:54.775806 (PostgreSQL's go to
    294276-12-31): µs since 1970 in a long, short of the +infinity stand-in, end there."""
    if v in (INT64_MIN, INT64_MAX):
        return v
    if v >= INT64_MAX - MICROS_2000:
        raise ValueError(f"timestamp {timestamp_to_json(v, False)} is after 294247-01-10T04:00:54.775806, the last "
                         "one Avro's timestamp-micros (µs since 1970 in a long) holds besides +infinity's stand-in; "
                         "the JSON encoding carries it")
    return v + MICROS_2000


def timestamp_to_json(v: int, utc: bool) -> str:
    """Trigger timestamp -> ISO 8601, with ``Z`` when utc (timestamptz)."""
    if v == INT64_MAX:
        return "infinity"
    if v == INT64_MIN:
        return "-infinity"
    days, us = divmod(v + MICROS_2000, _US_DAY)
    date = _date_text(days)
    bc = date.endswith(" BC")
    text = f"{date[:-3] if bc else date}T{_time_text(us)}{'Z' if utc else ''}"
    return f"{text} BC" if bc else text


def time_to_json(v: int) -> str:
    """Trigger time -> "HH:MM:SS.ffffff"."""
    return _time_text(v)


def interval_to_iso(v: list) -> str:
    """Trigger interval [months, days, us] -> ISO 8601 duration, e.g. "P1Y2M3DT4H5M6.5S".

    Components keep their own signs, as PostgreSQL's iso_8601 IntervalStyle does.
    """
    months, days, us = v
    if not (months or days or us):
        return "PT0S"
    years = int(months / 12)
    out = ["P"]
    for n, unit in ((years, "Y"), (months - years * 12, "M"), (days, "D")):
        if n:
            out.append(f"{n}{unit}")
    if us:
        sign = "-" if us < 0 else ""
        h, rest = divmod(abs(us), 3_600_000_000)
        m, rest = divmod(rest, 60_000_000)
        out.append("T")
        if h:
            out.append(f"{sign}{h}H")
        if m:
            out.append(f"{sign}{m}M")
        if rest:
            secs = f"{rest // 1_000_000}.{rest % 1_000_000:06d}".rstrip("0").rstrip(".")
            out.append(f"{sign}{secs}S")
    return "".join(out)


_TZ_SHORT = re.compile(r"([+-]\d\d)$")


def timetz_to_iso(text: str) -> str:
    """PostgreSQL timetz text ("12:34:56.5+03") -> ISO 8601 ("12:34:56.5+03:00")."""
    return _TZ_SHORT.sub(r"\1:00", text)


# Text forms, as found inside array literals (DateStyle ISO assumed).

def date_from_text(text: str) -> int:
    """ "YYYY-MM-DD" or "infinity" -> trigger date form."""
    if text in ("infinity", "-infinity"):
        return INT32_MAX if text == "infinity" else INT32_MIN
    try:
        y, m, d = (int(p) for p in text.split("-"))
    except ValueError as exc:
        raise EncodeError(f"cannot parse date {text!r} (DateStyle ISO expected)") from exc
    return days_from_civil(y, m, d) - DAYS_2000


def timestamp_from_text(text: str) -> int:
    """ISO timestamp text (with or without offset) -> trigger timestamp form."""
    if text in ("infinity", "-infinity"):
        return INT64_MAX if text == "infinity" else INT64_MIN
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise EncodeError(f"cannot parse timestamp {text!r} (DateStyle ISO expected)") from exc
    naive = dt.astimezone(UTC).replace(tzinfo=None) if dt.tzinfo else dt
    days = days_from_civil(naive.year, naive.month, naive.day)
    us = ((naive.hour * 60 + naive.minute) * 60 + naive.second) * 1_000_000 + naive.microsecond
    return days * _US_DAY + us - MICROS_2000


def time_from_text(text: str) -> int:
    """ "HH:MM:SS[.ffffff]" -> microseconds since midnight."""
    hms, _, frac = text.partition(".")
    h, m, s = (int(p) for p in hms.split(":"))
    return ((h * 60 + m) * 60 + s) * 1_000_000 + int((frac + "000000")[:6])
