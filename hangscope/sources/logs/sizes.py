"""Size lines: what a rank's own log says about the sizes of what it built.

A training script often prints the sizes it derived from its data or config: ``vocabulary: 32
tokens``, ``num_classes=10``, ``embedding (5003, 64)``, ``a [5, 4] bucket`` (a shape),
``torch.Size([5, 4])``, ``model has 1,234,567 parameters``. When one rank derived another size
than the others, the line that says so is the same line on every rank with another number; that
is how a size mismatch that gloo turned into an abort on *another* rank (``Received data size
doesn't match expected size``) still names its culprit when no flight-recorder dump does.

For each rank stream of the log's tail (``tail.TAIL_BYTES``, streams told apart as
``progress`` does) the scan keeps the last line of each *template* (the line with every number
replaced by ``#``) whose text names a size (``_SIZE_WORDS``) and holds a number, at most
``MAX_TEMPLATES`` per stream, as ``size_line`` events (``fields``: ``template``, ``values``, the
numbers joined by commas). ``analysis/log_sizes.py`` compares them across ranks. Numbers inside
words (``fp16``) are part of the template; a rank's own number (``[rank3]``, ``cuda:3``) is not
compared. False positives: a line whose numbers differ per rank by design (``shard has 15
documents``) compares as a difference too: only a majority that agrees and a minority that does
not is read, and only where an error says sizes differed.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.casefold import twin
from hangscope.sources.logs.common import Line, decode, make_event, parse_line
from hangscope.sources.logs.tail import MAX_LINE, lowered_lines, tail_lines

MAX_TEMPLATES = 32  # per stream: the latest ones
_SIZE_WORDS = re.compile(rb"(?i)size|shape|numel|vocab|classes|params|parameters|elements|"
                         rb"tokens|rows|columns|\bdim\b|\blen\b|features|[\[(]\d+, ?\d+[\])]")
_NUMBER = re.compile(r"(?<![\w.])\d[\d,_]*(?:\.\d+)?(?![\w.])")
_RANK = re.compile(r"(?i)\b(rank|local_rank|gpu|device|cuda:)\s*[=:]?\s*(?:\d+|\[\d+\])")


def scan_sizes(path: str, rank_hint: int | None = None) -> list[LogEvent]:
    """The latest size line of each template per rank stream in the log's tail."""
    read = tail_lines(path, rank_hint)
    if read is None:
        return []
    ctx, first_line, lines, skip = read
    lowered, search = lowered_lines(lines), twin(_SIZE_WORDS).search
    kept: dict[tuple[int | None, int | None], dict[str, tuple[Line, str]]] = {}
    for index in range(len(lines) - 1, -1, -1):
        raw = lines[index]
        if index in skip or not search(lowered[index]):
            continue
        line = parse_line(decode(raw.split(b"\r")[-1], MAX_LINE), first_line + index, ctx)
        body = _RANK.sub(lambda m: m.group(1) + "#", line.body.strip())
        if body.startswith(('File "', "what():")):
            continue  # a traceback's frame, an error: not a size the rank built
        numbers = _NUMBER.findall(body)
        if not numbers or len(body) > 400:
            continue
        key = (line.rank if line.rank is not None else ctx.rank_hint,
               line.local_rank if line.local_rank is not None else ctx.local_hint)
        stream = kept.setdefault(key, {})
        template = _NUMBER.sub("#", body)
        if template in stream or len(stream) >= MAX_TEMPLATES:
            continue
        values = ",".join(n.replace(",", "").replace("_", "") for n in numbers)
        stream[template] = (line, values)
    if len(kept) > 1:
        kept.pop((None, None), None)  # the launcher's own lines, not a rank's stream
    return [make_event("size_line", line, ctx, "info", {"template": template, "values": values})
            for stream in kept.values() for template, (line, values) in stream.items()]
