"""What a paste carries around its log, put there by whatever relayed or quoted it.

Before any wrap is measured, ``normalize`` takes off what is not the log's own: the Markdown code
fences around it, and what is the same on nearly every line:

* **A screen's padding** (``unpadded_rows``): a terminal copied as it shows pads every row to its
  width with blanks; they go, and the full rows, cut at the width, are left for the wrap repair.
* **A common indentation.** A log pasted as a Markdown indented code block (four blanks before
  every line: Stack Overflow's and many forums' code form), or inside a list item or an indented
  quote, has every line shifted alike. Indentation is structure to the readers (traceback frames,
  py-spy's frames, torchelastic's table), so the shift common to every non-blank line is removed,
  as ``textwrap.dedent`` does, and nothing more.
* **A relay's head** (``head_of``): pytest's ``E   ``, ``kubectl logs --prefix``'s
  ``[pod/NAME/CONTAINER] ``, docker compose's ``NAME | ``, ``srun -l``'s ``12: `` (the task: it
  becomes ``[rank12]:``), the container runtime's CRI head, pdsh's ``HOST: ``, a Markdown quote's
  ``> ``, and a collector's timestamp: ``kubectl logs --timestamps``, ``docker logs -t``, a CI
  runner's or a log store's export (RFC 3339, ``2024-05-01T12:00:00.123456789Z ``), journald's
  and syslog's ``May 01 12:00:00 host python[4242]: ``.

A collector's timestamp is told from a program's own by what follows it: a collector stamps every
physical line, so some stamped line goes on with an indented frame, a ``Traceback`` or a wrapped
piece's blank; a logger stamps its records and leaves their continuation lines bare. A program's
own stamps are left for the line parser, which reads their time and level.
"""

from __future__ import annotations

import os
import re

from hangscope.sources.logs.common import CRI_PATTERN, PDSH_PATTERN, SRUN_PATTERN

HEAD_SAMPLE = 40  # first non-empty lines looked at to decide that a paste has a head
HEAD_SHARE = 0.8  # of them that must carry it
MIN_SCREEN_WIDTH = 40  # rows of one length narrower than this are more likely a table's

# Heads a tool puts before every line of what it relays, naming no rank: pytest's failure output
# (``E   ``), ``kubectl logs --prefix`` (``[pod/NAME/CONTAINER] ``), docker compose (``NAME  | ``),
# pdsh (``HOST: ``).
# ``srun -l`` (``12: ``) names the task, which is the rank: it becomes ``[rank12]:``.
_HEADS = (
    ("pytest", re.compile(r"E {3}")),
    ("kubectl", re.compile(r"\[pod/[^\]\s]{1,200}\] ")),
    ("compose", re.compile(r"[\w.\-]{1,100} +\| ")),
    ("srun", re.compile(SRUN_PATTERN)),
    ("cri", re.compile(CRI_PATTERN)),
    # pdsh / pssh / clush (DeepSpeed's multi-node launcher runs pdsh): ``HOST: `` before every
    # line a node relays, HOST an IPv4 address or a host name with a digit or a hyphen in it
    # (``worker-0: ``, ``node12: ``), never ``rank3: `` (a rank, which the rank parsers read)
    ("pdsh", re.compile(PDSH_PATTERN)),
)
# heads no program writes for itself: one line that carries one was relayed (a one-line paste of
# a container's log file, or of ``kubectl logs --prefix``)
_SELF_EVIDENT = frozenset({"cri", "kubectl"})
# A collector's timestamp before every physical line (see the module docstring): RFC 3339 with
# its zone (kubectl --timestamps, docker logs -t, CI runners, log stores), or journald's / syslog's
# short form with the host and the program (``May 01 12:00:00 node-3 python[4242]: ``).
_STAMPS = (
    ("stamp", re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d):? ")),
    ("journal", re.compile(r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d "
                           r"\d\d:\d\d:\d\d [\w.\-]{1,100} "
                           r"(?!kernel:)[\w.\-/]{1,100}(?:\[\d{1,10}\])?: ")),
)
# what only a collector's stamp goes on with: an indented line, a traceback's head or frame
_STAMPED_PIECE = re.compile(r"\s|Traceback \(most|File \"")
# what a program's own stamp goes on with: its record's level, or a separator before it
_OWN_RECORD = re.compile(r"[\[(]?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE)\b|[-|:] ")
# a Markdown quote ("> " before each line, ">" alone on a blank one): a log pasted into a reply
# as a quotation (a quote of a quote: "> > "); alone, or inside one of the heads above
_QUOTE_HEAD = re.compile(r"(?:>(?: |$))+")

