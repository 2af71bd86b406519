"""Shared helpers for tests/test_logs_*.py (not a test module)."""

from __future__ import annotations

from pathlib import Path

from hangscope.model import LogEvent
from hangscope.sources.logs import scan_log

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "logs"


def scan(name: str, rank_hint: int | None = None) -> list[LogEvent]:
    return scan_log(str(FIXTURES / name), rank_hint=rank_hint)


def of_kind(events: list[LogEvent], kind: str) -> list[LogEvent]:
    return [e for e in events if e.kind == kind]


def strip_source(fields: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in fields.items() if k not in ("rank_source",)}
