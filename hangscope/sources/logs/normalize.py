"""Rebuild the logical lines of a log as people paste it, before any family parser sees them.

A log reaches hangscope copied out of a terminal, an issue tracker or a mail: long records are
hard-wrapped at the terminal's width (a ``WorkNCCL(...)`` record cut in the middle of a number and
continued on the next line), CRLF line ends, colours. Every parser matches one logical line, so a
wrapped record is invisible to all of them. This pass undoes the damage once, for every family:

* **Hard wraps at a fixed width.** A terminal cuts every over-long line at exactly its width ``W``,
  so a wrapped paste's longest lines are exactly ``W`` characters long, ``W`` one of the widths
  terminals and trackers use (``COMMON_WIDTHS``: a table of equal rows at some other width is not a
  wrap). Such a line is joined with the next, unless the next one starts a record of its own (a rank
  or launcher prefix, a timestamp, a glog/c10 head, ``Traceback``) or opens with the same characters
  as the line (two lines of one stream): two identical longest lines of a healthy log stay two
  lines. A line is rebuilt from as many pieces as it was cut into, up to ``MAX_JOINED_AT_WIDTH``
  characters (a paste a tracker flattened into one line runs to thousands).
* **Records still open.** A line holding the start of a record whose end is known (a watchdog's
  ``WorkNCCL(`` ... ``before timing out``, a DETAIL ``CollectiveFingerPrint(`` ... ``)``) is joined
  with the lines that complete it (at most ``MAX_JOIN``, more at a narrow width), as long as they
  do not start a record of their own: this catches wraps at word boundaries and at widths the
  spike test cannot see.
* **Wraps padded to a screen's width.** Text copied out of a terminal window or a web page that
  wrapped a line keeps the cut and the continuation on one line, with the blank rest of the screen
  row between them: ``File ".../data/dataload<150 blanks>er.py", line 761``. Where at least two
  lines have a run of blanks that ends at the same column, and the text before each run is at most
  ``W`` long with ``W`` one of ``COMMON_WIDTHS`` (and some line exactly ``W``; or, at any other
  ``W`` of 60 or more, two runs that both start at ``W`` inside a word), the runs are the
  padding: the pieces are joined (with the one blank the cut ate, where the first piece is
  shorter than ``W``).
* CR, ANSI colours: removed (the scanner does this per line too; here it must happen before the
  widths are measured). No-break spaces (U+00A0, U+202F: text copied out of a web page or a
  chat client has them between every word) become plain spaces.
* **A container runtime's partial lines.** The kubelet's CRI log file splits a line longer than
  16 KiB into pieces tagged ``P`` (partial), the last one ``F`` (full); a ``P`` piece is joined
  with the pieces of the same stream that follow it, up to its ``F``.

Process prefixes (``[rank3]:``, ``[default0]:``, mpirun's ``[1,3]<stderr>:``) and timestamps are
peeled per line by :func:`common.parse_line`, which also serves big files this pass skips; what
the paste's relay or quotation put before every line (a common indentation, a relay's head, a
collector's timestamp, a Markdown quote: :mod:`heads`) is taken off here first. The output keeps the
original line numbers: ``line_map[i]`` is the first original line of logical line ``i + 1``, so
events cite the file as the user has it.

Cost: files over ``NORMALIZE_MAX`` bytes are not normalized (rank logs that big were written by the
job, not pasted); below it, one ``split`` and one ``max(map(len))`` decide in C whether any Python
work is needed at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hangscope.sources.logs.common import ANSI_PATTERN, SRUN_PATTERN
from hangscope.sources.logs.heads import (
    HEAD_SAMPLE,
    Head,
    char_lengths,
    common_indent,
    dedent,
    head_of,
    split_head,
    table_row,
    unfenced,
    unnumbered,
    unpadded_rows,
)

NORMALIZE_MAX = 16 << 20
MAX_JOIN = 8  # physical lines one logical line may be rebuilt from (at a wide wrap)
MAX_JOINED = 640  # characters of wrapped pieces one logical line may be rebuilt from, at least
# pieces each exactly the wrap width are a wrap's and nothing else's: a paste flattened into one
# line (a tracker's one-line quote) is rebuilt whole up to this many characters
MAX_JOINED_AT_WIDTH = 16384
MAX_PARTIAL = 64  # CRI pieces (16 KiB each) one line may be rebuilt from: 1 MiB
MIN_OPEN_CUTS = 3  # open records cut at one uncommon width that make it the paste's wrap width
MIN_WRAP_CUTS = 3  # lines cut inside a word at one uncommon width that make it the wrap width
LOOSE_WRAP_CUTS = 2  # longest lines going on, none starting a record, that make it the width
# what a piece cut at the width may start with that a line rarely does: a sign that goes on
# from the line before (",", ".", ")", "/", a quote), a digit, one blank and a word in lower case
_LOOSE_CUT = re.compile(r"[,.;:)\]}/\"'=]|\d| [a-z]")
MIN_UNCOMMON_WIDTH = 40  # narrower than this, equal lengths are more likely chance than a wrap
MIN_PADDED_WIDTH = 60  # an uncommon screen width padding is believed at (not a table's column)
HEAD = 8  # a line starting with the same characters as the one before opens a new record
# widths a terminal or tracker commonly cuts at: one line cut at one of these is enough evidence
COMMON_WIDTHS = frozenset((72, 76, 78, 79, 80, 100, 110, 119, 120, 128, 132, 140, 150, 160, 180,
                           200, 220, 240, 250, 256))

_ANSI = re.compile(ANSI_PATTERN.encode())
_PADDING = re.compile(r"(?<=\S) {8,}(?=\S)")
_PADDING_BYTES = re.compile(rb"(?<=\S) {8,}(?=\S)")
PAD_RUN_TEXT = " " * 8  # the shortest run of blanks read as padding (as _PADDING has it)
PAD_RUN = PAD_RUN_TEXT.encode()

# A line that starts a record of its own is never the continuation of the line before it.
_RECORD_START = re.compile(
    r"\s*$"
    r"|\[(?:rank|RANK|default|Rank|PG |trainer|worker)\s?:?\s?\d"
    r"|\[(?:\d+,)?\d+\]<|\[\d+,\d+\]:"
    r"|\[?[IWEF]\d{4} \d\d:\d\d"
    r"|\[[IWEF] \w"
    r"|\[?\d{4}-\d\d-\d\d[ T]\d\d:"
    r"|\[\d\d:\d\d:\d\d(?:[.,]\d+)?\]"  # a logger's bracketed time of day: "[07:04:40]"
    r"|\[\s*\d+\.\d+\] "
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ \d\d:\d\d:\d\d "
    r"|Traceback \(most"
    # a paster's elision ("[... similar lines ...]", "... 20 more"): never a wrap's tail, but a
    # list cut before its closing dots is ("...]", "...)")
    r"|\[(?:\.\.\.|\u2026)|(?:\.\.\.|\u2026)(?![\])])"
    r"|[\w.\-]+:\d+:\d+ \[\d+\] NCCL "
    r"|E {3}"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[:\] ]")
# docker compose's "service_1  | " starts a record only in a paste whose lines carry it: a wrapped
# piece of a table's row may start with a word and a column bar ("...| D" / "type    | Ranks"),
# and a table's row itself opens so ("74     | EXPERT_MODEL_PARALLEL_GROUP | nccl:all_to_all | ")
_COMPOSE_START = re.compile(r"[\w.\-]+ +\| ")

# ``srun -l``'s task label ("12: ") starts a record only in a paste where other lines carry one
# too: a wrapped piece may start with a number and a colon ("...CUDA error" / "2: out of memory")
_SRUN_START = re.compile(SRUN_PATTERN)
MIN_SRUN_LINES = 2

# Ray's log relay heads every worker line with ``(Name pid=N, ip=X) ``; a paste that lost its line
# breaks (a tracker's one-line quote) has them mid-line, each opening a record of its own
# The same for torch's ``[rankN]:`` head glued to another process's unfinished line (a progress
# bar that ends without a newline): the head of a C++ log line (``[rank1]:[W516 14:34:56...``) or
# a head right after a bar's closing bracket.
# (each alternative opens with what it must see ahead and only then looks behind: a look behind
# first is tried at every place of the text, three times slower)
_RELAY_MIDLINE = re.compile(
    r" (?=\((?:[A-Za-z_][\w.\-]*(?: (?:TP\d+|rank=\d+))? )?pid=\d+"
    r"(?:, ip=[\d.:a-fA-F]+)?\) )(?<=\S )"
    r"|(?=\[rank\d{1,6}\]:\[[IWEF]\d{3,4} )(?<=\S)|(?=\[rank\d{1,6}\]: )(?<=\])")
_RELAY_MIDLINE_BYTES = re.compile(_RELAY_MIDLINE.pattern.encode())

# (start, end): a line holding ``start`` but not ``end`` continues on the next lines.
_OPEN_RECORDS = (
    # (from its first two words: a terminal may cut the sentence itself, "caught colle|ctive")
    ("Watchdog caught", "timing out"),
    ("WorkNCCL(", ")"),
    ("CollectiveFingerPrint(", ")"),
    # DETAIL's report of two ranks, one fingerprint per line as some pastes break it
    ("Detected mismatch between collectives on ranks", "but Rank"),
    ("failed to pass monitoredBarrier", " ms"),
    ("CUDA out of memory. Tried to allocate", "iB"),
)
_OPEN_TRIGGER = re.compile(b"|".join(re.escape(s.encode()) for s, _ in _OPEN_RECORDS))


@dataclass(frozen=True, slots=True)
class Normalized:
    """The logical lines as bytes, and where each starts in the original file (1-based)."""

    data: bytes
    line_map: list[int]

    def original_line(self, logical: int) -> int:
        if 1 <= logical <= len(self.line_map):
            return self.line_map[logical - 1]
        return logical


def wrap_width(lengths: list[int], lines: Sequence[bytes | str] | None = None) -> int | None:
    """The width a paste was hard-wrapped at, from its line lengths (and its lines, for a width
    that is not a common one), or None.

    A common width needs one line that long. Any other width (a narrow terminal, a chat window, a
    tracker's box) needs lines of exactly that, the longest, length that a cut ended: cut inside a
    word (a letter or digit on either side) and continued by a line that starts no record of its
    own and opens otherwise than the one before it, or followed by nothing but the rest of a row's
    blank padding. ``MIN_WRAP_CUTS`` such cuts outweighing the longest lines a new record
    follows, or two with none against them (one long line wrapped), make it the width; so does
    one with none against it beside a cut right after a blank (a line rarely ends in one) or a
    longest piece that goes on from another (one line cut twice). A table of equal rows, or a
    few long lines of one length, do not; a row longer than the width goes on in a shorter
    piece, its rest, and is cut like any line."""
    width = max(lengths, default=0)
    if width in COMMON_WIDTHS:
        return width
    if lines is None or width < MIN_UNCOMMON_WIDTH:
        return None
    if lengths.count(width) < 2:
        return None  # (a wrap leaves a longest piece and its rest at the least)
    cuts = against = blank_cuts = chained = loose = 0
    index = -1
    while (index := _index(lengths, width, index + 1)) >= 0 and index + 1 < len(lengths):
        if not lengths[index + 1]:
            continue
        before, after = _as_text(lines[index]), _as_text(lines[index + 1])
        if not after.strip():
            cuts += lengths[index + 1] == width  # a padded row's blank rest, cut at the width
        elif not _continues(before, after) or (before.endswith("|") and after.startswith("|")) \
                or _shape(before) == _shape(after) and lengths[index + 1] >= width * 3 // 4 \
                or lengths[index + 1] == width and _PADDING.search(before):
            # a new record, or rows of one shape after a longest line: a print per rank that
            # differs in its numbers only, or a table whose columns are padded with blanks (its
            # next row as long; a row cut at the width goes on with a shorter piece, its rest)
            against += 1
        else:
            if _WORD_END.search(before) and _WORD_START.match(after):
                cuts += 1  # a word cut in two
            elif before[-1:] == " " and before.strip():
                blank_cuts += 1  # a cut after a blank: a line rarely ends in one of its own
                # (and a loose one where what goes on is no capital, no indentation, no padding)
                loose += not (after[:1].isupper() or after[:1].isspace() or before[-2:] == "  ")
            elif _LOOSE_CUT.match(after) and not _RULE.match(before) and not _RULE.match(after) \
                    and not (after[:1] == " " and before[-1:].isdigit()):
                loose += 1  # a cut before a sign, a digit or a blank and a word going on
            # a longest line that itself goes on from a longest line: one line cut twice
            chained += index > 0 and lengths[index - 1] == width
    if cuts >= MIN_WRAP_CUTS and cuts > against or cuts >= 2 and not against \
            or cuts and (blank_cuts or chained) and not against:
        return width
    # (or longest lines that each go on in a piece that starts no record, cut beside a blank or
    # a sign: one such is a line's end as often as a cut; many, and none a new record, are a wrap)
    if not against and cuts + loose >= LOOSE_WRAP_CUTS:
        return width
    return None


def _all_headed_after(lengths: list[int], width: int, headed: list[bool]) -> bool:
    """Whether every line after a line ``width`` long carries the relay's head again."""
    after = [headed[i + 1] for i, length in enumerate(lengths[:-1]) if length == width]
    return bool(after) and all(after)


def _index(values: list[int], value: int, start: int) -> int:
    """The next position of ``value`` from ``start`` (found in C), or -1."""
    try:
        return values.index(value, start)
    except ValueError:
        return -1


def _shape(line: str) -> str:
    """A line's head with its digits made alike: two rows of one print share it."""
    return _DIGITS.sub("0", line[:HEAD])


_DIGITS = re.compile(r"\d+")
_RULE = re.compile(r"^([-=_*#~+])\1*$")  # a line of one character repeated: a separator
_WORD_END = re.compile(r"\w$")
_WORD_START = re.compile(r"\w")


def _as_text(line: bytes | str) -> str:
    return line if isinstance(line, str) else line.decode("utf-8", errors="replace")


# the last text normalized and its result: one file's scans (its events, its tail's logical
# lines, its progress) each ask for the same bytes, and rebuilding a megabyte takes milliseconds
_last: tuple[bytes, Normalized | None] | None = None


def normalize(raw: bytes) -> Normalized | None:
    """The paste's logical lines, or None when it needs no repair (the common, fast case)."""
    global _last
    if len(raw) > NORMALIZE_MAX or not raw:
        return None
    last = _last
    if last is not None and len(last[0]) == len(raw) and last[0] == raw:
        return last[1]
    fixed = _normalize(raw)
    _last = (raw, fixed)
    return fixed


def _normalize(raw: bytes) -> Normalized | None:
    data = raw
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if b"\x1b" in data:
        data = _ANSI.sub(b"", data)
    if b"\xc2\xa0" in data or b"\xe2\x80\xaf" in data:
        # no-break spaces, as text copied out of a web page or a chat client carries them
        # between every word: plain spaces to every parser
        data = data.replace(b"\xc2\xa0", b" ").replace(b"\xe2\x80\xaf", b" ")
    fenced = len(data) != len(data := unfenced(data))  # (a blanked fence is shorter)
    if data.endswith(b"\n"):
        data = data[:-1]
    physical = data.split(b"\n")
    if (counted := unnumbered(physical)) is not None:  # a viewer's line numbers
        physical = counted
        data = b"\n".join(physical)
    screen = False
    if data.endswith(b"  ") or b"  \n" in data:
        if (screened := unpadded_rows(physical)) is not None:  # a screen copied as it shows
            physical, screen = screened
            data = b"\n".join(physical)
    if not screen and (physical[0][:1] in (b" ", b"\t") or not physical[0].strip()):
        # (a paste whose first line is not indented has no indentation common to every line)
        if indent := common_indent(physical):
            physical = dedent(physical, indent)
            data = b"\n".join(physical)
    # a Markdown block's opening fence (blanked above) and blank lines before it are no part of
    # the paste: a rule that reads a paste's first lines finds them first (a file that merely
    # starts with a blank line is read as it is)
    blanks = 0
    while fenced and blanks + 1 < len(physical) and not physical[blanks].strip():
        blanks += 1
    if blanks:
        physical = physical[blanks:]
        data = b"\n".join(physical)
    text = [p.decode("utf-8", errors="replace") for p in physical[:HEAD_SAMPLE * 4]]
    head = head_of(text)
    if PAD_RUN in data and (unpadded := _unpad(physical, data, head)) is not None:
        physical = unpadded
        data = b"\n".join(physical)
    lengths = char_lengths(physical)
    width = wrap_width(lengths, physical)
    if head is None and width is not None:
        # a wrap's second pieces never carry a relay's head: most of the paste's lines then may
        # not, though every line the relay wrote does; look again without those pieces
        head = head_of([line for i, line in enumerate(text) if not i or lengths[i - 1] != width])
    has_open = _OPEN_TRIGGER.search(data) is not None
    relayed = (b"pid=" in data or b"[rank" in data) \
        and _RELAY_MIDLINE_BYTES.search(data) is not None
    if width is None and not has_open and head is None and not relayed:
        if data is raw or data + b"\n" == raw:
            return None
        return _identity(data, len(physical), blanks)
    text = [p.decode("utf-8", errors="replace") for p in physical]
    heads: list[str] | None = None
    headed: list[bool] | None = None  # pieces that may not continue a wrapped line
    partial: list[str | None] | None = None  # a CRI piece's stream where it is partial
    if head is not None:
        # lines are joined without their heads (a continuation that carries the head too must
        # not read as a new record of the same stream), and where the paste was wrapped first
        # and the head added after to every piece, the width is the content's
        pattern = head[1]
        split = [split_head(line, head) for line in text]
        if width is not None:
            # the terminal wrapped the headed lines: a piece with the head is a new line
            headed = [pattern.match(line) is not None for line in text]
            if _all_headed_after(lengths, width, headed):
                # (no piece after a longest line lacks the head: nothing was cut there, and
                # the longest lines are as long as they are by chance; the content may be)
                width, headed = None, None
        heads = [lead for lead, _ in split]
        text = [content for _, content in split]
        partial = _partial_pieces(physical, pattern) if b" P " in data else None
        if width is None:
            content_lengths = [len(content) for content in text]
            if (content_width := wrap_width(content_lengths, text)) is not None:
                width, lengths = content_width, content_lengths
    srun = sum(1 for line in text if _SRUN_START.match(line)) >= MIN_SRUN_LINES
    open_cut = _open_cut_width(text, lengths) if has_open else None
    # a narrow window cuts a long record into more pieces: as many as MAX_JOINED characters make
    most = max(MAX_JOIN, MAX_JOINED // (width or open_cut or MAX_JOINED))
    most_at_width = max(most, MAX_JOINED_AT_WIDTH // width) if width else most
    out: list[str] = []
    line_map: list[int] = []
    i, n = 0, len(text)
    while i < n:
        start = i
        line = text[i]
        piece = lengths[i]
        i += 1
        joined = 1
        padded = False
        while partial is not None and partial[i - 1] and i < n and joined < MAX_PARTIAL \
                and _same_stream(physical[i], partial[i - 1]):
            line += text[i]
            piece = lengths[i]
            i += 1
            joined += 1
        while width is not None and piece == width and i < n and joined < most_at_width \
                and not (headed is not None and headed[i]):
            after_blank = text[i - 1].endswith(" ")
            if after_blank and not padded and text[i][:1] == " " and _OPEN_BAR.search(line):
                pass  # the unfilled part of a bar ("  0%|" and blanks): it goes on after them
            elif after_blank and not text[i].strip():
                # a row padded with blanks past the width: its wrapped rest is only padding,
                # and the row ended where its padding began
                piece = lengths[i]
                i += 1
                padded = True
                continue
            elif padded or not _continues(text[i - 1], text[i], srun, _opening(text, start, i)) \
                    or _RULE.match(text[i - 1]) and not _RULE.match(text[i]):
                # (a rule of dashes as long as the width, torchelastic's 60 across, is whole:
                # only more of the rule can go on from it)
                break
            line += text[i]
            piece = lengths[i]
            i += 1
            joined += 1
        if has_open:
            while _is_open(line) and i < n and joined < most \
                    and _continues(text[i - 1], text[i], srun, _opening(text, start, i)):
                # a cut at the wrap width (a common one, or the one most open records were cut
                # at) ate nothing; else a word wrap ate a space
                cut = lengths[i - 1] in COMMON_WIDTHS or lengths[i - 1] == open_cut
                line += text[i] if cut else " " + text[i].lstrip()
                i += 1
                joined += 1
        line = heads[start] + line if heads is not None else line
        # (a head glued mid-line may itself have been cut by the wrap: look again once joined)
        for record in _RELAY_MIDLINE.split(line) if relayed or joined > 1 else (line,):
            out.append(record)
            line_map.append(start + 1 + blanks)
    return Normalized(("\n".join(out) + "\n").encode("utf-8"), line_map)


def logical_bytes(data: bytes) -> bytes:
    """``data``'s logical lines, or ``data`` itself when it needs no repair: for readers of pasted
    stacks, which see the same heads and wraps as the log scanner."""
    fixed = normalize(data)
    return fixed.data if fixed is not None else data


# the CRI head's stream and tag: ``stdout P `` marks a piece the kubelet split off a long line
_CRI_TAG = re.compile(r" (stdout|stderr) ([FP]) ")


def _partial_pieces(physical: list[bytes], pattern: re.Pattern[str]) -> list[str | None] | None:
    """Per line, the stream of a CRI piece tagged partial (its line goes on in the next piece of
    that stream), else None; None for all when no line is one."""
    out: list[str | None] = []
    for raw in physical:
        line = raw.decode("utf-8", errors="replace")
        m = pattern.match(line)
        tag = _CRI_TAG.search(m.group(0)) if m is not None else None
        out.append(tag.group(1) if tag is not None and tag.group(2) == "P" else None)
    return out if any(out) else None


def _same_stream(raw: bytes, stream: str | None) -> bool:
    """Whether ``raw`` is a CRI piece of ``stream`` (the rest of a partial line of it)."""
    return f" {stream} ".encode() in raw[:128]


# NCCL's "host:pid:tid [dev] NCCL INFO ..." cut between "NCCL" and its level: the level word
# starts the wrapped piece, and is no record of its own
_NCCL_CUT = re.compile(r"\] NCCL ?$")
_NCCL_LEVEL = re.compile(r"(?:INFO|WARN) ")


# a progress bar drawn up to its blank, unfilled part ("  0%|      "): blanks after it are the
# bar's own, not a screen row's padding
_OPEN_BAR = re.compile(r"\d%\|[^|]*$")
# Python's traceback frame line, complete (it ends with the function's name): one that happens
# to be as long as a common width is no wrapped piece
_FRAME_DONE = re.compile(r'File "[^"]*", line \d+, in [\w<>.]+\s*$')


def _opening(text: list[str], start: int, i: int) -> str:
    """What ``text[i]`` is compared with to tell a new line of the same stream: the piece before
    it, unless that piece starts inside a word the piece before it cut (a piece from inside one
    line, whose first characters are no head: pieces of a list of repeating names open alike by
    chance); then the line's first piece."""
    if i - 2 >= start and _WORD_END.search(text[i - 2]) and _WORD_START.match(text[i - 1]):
        return text[start]
    return text[i - 1]


def _continues(before: str, after: str, srun: bool = True, opening: str | None = None) -> bool:
    """Whether ``after`` may continue ``before``: it starts no record of its own, and does not open
    the way ``opening`` (default ``before``) opens: two lines of one stream share their head, a
    line and its wrapped tail do not. ``srun``: the paste has ``srun -l`` task labels, so one
    starts a record."""
    if _RECORD_START.match(after) and not (_NCCL_LEVEL.match(after) and _NCCL_CUT.search(before)):
        return False
    if srun and _SRUN_START.match(after):
        return False
    if _FRAME_DONE.search(before) and after[:1].isspace():
        return False  # a whole traceback frame line, then its indented source line
    if opening is None:
        opening = before
    if _COMPOSE_START.match(after) and (m := _COMPOSE_START.match(opening)) is not None \
            and not table_row(opening[m.end():]):  # (a table's row is no service's line)
        return False
    head = min(HEAD, len(opening))
    return head < 4 or opening[:head] != after[:head]


def _unpad(physical: list[bytes], data: bytes,
           head: Head | None) -> list[bytes] | None:
    """The lines with screen-row padding taken out of wrapped lines, or None when no line has it
    (see the module docstring). Columns count from after the paste's head (pytest's ``E   ``...),
    which the tool that relayed the lines added after the screen was copied. The runs are found
    by one regex over the whole text (C speed); only lines holding one are looked at."""
    runs: dict[int, list[tuple[int, int, re.Match[str]]]] = {}
    index, at, looked = 0, 0, -1
    for hit in _PADDING_BYTES.finditer(data):
        index += data.count(b"\n", at, hit.start())
        at = hit.start()
        if index == looked:
            continue  # one run per line: its first
        looked = index
        line = physical[index].decode("utf-8", errors="replace")
        lead = m.end() if head is not None and (m := head[1].match(line)) is not None else 0
        pad = _PADDING.search(line, lead)
        if pad is not None:
            runs.setdefault(pad.end() - lead, []).append((index, lead, pad))
    for found in runs.values():
        width = max(pad.start() - lead for _, lead, pad in found)
        # elsewhere than at a common width, two runs from one column to another that each cut a
        # word in two, far into the row: a screen row's width (a table's columns are no cut)
        cut_at_width = sum(1 for _, lead, pad in found if pad.start() - lead == width
                           and _cuts_word(pad))
        if len(found) < 2 or (width not in COMMON_WIDTHS
                              and (cut_at_width < 2 or width < MIN_PADDED_WIDTH)):
            continue
        out = list(physical)
        for index, lead, pad in found:
            line = pad.string
            gap = "" if pad.start() - lead == width else " "  # the blank the cut ate
            out[index] = (line[:pad.start()] + gap + line[pad.end():]).encode("utf-8")
        return out
    return None


def _cuts_word(pad: re.Match[str]) -> bool:
    """Whether a run of blanks sits inside a word: a letter, digit or ``_`` on either side."""
    line = pad.string
    return _WORD_END.search(line, 0, pad.start()) is not None \
        and _WORD_START.match(line, pad.end()) is not None


def _open_cut_width(text: list[str], lengths: list[int]) -> int | None:
    """The width open records were hard-cut at where it is not a common one (a tracker's
    ``<pre>`` at 137 columns): the one length that at least ``MIN_OPEN_CUTS`` open lines share
    and that ends inside a word; None when no such width stands out."""
    counts: dict[int, int] = {}
    for line, length in zip(text, lengths):
        if length >= 60 and line[-1:].isalnum() and _is_open(line):
            counts[length] = counts.get(length, 0) + 1
    if not counts:
        return None
    width, count = max(counts.items(), key=lambda item: item[1])
    return width if count >= MIN_OPEN_CUTS else None


def _identity(data: bytes, count: int, blanks: int) -> Normalized:
    return Normalized(data + b"\n", list(range(1 + blanks, count + 1 + blanks)))


def _is_open(line: str) -> bool:
    """Whether the line starts a record it does not finish."""
    for start, end in _OPEN_RECORDS:
        at = line.rfind(start)
        if at < 0:
            continue
        rest = line[at + len(start):]
        if end == ")":
            if rest.count("(") + 1 > rest.count(")"):
                return True
        elif end not in rest:
            return True
    return False
