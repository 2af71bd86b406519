"""Progress lines: how far a rank's own log says it got, and where that log ends.

A training loop prints its position in many wordings; these are recognised, with or without a
timestamp or rank prefix (``common.parse_line`` peels those):

* counters: ``step 41``, ``Step [41/600]``, ``global_step=41``, ``iter 41``, ``iteration 41/1000``,
  Megatron's ``iteration      100/   10000 |``, DeepSpeed's ``step=100, skipped=0``, fairseq's
  ``num_updates 100``, ``Batch 41/600``;
* DeepSpeed's fp16 loss scaler skipping a step whose gradients overflowed (``[deepspeed] OVERFLOW!
  Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768``): each line one more step
  ran, so a stream of them with the scale falling moves (unit ``overflow``);
* epochs: ``Epoch 3``, ``Epoch [3/10], Step [41/600]``, HF Trainer's ``{'loss': 2.1, ..., 'epoch':
  0.45}``, the PyTorch examples' ``Train Epoch: 1 [12800/60000 (21%)]``;
* tqdm bars (Lightning, HF Trainer, plain tqdm): ``Epoch 0:  45%|████▌     | 45/100 [00:10<00:12,
  4.50it/s]``; a bar redrawn with carriage returns counts by its last drawing.

Only the tail of a log is read (``tail.TAIL_BYTES``; the lines before it are counted so that line
numbers stay the file's). Per rank stream the scan yields at most two events: ``progress`` (the last
progress line: ``fields`` ``step``, ``total``, ``epoch``, ``unit``) and ``log_end`` (the last
non-blank line); ``advanced`` is set where an earlier line of the stream (or an earlier drawing of
a redrawn bar) stood at an earlier position in the same unit, or in a unit of a later line than
the last (DeepSpeed's ``step=1840`` lines, then an evaluation's ``Epoch 1/1`` header): the log
shows it move
(``advanced_since``: the line of that earlier position); ``lap_start`` is set where an earlier
line of the stream stood further on than its last lap's first line (a counter that started over:
trials, epochs whose number is not printed): that first line. Both are
facts, not failures: ``analysis/log_progress.py`` reads them. Where a
stream's progress lines also state a per-step time (``compute 38ms``, ``fwd_bwd=0.21s``,
``step_time: 67 ms``, the PyTorch examples' ``Time  0.123 ( 0.150)``: :func:`parse_timing`), the
``progress`` event carries the median of its last ``TIMING_SAMPLES`` such lines (``timing``,
``timing_value``, ``timing_unit``, ``timing_samples``, ``timing_first_line``): what
``detectors/straggler_logs.py`` compares across ranks. Numbers
inside words (``max_steps``, ``step_time``, ``--max-step 1000``) and plurals (``4 steps``) do not
count. False positives: any other line that says ``step N``; only the last one matters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from statistics import median

from hangscope.model import LogEvent
from hangscope.sources.logs.common import (
    SRUN_PATTERN,
    TEXT_RANK,
    Line,
    decode,
    make_event,
    parse_line,
)
from hangscope.sources.logs.heads import char_lengths, framed
from hangscope.sources.logs.normalize import normalize, wrap_width
from hangscope.sources.logs.tail import MAX_LINE, tail_lines

SETTLE_LINES = 2000  # lines read past the last new stream, or new end or progress of one
TIMING_SAMPLES = 16  # per-step times kept per stream (its latest progress lines)

# any of these (case-insensitive) must be in a line for it to be parsed as progress
_CANDIDATE = re.compile(rb"(?i)step|iter|epoch|num_updates|batch|%\||\(\d+%\)|/sec:|\]\s+eta\b")

_NUM = r"(\d+)(?:\s*(?:/|of)\s*(\d+))?"
# the launcher and torch heads that name a line's process (its stream is theirs, not its text's)
_HEADED = re.compile(rb"\[(?:rank\d|RANK \d|default\d|\d+,\d+\]<|\d{1,4}\] )|\(\w[\w.\-]* pid=")
# the one CUDA device a progress line names ("mem_usage:cuda:3 6.6GB", "on cuda:1")
_DEVICE = re.compile(rb"(?<![\w.])cuda:(\d{1,3})\b")
_SRUN = re.compile(SRUN_PATTERN.encode())  # srun -l's task id heads a line with a digit or blank
_K2_HEAD = re.compile(rb"\.py:\d+\] \(\d{1,5}/\d{1,5}\) ")  # icefall's "[train.py:908] (1/4) "
_BEFORE = r"(?<![\w\-.])"  # not inside a word, an option name or a dotted name
_BAR = re.compile(r"(\d{1,3})%\|[^|\n]{0,200}\|\s*(\d+)/(\d+)\s*\[")
_COUNTERS = (
    # (never nccl-tests' header "step: 2(factor)", the size multiplier)
    # (nor SLURM's "*** STEP 1809655.0 ON r6i4n3 CANCELLED", a job step's id, nor a timer's
    # decimal, DeepSpeed's "step: 72.82" milliseconds: a count has no fraction)
    ("step", re.compile(_BEFORE + r"(?:global[_ ])?step\b['\"]?\s*[:=#]?\s*\[?\s*" + _NUM
                        + r"(?!\d|\(factor\)|\.\d)", re.I)),
    ("iter", re.compile(_BEFORE + r"iter(?:ation)?\b['\"]?\s*[:=#]?\s*\[?\s*" + _NUM, re.I)),
    ("update", re.compile(_BEFORE + r"num_updates\b['\"]?\s*[:=]?\s*(\d+)()", re.I)),
    # "Batch 41/600"; "Epoch 0, batch 10, loss ..." (never "batch size 14", "batch_size=14")
    ("batch", re.compile(_BEFORE + r"batch\b\s*[:=#]?\s*\[?\s*(\d+)"
                         r"(?:\s*/\s*(\d+)|(?=[,:\]|]|\s*$))()", re.I)),
    ("sample", re.compile(r"\[(\d+)/(\d+) \(\d+%\)\]")),
    # a metric logger's bracketed batch after the epoch's (DeiT, MAE, DETR, torchvision's
    # references: "Epoch: [0]  [  10/4003]  eta: ..."; mmcv: "Epoch [1][50/1000]", mmengine:
    # "Epoch(train) [1][  50/1000]"), or before its "eta" ("Test:  [ 40/196]  eta: 0:00:31")
    ("batch", re.compile(r"epoch\b(?:\s*\(\w+\))?\s*:?\s*\[\s*\d+(?:\s*/\s*\d+)?\s*\]"
                         r"\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]", re.I)),
    ("batch", re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]\s+eta\b", re.I)),
    # DeepSpeed's pipeline engine (PipelineEngine.train_batch, every steps_per_print):
    # "steps: 20 loss: 4.6178 iter time (s): 0.994 samples/sec: 257.601"
    ("step", re.compile(r"(?<![\w\-.])steps: (\d+) loss: ()")),
    # tf_cnn_benchmarks' rows (Horovod's and TensorFlow's benchmark): "10\timages/sec: 47.3 +/- 0.7"
    ("step", re.compile(r"^\s*(\d+)\s+(?:images|img|samples|examples|sequences|tokens)/sec:()")),
)
_EPOCH = re.compile(_BEFORE + r"epoch\b['\"]?\s*[:=#]?\s*\[?\s*(\d+(?:\.\d+)?)(?:\s*/\s*\d+)?",
                    re.I)


# Per-step times a training loop prints beside its step counter, most specific first: a rank's
# own compute says most (in synchronous training the step time is the same on every rank).
_TIME_KEYS = (
    ("compute", r"compute(?:[_ ]time)?"),
    ("fwd_bwd", r"(?:fwd[_ ]?bwd|forward[_ ]backward)(?:[_ ]time)?"),
    ("forward", r"(?:forward|fwd)(?:[_ ]time)?"),
    ("backward", r"(?:backward|bwd)(?:[_ ]time)?"),
    ("step_time", r"(?:step|iter(?:ation)?|batch)[_ ]time"
                  r"|(?:elapsed[_ ])?time[_ ]per[_ ](?:step|iter(?:ation)?)"),
    ("time", r"time"),
    ("data_time", r"data(?:[_ ]time)?"),
)
_TIMING = re.compile(
    r"(?<![\w\-./])(?:" + "|".join(f"(?P<{name}>{pattern})" for name, pattern in _TIME_KEYS)
    + r")\b['\"]?(?:\s*\((?P<punit>ms|s)\))?\s*[:=]?\s*"
    r"(?P<value>\d+(?:\.\d+)?)(?![\d:])\s*(?P<unit>ms|s|secs?|seconds)?\b",
    re.I)
_TO_MS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "secs": 1000.0, "seconds": 1000.0}


def parse_timing(text: str) -> tuple[str, float, str] | None:
    """The most specific per-step time a line states: (key, value, unit), seconds turned into
    ms; a value without a unit keeps unit "" (compared only with the same key's unitless
    values). A clock time (``time 12:03:44``) is no duration."""
    best: tuple[int, str, float, str] | None = None
    for found in _TIMING.finditer(text):
        key = next(name for name, _ in _TIME_KEYS if found.group(name))
        order = [name for name, _ in _TIME_KEYS].index(key)
        if best is not None and best[0] <= order:
            continue
        unit = (found.group("unit") or found.group("punit") or "").lower()
        value = float(found.group("value")) * _TO_MS.get(unit, 1.0)
        best = (order, key, value, "ms" if unit else "")
    return None if best is None else best[1:]


@dataclass(frozen=True, slots=True)
class Progress:
    """A position in training: ``step`` of ``total`` (a bar's count, an iteration...) within
    ``epoch``; either part may be unknown."""

    unit: str
    step: int | None
    total: int | None
    epoch: float | None


# DeepSpeed's fp16 loss scaler on a step whose gradients overflowed (loss_scaler.py): the step
# ran (forward, backward, the gradients' all-reduce) and its update was skipped. Each such line is
# one more step; its position is how many times the scale was halved (from 2^64 down)
_OVERFLOW = re.compile(r"OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: \d+, "
                       r"reducing to (\d+)")
OVERFLOW_TOP = 64


def parse_progress(text: str) -> Progress | None:
    """The position a progress line states, or None when the text states none."""
    overflow = _OVERFLOW.search(text)
    if overflow is not None:
        scale = int(overflow.group(1))
        return Progress("overflow", OVERFLOW_TOP - scale.bit_length(), None, None) \
            if 0 < scale < 1 << OVERFLOW_TOP else None
    epoch_match = _EPOCH.search(text)
    epoch = float(epoch_match.group(1)) if epoch_match else None
    bar = _BAR.search(text)
    if bar:
        return Progress("bar", int(bar.group(2)), int(bar.group(3)), epoch)
    for unit, pattern in _COUNTERS:
        found = pattern.search(text)
        if found:
            total = int(found.group(2)) if found.group(2) else None
            return Progress(unit, int(found.group(1)), total, epoch)
    if epoch is not None:
        return Progress("epoch", None, None, epoch)
    return None


def scan_progress(path: str, rank_hint: int | None = None) -> list[LogEvent]:
    """The last progress line and the last line of each rank stream in the log's tail. An
    unreadable file gives nothing (the event scan of the same file reports it).

    Lines are read from the end: a stream is done once its last line and its last progress line
    are found, and the scan stops ``SETTLE_LINES`` lines after the last stream that was not."""
    read = tail_lines(path, rank_hint)
    if read is None:
        return []
    ctx, first_line, lines, skip = read
    hinted = (ctx.rank_hint, ctx.local_hint)
    number = None  # the file's line number of a rebuilt line (1-based in, 1-based out)
    named: dict[int, tuple[int | None, int | None]] = {}
    if hinted == (None, None):
        named = _named_streams(lines, skip)
    # a tail hard-wrapped at one width (a terminal's or a tracker's cut) is read as its logical
    # lines; so is one whose device names no stream until it is (the device on a continuation)
    device_cut = hinted == (None, None) and not named and any(b"cuda:" in raw for raw in lines)
    # (a line's width in characters: a bar's blocks are three bytes each)
    wrapped = wrap_width(char_lengths(lines), lines) is not None
    # and so is one indented, or behind a relay's head, alike on every line
    relayed = framed(lines)
    fixed = normalize(b"\n".join(lines)) if device_cut or wrapped or relayed else None
    if fixed is not None:
        rebuilt = fixed.data.split(b"\n")
        renamed = _named_streams(rebuilt, set()) if hinted == (None, None) else {}
        if wrapped or relayed or renamed:
            lines, skip, number, named = rebuilt, set(), fixed.original_line, renamed
    last: dict[tuple[int | None, int | None], tuple[Line, Progress]] = {}
    ends: dict[tuple[int | None, int | None], Line] = {}
    times: dict[tuple[int | None, int | None], _Times] = {}
    # streams seen at two positions: the line of the nearest earlier one that stood further back
    advanced: dict[tuple[int | None, int | None], int] = {}
    # per stream, the latest line of each other unit: a stream whose last line is an epoch
    # header but whose step counter moved before it moved all the same
    others: dict[tuple[int | None, int | None], dict[str, Progress]] = {}
    # per stream still in its last lap: (the lowest position of its last lap read so far, the
    # line it is on); a stream whose earlier line stood further on started over after it
    lap: dict[tuple[int | None, int | None], tuple[tuple[float, int], int]] = {}
    lap_start: dict[tuple[int | None, int | None], int] = {}
    settled = 0  # lines since a stream last changed
    for index in range(len(lines) - 1, -1, -1):
        if settled > SETTLE_LINES and len(last) == len(ends):
            break
        raw = lines[index]
        if index in skip or not raw.strip():
            continue
        settled += 1
        segments = [s for s in raw.split(b"\r") if s.strip()]
        line_no = first_line + (index if number is None else number(index + 1) - 1)
        head = None
        key = hinted
        if raw[:1] in (b"[", b"(") or _SRUN.match(raw) or _K2_HEAD.search(raw, 0, 160):
            # process prefixes ([rank3]:, [default3]:, Ray's, srun -l's task id) start so; the
            # k2 logger's "(rank/world)" stands after the time and the file
            head = parse_line(decode(segments[0], MAX_LINE), line_no, ctx)
            key = (head.rank if head.rank is not None else ctx.rank_hint,
                   head.local_rank if head.local_rank is not None else ctx.local_hint)
        stream = named.get(index)
        if stream is not None and key == (None, None):
            key = stream
        if key in last:
            timed = times.get(key)
            wants_time = timed is not None and timed.wants()
            if (wants_time or key not in advanced or key in lap) and \
                    _CANDIDATE.search(segments[-1]):
                body = head.body if head is not None and len(segments) == 1 else \
                    parse_line(decode(segments[-1], MAX_LINE), line_no, ctx).body
                found = parse_progress(body)
                if found is not None and key in lap and found.unit == last[key][1].unit:
                    lowest, began = lap[key]
                    if _order(found) <= lowest:
                        lap[key] = (_order(found), line_no)
                    else:  # it stood further on before: the last lap began at ``began``
                        lap_start[key] = began
                        del lap[key]
                if found is not None and key not in advanced:
                    later = last[key][1] if found.unit == last[key][1].unit else \
                        others.setdefault(key, {}).setdefault(found.unit, found)
                    if _order(found) < _order(later):
                        advanced[key] = line_no  # an earlier line of the stream stood further back
                        settled = 0
                if found is not None and timed is not None and wants_time \
                        and timed.add(parse_timing(body), line_no):
                    settled = 0
            continue
        prefix = head.key if head is not None else ""
        for nth in range(len(segments) - 1, -1, -1):
            need_end = key not in ends
            candidate = _CANDIDATE.search(segments[nth]) is not None
            if not need_end and not candidate:
                if len(segments) - nth > 8:
                    break  # only the last drawings of a long-redrawn line are worth reading
                continue
            # a bar redrawn with carriage returns: its prefix is on the first drawing only
            line = (head if nth == 0 and head is not None else
                    parse_line((prefix if nth else "") + decode(segments[nth], MAX_LINE),
                               line_no, ctx))
            if stream is not None and key == stream:
                rank, local = stream
                line = replace(line, rank=rank, rank_source="content") if rank is not None \
                    else replace(line, local_rank=local)
            if need_end:
                ends[key] = line
                settled = 0
            found = parse_progress(line.body) if candidate else None
            if found is not None:
                last[key] = (line, found)
                if found.step is not None:
                    lap[key] = (_order(found), line_no)
                # a bar redrawn with carriage returns shows its own advance within the line
                first = parse_progress(decode(segments[0], MAX_LINE)) if nth else None
                if first is not None and first.unit == found.unit and _order(first) < _order(found):
                    advanced[key] = line_no
                timing = parse_timing(line.body)
                if timing is not None:
                    times[key] = _Times(timing[0], timing[2])
                    times[key].add(timing, line_no)
                settled = 0
                break
    if len(ends) > 1 and (len(last) > 1 or (None, None) not in last):
        # lines that name no rank in a log whose other lines do (and whose name names none):
        # the launcher's own, not a rank's stream; unless they alone say how far training got
        # (Megatron prints its iteration lines from one rank with no prefix, beside a
        # "[Rank 1] memory" line)
        ends.pop((None, None), None)
        last.pop((None, None), None)
    events = []
    for key, (line, found) in last.items():
        fields: dict[str, str | int | float] = {"unit": found.unit}
        if key in times:
            fields.update(times[key].fields())
        if found.step is not None:
            fields["step"] = found.step
        if found.total is not None:
            fields["total"] = found.total
        if found.epoch is not None:
            fields["epoch"] = found.epoch
        if key in advanced:
            fields["advanced"] = 1
            fields["advanced_since"] = advanced[key]
        if key in lap_start:
            fields["lap_start"] = lap_start[key]
        events.append(make_event("progress", line, ctx, "info", fields))
    events.extend(make_event("log_end", line, ctx, "info", {}) for line in ends.values())
    return events


def _named_streams(lines: list[bytes], skip: set[int]
                   ) -> dict[int, tuple[int | None, int | None]]:
    """Per progress line with no process prefix that names one rank in its text (a user's own
    ``rank 3: step 120``) or else one CUDA device (RETURNN's ``mem_usage:cuda:3``: one process per
    GPU), the stream it belongs to: (rank, None) or (None, device). Only where at least two
    streams are named this way; one name is one process, whose lines stay one stream."""
    found: dict[int, tuple[int | None, int | None]] = {}
    for index, raw in enumerate(lines):
        ranked, device = b"ank" in raw or b"ANK" in raw, b"cuda:" in raw
        if not (ranked or device) or index in skip or _HEADED.match(raw) \
                or not _CANDIDATE.search(raw):
            continue  # (a prefixed line's stream is its prefix's)
        text = decode(raw, MAX_LINE)
        if parse_progress(text) is None:
            continue  # (a wrapped line's continuation names the device but is no progress)
        ranks = {int(m.group("r")) for m in TEXT_RANK.finditer(text)} if ranked else set()
        if len(ranks) == 1:
            found[index] = (ranks.pop(), None)
            continue
        named = set(_DEVICE.findall(raw)) if device and not ranks else set()
        if len(named) == 1:
            found[index] = (None, int(named.pop()))
    return found if len(set(found.values())) >= 2 else {}


def _order(found: Progress) -> tuple[float, int]:
    """A position's place in training, to tell an earlier line from a later one of a stream:
    epoch first, then the counter (unknown parts count as the start)."""
    return (found.epoch if found.epoch is not None else -1.0,
            found.step if found.step is not None else -1)


@dataclass(slots=True)
class _Times:
    """One stream's per-step times under one key and unit, newest first."""

    key: str
    unit: str
    values: list[float] = field(default_factory=list)
    first_line: int = 0

    def wants(self) -> bool:
        return len(self.values) < TIMING_SAMPLES

    def add(self, timing: tuple[str, float, str] | None, line_no: int) -> bool:
        if timing is None or (timing[0], timing[2]) != (self.key, self.unit):
            return False
        self.values.append(timing[1])
        self.first_line = line_no
        return True

    def fields(self) -> dict[str, str | int | float]:
        return {"timing": self.key, "timing_value": round(median(self.values), 3),
                "timing_unit": self.unit, "timing_samples": len(self.values),
                "timing_first_line": self.first_line}


def position(event: LogEvent) -> tuple[float | None, int | None]:
    """(epoch, step) of a ``progress`` event."""
    epoch, step = event.fields.get("epoch"), event.fields.get("step")
    return (float(epoch) if isinstance(epoch, (int, float)) else None,
            step if isinstance(step, int) else None)


