"""Who is the odd one out: one rule for every source that compares ranks (flight-recorder sizes,
log lines, stacks).

Where more than half of the ranks that report a value agree on it, the others are the odd ones
out. Where no value has such a majority (two ranks, or every rank different), no side is picked:
callers then name both sides and say why.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class OddOut(Generic[T]):
    value: T  # what the majority reports
    majority: list[int]
    odd: list[int]  # ascending


def odd_ones_out(values: Mapping[int, T]) -> OddOut[T] | None:
    """The majority's value and the ranks that differ from it, or None when fewer than half plus
    one of the ranks agree or nobody differs."""
    counts: dict[T, list[int]] = {}
    for rank, value in values.items():
        counts.setdefault(value, []).append(rank)
    if len(counts) < 2:
        return None
    value, ranks = max(counts.items(), key=lambda item: len(item[1]))
    if len(ranks) * 2 <= len(values):
        return None
    odd = sorted(r for r in values if r not in ranks)
    return OddOut(value, sorted(ranks), odd)
