"""Loader for the bundle's ``probe`` record: what a rank's in-job probe answered
(``hangscope.collect.probe``; the answer's schema is in ``hangscope.probe.answer``)::

    {"rank": 3, "pid": 1234, "socket": "/tmp/hangscope-probe-0/1234.sock",
     "asked_at": 1795456933.1, "seconds": 0.012,
     "answer": {"protocol": 1, "pid": 1234, "time": {"wall": ...},
                "threads": [{"ident": 1399, "native_id": 1234, "name": "MainThread",
                             "is_main": true, "frames": [{"name", "filename", "line"}],
                             "waits_on": {"kind": "queue", "detail": "qsize 0"} | null}],
                "fr": {"bytes": 51234}, "cuda": null, "dataloader": [], "notes": []}}

The flight-recorder trace that came with the answer is its own ``fr`` file (``probe-fr.json``)
and goes through the FR loader like any dump. From this record:

- the threads become a stack sample (source ``probe``) of the rank, in py-spy's frame format
  (qualified name, file, line; innermost first), but only when the bundle holds no py-spy stacks
  of that rank (``stacks-*.json`` beside it): py-spy's samples carry idle/GIL flags and a timing
  series that one in-process snapshot would blur;
- DataLoader worker pids the probe saw join the rank's ``worker_pids``;
- the probe's own notes (no FR, a trace over the size limit) become load problems, named by file.

Protocol versions seen: 1.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any

from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, StackSample
from hangscope.sources.pyspy import sample_from_json

RECORD_KIND = "probe"
MAX_BYTES = 32 << 20
PYSPY_PREFIX = "stacks-"  # collect.pyspy.bundle_name


def load_probe_record(path: str, rank: int | None, evidence: JobEvidence,
                      problems: list[str]) -> None:
    try:
        doc = _read(path)
        answer = doc.get("answer")
        if not isinstance(answer, dict):
            raise BadInputError(path, "probe record without an 'answer' object")
        record_rank = doc.get("rank")
        if rank is None:
            if not _is_int(record_rank):
                raise BadInputError(path, "probe record belongs to no rank")
            rank = int(str(record_rank))
        raw_pid = answer.get("pid") if _is_int(answer.get("pid")) else doc.get("pid")
        pid = raw_pid if isinstance(raw_pid, int) and not isinstance(raw_pid, bool) else None
        rank_ev = evidence.rank(rank)
        if rank_ev.pid is None and pid is not None:
            rank_ev.pid = pid
        threads = answer.get("threads")
        if isinstance(threads, list) and threads and not _has_pyspy(path):
            taken = _wall(answer)
            rank_ev.samples.append(_sample(threads, pid, taken, path))
        for loader in answer.get("dataloader") or []:
            for worker in (loader.get("worker_pids") or []) if isinstance(loader, dict) else []:
                if _is_int(worker) and worker not in rank_ev.worker_pids:
                    rank_ev.worker_pids.append(int(worker))
        notes = answer.get("notes")
        problems.extend(f"{path}: probe of rank {rank} says: {str(note)[:300]}"
                        for note in (notes[:5] if isinstance(notes, list) else []))
    except BadInputError as exc:
        problems.append(str(exc))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError, TypeError,
            AttributeError) as exc:
        problems.append(f"{path}: unreadable probe record ({' '.join(str(exc).split())[:200]})")


def _read(path: str) -> dict[str, Any]:
    if os.path.getsize(path) > MAX_BYTES:
        raise BadInputError(path, f"larger than {MAX_BYTES >> 20} MiB")
    with open(path, "rb") as handle:
        doc = json.loads(handle.read())
    if not isinstance(doc, dict):
        raise BadInputError(path, "probe record is not a JSON object")
    return doc


def _sample(threads: list[Any], pid: int | None, taken: float | None,
            path: str) -> StackSample:
    """The probe's threads in py-spy's JSON shape, through py-spy's own parser."""
    as_pyspy = [{"thread_id": t.get("ident"), "os_thread_id": t.get("native_id"),
                 "thread_name": t.get("name"), "frames": t.get("frames")}
                for t in threads if isinstance(t, dict)]
    sample = sample_from_json(as_pyspy, pid, taken, path, path)
    return replace(sample, source=RECORD_KIND)


def _has_pyspy(path: str) -> bool:
    try:
        return any(name.startswith(PYSPY_PREFIX) for name in os.listdir(os.path.dirname(path)))
    except OSError:
        return False


def _wall(answer: dict[str, Any]) -> float | None:
    times = answer.get("time")
    wall = times.get("wall") if isinstance(times, dict) else None
    return float(wall) if isinstance(wall, (int, float)) and not isinstance(wall, bool) else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
