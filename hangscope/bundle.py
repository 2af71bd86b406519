"""The on-disk bundle: everything collected from a job, so any analysis can be re-run later.

Layout (schema ``hangscope.bundle/1``)::

    bundle/
      manifest.json             job, hosts, world size, what was collected how and when, gaps
      ranks/<rank>/<file>       per-rank evidence in its source format (FR dump bytes as torch
                                wrote them, py-spy JSON, process-state JSON, log excerpts)
      job/<file>                evidence of no single rank (the launcher's output), listed
                                under "job_files" and loaded with rank None

``manifest.json``::

    {"schema": "hangscope.bundle/1", "hangscope_version": "0.1.0", "created_at": 1790000000.0,
     "host": "node1", "node": "n1", "job_id": "4242", "expected_nodes": ["n1", "n2"],
     "node_index": 0, "group_rank": 0, "local_world_size": 4, "group_world_size": 2,
     "collected_at": 1789999998.0,
     "clock": {"wall_start": 1789999998.0, "wall_end": 1790000000.0,
               "monotonic_start": 5000.0, "monotonic_end": 5002.0},
     "partial": false, "cut_short": [],
     "job": {"launcher_pid": 123, "run_id": "..."}, "hosts": ["node1"], "world_size": 4,
     "ranks": {"0": {"host": "node1", "pid": 456, "local_rank": 0,
                     "files": [{"kind": "fr", "path": "ranks/0/fr_dump"}, ...]}},
     "collection": [{"source": "py-spy", "rank": 0, "status": "ok", "detail": "",
                     "started_at": 1790000000.0, "seconds": 0.02}],
     "gaps": ["rank 3: permission denied ..."]}

The fields from ``host`` to ``cut_short`` were added later without a schema bump (readers ignore
what they do not know, and every one of them is optional when read): see docs/bundle.md.

A bundle is untrusted input like any other: file paths in the manifest must stay inside the bundle
and each file goes through the same loader as it would on its own. New sources add a file kind and
add its loader to ``sources.registry.FILE_LOADERS``; the format itself does not change.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from hangscope import __version__
from hangscope.errors import BadInputError, UsageError
from hangscope.model import JobEvidence, LogEvent
from hangscope.redact import redact, redact_bytes

SCHEMA = "hangscope.bundle/1"
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 << 20

@dataclass(slots=True)
class CollectionRecord:
    source: str
    rank: int | None
    status: str  # ok | failed | timeout | skipped
    detail: str = ""
    started_at: float = 0.0
    seconds: float = 0.0


@dataclass(slots=True)
class RankEntry:
    host: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    files: list[dict[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class BundleWriter:
    """Collectors write into this; ``close`` writes the manifest last, so a manifest means done."""

    root: str
    job: dict[str, Any] = field(default_factory=dict)
    world_size: int | None = None
    hosts: list[str] = field(default_factory=list)
    ranks: dict[int, RankEntry] = field(default_factory=dict)
    job_files: list[dict[str, str]] = field(default_factory=list)
    collection: list[CollectionRecord] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # host, node, job_id, clock... (top level)
    cut_short: list[str] = field(default_factory=list)  # what a time limit stopped
    late_files: int = 0  # files offered after close(): not written
    redact: bool = False  # mask secrets in the copies (logs, JSON records; never FR dumps)
    _made: set[str] = field(default_factory=set, repr=False)  # folders already created
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _closed: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        os.makedirs(self.root, exist_ok=True)

    def rank_entry(self, rank: int) -> RankEntry:
        return self.ranks.setdefault(rank, RankEntry())

    def add_file(self, rank: int, kind: str, name: str, data: bytes) -> str:
        """Store one evidence file for ``rank``; returns its path inside the bundle. After
        ``close`` (a collection cut short by its time limit) the file is dropped and counted."""
        with self._lock:
            if self._closed:
                self.late_files += 1
                return ""
            rel = self._write(f"ranks/{rank}", name, self._clean(kind, data))
            self.rank_entry(rank).files.append({"kind": kind, "path": rel})
        return os.path.join(self.root, rel)

    def add_job_file(self, kind: str, name: str, data: bytes, source_path: str = "") -> str:
        """Store a file that belongs to no single rank (the launcher's output)."""
        with self._lock:
            if self._closed:
                self.late_files += 1
                return ""
            rel = self._write("job", name, self._clean(kind, data))
            self.job_files.append({"kind": kind, "path": rel, "source": source_path})
        return os.path.join(self.root, rel)

    def _clean(self, kind: str, data: bytes) -> bytes:
        """With ``redact``, the copy that may leave the machine has its secrets masked: a JSON
        record string by string (it stays valid JSON), any other text line by line; a
        flight-recorder dump is kept byte for byte (a pickle must not be edited)."""
        if not self.redact or kind == "fr":
            return data
        try:
            record = json.loads(data)
        except ValueError:
            return redact_bytes(data)
        cleaned = redact(record)
        return data if cleaned == record else json.dumps(cleaned).encode()

    def file_count(self) -> int:
        with self._lock:
            return len(self.job_files) + sum(len(e.files) for e in self.ranks.values())

    def _write(self, folder: str, name: str, data: bytes) -> str:
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"bad bundle file name {name!r}")
        rel = f"{folder}/{name}"
        full = os.path.join(self.root, rel)
        folder_path = os.path.dirname(full)
        if folder_path not in self._made:
            os.makedirs(folder_path, exist_ok=True)
            self._made.add(folder_path)
        with open(full, "wb") as handle:
            handle.write(data)
        return rel

    def close(self) -> str:
        """Write the manifest; later ``add_file`` calls are dropped (see ``late_files``)."""
        with self._lock:
            self._closed = True
            return self._write_manifest()

    def _write_manifest(self) -> str:
        manifest = {
            **self.meta,
            "schema": SCHEMA,
            "hangscope_version": __version__,
            "created_at": time.time(),
            "partial": bool(self.cut_short),
            "cut_short": list(self.cut_short),
            "job": self.job,
            "hosts": sorted(set(self.hosts)),
            "world_size": self.world_size,
            "ranks": {str(rank): {"host": entry.host, "pid": entry.pid,
                                  "local_rank": entry.local_rank, "files": list(entry.files)}
                      for rank, entry in sorted(self.ranks.items())},
            "job_files": list(self.job_files),
            "collection": [vars_of(record) for record in list(self.collection)],
            "gaps": list(self.gaps),
        }
        return write_manifest(self.root, redact(manifest) if self.redact else manifest)


