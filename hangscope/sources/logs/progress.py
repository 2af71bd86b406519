"""Progress lines: how far a rank's own log says it got, and where that log ends.

A training loop prints its position in many wordings; these are recognised, with or without a
timestamp or rank prefix (``common.parse_line`` peels those):

* counters: ``step 41``, ``Step [41/600]``, ``global_step=41``, ``iter 41``, ``iteration 41/1000``,
  Megatron's ``iteration      100/   10000 |``, DeepSpeed's ``step=100, skipped=0``, fairseq's
  ``num_updates 100``, ``Batch 41/600``;
* epochs: ``Epoch 3``, ``Epoch [3/10], Step [41/600]``, HF Trainer's ``{'loss': 2.1, ..., 'epoch':
  0.45}``, the PyTorch examples' ``Train Epoch: 1 [12800/60000 (21%)]``;
* tqdm bars (Lightning, HF Trainer, plain tqdm): ``Epoch 0:  45%|████▌     | 45/100 [00:10<00:12,
  4.50it/s]``; a bar redrawn with carriage returns counts by its last drawing.

Only the tail of a log is read (``TAIL_BYTES``; the lines before it are counted so that line
numbers stay the file's). Per rank stream the scan yields at most two events: ``progress`` (the last
progress line: ``fields`` ``step``, ``total``, ``epoch``, ``unit``) and ``log_end`` (the last
non-blank line). Both are facts, not failures: ``analysis/log_progress.py`` reads them. Numbers
inside words (``max_steps``, ``step_time``, ``--max-step 1000``) and plurals (``4 steps``) do not
count. False positives: any other line that says ``step N``; only the last one matters.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass

from hangscope.model import LogEvent
from hangscope.sources.logs.common import (
    Context,
    Line,
    decode,
    infer_rank_from_path,
    make_event,
    parse_line,
)

TAIL_BYTES = 1 << 20
COUNT_CHUNK = 8 << 20
MAX_LINE = 64 << 10

_NUM = r"(\d+)(?:\s*(?:/|of)\s*(\d+))?"
_BEFORE = r"(?<![\w\-.])"  # not inside a word, an option name or a dotted name
_BAR = re.compile(r"(\d{1,3})%\|[^|\n]{0,200}\|\s*(\d+)/(\d+)\s*\[")
_COUNTERS = (
    ("step", re.compile(_BEFORE + r"(?:global[_ ])?step\b['\"]?\s*[:=#]?\s*\[?\s*" + _NUM, re.I)),
    ("iter", re.compile(_BEFORE + r"iter(?:ation)?\b['\"]?\s*[:=#]?\s*\[?\s*" + _NUM, re.I)),
    ("update", re.compile(_BEFORE + r"num_updates\b['\"]?\s*[:=]?\s*(\d+)()", re.I)),
    ("batch", re.compile(_BEFORE + r"batch\b\s*[:=#]?\s*\[?\s*(\d+)\s*/\s*(\d+)", re.I)),
    ("sample", re.compile(r"\[(\d+)/(\d+) \(\d+%\)\]")),
)
_EPOCH = re.compile(_BEFORE + r"epoch\b['\"]?\s*[:=#]?\s*\[?\s*(\d+(?:\.\d+)?)(?:\s*/\s*\d+)?",
                    re.I)


@dataclass(frozen=True, slots=True)
class Progress:
    """A position in training: ``step`` of ``total`` (a bar's count, an iteration...) within
    ``epoch``; either part may be unknown."""

    unit: str
    step: int | None
    total: int | None
    epoch: float | None


def parse_progress(text: str) -> Progress | None:
    """The position a progress line states, or None when the text states none."""
    epoch_match = _EPOCH.search(text)
    epoch = float(epoch_match.group(1)) if epoch_match else None
    bar = _BAR.search(text)
    if bar:
        return Progress("bar", int(bar.group(2)), int(bar.group(3)), epoch)
    for unit, pattern in _COUNTERS:
        found = pattern.search(text)
        if found:
            total = int(found.group(2)) if found.group(2) else None
            return Progress(unit, int(found.group(1)), total, epoch)
    if epoch is not None:
        return Progress("epoch", None, None, epoch)
    return None


def scan_progress(path: str, rank_hint: int | None = None) -> list[LogEvent]:
    """The last progress line and the last line of each rank stream in the log's tail. An
    unreadable file gives nothing (the event scan of the same file reports it)."""
    ctx = _context(path, rank_hint)
    try:
        first_line, data = _tail(path)
    except OSError:
        return []
    last: dict[tuple[int | None, int | None], tuple[Line, Progress]] = {}
    ends: dict[tuple[int | None, int | None], Line] = {}
    for offset, raw in enumerate(data.split(b"\n")):
        segments = [s for s in raw.split(b"\r") if s.strip()]
        if not segments:
            continue
        line_no = first_line + offset
        head = parse_line(decode(segments[0], MAX_LINE), line_no, ctx)
        key = (head.rank, head.local_rank)
        # a bar redrawn with carriage returns: its prefix is on the first drawing only
        drawings = (head if index == 0 else
                    parse_line(head.key + decode(segments[index], MAX_LINE), line_no, ctx)
                    for index in range(len(segments) - 1, -1, -1))
        for nth, line in enumerate(drawings):
            if nth == 0:  # the last drawing is what the line finally shows
                ends[key] = line
            found = parse_progress(line.body)
            if found is not None:
                last[key] = (line, found)
                break
    events = []
    for line, found in last.values():
        fields: dict[str, str | int | float] = {"unit": found.unit}
        if found.step is not None:
            fields["step"] = found.step
        if found.total is not None:
            fields["total"] = found.total
        if found.epoch is not None:
            fields["epoch"] = found.epoch
        events.append(make_event("progress", line, ctx, "info", fields))
    events.extend(make_event("log_end", line, ctx, "info", {}) for line in ends.values())
    return events


def position(event: LogEvent) -> tuple[float | None, int | None]:
    """(epoch, step) of a ``progress`` event."""
    epoch, step = event.fields.get("epoch"), event.fields.get("step")
    return (float(epoch) if isinstance(epoch, (int, float)) else None,
            step if isinstance(step, int) else None)


def _context(path: str, rank_hint: int | None) -> Context:
    source = "hint"
    local: int | None = None
    if rank_hint is None:
        guessed, is_local = infer_rank_from_path(path)
        if guessed is not None and is_local:
            local = guessed
        elif guessed is not None:
            rank_hint, source = guessed, "path"
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        mtime = time.time()
    return Context(path=path, year=time.localtime(mtime).tm_year, now=mtime, rank_hint=rank_hint,
                   rank_hint_source=source, local_hint=local)


def _tail(path: str) -> tuple[int, bytes]:
    """(the file's line number of the first line returned, the last ``TAIL_BYTES`` from a line
    start); the newlines before the cut are counted, not kept."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= TAIL_BYTES:
            return 1, handle.read(TAIL_BYTES)
        cut = size - TAIL_BYTES
        newlines = 0
        done = 0
        while done < cut:
            chunk = handle.read(min(COUNT_CHUNK, cut - done))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            done += len(chunk)
        data = handle.read(TAIL_BYTES)
    start = data.find(b"\n")
    if start < 0:
        return newlines + 1, data
    return newlines + 2, data[start + 1:]