# a Markdown code fence, opening (with its language) or closing the block the log was pasted in
_FENCE = re.compile(rb"(?m)^[ \t]*(?:`{3,}|~{3,})[\w+.\-]*[ \t]*$")

Head = tuple[str, re.Pattern[str]]


def unfenced(data: bytes) -> bytes:
    """``data`` with its Markdown code fences blanked (the lines kept, so line numbers hold)."""
    if b"``" not in data and b"~~~" not in data:
        return data
    return _FENCE.sub(b"", data)


# a viewer's line number before every line: ``cat -n`` / ``nl`` (right-aligned, a tab), ``less -N``
# and editors (blanks), web log viewers (``12 | ``, a box-drawing bar), then the line (not
# ``12: ``, which is ``srun -l``'s task head)
_NUMBER = re.compile(rb"^ {0,8}(\d{1,7})(\t|[ ]*(?:\||\xe2\x94\x82)[ ]?|[ ]+|$)")
MIN_NUMBERED = 3  # numbered lines needed before a paste is read as numbered


def char_lengths(rows: list[bytes]) -> list[int]:
    """Each row's length in characters, as a terminal or a viewer counts its width (bytes where
    every row is ASCII, which is the common case and counted in C)."""
    if all(row.isascii() for row in rows):
        return list(map(len, rows))
    return [len(row.decode("utf-8", "replace")) for row in rows]


def unnumbered(lines: list[bytes]) -> list[bytes] | None:
    """The lines without the line numbers a viewer put before each, or None when they carry none.

    Numbers are a viewer's when nearly every non-blank line starts with one and they count the
    lines from 1 or more: each is its line's place in the paste plus one offset (a range copied
    from the middle of a file), or one more than the last numbered line's (``nl`` leaves blank
    lines unnumbered). A program's own counter at the start of its lines skips or repeats, or
    starts at 0, or stands out of a column. What separates number from line is taken off as
    wide as its narrowest, so a line's own indentation (a traceback frame's) stays."""
    sample = [line for line in lines[:HEAD_SAMPLE * 4] if line.strip()]
    if len(sample) < MIN_NUMBERED or not (sample[0][:1].isdigit() or sample[0][:1] == b" "):
        return None
    # (the paste's first lines decide, so that a long log that merely starts with a digit or a
    # blank, a timestamped one, costs one pass over them, not over every line)
    if sum(1 for line in sample if _NUMBER.match(line)) < HEAD_SHARE * len(sample):
        return None
    found = [(i, m) for i, line in enumerate(lines) if (m := _NUMBER.match(line)) is not None]
    nonblank = sum(1 for line in lines if line.strip())
    if len(found) < max(MIN_NUMBERED, HEAD_SHARE * nonblank):
        return None
    first_place, first = found[0][0], int(found[0][1].group(1))
    numbers = [(i, int(m.group(1))) for i, m in found]
    by_place = sum(1 for i, number in numbers if number - i == first - first_place)
    by_count = sum(1 for k, (_i, number) in enumerate(numbers) if number - k == first)
    if first < 1 or max(by_place, by_count) < HEAD_SHARE * len(found):
        return None
    seps = [m.group(2) for i, m in found if m.end() < len(lines[i])]
    tabbed = sum(1 for sep in seps if sep == b"\t") >= HEAD_SHARE * len(seps)
    width = min(map(len, seps), default=0)
    if not tabbed and width == 1 and len({m.start(2) for _i, m in found}) > 1:
        return None  # (one blank after numbers not in a column: a program's own count)
    out = list(lines)
    for i, m in found:
        sep = m.group(2)
        if sep.strip(b" \t"):  # a bar: all of it
            out[i] = lines[i][m.end():]
        else:
            out[i] = lines[i][m.start(2) + (1 if tabbed and sep[:1] == b"\t" else
                                            min(width, len(sep))):]
    return out


