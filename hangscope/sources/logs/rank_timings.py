"""One measurement per rank, printed by every rank: users' own timers, compared across ranks.

To find a slow rank, people time one thing on every rank and print it (``Rank 2 ... time cost
3.4``, ``[Rank 3] Shard write took 2.79s``, ``node_id 1 local_rank 0 ... bytes: 0.439 sec``). A
``rank_timings`` event is kept per template (the line's text with its numbers masked) that at
least ``MIN_RANKS`` ranks printed: fields ``ranks`` and ``values`` (each rank's median, comma-
joined, in rank order), ``unit`` (``ms`` where the line names a unit, ``""`` where the number
only follows a timing word), ``collective`` (1 where the line names the collective it timed),
``template``.

A rank is read from the text (``TEXT_RANK``: ``rank 3``, ``[Rank 3]``) or from ``local_rank N``,
with ``node N`` (``node_id``, ``node_rank``) beside it: torchrun numbers ranks node by node, so
rank = node * ranks per node + local rank where every node shows the same local ranks. A
process head's own rank (``[rank3]:``) is that process's stream, read by ``progress.py`` and
``step_times.py``, not here; so is a progress line's step time (``[rank0] train: step 0/100000
... step_time 1905ms``: read with enough samples by ``progress.py``, where a first step's time,
warm-up and all, is not taken alone). What is not a measurement is left out: a configured timeout
(``Timeout(ms)=600000``, ``ran for 600046 milliseconds before timing out``), NCCL's own lines,
a store barrier's elapsed time while it waits.
"""

from __future__ import annotations

import re
from collections import defaultdict
from statistics import median

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, Line, make_event
from hangscope.sources.logs.progress import parse_progress
from hangscope.sources.logs.tail import LogicalTail, unheaded_candidates

MIN_RANKS = 3
MAX_TEMPLATES = 64
_CANDIDATE = re.compile(rb"(?i)\d\s*(?:ms|msec|milliseconds?|s|secs?|seconds?|mins?|minutes)\b|"
                        rb"(?:took|cost|elapsed|duration|latency|time)\b")
_LOCAL = re.compile(r"(?i)\blocal[_ ]?rank\s*[=:#]?\s*\[?(?P<r>\d+)\b")
_NODE = re.compile(r"(?i)\bnode(?:[_ ]?(?:id|rank))?\s*[=:#]?\s*(?P<n>\d+)\b")
_UNIT = re.compile(r"(?i)(?<![\w.])(?P<v>\d+(?:\.\d+)?)\s*(?P<u>ms|msec|milliseconds?|s|secs?|"
                   r"seconds?|mins?|minutes)\b")
_WORD = re.compile(r"(?i)\b(?:took|cost|elapsed(?: time)?|duration|latency|time)\s*[:=]?\s*"
                   r"(?P<v>\d+(?:\.\d+)?)(?![\w.])")
_TO_MS = {"ms": 1.0, "msec": 1.0, "millisecond": 1.0, "milliseconds": 1.0, "s": 1000.0,
          "sec": 1000.0, "secs": 1000.0, "second": 1000.0, "seconds": 1000.0,
          "min": 60000.0, "mins": 60000.0, "minute": 60000.0, "minutes": 60000.0}
_NOT_MEASURED = re.compile(r"(?i)timeout|timed? ?out|timing out|\bNCCL (?:INFO|WARN)\b|"
                           r"store.based barrier|\bnranks\b|\beta\b|remaining")
_COLLECTIVE = re.compile(r"(?i)all[_ -]?reduce|all[_ -]?gather|reduce[_ -]?scatter|broadcast|"
                         r"all[_ -]?to[_ -]?all|\bbarrier\b|collective")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def scan_rank_timings(tail: LogicalTail | None) -> list[LogEvent]:
    if tail is None:
        return []
    # template -> {(node, rank-or-local, is_local): [ms]}
    seen: dict[str, dict[tuple[int | None, int, bool], list[float]]] = defaultdict(dict)
    units: dict[str, str] = {}
    last: dict[str, Line] = {}  # the template's last line
    for _index, line in unheaded_candidates(tail, _CANDIDATE):
        body = line.body.strip()
        if _NOT_MEASURED.search(body):
            continue
        who = _who(body)
        if who is None:
            continue
        found = _value(body, who[3])
        if found is None or parse_progress(body) is not None:
            continue  # a step's time is a progress line's, read with its samples by progress.py
        value, unit = found
        template = _NUMBER.sub("#", body)[:200]
        if template not in seen and len(seen) >= MAX_TEMPLATES:
            continue
        if units.setdefault(template, unit) != unit:
            continue
        seen[template].setdefault(who[:3], []).append(value)
        last[template] = line
    out = []
    for template, by_rank in seen.items():
        ranks = _global(by_rank)
        if ranks is None or len(ranks) < MIN_RANKS:
            continue
        order = sorted(ranks)
        out.append(make_event("rank_timings", last[template], tail.ctx, "info", {
            "ranks": ",".join(str(r) for r in order),
            "values": ",".join(f"{ranks[r]:g}" for r in order),
            "unit": units[template], "template": template,
            "collective": int(_COLLECTIVE.search(template) is not None)}, rank=None,
            rank_source=""))
    return out


def _who(body: str) -> tuple[int | None, int, bool, int] | None:
    """(node, rank or local rank, whether local, where the id ends) of the one rank the line
    names, or None (none, or several)."""
    ranks = {int(m.group("r")): m.end() for m in TEXT_RANK.finditer(body)}
    if len(ranks) == 1:
        (rank, end), = ranks.items()
        return None, rank, False, end
    if ranks:
        return None
    locals_ = {int(m.group("r")): m.end() for m in _LOCAL.finditer(body)}
    if len(locals_) != 1:
        return None
    (local, end), = locals_.items()
    nodes = {int(m.group("n")) for m in _NODE.finditer(body)}
    if len(nodes) > 1:
        return None
    return (nodes.pop() if nodes else None), local, True, end


def _value(body: str, after: int) -> tuple[float, str] | None:
    """The first timing after the rank: (ms, "ms") with a unit, (number, "") after a timing word."""
    rest = body[after:]
    unit = _UNIT.search(rest)
    word = _WORD.search(rest)
    if unit is not None and (word is None or unit.start() <= word.end()):
        return float(unit.group("v")) * _TO_MS[unit.group("u").lower()], "ms"
    if word is not None:
        return float(word.group("v")), ""
    return None


def _global(by_rank: dict[tuple[int | None, int, bool], list[float]]) -> dict[int, float] | None:
    """Each rank's median, numbered globally; None where local ranks cannot be numbered (no
    node shows every local rank up to the highest, or local and global ids mixed)."""
    if len({is_local for _, _, is_local in by_rank}) > 1:
        return None
    nodes = {node for node, _, _ in by_rank}
    if None in nodes and len(nodes) > 1:
        return None
    per_node: dict[int | None, set[int]] = defaultdict(set)
    for node, rank, _ in by_rank:
        per_node[node].add(rank)
    width = 0
    if len(per_node) > 1:  # a node showing every local rank 0..w-1 gives w (a paste may cut others)
        width = max(max(ranks) for ranks in per_node.values()) + 1
        if not any(len(ranks) == width for ranks in per_node.values()):
            return None
    return {(node or 0) * width + rank: median(values)
            for (node, rank, _), values in by_rank.items()}
