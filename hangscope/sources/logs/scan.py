# ruff: noqa: E501
"""Scan one log file for the events of every family, fast and without trusting the input.

How (see ``base`` for the handler interface):

* The file is read in ``CHUNK`` pieces; a line longer than ``MAX_LINE`` bytes is clipped to that
  bound and the rest of it skipped without ever being held whole (a 100 MB line costs one pass of
  ``bytes.find``). Bytes are decoded per line with ``errors='replace'``; CR and ANSI colours go.
* ONE compiled regex of all the families' trigger substrings runs over each chunk (most lines of an
  ``NCCL_DEBUG=INFO`` log match nothing and are never decoded); line numbers come from
  ``bytes.count(b"\\n")`` between hits.
* Block parsers see up to ``LOOKAHEAD`` bytes past the chunk (the tail is carried over).
* Nothing in the content raises: a handler that fails on a line is skipped for that line.
  :class:`~hangscope.errors.BadInputError` only when the file cannot be opened or read.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Iterator

from hangscope.errors import BadInputError
from hangscope.model import LogEvent
from hangscope.sources.logs import (
    bench_reports,
    dataloader,
    elastic,
    gloo,
    gpu,
    init,
    mpi,
    nccl_debug,
    nccl_ras,
    nccl_tests,
    oom,
    perf_reports,
    pg_wrapper,
    pipeline,
    runtime_lines,
    shape_checks,
    stall_reports,
    torch_nccl,
    traceback,
)
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, decode, infer_rank_from_path, parse_line
from hangscope.sources.logs.normalize import NORMALIZE_MAX, Normalized, normalize

CHUNK = 8 << 20
LOOKAHEAD = 256 << 10
MAX_LINE = 64 << 10
MAX_FOLLOW_LINES = 4000
MAX_JSON_BYTES = 64 << 20

# Order matters only when one line holds triggers of several families: first match wins.
_FAMILIES = (nccl_debug, torch_nccl, nccl_ras, elastic, mpi, oom, dataloader, gloo, init, traceback,
             gpu, runtime_lines, stall_reports, perf_reports, nccl_tests, bench_reports, pg_wrapper,
             pipeline, shape_checks)
_HANDLERS: dict[bytes, list[Handler]] = {}
_PRIORITY: dict[Handler, int] = {}
for _module in _FAMILIES:
    for _trigger, _handler in _module.HANDLERS:
        _HANDLERS.setdefault(_trigger, []).append(_handler)
        _PRIORITY.setdefault(_handler, len(_PRIORITY))
_TRIGGERS = re.compile(b"|".join(re.escape(t) for t in sorted(_HANDLERS, key=len, reverse=True)))

# The chunk-level pre-filter. CPython's ``re`` has no multi-literal (Aho-Corasick) search: a regex of
# all ~45 triggers runs at ~40 MB/s, while one whose alternatives start with a few RARE first bytes
# runs at memchr-like speed. So the chunk is searched for these anchors (each interesting line holds
# one: exception lines say "...Error", c10 lines "Watchdog"/"watchdog"/"Timeout at", ...), and only
# the lines they hit are searched for the real triggers. An anchor starts at the rarest byte of its
# trigger in NCCL_DEBUG=INFO text, where C, D, F (of INFO), p and k are common: "CUDA" is anchored
# at "UDA", "Init COMPLETE" at "MPLETE", "DataLoader worker (pid" at "(pid". Triggers that only
# occur in exception messages ("DataLoader timed out", "Detected mismatch") ride on "Error". tests/test_logs_hostile.py checks, on every
# fixture, that this gives exactly the events a full trigger search gives.
_ANCHORS = re.compile(
    rb"E(?:rror|xception \(either|xception in thread|RROR|nforceNotMet)"
    rb"|W(?:atchdog|ARN |aiting in store)|w(?:idth|atchdog|een collectives|aiting on [Rr]ank|aiting for [Rr]ank|aits on rank|aits for rank)|v(?:ersion:? \d)|V(?:ersion \d)"
    rb"|T(?:imeout at|imed out|raceback \(most|he client socket|he node |hread )|A(?:vg bus bandwidth)|#(?:wrong)|H(?:eartbeat monitor)"
    rb"|K(?:illed process)|L(?:ast error:)|=(?:CONSTRAINT_)"
    rb"|\((?:exitcode: |first observed failure\)|pid|local_rank: |elements\))|\)(?: INCOMPLETE| MISMATCH)|S(?:ending process|talled ranks|TRAGGLER DETECTION)"
    rb"|F(?:ailures:|ile \")|P(?:G on this rank|G debug info|rocess Group Desc|U relative performance:|U individual performance:)|I(?:nit timings|nput shapes:)|R(?:unning collective: C|ecorder|eceived a dump|eceived \d+ death|eceived Signals\.|ead timeout \[)|i(?:ng to dump d|ng ncclUniqueId)"
    rb"|M(?:ISMATCH|ismatched collective d|issing communicator|issing ranks:|EMBER: |PLETE)|S(?:TART\b)|B(?:arrier in|arrier, but)"
    rb"|U(?:DA out of memory|DA error|nexpected |sing |nable to determine)"
    rb"|y(?: peer| environment to | ranks: )|g(?: ranks: |ht collective op|ht signal |glers? detected|glers found)"
    rb"|j(?:ob process|oining collective)|N(?:VRM: )|O(?:ut Of Memory|OM when alloc)|H(?:W Exception by GPU)"
    rb"|x(?:pectedly)|l(?:ocalRank \d)|k(?:er process has died|er died or was)|I(?:P out of memory)|'(?:out of memory')"
    rb"|\*(?:\*\* STEP |\*\* JOB )|(?:noticed that |srun: |The first process to do so was|RUNNING AT |comm op: |Matrix \(us\)|watchdog hang|the following error|recorder dump)"
    rb"|G(?:B/s|bps)|bw|BW|k(?:B, limit )"
    rb"|S(?:endF|endB|END_F|END_B|hard \d)|R(?:ecvF|ecvB|ECV_F|ECV_B)|C(?:onnected all|omputational task took)|: (?:\[Horovod)")
_PREFILTER = _ANCHORS

# Where ahocorasick_rs is installed (a dependency; it has wheels for every platform the project
# runs on), the chunk is searched for the triggers themselves in one Aho-Corasick pass in Rust:
# about 15x the anchor regex on NCCL_DEBUG=INFO text, and exact (no candidate lines to re-check).
# The anchors stay as the fallback where it cannot be imported.
try:
    import ahocorasick_rs as _ahocorasick
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _TRIGGER_SEARCH = None
else:
    _TRIGGER_LIST: list[bytes] = sorted(_HANDLERS, key=len, reverse=True)
    # a DFA: twice the default's speed on NCCL_DEBUG=INFO text (about 330 against 165 MiB/s on
    # 64 MiB, this machine), for a table of some tens of triggers that builds in microseconds
    _TRIGGER_SEARCH = _ahocorasick.BytesAhoCorasick(
        _TRIGGER_LIST, implementation=_ahocorasick.Implementation.DFA)

_SNIFF_WORDS = (b"NCCL INFO", b"NCCL WARN", b"Traceback (most recent call last)", b"[rank",
                b"ProcessGroupNCCL", b"torch.distributed", b"Watchdog caught", b"ChildFailedError",
                b"Communicators", b"oom-kill", b"Killed process", b"DataLoader", b"gloo",
                b"elastic", b"CUDA out of memory", b"NCCL version", b"[default",
                b"NVRM: ", b"CUDA error: ", b"oom_kill event", b"Out Of Memory",
                b"HW Exception by GPU")


def sniff_log(head: bytes, path: str) -> bool:
    """True when the first bytes (or the name) say this is a training/launcher/kernel log."""
    if nccl_ras.looks_like_ras_json(head):
        return True
    if head.startswith((b"\x80", b"PK\x03\x04", b"\x1f\x8b", b"\x7fELF")):
        return False  # pickle (FR dump), zip, gzip, ELF
    if any(word in head for word in _SNIFF_WORDS):
        return True
    name = os.path.basename(path).lower()
    if name.endswith((".log", ".out", ".err", ".txt")) or name in ("stdout", "stderr", "dmesg"):
        return is_text(head)
    return False


def is_text(head: bytes) -> bool:
    """Mostly printable: a text file of some kind (a file a user names is read as a log if so,
    whatever its name)."""
    if head.startswith((b"\x80", b"PK\x03\x04", b"\x1f\x8b", b"\x7fELF")):
        return False
    sample = head[:4096]
    if not sample:
        return False
    # counted in characters: a progress bar of '█' is three UTF-8 bytes per character, and a
    # paste of bars is text (an invalid byte decodes to U+FFFD and counts against)
    text = sample.decode("utf-8", errors="replace")
    if len(sample) == 4096:
        text = text[:-2]  # a character the sample cut in two
    if not text:
        return False
    printable = sum(1 for ch in text if ch in "\t\n\r" or (ch.isprintable() and ch != "\ufffd"))
    return printable / len(text) > 0.85


def scan_log(path: str, data: bytes | None = None, rank_hint: int | None = None) -> list[LogEvent]:
    """Every event in one log. ``rank_hint`` (else the file name) gives the rank of lines that do not
    say theirs; ``data`` scans those bytes instead of reading ``path``."""
    hint_source = "hint"
    local_hint: int | None = None
    if rank_hint is None:
        guessed, is_local = infer_rank_from_path(path)
        if guessed is not None and is_local:
            local_hint = guessed
        elif guessed is not None:
            rank_hint, hint_source = guessed, "path"
    mtime = time.time()
    if data is None:
        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            raise BadInputError(path, f"cannot read log ({exc.strerror or exc})") from None
    ctx = Context(path=path, year=time.localtime(mtime).tm_year, now=mtime, rank_hint=rank_hint,
                  rank_hint_source=hint_source, local_hint=local_hint)
    if data is not None:
        return _scan_whole(data, ctx)
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise BadInputError(path, f"cannot read log ({exc.strerror or exc})") from None
    with handle:
        try:
            head = handle.read(NORMALIZE_MAX + 1)
            if len(head) <= NORMALIZE_MAX:  # a paste-sized log: read whole, normalized first
                return _scan_whole(head, ctx)
            handle.seek(0)
        except OSError as exc:
            raise BadInputError(path, f"cannot read log ({exc.strerror or exc})") from None
        return _finish(_scan_bytes_source(_chunks(handle, path), ctx, head[:4096]), ctx)


def _scan_whole(data: bytes, ctx: Context) -> list[LogEvent]:
    """A log held in memory: its logical lines rebuilt (``normalize``), events cite the original."""
    fixed = normalize(data)
    if fixed is None:
        return _finish(_scan_bytes_source(iter([data]), ctx, data[:4096]), ctx)
    events = _finish(_scan_bytes_source(iter([fixed.data]), ctx, fixed.data[:4096]), ctx)
    return [_cite_original(event, fixed) for event in events]


def _cite_original(event: LogEvent, fixed: Normalized) -> LogEvent:
    line_no = fixed.original_line(event.line_no)
    return event if line_no == event.line_no else dataclasses.replace(event, line_no=line_no)


def _chunks(handle: object, path: str) -> Iterator[bytes]:
    read = handle.read  # type: ignore[attr-defined]
    while True:
        try:
            piece = read(CHUNK)
        except OSError as exc:
            raise BadInputError(path, f"read failed ({exc.strerror or exc})") from None
        if not piece:
            return
        yield piece


def _scan_bytes_source(chunks: Iterator[bytes], ctx: Context, head: bytes) -> list[LogEvent]:
    if nccl_ras.looks_like_ras_json(head):
        whole = b"".join(_bounded(chunks, MAX_JSON_BYTES))
        found = nccl_ras.scan_json(whole.decode("utf-8", errors="replace"), ctx.path, ctx)
        if found is not None:
            return found
        chunks = iter([whole])
    return _Scanner(ctx).run(chunks)


def _bounded(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    total = 0
    for piece in chunks:
        total += len(piece)
        yield piece
        if total > limit:
            return


class _Scanner:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.events: list[LogEvent] = []
        self.consumed: set[int] = set()

    def run(self, chunks: Iterator[bytes]) -> list[LogEvent]:
        carry = b""
        base_line = 1  # line number of carry[0]
        skipping = False  # dropping the rest of an over-long line
        pending = next(chunks, None)
        while pending is not None:
            data = pending
            pending = next(chunks, None)
            if skipping:
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data = data[nl:]
                skipping = False
            buf = carry + data if carry else data
            last_nl = buf.rfind(b"\n")
            if len(buf) - last_nl - 1 > MAX_LINE:  # the unfinished last line is already too long
                buf = buf[:last_nl + 1 + MAX_LINE]
                skipping = True
            # Bytes needed after the cut so that blocks starting before it can be read whole.
            while pending is not None and len(buf) < LOOKAHEAD * 2 and not skipping:
                more = pending
                pending = next(chunks, None)
                buf += more
                last_nl = buf.rfind(b"\n")
                if len(buf) - last_nl - 1 > MAX_LINE:
                    buf = buf[:last_nl + 1 + MAX_LINE]
                    skipping = True
            final = pending is None
            if final:
                cut = len(buf)
            else:
                cut = buf.rfind(b"\n", 0, max(0, len(buf) - LOOKAHEAD)) + 1
                if cut <= 0:
                    cut = buf.rfind(b"\n") + 1
                    if cut <= 0:
                        cut = len(buf)
            self._scan(buf, cut, base_line)
            base_line += buf.count(b"\n", 0, cut)
            carry = buf[cut:]
            if skipping and final:
                break
        if carry:
            self._scan(carry, len(carry), base_line)
        return self.events

    def _scan(self, buf: bytes, cut: int, base_line: int) -> None:
        pos = 0
        count_pos = 0
        line_no = base_line
        findall = _TRIGGERS.findall
        for hit_start, hit_end in _hits(buf, cut):
            if hit_start < pos:
                continue  # another trigger on a line already handled
            start = buf.rfind(b"\n", 0, hit_start) + 1
            end = buf.find(b"\n", hit_end)
            if end < 0:
                end = len(buf)
            line_no += buf.count(b"\n", count_pos, start)
            count_pos = start
            pos = end + 1
            if line_no in self.consumed:
                continue
            triggers = set(findall(buf, start, end))
            if not triggers:
                continue
            self._handle(buf, start, end, line_no, triggers)

    def _handle(self, buf: bytes, start: int, end: int, line_no: int,
                triggers: set[bytes]) -> None:
        handlers: list[Handler] = []
        for trigger in triggers:
            for handler in _HANDLERS[trigger]:
                if handler not in handlers:
                    handlers.append(handler)
        handlers.sort(key=_PRIORITY.__getitem__)
        line = parse_line(decode(buf[start:end], MAX_LINE), line_no, self.ctx)
        follow = Follow(lambda: self._follow(buf, end, line_no))
        for handler in handlers:
            try:
                found = handler(line, self.ctx, follow)
            except (ValueError, IndexError, KeyError, TypeError, OverflowError, RecursionError):
                continue
            if found:
                self.events.extend(found)
                self.consumed |= follow.consumed
                return

    def _follow(self, buf: bytes, end: int, line_no: int) -> Iterator[Line]:
        pos = end + 1
        limit = min(len(buf), end + 1 + LOOKAHEAD)
        number = line_no
        for _ in range(MAX_FOLLOW_LINES):
            if pos >= limit:
                return
            nxt = buf.find(b"\n", pos, limit)
            if nxt < 0:
                nxt = limit
            number += 1
            yield parse_line(decode(buf[pos:nxt], MAX_LINE), number, self.ctx)
            pos = nxt + 1


def _hits(buf: bytes, cut: int) -> Iterator[tuple[int, int]]:
    """Where a trigger (or, without Aho-Corasick, an anchor) is in ``buf[:cut]``, in order."""
    if _TRIGGER_SEARCH is not None:
        for _, start, end in _TRIGGER_SEARCH.find_matches_as_indexes(memoryview(buf)[:cut]):
            yield start, end
        return
    for m in _PREFILTER.finditer(buf, 0, cut):
        yield m.start(), m.end()


def _finish(events: list[LogEvent], ctx: Context) -> list[LogEvent]:
    """Late pid->rank attribution: NCCL lines printed before the ``Init COMPLETE`` that names the
    process's rank (or in another file section) get it now."""
    if not ctx.pid_rank:
        return events
    out: list[LogEvent] = []
    for event in events:
        pid, host = event.fields.get("pid"), event.fields.get("host")
        src = event.fields.get("rank_source")
        if isinstance(pid, int) and isinstance(host, str) and src not in ("prefix", "pid") \
                and event.kind in ("nccl_warn", "nccl_transport_error", "cuda_error",
                                   runtime_lines.KIND):
            known = ctx.pid_rank.get((host, pid))
            if known is not None:
                fields = dict(event.fields)
                fields["rank_source"] = "pid"
                event = dataclasses.replace(event, rank=known[1], fields=fields)
        out.append(event)
    return out
