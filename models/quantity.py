"""Kubernetes resource quantities and Go durations: validation, parsing and canonical form.

Workspace classes and workspace requests carry cpu, memory and storage as Kubernetes quantities
("4", "500m", "16Gi") and timeouts as Go durations ("15m", "1h30m"), because that is how the
exalsius CRDs spell them and how users already write them. `models/workspace_class.py` validates
them with these functions; `models/values.py` injects the canonical form into Helm values, which is
what the exalsius operator writes (`resource.Quantity.String()`), so charts see the same strings.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from enum import StrEnum

QUANTITY_PATTERN = re.compile(
    r"^(?P<sign>[+-])?(?P<number>[0-9]+(\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
"""The grammar of `k8s.io/apimachinery/pkg/api/resource.ParseQuantity` (the CRD's pattern, with the
exponent restricted to an integer, as the parser requires)."""

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL.items()}
_BINARY_SUFFIX = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


class QuantityFormat(StrEnum):
    """How a quantity was written; its canonical form keeps the same family (as Kubernetes does)."""

    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


def quantity_problem(field: str, value: object) -> str | None:
    """Why `value` is not a Kubernetes quantity, or None.

    Args:
        field: the field's name as the user wrote it ("cpu", "memory"), for the message.
        value: the value given (a string or a number).
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f'{field} must be a Kubernetes quantity such as "4", "500m" or "16Gi", got {value!r}'
    text = str(value)
    if not QUANTITY_PATTERN.match(text):
        return (
            f"{field} '{text}' is not a Kubernetes quantity: write a number with an optional suffix, "
            'such as "4", "500m", "16Gi" or "100G"'
        )
    return None


def parse_quantity(value: str | int | float) -> tuple[Decimal, QuantityFormat]:
    """The exact value of a quantity and the format family it was written in.

    Raises:
        ValueError: `value` is not a quantity (the message is `quantity_problem`'s).
    """
    problem = quantity_problem("quantity", value)
    if problem:
        raise ValueError(problem)
    match = QUANTITY_PATTERN.match(str(value))
    assert match is not None
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"quantity '{value}' is not a number") from exc
    if match["sign"] == "-":
        number = -number
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * (2 ** _BINARY[suffix]), QuantityFormat.BINARY_SI
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix]), QuantityFormat.DECIMAL_SI
    return number.scaleb(int(suffix[1:])), QuantityFormat.DECIMAL_EXPONENT


def canonical_quantity(value: str | int | float) -> str:
    """The quantity as Kubernetes prints it (`resource.Quantity.String()`).

    "0.5" becomes "500m", "2000" becomes "2k", "1024Mi" becomes "1Gi", "1.5Gi" becomes "1536Mi";
    values finer than a nano-unit round up to it, as `ParseQuantity` does.

    Raises:
        ValueError: `value` is not a quantity.
    """
    number, fmt = parse_quantity(value)
    if number == 0:
        return "0"
    number = _round_up_to_nano(number)
    sign = "-" if number < 0 else ""
    magnitude = abs(number)
    if fmt is QuantityFormat.BINARY_SI:
        # Kubernetes keeps binary suffixes only for whole values of at least 1Ki; smaller or
        # fractional ones are shown in decimal so no precision is lost.
        if magnitude >= 1024 and magnitude == magnitude.to_integral_value():
            whole, power = int(magnitude), 0
            while power < len(_BINARY_SUFFIX) - 1 and whole % 1024 == 0:
                whole //= 1024
                power += 1
            return f"{sign}{whole}{_BINARY_SUFFIX[power]}"
        fmt = QuantityFormat.DECIMAL_SI
    mantissa, exponent = int(magnitude.scaleb(9)), -9
    while exponent < 18 and mantissa % 1000 == 0:
        mantissa //= 1000
        exponent += 3
    if fmt is QuantityFormat.DECIMAL_EXPONENT:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def _round_up_to_nano(number: Decimal) -> Decimal:
    scaled = number.scaleb(9)
    if scaled == scaled.to_integral_value():
        return number
    return scaled.to_integral_value(rounding=ROUND_CEILING).scaleb(-9)


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def parse_go_duration(text: str) -> timedelta:
    """A Go duration string ("15m", "1h30m", "90s", "2.5h") as a timedelta.

    This is the syntax of the CRDs' `deployTimeout` (Go's `time.ParseDuration`).

    Raises:
        ValueError: not a Go duration, or a negative one.
    """
    stripped = text.strip()
    if stripped == "0":
        return timedelta(0)
    if stripped.startswith("-"):
        raise ValueError(f"duration '{text}' must not be negative")
    body = stripped.removeprefix("+")
    position, seconds = 0, Decimal(0)
    for match in _DURATION_PART.finditer(body):
        if match.start() != position:
            break
        seconds += Decimal(match[1]) * _DURATION_UNITS[match[2]]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(
            f"duration '{text}' is not a Go duration: write a number and a unit, "
            'such as "15m", "1h30m" or "90s"'
        )
    return timedelta(seconds=float(seconds))


def format_go_duration(value: timedelta) -> str:
    """A timedelta as a compact Go duration ("15m", "1h30m", "1m30.5s"); `parse_go_duration`'s inverse."""
    total = Decimal(str(value.total_seconds()))
    if total == 0:
        return "0s"
    sign = "-" if total < 0 else ""
    total = abs(total)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = []
    if hours:
        parts.append(f"{int(hours)}h")
    if minutes:
        parts.append(f"{int(minutes)}m")
    if seconds:
        text = format(seconds.normalize(), "f")
        parts.append(f"{text}s")
    return sign + "".join(parts)
