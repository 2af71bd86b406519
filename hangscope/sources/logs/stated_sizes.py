"""Per-rank sizes of one collective as a person writes them out: the summary of many watchdog lines.

Users who read thousands of watchdog lines post what they found in a line per group of ranks, or a
Markdown table::

    WorkNCCL SeqNum=1320347, OpType=ALLREDUCE
    rank 0/1/2/3/4/6/7: NumelIn=4501504 = 628 * 7168
    rank 5:             NumelIn=8171520 = 1140 * 7168

    | ranks   | NumelIn | = |
    |---------|---------|---|
    | rank7   | 161600  | 16160 x 10 |
    | rank0-6 | 145440  | 16160 x 9 |

One ``stated_size`` event per line or row: fields ``ranks`` (comma-separated: ``0/1/2``, ``0-6``,
``0\u20136``, ``0, 1 and 2`` expand), ``what`` (NumelIn | NumelOut) and ``numel``. torch's own
watchdog lines (``WorkNCCL(SeqNum=..., NumelIn=...)``) are the watchdog parser's, not read here.
``analysis/detectors/stated_sizes.py`` compares them.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Context, Line, make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)numel|^[\s>]*\|")  # (a table's rows: every line opening with |)
_SPEC = r"\d+(?:\s*(?:[/,&]|and|-|\u2013|\u2014|to|\.\.)\s*\d+)*"
# "rank 0/1/2/3/4/6/7: NumelIn=4501504", "- ranks 0-6 -> NumelIn 145440"
_LINE = re.compile(r"^[\s>*#|`-]*ranks?\s*(?P<spec>" + _SPEC + r")\b[^A-Za-z0-9]{0,24}?"
                   r"[\w ]{0,24}?\bNumel(?P<what>In|Out)\b\s*[=:]?\s*(?P<n>\d[\d,_]*)", re.I)
_CELL_RANK = re.compile(r"^(?:ranks?\s*)?(?P<spec>" + _SPEC + r")$", re.I)
_CELL_NUMBER = re.compile(r"^\**(?P<n>\d[\d,_]*)\**\b")
_WATCHDOG = re.compile(r"WorkNCCL\(|Watchdog caught")
MAX_RANKS = 4096
MAX_EVENTS = 256


def expand(spec: str) -> list[int]:
    """``0/1/2`` -> [0, 1, 2]; ``0-6``, ``0\u20136``, ``0 to 6`` -> 0..6; [] when over
    ``MAX_RANKS`` or not a rank list."""
    ranks: list[int] = []
    parts = re.split(r"\s*(?:[/,&]|\band\b)\s*", spec.strip())
    for part in parts:
        bounds = re.split(r"\s*(?:-|\u2013|\u2014|\bto\b|\.\.)\s*", part)
        if not all(b.isdigit() for b in bounds) or len(bounds) > 2:
            return []
        low, high = int(bounds[0]), int(bounds[-1])
        if high < low or high - low + len(ranks) > MAX_RANKS:
            return []
        ranks.extend(range(low, high + 1))
    return sorted(set(ranks))


def scan_stated_sizes(path: str, rank_hint: int | None = None,
                      tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    out: list[LogEvent] = []
    columns: tuple[int, int, str] | None = None  # a table's rank and size columns
    last_row = -2
    for line in lines:
        body = line.body.strip().lstrip(">").strip()  # (a quoted table: "> | rank7 | ...")
        if _WATCHDOG.search(body):
            continue
        cells = [c.strip() for c in body.strip("|").split("|")] if body.startswith("|") else []
        if cells and line.line_no > last_row + 2:
            columns = None  # a table is contiguous lines (its |---| rule is no candidate)
        if cells:
            last_row = line.line_no
            header = _header(cells)
            if header is not None:
                columns = header
                continue
            if columns is not None:
                out += _row(line, ctx, cells, columns)
                continue
        m = _LINE.search(body)
        if m is not None and (ranks := expand(m.group("spec"))):
            out.append(_event(line, ctx, ranks, "Numel" + m.group("what").capitalize(),
                              m.group("n")))
        if len(out) >= MAX_EVENTS:
            break
    return out


def _header(cells: list[str]) -> tuple[int, int, str] | None:
    ranks = [i for i, c in enumerate(cells) if re.fullmatch(r"(?i)\**ranks?\**", c)]
    sizes = [i for i, c in enumerate(cells) if re.fullmatch(r"(?i)\**numel ?(in|out)\**", c)]
    if not ranks or not sizes:
        return None
    what = "NumelOut" if "out" in cells[sizes[0]].lower() else "NumelIn"
    return ranks[0], sizes[0], what


def _row(line: Line, ctx: Context, cells: list[str], columns: tuple[int, int, str]
         ) -> list[LogEvent]:
    rank_at, size_at, what = columns
    if max(rank_at, size_at) >= len(cells):
        return []
    spec = _CELL_RANK.match(cells[rank_at].strip("*` "))
    size = _CELL_NUMBER.match(cells[size_at].strip("` "))
    if spec is None or size is None or not (ranks := expand(spec.group("spec"))):
        return []
    return [_event(line, ctx, ranks, what, size.group("n"))]


def _event(line: Line, ctx: Context, ranks: list[int], what: str, numel: str) -> LogEvent:
    fields: dict[str, str | int | float] = {
        "ranks": ",".join(map(str, ranks)), "what": what,
        "numel": int(numel.replace(",", "").replace("_", ""))}
    # (the ranks are the line's content: the line itself is no rank's)
    return make_event("stated_size", line, ctx, "info", fields, rank=None, rank_source="")
