"""A round of one print from every rank, with one rank absent: users' own probes.

To find which rank stalls, people print one line per rank at the same spot (``rank 4, fetch sample
1469``, ``[rank 2] entering all_reduce``) and paste the last round. A round is the run of lines of
one template (the text with its numbers masked) that each name one rank in their text
(``TEXT_RANK``), read back from the template's last line until a rank repeats (the round before).
Where that last round names every rank from 0 to N but one, and N + 1 >= ``MIN_RANKS``, a
``rank_round`` event is kept on its last line: fields ``absent`` (the rank), ``present`` (how many
printed), ``template``. The absent rank must also have printed the line fewer times than every
other rank: where ranks run a few lines apart, one rank's next round can start before another's
last line, and a rank that printed as often as the others missed no round. A line whose process
head names its rank or local rank (``[rank3]:``, ``[1,3]<stdout>:``, torchrun's ``[default3]:``)
is that process's stream, not a probe, and NCCL's own set-up lines (``rank 3 nranks 4``) are no
probe either: neither is read here.

Where the absent rank did print the round's statement, only with another shape (``[rank0] local
experts [0, 4], bucket order [('experts', 49664), ('dense', 33733)]`` beside three ranks' ``local
experts [2], bucket order [('dense', 33733), ('experts', 24832)]``: the same words after the rank,
numbers aside), it was not absent: it said something else there. The event then carries
``variant`` (that line's text) and ``variant_line`` (its line number): a rank whose own account of
the step differs from every other rank's, which ``detectors/absent_from_round.py`` reads as
another path, not a missing rank.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, make_event, parse_line
from hangscope.sources.logs.tail import LogicalTail, unheaded_candidates

MIN_RANKS = 4
_CANDIDATE = re.compile(rb"(?i)\brank\s*[=:#]?\s*\[?\d")
_NUMBER = re.compile(r"\d+")
_TOOL = re.compile(r"\bNCCL (?:INFO|WARN)\b|\bnranks\b")
_WORD = re.compile(r"[A-Za-z_]{2,}")
HEAD_WORDS = 2  # a statement: the first two words after the rank (at least 6 letters)


def scan_rank_rounds(tail: LogicalTail | None) -> list[LogEvent]:
    if tail is None:
        return []
    by_template: dict[str, list[tuple[int, int]]] = defaultdict(list)  # template -> (index, rank)
    heads: dict[str, str] = {}  # template -> its statement head
    by_head: dict[str, list[tuple[int, int, str]]] = defaultdict(list)  # (index, rank, template)
    # (a process's own head names its stream: not a probe)
    for index, line in unheaded_candidates(tail, _CANDIDATE):
        body = line.body.strip()
        if _TOOL.search(body):
            continue  # NCCL's "rank 3 nranks 4" is set-up
        named = list(TEXT_RANK.finditer(body))
        if len({m.group("r") for m in named}) == 1:
            template = _NUMBER.sub("#", body)[:200]
            rank = int(named[0].group("r"))
            by_template[template].append((index, rank))
            head = _head(body[named[-1].end():])
            if head:
                heads[template] = head
                by_head[head].append((index, rank, template))
    out = []
    for template, seen in by_template.items():
        found = _absent(seen)
        if found is None:
            continue
        absent, present, last, start = found
        line = parse_line(tail.text(last), tail.line_no(last), tail.ctx)
        fields: dict[str, str | int | float] = {"absent": absent, "present": present,
                                                "template": template}
        slack = 4 * (present + 1)  # lines of the round before, where a rank ran a little ahead
        said = [index for index, rank, other in by_head.get(heads.get(template, ""), [])
                if rank == absent and other != template and index >= start - slack]
        if said:
            fields["variant"] = tail.text(said[-1]).strip()[:300]
            fields["variant_line"] = tail.line_no(said[-1])
        out.append(make_event("rank_round", line, tail.ctx, "info", fields))
    return out


def _head(after_rank: str) -> str:
    """The first words a print says after its rank, numbers aside ("local experts"); "" where
    they are too short to name a statement."""
    words = _WORD.findall(after_rank)[:HEAD_WORDS]
    return " ".join(words) if len(words) == HEAD_WORDS and sum(map(len, words)) >= 6 else ""


def _absent(seen: list[tuple[int, int]]) -> tuple[int, int, int, int] | None:
    """(the one rank absent, how many printed, the round's last line, its first line) of the
    template's last round, or None."""
    if len(seen) < MIN_RANKS - 1:
        return None
    round_: set[int] = set()
    start = seen[-1][0]
    for index, rank in reversed(seen):
        if rank in round_:
            break
        round_.add(rank)
        start = index
    top = max(round_)
    missing = set(range(top + 1)) - round_
    if top + 1 < MIN_RANKS or len(missing) != 1:
        return None
    absent = missing.pop()
    printed = Counter(rank for _index, rank in seen)
    if printed[absent] >= min(printed[rank] for rank in round_):
        return None  # as many lines as the others: it missed no round, it runs a line apart
    return absent, len(round_), seen[-1][0], start
