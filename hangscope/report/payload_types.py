"""The report payload's shape: TypedDicts for every part of :class:`Payload`.

See :mod:`hangscope.report.payload` for the layout and how it is built. Columns are parallel
lists; ``int`` string fields are indices into ``Payload.strings`` (``-1``: none).
"""

from __future__ import annotations

from typing import TypedDict

from hangscope.report.config_table import ConfigRow


class Collective(TypedDict):
    pg: str | None
    pg_desc: str
    seq: int | None
    op: str


class EvidenceColumns(TypedDict):
    source: list[int]
    rank: list[int | None]
    detail: list[str]
    where: list[int]


class FindingData(TypedDict):
    kind: str
    culprits: str
    waiting: str
    collective: Collective | None
    confidence: float
    summary: str
    evidence: EvidenceColumns


class Summary(TypedDict):
    status: str
    world_size: int | None
    ranks_seen: str
    ranks_missing: str
    n_seen: int
    version: str
    inputs: list[str]
    headline: str


class ClassColumns(TypedDict):
    id: list[str]
    ranks: list[str]
    count: list[int]
    role: list[int]
    state: list[int]
    where: list[int]
    last: list[int]
    rep: list[int]
    gpu: list[int]  # the class's ranks' GPUs (verdict ``gpus``); all -1 when no GPU evidence


class RankColumns(TypedDict):
    rank: list[int]
    cls: list[int]
    host: list[int]
    pid: list[int | None]
    status: list[int]
    gpu: list[int]  # the rank's GPU line, -1 without one


class FrameColumns(TypedDict):
    name: list[int]
    file: list[int]
    line: list[int | None]
    lib: list[int]


class TreeColumns(TypedDict):
    source: str
    parent: list[int]
    frame: list[int]
    ranks: list[int]
    count: list[int]
    truncated: int


class ThreadColumns(TypedDict):
    name: list[int]
    tid: list[int]
    main: list[bool]
    active: list[bool | None]
    gil: list[bool | None]
    stack: list[list[int]]  # frame indices, innermost first
    cut: list[int]  # frames left out (deepest recursion)


class StacksData(TypedDict):
    source: int
    path: int
    taken_at: float
    samples: int
    threads: ThreadColumns


class FrEntryColumns(TypedDict):
    rid: list[int]
    seq: list[int]
    op: list[int]
    state: list[int]
    done: list[bool | None]
    sizes: list[int]
    created: list[float | None]  # ms since the epoch
    started: list[float | None]
    completed: list[float | None]
    p2p: list[bool]
    peer: list[int | None]
    where: list[int]  # the user's call site


class FrGroup(TypedDict):
    pg: int  # label "name (desc)"
    pending: int  # index into the columns of the op it is blocked in, -1 if none
    total: int  # entries the dump holds for this group
    entries: FrEntryColumns


class FrData(TypedDict):
    path: int
    version: int
    backend: int
    groups: list[FrGroup]
    stack: list[int]  # call stack of the op it is blocked in (else the newest op)


class LogColumns(TypedDict):
    kind: list[int]
    sev: list[int]
    msg: list[str]
    where: list[int]
    time: list[float | None]
    omitted: int


class ProcColumns(TypedDict):
    status: list[int]
    at: list[float]
    cpu: list[float | None]
    rss: list[int | None]
    threads: list[int | None]
    wchan: list[int]
    exit: list[int | None]
    signal: list[int | None]


class WorkerData(TypedDict):
    pid: int
    proc: ProcColumns
    stacks: StacksData | None


class RankDetail(TypedDict):
    rank: int
    host: int
    pid: int | None
    stacks: StacksData | None
    fr: FrData | None
    logs: LogColumns
    proc: ProcColumns
    workers: list[WorkerData]


class Payload(TypedDict):
    schema: str
    strings: list[str]
    summary: Summary
    findings: list[FindingData]
    gaps: list[str]
    notes: list[str]
    classes: ClassColumns
    ranks: RankColumns
    frames: FrameColumns
    tree: TreeColumns
    details: dict[str, RankDetail]
    job_logs: LogColumns
    config: list[ConfigRow]  # what differs between ranks; empty when they agree
