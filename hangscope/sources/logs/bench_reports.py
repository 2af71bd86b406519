# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Reports of collectives and GPU links that completed, from tools other than nccl-tests.

DeepSpeed's comms logger (``deepspeed/utils/comms_logging.py``, ``comms_logger.verbose``) prints
one line per collective it timed, after it completed::

    [2022-06-26 01:39:55,722] [INFO] [logging.py:69:log_dist] [Rank 0] rank=0 | comm op: reduce_scatter_tensor | time (ms): 9.46 | msg size: 678.86 MB | algbw (Gbps): 1204.52  | busbw (Gbps): 1129.23

CUDA's ``p2pBandwidthLatencyTest`` (cuda-samples) prints GPU-to-GPU latency matrices, the
diagonal a GPU to itself::

    P2P=Enabled Latency (P2P Writes) Matrix (us)
       GPU     0      1      2      3
         0   4.95 49206.88 49206.64 49206.69
         1 49206.62   2.08 49206.51 49206.52

Benchmarks of collectives print a table of numbers under a header naming bandwidth (the
all_reduce sweeps of Megatron's and others' benchmark scripts), or one block per host and trial
(``stas00/ml-engineering``'s ``all_reduce_bench.py``)::

    size(MB)   tavg(usec)    tmin(usec)    tmax(usec)  avgbw(GB/sec)  maxbw(GB/sec)  minbw(GB/sec)
    0.10      227.7          196.8          692.7          0.77           0.89           0.25

    hf-dgx-01:2:
     duration: 0.8994 sec
     busbw: 53.3711  Gbps

Events: ``bench_rows`` at a table's header (``rows``: its all-numeric rows, ``header``);
``bench_measure`` at each ``busbw:`` line (``gbps``); ``comm_op_done`` at each logger line (``op``, ``time_ms`` where the line holds it); ``p2p_matrix`` at a latency
matrix's title (``gpus``, ``diag_us`` and ``off_us``: the medians of the diagonal and of the rest,
``title``). The lines are no rank's subject (a matrix is the host's).
"""

from __future__ import annotations

import re
from statistics import median

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import Context, Line, make_event

MAX_GPUS = 64
# (the time may be on a line of its own where a terminal wrapped the record)
_COMM_OP = re.compile(r"\|\s*comm op:\s*(?P<op>\w+)(?:\s*\|\s*time \(ms\):\s*(?P<ms>\d+(?:\.\d+)?))?")
_MATRIX = re.compile(r"(?P<title>[\w=\- ]*Latency[\w()= \-]*Matrix) \(us\)")
_HEADER = re.compile(r"^\s*GPU(?:\s+\d+)+\s*$")
_ROW = re.compile(r"^\s*(?P<gpu>\d+)(?P<values>(?:\s+\d+(?:\.\d+)?)+)\s*$")
# a header cell that names a bandwidth: busbw, algbw, avgbw(GB/sec), "Bandwidth (GB/s)", Gbps
_BW_HEADER = re.compile(r"(?i)(?:bus|alg|avg|max|min)bw|bandwidth|\bG[Bb](?:/s(?:ec)?|ps)\b")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
_MEASURE = re.compile(r"^\s*busbw:\s*(?P<gbps>\d+(?:\.\d+)?)\s*Gbps\s*$")
MAX_ROWS = 400
MIN_ROWS = 3  # rows of numbers under one header: a table, not a stray line of figures
MIN_CELLS = 3  # cells of a header, and of each row under it
# the bandwidth cells _BW_HEADER reads, as triggers: lower case, capitalised, and any "...BW"
# (not a bare "bw": "fwd_bwd" is on every step line of many training logs)
_BW_CELLS = tuple(spelling.encode() for cell in ("bus", "alg", "avg", "max", "min")
                  for spelling in (cell + "bw", cell.capitalize() + "bw")) + (b"BW",)


def comm_op(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _COMM_OP.search(line.body)
    if m is None:
        return []
    fields: dict[str, str | int | float] = {"op": m.group("op")}
    if m.group("ms"):
        fields["time_ms"] = float(m.group("ms"))
    return [make_event("comm_op_done", line, ctx, "info", fields, rank=None, rank_source="")]


def latency_matrix(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _MATRIX.search(line.body)
    if m is None:
        return []
    diag: list[float] = []
    off: list[float] = []
    rows = 0
    for following in follow.lines():
        body = following.body
        if _HEADER.match(body):
            continue
        row = _ROW.match(body)
        if row is None or rows >= MAX_GPUS:
            break
        gpu = int(row.group("gpu"))
        for column, value in enumerate(row.group("values").split()):
            (diag if column == gpu else off).append(float(value))
        rows += 1
    if rows < 2 or not diag or not off:
        return []
    return [make_event("p2p_matrix", line, ctx, "info",
                       {"title": m.group("title").strip(), "gpus": rows,
                        "diag_us": median(diag), "off_us": median(off)},
                       rank=None, rank_source="")]


def _numbers(body: str) -> int:
    """The count of cells in a row made only of numbers, else 0."""
    cells = body.split()
    return len(cells) if len(cells) >= MIN_CELLS and all(_NUMBER.match(c) for c in cells) else 0


def bench_table(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A header naming bandwidth over rows of numbers only, as many cells as the header has
    columns (give or take one): each row a size the benchmark measured and finished."""
    body = line.body.strip()
    cells = body.split()
    if len(cells) < MIN_CELLS or not _BW_HEADER.search(body) or sum(
            1 for c in cells if _NUMBER.match(c)) > 1 or "|" in body:
        return []
    rows = 0
    for following in follow.lines():
        width = _numbers(following.body)
        if not width or abs(width - len(cells)) > 1 or rows >= MAX_ROWS:
            break
        rows += 1
    if rows < MIN_ROWS:
        return []
    return [make_event("bench_rows", line, ctx, "info", {"rows": rows, "header": body[:160]},
                       rank=None, rank_source="")]


def bench_measure(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _MEASURE.match(line.body)
    if m is None:
        return []
    return [make_event("bench_measure", line, ctx, "info", {"gbps": float(m.group("gbps"))},
                       rank=None, rank_source="")]


HANDLERS: list[tuple[bytes, Handler]] = [
    *((cell, bench_table) for cell in _BW_CELLS),
    (b"andwidth", bench_table),
    (b"GB/s", bench_table),
    (b"Gbps", bench_table),
    (b"busbw:", bench_measure),
    (b"comm op: ", comm_op),
    (b"Matrix (us)", latency_matrix),
]
