"""Step times in order: the time a loop says each step took, line after line, per stream.

``progress.py`` keeps the median of a rank's latest timed *progress* lines, to compare ranks. A
job that slowed down as a whole shows instead in one stream's own series: steps that took ~30 s
and then ~100 s. Loops state that in lines with no step counter at all, so this reads any line of
the log's tail (``tail.TAIL_BYTES``) that says what a step cost, in these wordings::

    Iteration took 32.709 s.                 # a loop's own timer (cBio/cbio-cluster#342)
    step took 1.52s   /  Epoch took 120.4 seconds
    70/70 [====] - 7s 99ms/step - loss: 0.08 # Keras' epoch summary; "1.209 sec/step"
    Step: 2/951, Loss: 3.25, Time/step: 67.29 # a loop's own field (seconds when unnamed)
    45/100 [00:10<00:12, 3.52s/it]           # tqdm when an iteration takes over a second

``step_times`` event per stream and wording (at the stream's last such line): fields key
(``took``, ``per_step``, ``s_per_it``), unit (``ms``), values (the times in file order, at most
``MAX_VALUES``, comma-joined), count, first_line. ``detectors/straggler_logs.py`` reads a lasting
jump in it (rule ``step-time-jump``).
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Line, make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

MAX_VALUES = 64
_CANDIDATE = re.compile(rb"(?i)took|/step|s/it|time ?/ ?(?:step|iter)")
_UNITS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "secs": 1000.0, "seconds": 1000.0}
_WORDINGS = (
    ("took", re.compile(r"(?i)\b(?:iteration|iter|step|batch|epoch)\s+took\s+"
                        r"(?P<v>\d+(?:\.\d+)?)\s*(?P<u>ms|s|secs?|seconds)\b")),
    ("per_step", re.compile(r"(?<![\w.])(?P<v>\d+(?:\.\d+)?) ?(?P<u>ms|s|secs?)/step\b")),
    # "Time/step: 43.86" (a loop's own field; seconds where it names no unit)
    ("time_per_step", re.compile(r"(?i)\btime ?/ ?(?:step|iter)\s*[:=]\s*(?P<v>\d+(?:\.\d+)?)"
                                 r"\s*(?P<u>ms|s)?\b")),
    ("s_per_it", re.compile(r"(?<![\w.])(?P<v>\d+(?:\.\d+)?)(?P<u>s)/it\b")),
)


def scan_step_times(path: str, rank_hint: int | None = None,
                    tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    series: dict[tuple[object, object, str], tuple[Line, list[float], int]] = {}
    for line in lines:
        for key, pattern in _WORDINGS:
            m = pattern.search(line.body)
            if m is None:
                continue
            stream = (line.rank if line.rank is not None else ctx.rank_hint,
                      line.local_rank if line.local_rank is not None else ctx.local_hint, key)
            value = float(m.group("v")) * _UNITS[(m.group("u") or "s").lower()]
            _, values, first = series.get(stream, (line, [], line.line_no))
            values.append(value)
            series[stream] = (line, values[-MAX_VALUES:], first)
            break
    return [make_event("step_times", line, ctx, "info",
                       {"key": key, "unit": "ms", "count": len(values), "first_line": first,
                        "values": ",".join(f"{v:g}" for v in values)})
            for (_, _, key), (line, values, first) in series.items()]
