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


def findings_of(folder: Path, text: str, name: str = "paste.log") -> list:  # type: ignore[type-arg]
    """The verdict's findings, root first, for ``text`` written to ``folder/name`` and analyzed as
    `hangscope analyze` does."""
    from hangscope.analysis.engine import analyze
    from hangscope.model import JobEvidence
    from hangscope.sources.logs.loader import load_log_file

    path = folder / name
    path.write_text(text)
    evidence = JobEvidence()
    load_log_file(str(path), None, evidence, [])
    return analyze(evidence)[0].findings


def root_of(folder: Path, text: str):  # type: ignore[no-untyped-def]
    found = findings_of(folder, text)
    return found[0] if found else None


def verdict_of(folder: Path, text: str, name: str = "train.log"):  # type: ignore[no-untyped-def]
    """The verdict for ``text`` written to ``folder/name``, the folder analyzed as
    `hangscope analyze FOLDER` does (the folder is made if missing)."""
    from hangscope.analysis.engine import analyze
    from hangscope.options import LoadOptions
    from hangscope.sources.load import load_paths

    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return analyze(load_paths([str(folder)], LoadOptions())[0])[0]


def kind_and_culprits(verdict):  # type: ignore[no-untyped-def]
    """(root finding's kind, its culprits), or None where nothing was found."""
    return (verdict.root.kind.value, verdict.root.culprit_ranks) if verdict.root else None


def write_paste(folder: Path, text: str, name: str = "paste.log") -> Path:
    """``text`` written as a log file ``name`` in ``folder`` (made as needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path
