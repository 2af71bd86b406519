"""The "What differs between ranks" table, one row per setting the ranks disagree on, shared by the
terminal summary and the HTML report. Empty (and the section hidden) on a homogeneous job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict

from hangscope.analysis.config_skew import label
from hangscope.analysis.verdict import Verdict
from hangscope.ranges import format_ranks

MAX_ROWS = 40
MAX_VALUES = 8
MAX_VALUE_CHARS = 200


class ConfigValue(TypedDict):
    value: str
    ranks: str  # ranges: "0-2,5"
    where: str


class ConfigRow(TypedDict):
    setting: str
    key: str
    values: list[ConfigValue]  # most-shared first
    unknown: str  # ranks nothing said it for, as ranges


def config_rows(verdict: Verdict) -> list[ConfigRow]:
    rows: list[ConfigRow] = []
    for diff in verdict.config_differences[:MAX_ROWS]:
        values: list[ConfigValue] = [
            {"value": _clip(g.value), "ranks": format_ranks(g.ranks), "where": g.where}
            for g in diff.groups[:MAX_VALUES]]
        rows.append({"setting": label(diff.key), "key": diff.key, "values": values,
                     "unknown": format_ranks(diff.unknown)})
    return rows


def format_differences(verdict: Verdict, limit: int = 12) -> Iterator[str]:
    """Terminal lines: ``  NCCL version   2.21.5 (ranks 0-2) | 2.18.1 (rank 3)``; nothing when
    the ranks agree."""
    rows = config_rows(verdict)
    if not rows:
        return
    yield ""
    yield "What differs between ranks:"
    width = min(32, max(len(row["setting"]) for row in rows[:limit]))
    for row in rows[:limit]:
        cells = " | ".join(f"{v['value'] or '(empty)'} ({_ranks(v['ranks'])})"
                           for v in row["values"])
        yield f"  {row['setting']:<{width}}  {cells}"
    if len(verdict.config_differences) > limit:
        yield f"  ... {len(verdict.config_differences) - limit} more in verdict.json"


def _ranks(text: str) -> str:
    return ("ranks " if "-" in text or "," in text else "rank ") + text


def _clip(value: str) -> str:
    return value if len(value) <= MAX_VALUE_CHARS else value[:MAX_VALUE_CHARS - 3] + "..."