def common_indent(lines: list[bytes]) -> int:
    """The blanks every non-blank line starts with, in bytes (0 when one line has none, or when
    they are a traceback's own: a paste of frames alone, its header and exception cut off)."""
    indents = []
    for line in lines:
        body = line.lstrip(b" \t")
        if body:
            if len(body) == len(line):
                return 0
            indents.append(line[:len(line) - len(body)])
    indent = len(os.path.commonprefix(indents)) if indents else 0
    if indent and any(line[indent:].startswith(b'File "') for line in lines):
        return 0  # (a frame's line is indented in every traceback Python prints)
    return indent


def dedent(lines: list[bytes], indent: int) -> list[bytes]:
    """The lines with their common indentation taken off (rows of blanks kept: a screen's
    padding may go on over them)."""
    return [line[indent:] if line.strip() else line for line in lines]


def head_of(lines: list[str]) -> Head | None:
    """The head most of the paste's first lines carry, if any, with a Markdown quote's ``> ``
    after it where most lines carry that too, and a second relay's head after it where most of
    what the first leaves carries one (relays stack: a collector's timestamp over pdsh's head,
    kubectl's prefix over ``srun -l``'s task, a quote over either); the pair is one head, named
    after srun's where it is one of them (its task is the rank), else after the relay's."""
    first = _one_head(lines)
    if first is None:
        return None
    rests = [line[m.end():] for line in lines if (m := first[1].match(line)) is not None]
    second = _one_head(rests) if len(rests) >= 2 else None
    if second is None or second[0] == "quote":
        return first
    name = "srun" if "srun" in (first[0], second[0]) else second[0] if first[0] == "quote" \
        else first[0]
    return name, re.compile(f"(?:{first[1].pattern})(?:{second[1].pattern})")


def _one_head(lines: list[str]) -> Head | None:
    sample = [line for line in lines if line.strip()][:HEAD_SAMPLE]
    if not sample:
        return None
    for name, pattern in _HEADS:
        if len(sample) < 2 and name not in _SELF_EVIDENT:
            continue  # "E   ", "node1: ", "3: " could open one line of a log's own
        found = _carried(sample, pattern)
        if found is not None and not (name == "compose" and _table_rows(sample, pattern)):
            return name, found
    # (a collector's stamp is told by what follows it, on one line as on many)
    for name, pattern in _STAMPS:
        stamped = [(line, m.end()) for line in sample if (m := pattern.match(line))]
        if len(stamped) >= HEAD_SHARE * len(sample) and _collected(stamped):
            return name, _carried(sample, pattern) or pattern
    # (one quoted line is a quote: "> " opens no log line of its own)
    if sum(1 for line in sample if _QUOTE_HEAD.match(line)) >= HEAD_SHARE * len(sample):
        return "quote", _QUOTE_HEAD
    return None


def table_row(rest: str) -> bool:
    """Whether what follows a compose-like ``NAME  | `` goes on with two column bars more: a pipe
    table's row (NVRx's ``74     | EXPERT_MODEL_PARALLEL_GROUP | nccl:all_to_all | ... | 12,14``),
    which a service's own line seldom is."""
    return rest.count(" | ") >= 2


def _table_rows(sample: list[str], pattern: re.Pattern[str]) -> bool:
    """Whether most lines that open like compose's ``NAME  | `` are a pipe table's rows."""
    rests = [line[m.end():] for line in sample if (m := pattern.match(line)) is not None]
    return sum(1 for rest in rests if table_row(rest)) >= HEAD_SHARE * len(rests)


def _collected(stamped: list[tuple[str, int]]) -> bool:
    """Whether the stamps of these (line, end of stamp) are a collector's: one goes on with what a
    logger never stamps, or most go on otherwise than a logger's record does."""
    if any(_STAMPED_PIECE.match(line, end) for line, end in stamped):
        return True
    return sum(1 for line, end in stamped if _OWN_RECORD.match(line, end)) < len(stamped) / 2


