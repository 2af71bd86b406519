"""Stacks from Ctrl-C: the tracebacks a hung Python process prints when it is interrupted by hand.

A user whose job hangs presses Ctrl-C and pastes what came out: the terminal's ``^C`` echo,
``Traceback (most recent call last):``, the frames each process was blocked in, and
``KeyboardInterrupt``; a process started by ``multiprocessing`` (a DataLoader worker, a logger's
service process) prints ``Process NAME:`` before its own::

    ^CProcess wandb_internal:
    Traceback (most recent call last):
      File ".../multiprocessing/process.py", line 315, in _bootstrap
      File ".../threading.py", line 1049, in _wait_for_tstate_lock
        elif lock.acquire(block, timeout):
    KeyboardInterrupt

That is a stack sample taken while the process hung, outermost frame first, not a death: each
such traceback becomes one thread, innermost frame first, for the stack readers
(``analysis/stacks.py``) to say what it waited in. A traceback counts when the ``^C`` echo opens
it (on its header or the line before) or ``KeyboardInterrupt`` ends it; a paste cut before its
end keeps the frames it shows. Only a paste that is mostly such tracebacks (``MIN_SHARE`` of its
non-blank lines) is read this way: a Ctrl-C at the end of a long log whose lines say what failed
is the user stopping it, and those lines stay a log's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MIN_SHARE = 0.5
MAX_FRAMES = 512  # frames kept of one traceback (a recursion's thousands say nothing more)

_HEAD = re.compile(r"Traceback \(most recent call last\):")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')
_CTRL_C = re.compile(r"^\s*\^C")
_PROCESS = re.compile(r"^\s*(?:\^C)?\s*Process (?P<name>[\w.\-]+):\s*$")
_INTERRUPT_END = re.compile(r"^\s*(?:\w+\.)*KeyboardInterrupt\b")


@dataclass(slots=True)
class InterruptedTrace:
    """One interrupted process's traceback: ``name`` where multiprocessing printed one (a child
    process), frames as (function, file, line), innermost first."""

    name: str | None
    frames: list[tuple[str, str, int]] = field(default_factory=list)


def sniff(text: str) -> bool:
    """Whether ``text`` is mostly Ctrl-C tracebacks (cheap tests first)."""
    if "Traceback (most recent call last)" not in text or \
            ("^C" not in text and "KeyboardInterrupt" not in text):
        return False
    return bool(interrupted_traces(text.splitlines()))


def interrupted_traces(lines: list[str]) -> list[InterruptedTrace]:
    """The paste's Ctrl-C tracebacks, or none where they are not most of it."""
    out: list[InterruptedTrace] = []
    covered = 0
    index, count = 0, len(lines)
    while index < count:
        if _HEAD.search(lines[index]) is None:
            index += 1
            continue
        before = lines[index - 1] if index else ""
        opened = _CTRL_C.match(lines[index]) is not None or _CTRL_C.match(before) is not None
        process = _PROCESS.match(before)
        trace = InterruptedTrace(process.group("name") if process else None)
        end = index + 1
        while end < count:
            frame = _FRAME.match(lines[end])
            if frame is not None:
                if len(trace.frames) < MAX_FRAMES:
                    trace.frames.append((frame.group("func"), frame.group("file"),
                                         int(frame.group("line")[:9])))
            elif not (lines[end][:1].isspace() and lines[end].strip()):
                break  # neither a frame nor its indented source line: the traceback ended
            end += 1
        ended = end < count and _INTERRUPT_END.match(lines[end]) is not None
        if trace.frames and (opened or ended):
            trace.frames.reverse()
            out.append(trace)
            covered += end - index + (1 if ended else 0) + (1 if process else 0)
        index = max(end, index + 1)
    said = sum(1 for line in lines if line.strip())
    return out if out and covered >= MIN_SHARE * said else []


def main_index(traces: list[InterruptedTrace]) -> int:
    """Which traceback is the main process's: the first one no ``Process NAME:`` heads that
    shows more than its entry frame, else the first (a cut paste's)."""
    return next((i for i, t in enumerate(traces) if t.name is None and len(t.frames) > 1), 0)
