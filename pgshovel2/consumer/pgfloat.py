"""real and double precision as PostgreSQL 12+ prints them: the shortest decimal that reads
back as the same value (float4: as the same float32, not its widened double), in fixed-point
from 1e-4 up to 1e+06 (real) / 1e+15 (double), else in exponent form (``1e+06``, ``1e-05``);
``NaN``, ``Infinity``, ``-Infinity``, ``-0``. Ties between two shortest decimals go to the
even last digit, as PostgreSQL's Ryu does."""

import functools
import math
import struct
from decimal import Decimal

_F32 = struct.Struct("<f")


def _layout(negative: bool, digits: str, exp10: int, fixed_below: int) -> str:
    """PostgreSQL's float text of ±0.digits×10^(exp10+1): fixed-point for -4 <= exp10 < fixed_below."""
    if -4 <= exp10 < fixed_below:
        if exp10 < 0:
            body = "0." + "0" * (-exp10 - 1) + digits
        elif len(digits) <= exp10 + 1:
            body = digits + "0" * (exp10 + 1 - len(digits))
        else:
            body = digits[:exp10 + 1] + "." + digits[exp10 + 1:]
    else:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + \
            f"e{'-' if exp10 < 0 else '+'}{abs(exp10):02d}"
    return "-" + body if negative else body


def _special(x: float) -> str | None:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    return None


def float8_text(x: float) -> str:
    """A double as PostgreSQL prints it (shortest round-trip digits, exponent from 1e+15 or below 1e-4)."""
    r = repr(x)
    if 1e-4 <= abs(x) < 1e15:  # Python's repr is fixed-point here too (it switches at 1e16)
        return r[:-2] if r.endswith(".0") else r
    special = _special(x)
    if special is not None:
        return special
    mantissa, _, exp = r.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exp10 = int(exp or 0) + len(whole) - 1 - (len(whole + fraction) - len(digits))
    return _layout(x < 0, digits.rstrip("0"), exp10, 15)


def _to_f32(d: float) -> float:
    """The float32 nearest to double d (ties to even)."""
    return _F32.unpack(_F32.pack(d))[0]


def _reads_back(text: str, x: float) -> bool:
    """True when the decimal text rounds to float32 x (exactly, despite parsing through a double)."""
    d = float(text)
    _, e = math.frexp(d)
    r = math.ldexp(abs(d), -max(e - 24, -149))
    if r - math.floor(r) == 0.5:  # d is halfway between two float32: parsing may have rounded onto it
        exact, mid = Decimal(text), Decimal(d)
        if exact != mid:
            d = math.nextafter(d, math.inf if exact > mid else -math.inf)
    return _F32.unpack(_F32.pack(d))[0] == x


def _f32_digits(x: float, p: int) -> str | None:
    """The p-digit decimal (``%e`` form) reading back as float32 x, closest to x; None if none does."""
    text = f"{x:.{p - 1}e}"
    if _reads_back(text, x):
        return text
    if struct.unpack("<I", _F32.pack(x))[0] & 0x7FFFFF:
        return None
    # x is a power of two: the float32 below it is nearer than the one above, so the range reading
    # back as x is lopsided and the nearest decimal's upper neighbour may read back when it does not
    mantissa, exp = text.split("e")
    step = Decimal(1 if x > 0 else -1).scaleb(int(exp) - (p - 1))
    other = f"{Decimal(mantissa).scaleb(int(exp)) + step:.{p - 1}e}"
    return other if _reads_back(other, x) else None


def float4_text(x: float) -> str:
    """A real (float32 value, as Avro/JSON carry it) as PostgreSQL prints it: its shortest text.

    x is widened to a double on the way (3.4028234663852886e+38); the digits
    are those of the shortest decimal reading back as the same float32
    (3.4028235e+38), exponent form from 1e+06 or below 1e-4.
    """
    special = _special(x)
    return special if special is not None else _float4_digits(x)


@functools.lru_cache(maxsize=4096)
def _float4_digits(x: float) -> str:
    """float4_text of a finite non-zero x (cached: 0.0 and -0.0, equal keys, never reach it)."""
    x = _to_f32(x)
    lo, hi, best = 1, 9, f"{x:.8e}"  # 9 significant digits always read back
    while lo < hi:  # the shortest p: reading back is monotone in p
        mid = (lo + hi) // 2
        found = _f32_digits(x, mid)
        if found is None:
            lo = mid + 1
        else:
            hi, best = mid, found
    mantissa, exp = best.lstrip("-").split("e")
    return _layout(x < 0, mantissa.replace(".", "").rstrip("0") or "0", int(exp), 6)
