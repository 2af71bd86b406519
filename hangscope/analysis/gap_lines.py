"""Evidence gaps a person can read: one line per cause with its ranks, not one per rank.

A live attach on a job whose ranks share one output file says "rank N: stdout goes to the
launcher's output file" for every N, and "rank N: no flight-recorder dump at
/tmp/nccl_trace_rank_N" for every N: eight lines of one fact above the evidence. Lines of the
form ``rank N: TEXT`` whose TEXT is the same once the rank's own number is masked become one line,
``ranks 0-7: TEXT`` (the number shown as ``N`` where it was part of the text), in the place of
the first of them. Other lines are kept as they are, in their order, without duplicates.
"""

from __future__ import annotations

import re

from hangscope.ranges import ranks_phrase

_RANK_LINE = re.compile(r"^rank (\d+): (.*)$", re.S)


def group_rank_gaps(gaps: list[str]) -> list[str]:
    slots: list[str | tuple[str, str]] = []  # a plain line, or a (template, rank-0 text) key
    members: dict[str, list[int]] = {}
    texts: dict[str, str] = {}
    seen: set[str] = set()
    for gap in gaps:
        m = _RANK_LINE.match(gap)
        if m is None:
            if gap not in seen:
                seen.add(gap)
                slots.append(gap)
            continue
        rank, text = int(m.group(1)), m.group(2)
        while text.startswith(f"rank {rank}: "):  # a bundle's gap said again with its rank
            text = text[len(f"rank {rank}: "):]
        template = re.sub(rf"(?<!\d){rank}(?!\d)", "\0", text)
        if template not in members:
            members[template] = []
            texts[template] = text
            slots.append((template, text))
        if rank not in members[template]:
            members[template].append(rank)
    out = []
    for slot in slots:
        if isinstance(slot, str):
            out.append(slot)
            continue
        template, first = slot
        ranks = members[template]
        if len(ranks) == 1:
            out.append(f"rank {ranks[0]}: {first}")
        else:
            out.append(f"{ranks_phrase(ranks)}: {template.replace(chr(0), 'N')}")
    return out
