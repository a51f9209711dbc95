"""Quantities in compute specs: CPU, memory, durations and counts, each with one written form.

CPU is cores (4, 0.5, "500m"); memory always carries a unit ("512Mi", "16Gi", "2G"); a
duration is seconds or a number with s, min, h or d ("1800", "30min"); never "m" for minutes.
Non-finite numbers and values Kubernetes cannot represent are refused with `ComputeSpecError`.

Example:
    >>> parse_memory("512Mi"), parse_duration("30min"), parse_cpu("500m")
    (536870912, 1800.0, 0.5)
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal
from typing import Any

from .errors import ComputeSpecError

MiB = 1024**2

# Kubernetes stores quantities as int64 (CPU in millicores); larger values cannot be represented.
_INT64_MAX = 2**63 - 1
MIN_CPU = Decimal("0.001")  # 1m, the finest CPU quantity Kubernetes keeps
MAX_CPU = Decimal(_INT64_MAX // 1000)
MIN_MEMORY = MiB
MAX_MEMORY = _INT64_MAX
MAX_COUNT = 2**31 - 1  # nodes, tasks and GPUs: Kubernetes and Slurm keep them as 32-bit ints
MAX_TIMEOUT_S = 365 * 86400

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_CPU = re.compile(_NUMBER + r"(m?)")
_MEMORY_UNITS = {
    **{
        suffix: 1024 ** (power + 1)
        for power, suffix in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    },
    **{suffix: 1000 ** (power + 1) for power, suffix in enumerate(("k", "M", "G", "T", "P", "E"))},
}
_MEMORY = re.compile(_NUMBER + "(" + "|".join(_MEMORY_UNITS) + ")")
_MEMORY_LIKE = re.compile(r"\s*" + _NUMBER + r"\s*([A-Za-z]*)\s*")
_DURATION_UNITS = {"": 1, "s": 1, "min": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(_NUMBER + "(s|min|h|d)?")
_COUNT = re.compile(r"([0-9]+(?:\.0+)?)")
_NOT_FINITE = "NaN and infinity are not allowed; give a finite number"


def show_value(value: Any) -> str:
    """`repr` for messages, cut short: a value can be a 10,000-digit int or a whole file."""
    try:
        text = repr(value)
    except ValueError:  # an int with more digits than Python prints
        return f"<an int of {value.bit_length()} bits>"
    return text if len(text) <= 60 else f"{text[:50]}...({len(text)} characters)"


def field_error(
    field: str, value: Any, allowed: str, step: str | None = None, fix: str | None = None
) -> ComputeSpecError:
    """The error for one bad field: where, the field and its value, what is allowed, the fix.

    Example:
        >>> str(field_error("cpu", 0, "cpu must be > 0", step="mosaic", fix="give 1 or more"))
        "step 'mosaic': cpu=0 is not allowed: cpu must be > 0; give 1 or more"
    """
    where = f"step '{step}': " if step else ""
    tail = f"; {fix}" if fix else ""
    return ComputeSpecError(f"{where}{field}={show_value(value)} is not allowed: {allowed}{tail}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _decimal(value: int | float) -> Decimal:
    """A number as a `Decimal` that reads the same as the number written in a tag (`str`)."""
    return Decimal(value) if isinstance(value, int) else Decimal(repr(float(value)))


def _plain(number: Decimal) -> str:
    """A decimal without exponent or trailing zeros, as a user would write it ("1800", "0.5")."""
    text = format(number, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def whitespace_fix(value: Any, pattern: re.Pattern[str]) -> str | None:
    """The fix for a value that would match `pattern` without its whitespace ("30 min")."""
    if isinstance(value, str):
        compact = "".join(value.split())
        if compact != value and pattern.fullmatch(compact):
            return f"remove the whitespace: {compact!r}"
    return None


def _too_large(number: Decimal) -> bool:
    """True for numbers beyond any limit here (checked before multiplying, so nothing overflows)."""
    return number.adjusted() > 30


def _number_from(
    value: Any,
    pattern: re.Pattern[str],
    field: str,
    allowed: str,
    step: str | None,
    fix: str | None = None,
) -> tuple[Decimal, str]:
    """A finite number and its unit from an int, a float or a string matching `pattern`."""
    if _is_number(value):
        number, unit = _decimal(value), ""
        if not number.is_finite():
            raise field_error(field, value, allowed, step, _NOT_FINITE)
        return number, unit
    match = pattern.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise field_error(field, value, allowed, step, whitespace_fix(value, pattern) or fix)
    return Decimal(match[1]), (match[2] or "") if pattern.groups > 1 else ""


def parse_cpu(value: Any, step: str | None = None, field: str = "cpu") -> float:
    """CPU cores from 4, 0.5, "2" or "500m" (millicores), between 1m and Kubernetes' limit.

    Example:
        >>> parse_cpu("500m"), parse_cpu(2)
        (0.5, 2.0)
    """
    allowed = f'{field} must be a number of cores from 0.001 to {MAX_CPU}: 4, 0.5 or "500m"'
    number, unit = _number_from(value, _CPU, field, allowed, step)
    if unit == "m":
        number = number / 1000
    if number <= 0:
        raise field_error(field, value, allowed, step, f"{field} must be > 0")
    if number < MIN_CPU:
        raise field_error(field, value, allowed, step, "Kubernetes rounds anything below 1m to 0")
    if _too_large(number) or number > MAX_CPU:
        raise field_error(field, value, allowed, step, "larger than Kubernetes can represent")
    return float(number)


def _memory_fix(value: Any) -> str:
    """What the user most likely meant by a memory value that is not a quantity with a unit."""
    if _is_number(value):
        if not _decimal(value).is_finite():
            return _NOT_FINITE
        return f"a number without a unit is bytes; {_did_you_mean(_decimal(value))}"
    match = _MEMORY_LIKE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return 'write a number with a unit: "512Mi", "16Gi"'
    number, unit = match[1], match[2]
    key = unit.lower().removesuffix("b").removesuffix("i")
    if unit == "m":
        return f'"m" means milli (1/1000 byte); did you mean "{number}Mi"?'
    if len(key) == 1 and key in "kmgtpe":
        hint = (
            f'"{number}{key.upper()}i" (binary) or "{number}{"k" if key == "k" else key.upper()}"'
        )
        return whitespace_fix(value, _MEMORY) or f"did you mean {hint} (decimal)?"
    if not unit:
        return f"a number without a unit is bytes; {_did_you_mean(Decimal(number))}"
    return f"{unit!r} is not a unit; use Mi or Gi (binary) or M or G (decimal)"


def _did_you_mean(number: Decimal) -> str:
    """A bare number is small (MiB or GiB meant) or a byte count; suggest the likely quantity."""
    if _too_large(number) or number > MAX_MEMORY:
        return 'did you mean a number with a unit, such as "16Gi"?'
    if number < MiB:
        return f'did you mean "{_plain(number)}Mi"?'
    exact = (("Ti", 1024**4), ("Gi", 1024**3), ("Mi", MiB), ("T", 10**12), ("G", 10**9))
    for suffix, unit in (*exact, ("M", 10**6)):
        if number % unit == 0:
            return f'did you mean "{_plain(number / unit)}{suffix}"?'
    return f'did you mean "{_plain((number / MiB).to_integral_value(ROUND_CEILING))}Mi"?'


def parse_memory(value: Any, step: str | None = None, field: str = "memory") -> int:
    """Bytes from a Kubernetes quantity with a unit ("512Mi", "16Gi", "2G"), from 1Mi up.

    Example:
        >>> parse_memory("2Gi"), parse_memory("2G")
        (2147483648, 2000000000)
    """
    allowed = (
        f"{field} must be a number with a unit (Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E) "
        'from 1Mi to below 8Ei: "512Mi", "16Gi", "2G"'
    )
    match = _MEMORY.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise field_error(field, value, allowed, step, _memory_fix(value))
    number = Decimal(match[1])
    if _too_large(number) or number * _MEMORY_UNITS[match[2]] > MAX_MEMORY:
        raise field_error(field, value, allowed, step, "larger than Kubernetes can represent")
    number *= _MEMORY_UNITS[match[2]]
    if number < MIN_MEMORY:
        fix = f'that is {_plain(number)} bytes; did you mean "{match[1]}Mi"?'
        raise field_error(field, value, allowed, step, fix)
    return int(number.to_integral_value(rounding=ROUND_CEILING))


def parse_duration(value: Any, step: str | None = None, field: str = "timeout") -> float:
    """Seconds from 1800, "30s", "30min", "2h" or "1d", from 1 second to 365 days.

    Example:
        >>> parse_duration("30min"), parse_duration(90)
        (1800.0, 90.0)
    """
    allowed = (
        f'{field} must be seconds (1800) or a number with a unit s, min, h or d ("30s", '
        '"30min", "2h", "1d"), from 1s to 365d'
    )
    no_limit = f"omit {field} to wait without a limit"
    minutes = re.fullmatch(_NUMBER + "m", value.strip()) if isinstance(value, str) else None
    if minutes and not _too_large(Decimal(minutes[1])):
        in_seconds = _plain(Decimal(minutes[1]) * 60)
        fix = f'"m" could mean minutes or milliseconds: write "{minutes[1]}min" or "{in_seconds}"'
        raise field_error(field, value, allowed, step, fix)
    number, unit = _number_from(value, _DURATION, field, allowed, step, no_limit)
    if not _too_large(number):
        number *= _DURATION_UNITS[unit]
    if number < 1:
        raise field_error(field, value, allowed, step, "give at least 1 second")
    if _too_large(number) or number > MAX_TIMEOUT_S:
        raise field_error(field, value, allowed, step, no_limit)
    return float(number)


def parse_count(value: Any, field: str, *, minimum: int, step: str | None = None) -> int:
    """A whole number from `minimum` up to 2**31 - 1 (3, 3.0 or "3").

    Example:
        >>> parse_count("8", "gpu", minimum=0)
        8
    """
    allowed = f"{field} must be a whole number >= {minimum} (at most {MAX_COUNT})"
    number, _ = _number_from(value, _COUNT, field, allowed, step)
    if number != number.to_integral_value():
        raise field_error(field, value, allowed, step)
    if number < minimum or _too_large(number) or number > MAX_COUNT:
        raise field_error(field, value, allowed, step)
    return int(number)
