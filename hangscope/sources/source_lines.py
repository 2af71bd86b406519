"""The job's source lines that its stacks cite, read where the job ran and carried in the bundle.

A py-spy dump without ``--native`` shows no frame for a C call made straight from the job's code
(``with self._lock:``, ``lock.acquire()``, ``sock.recv()``): the stack ends at the job's line, and
that line says what the thread waits on. The files are at the paths the stacks name only on the
job's own machine, so collection reads the lines then and stores them beside the stacks; analysis
elsewhere reads them from the bundle instead of the disk.

Bundle file ``ranks/<rank>/source-lines.json`` (kind ``source_lines``)::

    {"schema": "hangscope.source_lines/1",
     "files": {"/job/train.py": {"43": "        with self.file_lock:",
                                 "44": "            with self.stats_lock:"}}}

Each cited line is stored with one line of context on either side (a line that waits on a
torch Work: ``WAIT_CONTEXT`` lines before it); files that cannot be read at
collection are left out (a stack from a deleted file, a ``<frozen ...>`` module). Only the job's
own files and the standard library's threading/queue are useful, but every Python frame's file is
taken while within the caps, so a report can show any cited line.
"""

from __future__ import annotations

import json
import linecache
import os
from collections.abc import Iterable, Mapping

from hangscope.model import JobEvidence, StackSample
from hangscope.sources.jsonfile import read_schema_file

KIND = "source_lines"
SCHEMA = "hangscope.source_lines/1"
FILE_NAME = "source-lines.json"
MAX_BYTES = 4 << 20
MAX_LINES = 4000  # per rank: a job's stacks cite a few dozen lines
MAX_LINE_CHARS = 400
CONTEXT = 1
# A line that waits on a torch Work (``req.wait()``) gets more lines before it: the call that
# made the Work (``req = dist.irecv(buf, src=prev)``) names the p2p op and its peer.
WAIT_CONTEXT = 12


def cited_in(samples: Iterable[StackSample | None]) -> set[tuple[str, int]]:
    """(filename, line) of every Python frame of the samples."""
    return {(frame.filename, frame.line) for sample in samples if sample is not None
            for thread in sample.threads for frame in thread.frames
            if not frame.native and frame.line}


def record(samples: Iterable[StackSample | None]) -> bytes | None:
    """The bundle file for the lines these samples cite, None when none is readable here."""
    lines = read_lines(cited_in(samples))
    return to_json(lines) if lines else None


def read_lines(cited: Iterable[tuple[str, int]]) -> dict[str, dict[int, str]]:
    """The cited lines (and their context) of the files readable here, within the caps."""
    found: dict[str, dict[int, str]] = {}
    count = 0
    for filename, line in sorted(set(cited)):
        if count >= MAX_LINES:
            break
        if not os.path.isabs(filename) or not os.path.isfile(filename):
            continue
        lines = found.setdefault(filename, {})
        before = WAIT_CONTEXT if ".wait(" in linecache.getline(filename, line) else CONTEXT
        for number in range(max(1, line - before), line + CONTEXT + 1):
            if number in lines:
                continue
            text = linecache.getline(filename, number)
            if text:
                lines[number] = text.rstrip("\n")[:MAX_LINE_CHARS]
                count += 1
        if not lines:
            del found[filename]
    return found


def to_json(lines: Mapping[str, Mapping[int, str]]) -> bytes:
    files = {name: {str(n): text for n, text in sorted(numbers.items())}
             for name, numbers in sorted(lines.items())}
    return json.dumps({"schema": SCHEMA, "files": files}, sort_keys=True).encode()


def load_source_lines(path: str, rank: int | None, evidence: JobEvidence,
                      problems: list[str]) -> None:
    """Bundle loader: adds the file's lines to ``evidence.source_lines`` (all ranks share them,
    by file name)."""
    doc = read_schema_file(path, SCHEMA, MAX_BYTES, "source lines", problems)
    files = doc.get("files") if doc is not None else None
    if not isinstance(files, dict):
        return
    for name, numbers in files.items():
        if not isinstance(name, str) or not isinstance(numbers, dict):
            continue
        into = evidence.source_lines.setdefault(name, {})
        for number, text in numbers.items():
            if isinstance(text, str) and str(number).isdigit():
                into[int(number)] = text[:MAX_LINE_CHARS]


def line_text(lines: Mapping[str, Mapping[int, str]], filename: str, line: int) -> str | None:
    """The text of ``filename:line``: from the evidence's carried lines, else from the file when
    it is readable here; None when neither has it."""
    carried = lines.get(filename, {}).get(line)
    if carried is not None:
        return carried
    if not os.path.isfile(filename):
        return None
    return linecache.getline(filename, line).rstrip("\n") or None
