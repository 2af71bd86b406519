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
it (on its header, or on the ``Process NAME:`` lines or the line just above it) or
``KeyboardInterrupt`` ends it; a paste cut before its end keeps the frames it shows. Other
processes' ``Process NAME:`` headers printed into it are skipped; one whose outermost frame is no
``_bootstrap`` is a main process's; one of an interpreter at exit (``threading._shutdown``
waiting for a thread) is left to the log's own rule (``stopped-after-finish``), since the
program's main had returned. A traceback cut before its exception with no such mark is not
read so: it is as often a death's, whose exception the paste lost. Only a paste that is mostly
such tracebacks (``MIN_SHARE`` of its non-blank lines), or whose other lines name no failure
(a program's set-up prints and the user's "stuck for hours, Ctrl-C says:"), is read this way: a
Ctrl-C at the end of a long log whose lines say what failed is the user stopping it, and those
lines stay a log's.
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
# words of a failure on a line outside the tracebacks: the log says what went wrong itself
_FAULT_WORD = re.compile(r"(?i)error|exception|fail|fatal|abort|killed|timed? ?out|segmentation|"
                         r"out of memory|\bOOM\b|signal|exit ?code|traceback")


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
    inside: list[tuple[int, int]] = []  # (first, end) line spans of the tracebacks kept
    index, count = 0, len(lines)
    while index < count:
        if _HEAD.search(lines[index]) is None:
            index += 1
            continue
        opened, process = _opening(lines, index)
        trace = InterruptedTrace(process)
        end = index + 1
        while end < count:
            frame = _FRAME.match(lines[end])
            if frame is not None:
                if len(trace.frames) < MAX_FRAMES:
                    trace.frames.append((frame.group("func"), frame.group("file"),
                                         int(frame.group("line")[:9])))
            elif _PROCESS.match(lines[end]) is None and \
                    not (lines[end][:1].isspace() and lines[end].strip()):
                break  # neither a frame, its source line nor another process's header: it ended
            end += 1
        ended = end < count and _INTERRUPT_END.match(lines[end]) is not None
        at_exit = bool(trace.frames) and trace.frames[0][0] == "_shutdown" \
            and trace.frames[0][1].endswith("threading.py")
        if trace.frames and (opened or ended) and not at_exit:
            trace.frames.reverse()
            if trace.frames[-1][0] != "_bootstrap":
                trace.name = None  # a process's own main, not one multiprocessing started
            out.append(trace)
            covered += end - index + (1 if end < count else 0)
            inside.append((index, end + 1))
        index = max(end, index + 1)
    said = sum(1 for line in lines if line.strip())
    if not out:
        return []
    if covered >= MIN_SHARE * said:
        return out
    outside = (line for at, line in enumerate(lines)
               if not any(first <= at < end for first, end in inside))
    return [] if any(_FAULT_WORD.search(line) for line in outside) else out


def _opening(lines: list[str], index: int) -> tuple[bool, str | None]:
    """Whether the ``^C`` echo opens the traceback at ``index`` (on its header, or on the run
    of ``Process NAME:`` headers just above it that the interrupted children printed), and the
    name on the header right above it."""
    if _CTRL_C.match(lines[index]) is not None:
        return True, None
    name = None
    at = index - 1
    while at >= 0 and (process := _PROCESS.match(lines[at])) is not None:
        name = name or process.group("name")
        if _CTRL_C.match(lines[at]) is not None:
            return True, name
        at -= 1
    return at >= 0 and _CTRL_C.match(lines[at]) is not None, name


def main_index(traces: list[InterruptedTrace]) -> int:
    """Which traceback is the main process's: the first one no ``Process NAME:`` heads that
    shows more than its entry frame, else the first (a cut paste's)."""
    return next((i for i, t in enumerate(traces) if t.name is None and len(t.frames) > 1), 0)
