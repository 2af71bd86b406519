"""Progress in a wording no parser knows: one line printed again and again with a counter going up.

``progress.py`` knows the common wordings (``step 41``, ``iteration 100/1000``, a tqdm bar...).
A training loop's own logger may print none of them: XLM's ``INFO - 08/01/19 14:20:20 - 2:02:04 -
3550 - 6.84 sent/s - 267.24 words/s - MLM-en: 7.5730 - model LR: 1.0000e-04``. What every such
logger shares is its shape: the same line, over and over, with its numbers changed, one of them a
count that only goes up. This scan reads the log's tail for that shape where ``progress.py`` found
nothing in the file: lines are reduced to a template (dates and clock times out, every number a
``#``); a template seen on ``MIN_LINES`` lines or more, that names a training metric (``loss``,
``lr``, a rate per second, ...), with an integer field that never falls and ends higher than it
began, is a stream that moved. It yields ``progress`` events (unit ``counter``, ``advanced``),
one per stream, which ``analysis/log_health.py``'s ``logs-advance`` rule reads like the others.

False positives: a line of a training metric with a counter that is not a step (a retry count)
still says the loop ran; a timestamp is never the counter (removed before the numbers are read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Line, make_event, parse_line
from hangscope.sources.logs.tail import LogicalTail

MIN_LINES = 2
MAX_TEMPLATES = 4096  # distinct templates tracked (a log of unique lines has no template to find)

_METRIC = re.compile(r"(?i)\b(?:loss|lr|learning[ _]rate|ppl|perplexity|acc(?:uracy)?|"
                     r"grad[ _]?norm)\b|"
                     r"\b(?:it|iters?|samples?|tokens?|toks?|sent|sentences|words|examples?|img|"
                     r"images?|seqs?|sequences|batches)/s(?:ec)?\b|\bs/it\b")
# dates and clock times (and an elapsed h:mm:ss): they rise on a stuck loop's repeated line too
_TIMES = re.compile(r"\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}(?:[ T_]\d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)?)?"
                    r"|\b\d{1,3}:\d\d(?::\d\d)?(?:[.,]\d+)?\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")


@dataclass(slots=True)
class _Template:
    """One stream's lines of one template: their integer fields (None where a field is not one)
    first and last, and which fields never fell."""

    first: tuple[int | None, ...]
    last: tuple[int | None, ...]
    rising: list[bool]
    count: int
    line: Line

    def add(self, ints: tuple[int | None, ...], line: Line) -> None:
        for i, (before, now) in enumerate(zip(self.last, ints)):
            if before is None or now is None or now < before:
                self.rising[i] = False
        self.last, self.count, self.line = ints, self.count + 1, line

    def counter(self) -> int | None:
        """The last value of a field that rose and never fell, or None."""
        for i, up in enumerate(self.rising):
            start, end = self.first[i], self.last[i]
            if up and start is not None and end is not None and end > start:
                return end
        return None


def scan_template_progress(tail: LogicalTail | None) -> list[LogEvent]:
    """A ``progress`` event for each stream of the tail whose repeated metric line counts up."""
    if tail is None:
        return []
    ctx = tail.ctx
    seen: dict[tuple[tuple[int | None, int | None], str], _Template] = {}
    for index in range(len(tail.lines)):
        if index in tail.skip:
            continue
        text = tail.text(index)
        if not _METRIC.search(text):
            continue
        line = parse_line(text, tail.line_no(index), ctx)
        body = _TIMES.sub("T", line.body)
        numbers = _NUMBER.findall(body)
        if not numbers:
            continue
        template = " ".join(_NUMBER.sub("#", body).split())
        ints = tuple(int(n) if _is_int(n) else None for n in numbers)
        key = ((line.rank, line.local_rank), template)
        if key in seen:
            seen[key].add(ints, line)
        elif len(seen) < MAX_TEMPLATES:
            seen[key] = _Template(ints, ints, [True] * len(ints), 1, line)
    moved: dict[tuple[int | None, int | None], LogEvent] = {}
    for (stream, _), found in seen.items():
        step = found.counter() if found.count >= MIN_LINES else None
        if step is None:
            continue
        event = make_event("progress", found.line, ctx, "info",
                           {"unit": "counter", "step": step, "advanced": 1})
        if stream not in moved or moved[stream].line_no < event.line_no:
            moved[stream] = event
    return list(moved.values())


def _is_int(number: str) -> bool:
    return number.lstrip("+-").isdigit()