def write_manifest(root: str, manifest: dict[str, Any]) -> str:
    """Write ``root``'s manifest whole or not at all (a reader never sees half of it)."""
    path = os.path.join(root, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


OWN_ENTRIES = frozenset({MANIFEST, MANIFEST + ".tmp", "ranks", "job"})


def clear_old_bundle(root: str) -> None:
    """Remove an earlier collection at ``root`` (``attach --force`` into an old ``--out``), so
    its files cannot sit beside the new ones. Anything that is not laid out as a bundle, or a
    link, is left alone and refused."""
    if not os.path.lexists(root):
        return
    if os.path.islink(root) or not os.path.isdir(root) \
            or not set(os.listdir(root)) <= OWN_ENTRIES:
        raise UsageError(f"{root}: exists and is not a hangscope bundle; not overwriting it")
    shutil.rmtree(root)


def vars_of(record: CollectionRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


def is_bundle(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MANIFEST))


def read_manifest(root: str) -> dict[str, Any]:
    path = os.path.join(root, MANIFEST)
    try:
        if os.path.getsize(path) > MAX_MANIFEST_BYTES:
            raise BadInputError(path, "manifest is implausibly large")
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as exc:
        raise BadInputError(path, f"unreadable bundle manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise BadInputError(path, f"not a {SCHEMA} manifest")
    return manifest


def load_bundle(root: str, evidence: JobEvidence, problems: list[str], *,
                manifest: dict[str, Any] | None = None,
                skip_job_files: frozenset[str] = frozenset(),
                gap_prefix: str = "") -> dict[str, Any]:
    """Load every file the manifest lists through its kind's loader; returns the manifest.

    When several bundles are merged (``sources.merge``) the caller passes the manifest it read,
    the job files another bundle already holds (``skip_job_files``: paths as listed) and a
    prefix naming this bundle's node for its gaps."""
    manifest = read_manifest(root) if manifest is None else manifest
    world = manifest.get("world_size")
    if isinstance(world, int) and world > 0:
        evidence.world_size = max(evidence.world_size or 0, world)
    gaps = manifest.get("gaps")
    if isinstance(gaps, list):
        evidence.gaps.extend(gap_prefix + str(gap) for gap in gaps)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, dict):
        raise BadInputError(os.path.join(root, MANIFEST), "'ranks' is not a mapping")
    real_root = os.path.realpath(root)
    job_files = manifest.get("job_files") or []
    if not isinstance(job_files, list):
        job_files = []
    job_files = [item for item in job_files
                 if not (isinstance(item, dict) and item.get("path") in skip_job_files)]
    scanned = _scan_logs(root, real_root, job_files, ranks)
    for item in job_files:
        _load_listed(root, real_root, item, None, evidence, problems, scanned)
    for key, entry in ranks.items():
        if not (isinstance(key, str) and key.isdigit() and isinstance(entry, dict)):
            problems.append(f"{root}/{MANIFEST}: bad rank entry {key!r}")
            continue
        rank = int(key)
        rank_ev = evidence.rank(rank)
        rank_ev.host = _opt_str(entry.get("host")) or rank_ev.host
        rank_ev.pid = _opt_int(entry.get("pid")) or rank_ev.pid
        rank_ev.local_rank = _opt_int(entry.get("local_rank"))
        for item in _rank_files(entry):
            _load_listed(root, real_root, item, rank, evidence, problems, scanned)
    return manifest


# a listed log's scan, by (its full path, the rank it is filed under): events, or its problem
_Scanned = dict[tuple[str, int | None], tuple[list[LogEvent], str | None]]


def _rank_files(entry: Any) -> list[Any]:
    files = entry.get("files") if isinstance(entry, dict) else None
    return files if isinstance(files, list) else []


def _scan_logs(root: str, real_root: str, job_files: list[Any],
               ranks: dict[Any, Any]) -> _Scanned:
    """Scan every log the manifest lists at once (``logs.pool``: one worker per core where
    they are megabytes), so that loading then files each one's events in the manifest's order."""
    listed: list[tuple[Any, int | None]] = [(item, None) for item in job_files]
    for key, entry in ranks.items():
        if isinstance(key, str) and key.isdigit():
            listed += [(item, int(key)) for item in _rank_files(entry)]
    logs: list[tuple[str, int | None]] = []
    for item, rank in listed:
        if isinstance(item, dict) and item.get("kind") == "log":
            full = _inside(real_root, root, str(item.get("path", "")))
            if full is not None and os.path.isfile(full):
                logs.append((full, rank))
    if not logs:
        return {}
    from hangscope.sources.logs import pool

    results = pool.scan_files([path for path, _ in logs], ranks=[rank for _, rank in logs])
    return {key: (events, problem) for key, (_, events, problem) in zip(logs, results,
                                                                         strict=True)}


def _inside(real_root: str, root: str, rel: str) -> str | None:
    """``rel``'s real path if it lies inside the bundle, else None (a hostile manifest)."""
    full = os.path.realpath(os.path.join(root, rel))
    return full if full.startswith(real_root + os.sep) else None


def _load_listed(root: str, real_root: str, item: Any, rank: int | None,
                 evidence: JobEvidence, problems: list[str], scanned: _Scanned) -> None:
    if not isinstance(item, dict):
        return
    kind, rel = str(item.get("kind", "")), str(item.get("path", ""))
    full = _inside(real_root, root, rel)
    if full is None:
        problems.append(f"{root}/{MANIFEST}: refused path {rel!r} outside the bundle")
        return
    from hangscope.sources.logs.loader import attribute
    from hangscope.sources.registry import FILE_LOADERS

    loader = FILE_LOADERS.get(kind)
    if loader is None:
        problems.append(f"{full}: unknown evidence kind {kind!r} (newer hangscope?)")
        return
    if not os.path.isfile(full):
        problems.append(f"{full}: listed in the manifest but missing")
        return
    done = scanned.pop((full, rank), None) if kind == "log" else None
    if done is None:
        loader(full, rank, evidence, problems)
    elif done[1] is not None:
        problems.append(done[1])
    else:
        attribute(done[0], rank, evidence)


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
