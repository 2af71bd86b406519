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

from hangscope.model import LogEvent
from hangscope.sources.logs.common import make_event, parse_line
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


def scan_template_progress(tail: LogicalTail | None) -> list[LogEvent]:
    """A ``progress`` event for each stream of the tail whose repeated metric line counts up."""
    if tail is None:
        return []
    ctx = tail.ctx
    # (stream, template) -> (first integer fields, last integer fields, rising so far, count, line)
    seen: dict[tuple[object, str], list] = {}  # type: ignore[type-arg]
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
        state = seen.get(key)
        if state is None:
            if len(seen) >= MAX_TEMPLATES:
                continue
            seen[key] = [ints, ints, [True] * len(ints), 1, line]
            continue
        _, last, rising, _, _ = state
        for i, (before, now) in enumerate(zip(last, ints)):
            if before is None or now is None or now < before:
                rising[i] = False
        state[1], state[3], state[4] = ints, state[3] + 1, line
    moved: dict[object, tuple[int, LogEvent]] = {}
    for (stream, _), (first, last, rising, count, line) in seen.items():
        if count < MIN_LINES:
            continue
        field = next((i for i, up in enumerate(rising)
                      if up and first[i] is not None and last[i] is not None
                      and last[i] > first[i]), None)  # type: ignore[operator]
        if field is None:
            continue
        step = last[field]
        event = make_event("progress", line, ctx, "info",
                           {"unit": "counter", "step": step, "advanced": 1})
        if stream not in moved or moved[stream][0] < line.line_no:
            moved[stream] = (line.line_no, event)
    return [event for _, event in moved.values()]


def _is_int(number: str) -> bool:
    return number.lstrip("+-").isdigit()
