"""Parsers for option values shared by several subcommands."""

from __future__ import annotations

from subnetlab.errors import SubnetlabError


def parse_int_list(text: str, name: str = "--seeds") -> list[int]:
    """Parse ``0-11``, ``0,3,5`` or ``0-2,7`` into a sorted list of distinct ints."""
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo < 0 or hi < lo:
                    raise ValueError
                values.update(range(lo, hi + 1))
            else:
                value = int(part)
                if value < 0:
                    raise ValueError
                values.add(value)
        except ValueError:
            raise SubnetlabError(f"{name}: malformed value {text!r} (expected e.g. 0-11 or 0,3,5)") from None
    if not values:
        raise SubnetlabError(f"{name}: empty list")
    return sorted(values)


def parse_fraction(value: float, name: str = "--sparsity") -> float:
    """A number strictly between 0 and 1."""
    if not 0.0 < value < 1.0:
        raise SubnetlabError(f"{name}: {value} is outside (0, 1)")
    return value