def _carried(sample: list[str], pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """``pattern``, or it with a quote's ``> `` after it, where most of ``sample`` carries it."""
    headed = [(line, m.end()) for line in sample if (m := pattern.match(line)) is not None]
    if len(headed) < HEAD_SHARE * len(sample):
        return None
    quoted = sum(1 for line, end in headed if _QUOTE_HEAD.match(line, end))
    if quoted >= HEAD_SHARE * len(sample):
        return re.compile(f"(?:{pattern.pattern}){_QUOTE_HEAD.pattern}")
    return pattern


def split_head(line: str, head: Head) -> tuple[str, str]:
    """What the peeled line starts with (``[rank12]: `` for srun's task, else nothing) and the
    line's own text after the head."""
    name, pattern = head
    m = pattern.match(line)
    if m is None:
        return "", line
    if name == "srun":  # (its task is the pattern's only group, alone or under another head)
        return f"[rank{m.group(m.re.groups)}]: ", line[m.end():]
    return "", line[m.end():]


def framed(lines: list[bytes]) -> bool:
    """Whether ``normalize`` would take something off these lines: a common indentation or a
    head (for readers that take the raw lines unless they need repair)."""
    if common_indent(lines) or unnumbered(lines) is not None:
        return True
    sample = [raw.decode("utf-8", errors="replace") for raw in lines[:HEAD_SAMPLE * 4]]
    return head_of(sample) is not None


def unpadded_rows(physical: list[bytes]) -> tuple[list[bytes], bool] | None:
    """The rows of a screen copy with the blanks that pad each to the screen's width taken off,
    and whether they were a screen's (rows of one width: an indentation common to them is the
    log's own), or None when the paste is no such copy.

    A terminal (or a web page's fixed-width box) copied as it shows pads every row with blanks to
    its width: every row is exactly as long as the longest, and the rows that ended early end in
    a run of blanks. Those runs go (a row that ended is that long no more); a full row, cut at the
    width, keeps its length, so the wrap is still seen where it was; a row that ends in a single
    blank may be one cut right after a word, and keeps it. A row whose padding goes on over rows
    of blanks, the last shorter than the width (a screen's rows wrapped again at a narrower
    width), keeps it, and they theirs, for ``normalize``'s wrap repair, which joins the row with
    its padding's rest; rows of blanks as wide as the screen are its blank lines (where the
    wider screen was an exact multiple of the narrower, the two cannot be told apart)."""
    lengths = char_lengths(physical)
    width = max(lengths, default=0)
    rows = [i for i, row in enumerate(physical) if row.strip()]
    at_width = [i for i in rows if lengths[i] == width]
    padded = sum(1 for i in at_width if physical[i].endswith(b"  "))
    # (on a screen, a row that ended early is padded: rows that end short unpadded are a wrapped
    # paste's last pieces, and blanks at the width there are a line's own, a bar's unfilled part)
    short = len(rows) - len(at_width)
    screen = width >= MIN_SCREEN_WIDTH and padded > short \
        and len(at_width) >= HEAD_SHARE * len(rows)
    if not screen:
        # (or blanks at the end of nearly every line, whatever its length: an editor's or a
        # Markdown line break's, not the log's)
        ends = sum(1 for i in rows if physical[i].endswith(b"  "))
        if not rows or ends < HEAD_SHARE * len(rows):
            return None
    rows_out: list[bytes] = []
    rest = False  # in the rows of blanks a padded row's wrap left
    for i, row in enumerate(physical):
        blank = not row.strip()
        if blank and row and rest:
            rows_out.append(row)
            continue
        rest = not blank and row.endswith(b" ") and _padding_wraps_on(physical, lengths, i, width)
        rows_out.append(row if rest or not (blank or row.endswith(b"  ")) else row.rstrip(b" "))
    return rows_out, screen


def _padding_wraps_on(physical: list[bytes], lengths: list[int], index: int, width: int) -> bool:
    """Whether the rows of blanks after row ``index`` are its padding's wrapped rest: the last of
    them is shorter than the width (rows of blanks as wide as the screen are its blank lines)."""
    end = index + 1
    while end < len(physical) and physical[end] and not physical[end].strip():
        end += 1
    return end > index + 1 and lengths[end - 1] < width
