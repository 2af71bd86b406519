# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Accelerate's cross-rank shape check: the shape each process offered to one operation.

With ``ACCELERATE_DEBUG_MODE`` (``verify_operation`` in ``accelerate/utils/operations.py``), an
operation whose tensors differ in shape across processes raises on every rank instead of hanging
in the collective, and lists each process's shape::

    accelerate.utils.operations.DistributedOperationException: Cannot apply desired operation due to shape mismatches. All shapes across devices must be valid.

    Operation: `accelerate.utils.operations.gather`
    Input shapes:
      - Process 0: [1024]
      - Process 1: [2048]

One ``shape_check`` event on the ``Input shapes:`` line, with fields ``shapes`` (``0=[1024];1=[2048]``,
process index = global rank) and ``processes``; a process listed twice keeps its first shape. The
list's lines are consumed. ``analysis/detectors/mismatch_error.py`` (rule ``ranks-disagree``) reads
which processes stand apart from the others.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

MAX_PROCESSES = 4096
_PROCESS = re.compile(r"^\s*-\s*Process (?P<index>\d{1,6}): (?P<shape>\[[^\]]{0,200}\]|\S{1,200})")


def input_shapes(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    if not line.body.strip().startswith("Input shapes:"):
        return []
    shapes: dict[int, str] = {}
    for nxt in follow.lines():
        if nxt.key != line.key:
            continue  # another process's lines interleaved with this one's
        m = _PROCESS.match(nxt.body)
        if m is None or len(shapes) >= MAX_PROCESSES:
            break
        shapes.setdefault(int(m.group("index")), " ".join(m.group("shape").split()))
        follow.consume(nxt.line_no)
    if len(shapes) < 2:
        return []
    fields: dict[str, str | int | float] = {
        "shapes": ";".join(f"{index}={shape}" for index, shape in sorted(shapes.items())),
        "processes": len(shapes)}
    listed = ", ".join(f"process {i}: {s}" for i, s in sorted(shapes.items())[:8])
    message = f"Accelerate's shape check: the processes' input shapes differ ({listed})"
    return [make_event("shape_check", line, ctx, "error", fields, message=message)]


def parse_shapes(field: str) -> dict[int, str]:
    """The ``shapes`` field back as {process index: shape}."""
    out: dict[int, str] = {}
    for item in field.split(";"):
        index, _, shape = item.partition("=")
        if index.isdigit():
            out[int(index)] = shape
    return out


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Input shapes:", input_shapes),
]
