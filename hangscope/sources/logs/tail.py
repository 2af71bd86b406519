"""A log's tail, read once for every scan of it: its last ``TAIL_BYTES`` as lines (the lines before
the cut are counted, so that line numbers stay the file's), continuation lines of a process's
report block marked, and the logical lines ``normalize`` rebuilds (``LogicalTail``), which the
scanners of progress, cues, collective lines, counts and shapes all read.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

from hangscope.sources.logs.casefold import twin
from hangscope.sources.logs.common import (
    Context,
    Line,
    decode,
    infer_rank_from_path,
    parse_line,
)
from hangscope.sources.logs.heads import unfenced
from hangscope.sources.logs.normalize import Normalized, normalize

TAIL_BYTES = 1 << 20
COUNT_CHUNK = 8 << 20
MAX_LINE = 64 << 10


def tail_lines(path: str, rank_hint: int | None = None
               ) -> tuple[Context, int, list[bytes], set[int]] | None:
    """The log's tail as lines: (its context, the file's line number of the first, the lines, the
    indexes of continuation lines); None when it cannot be read (the event scan says so)."""
    ctx = _context(path, rank_hint)
    try:
        first_line, data = _tail(path)
    except OSError:
        return None
    lines = unfenced(data).split(b"\n")  # (the fences of a Markdown paste: blank lines)
    return ctx, first_line, lines, _continuations(lines)


@dataclass(frozen=True, slots=True)
class LogicalTail:
    """The log's tail as logical lines: records a terminal hard-wrapped are rebuilt
    (``normalize``), each line keeping the file's line number it starts on."""

    ctx: Context
    lines: list[bytes]
    skip: set[int]  # indexes of continuation lines (only where nothing was rebuilt)
    first_line: int
    fixed: Normalized | None
    lowered: list[bytes]  # ``lines`` lowered, for the candidate tests (``casefold``)

    def text(self, index: int) -> str:
        """``lines[index]`` decoded; a line redrawn with carriage returns: its last drawing."""
        return decode(self.lines[index].rstrip(b"\r").split(b"\r")[-1], MAX_LINE)

    def last_said(self, count: int) -> list[int]:
        """Indexes of the last ``count`` lines that say something (not blank, not a
        continuation), in file order."""
        found: list[int] = []
        for index in range(len(self.lines) - 1, -1, -1):
            if len(found) == count:
                break
            if index not in self.skip and self.lines[index].strip():
                found.append(index)
        return found[::-1]

    def line_no(self, index: int) -> int:
        """The file's line number of ``lines[index]``."""
        if self.fixed is None:
            return self.first_line + index
        return self.first_line + self.fixed.original_line(index + 1) - 1


def logical_tail(path: str, rank_hint: int | None = None) -> LogicalTail | None:
    """The tail read once, for every scan that wants wrapped records whole (collective lines,
    cues); None when it cannot be read (the event scan says so)."""
    read = tail_lines(path, rank_hint)
    if read is None:
        return None
    ctx, first_line, lines, skip = read
    fixed = normalize(b"\n".join(lines))
    if fixed is not None:
        lines, skip = fixed.data.split(b"\n"), set()
    return LogicalTail(ctx, lines, skip, first_line, fixed, lowered_lines(lines))


def lowered_lines(lines: list[bytes]) -> list[bytes]:
    """``lines`` lowered (ASCII), one by one, in one pass over their bytes."""
    return b"\n".join(lines).lower().split(b"\n")


def unheaded_candidates(tail: LogicalTail, candidate: re.Pattern[bytes]
                        ) -> Iterator[tuple[int, Line]]:
    """(index, parsed line) of the tail's lines that ``candidate`` finds a word in and whose
    process head names no rank or local rank: lines a user's own print numbers in its text
    (``rank 4, fetch sample 1469``), where a head's rank would make the line its stream's."""
    search, lowered = twin(candidate).search, tail.lowered
    for index in range(len(tail.lines)):
        if index in tail.skip or not search(lowered[index], 0, MAX_LINE):
            continue
        line = parse_line(tail.text(index), tail.line_no(index), tail.ctx)
        if line.rank is None and line.local_rank is None:
            yield index, line


def tail_candidates(path: str, rank_hint: int | None, candidate: re.Pattern[bytes],
                    tail: LogicalTail | None = None) -> tuple[Context, list[Line]] | None:
    """The log tail's logical lines (wrapped records rebuilt, as ``logical_tail`` reads them)
    that ``candidate`` finds a word in, prefix-parsed (a line redrawn with carriage returns: its
    last drawing), with the log's context; None when unreadable. ``tail``: the one the loader
    already read and rebuilt, so a file is normalized once for every scan of its tail."""
    tail = tail or logical_tail(path, rank_hint)
    if tail is None:
        return None
    search = twin(candidate).search
    return tail.ctx, [parse_line(tail.text(index), tail.line_no(index), tail.ctx)
                      for index, folded in enumerate(tail.lowered)
                      if index not in tail.skip and search(folded, 0, MAX_LINE)]


def _continuations(lines: list[bytes]) -> set[int]:
    """Indented lines that continue a rank-prefixed line's message (a report block): they are
    no stream of their own."""
    found = set()
    prefixed = False
    for index, raw in enumerate(lines):
        if not raw.strip():
            continue
        if raw[:1] in (b" ", b"\t") and not _STAMPED.match(raw) and not _BAR_START.match(raw):
            if prefixed:
                found.add(index)
            continue
        prefixed = _PROCESS_HEAD.match(raw) is not None
    return found


# an indented line that opens with its own date is a record of its own, not a continuation
# (Megatron's " [2024-04-06 02:55:45] iteration 2/100 | ..." after a "[Rank 1] memory" line)
_STAMPED = re.compile(rb"[ \t]+\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d")
# nor one that is a progress bar's drawing (tqdm pads its percentage: "  0%|          | 1/801"):
# the bar's own stream, drawn after the record above it
_BAR_START = re.compile(rb"[ \t]*\d{1,3}%\|")


# a process's head (``[rank3]:``, ``[default0]:``, ``[1,0]<stderr>:``, ``[3] ``, Ray's
# ``(Worker pid=7)``), not any bracket (``[Errno 28] No space left``, ``(base) $``)
_PROCESS_HEAD = re.compile(rb"\[(?:rank|RANK|Rank|default|trainer|worker)\s?[:=]?\s?\d|"
                           rb"\[(?:\d+,)?\d+\](?:<|:| )|\[\d+,mpirank:\d+,[\w.\-]+\]<|"
                           rb"\[[A-Za-z_]+\d+(?:\|\d+)?\]:|"
                           rb"\((?:[\w.\-]+ )*pid=\d+")


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
