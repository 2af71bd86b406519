"""Loader for PyTorch flight-recorder (FR) dumps, pickle or JSON, NCCL or gloo, torch 2.4 to 2.13.

What torch writes (``torch/csrc/distributed/c10d/FlightRecorder*.{cpp,hpp}``), one file per rank,
named ``<prefix><rank>`` (``TORCH_FR_DUMP_TEMP_FILE`` / ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, default
prefix ``/tmp/nccl_trace_rank_``), or JSON from ``_dump_fr_trace_json``::

    {"version": "2.10",                      # "2.2" (torch 2.4) ... "2.10" (torch 2.13)
     "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}, ...},
     "pg_status": {"0": {"last_enqueued_collective": 7, "last_started_collective": 7,
                         "last_completed_collective": 6}},          # >= 2.3; str values in JSON
     "comm_lib_version": "2.21.5", "nccl_comm_state": {...},         # optional
     "entries": [{"record_id": 12, "pg_id": 0, "process_group": ("0", "default_pg"),
                  "collective_seq_id": 7, "p2p_seq_id": 0, "op_id": 7,
                  "profiling_name": "nccl:all_reduce",   # "nccl:send 0->1", "nccl:recv 1<-0"
                  "time_created_ns": ..., "time_discovered_started_ns": ..., (None or 0)
                  "time_discovered_completed_ns": ..., "duration_ms": 1.5 (optional),
                  "input_sizes": [[4, 4]], "input_dtypes": ["Float"], "output_sizes": ...,
                  "output_dtypes": ..., "state": "scheduled" | "started" | "completed",
                  "retired": bool, "timeout_ms": 600000, "is_p2p": bool,
                  "frames": [{"name": ..., "filename": ..., "line": ...}],   # pickle only
                  "thread_id": "140..", "thread_name": "pt_main_thread"}, ...]}

gloo in torch 2.13 differs (see ``shared/TORCH-FACTS.md``): every entry is ``scheduled``, a finished
op is ``retired`` (so is one that failed: gloo raised, and ``pg_status`` counts it completed);
``pg_config`` has one slot keyed ``''``: the default group's ranks (``"[0, 1, 2, 3]"``) while no
sub-group exists, ``"[]"`` after, so sub-group membership must be inferred (a ``''`` group with
ranks is kept under the name ``''``: ``analysis.correlate`` decides what it describes); send/recv
are not recorded at all. Older versions lack ``pg_status``, ``is_p2p``, ``p2p_seq_id``,
``thread_*``, ``timeout_ms``: missing optional fields default, missing required ones reject the
entry (the rest of the file and the other ranks are still used).

The file name gives the rank (dumps carry no rank of their own): ``rank[_-]?N`` if present, else
the trailing number; ``prefix`` overrides that for odd naming schemes.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from hangscope import timing
from hangscope.errors import BadInputError
from hangscope.model import Frame, FrDump, FrEntry, ProcessGroupInfo
from hangscope.sources import fr_blocks, fr_corrections, safe_pickle

log = logging.getLogger(__name__)

MAX_DUMP_BYTES = 1 << 30  # a 2000-entry dump is a few MB; anything near this is not a dump
_REQUIRED = ("record_id", "profiling_name", "state", "collective_seq_id")
_RANK_IN_NAME = re.compile(r"rank[_\-.]?(\d+)(?!.*rank[_\-.]?\d)", re.IGNORECASE)
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.(?:json|pkl|pickle))?$")


def looks_like_fr_dump(head: bytes) -> bool:
    """Cheap sniff on the first bytes: a pickle protocol 2+ header, or JSON with FR keys."""
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return True
    text = head.lstrip()[:4096]
    return text.startswith(b"{") and (b'"entries"' in text or b'"pg_config"' in text
                                      or b'"version"' in text)


def rank_from_name(path: str, prefix: str | None = None) -> int | None:
    """The rank a dump's file name claims, or None if it names none."""
    base = os.path.basename(path)
    if prefix is not None:
        prefix_base = os.path.basename(prefix)
        if not base.startswith(prefix_base):
            return None
        rest = base[len(prefix_base):]
        for suffix in (".json", ".pkl", ".pickle"):
            rest = rest.removesuffix(suffix)
        return int(rest) if rest.isdigit() else None
    match = _RANK_IN_NAME.search(base) or _TRAILING_NUMBER.search(base)
    return int(match.group(1)) if match else None


def load_dump(path: str, rank: int, data: bytes | None = None) -> tuple[FrDump, list[str]]:
    """Read one dump. Returns it with per-entry problems (as one-line gaps).

    Raises BadInputError, naming the file, when the file as a whole is unusable.
    """
    raw, entries_raw = read_raw(path, data)
    problems: list[str] = fr_corrections.correct(raw, entries_raw)
    with timing.phase("reduce"):
        entries = _convert_entries(path, entries_raw, problems)
    return dump_of(path, rank, raw, entries), problems


def read_bytes(path: str) -> bytes:
    """The dump's bytes; BadInputError, naming the file, if unreadable or too large."""
    with timing.phase("read"):
        return _read_bounded(path)


def read_raw(path: str, data: bytes | None = None) -> tuple[dict[str, Any], list[Any]]:
    """The decoded dump and its raw entries; BadInputError, naming the file, if unusable."""
    if data is None:
        data = read_bytes(path)
    with timing.phase("unpickle"):
        raw = _decode(path, data)
    if not isinstance(raw, dict):
        raise BadInputError(path, f"not a flight-recorder dump (top level is {type(raw).__name__})")
    entries_raw = raw.get("entries")
    if entries_raw is None and "version" not in raw:
        raise BadInputError(path, "not a flight-recorder dump (no 'version' or 'entries')")
    if entries_raw is None:
        entries_raw = []
    if not isinstance(entries_raw, list):
        raise BadInputError(path, "'entries' is not a list")
    with timing.phase("reduce"):
        entries_raw = raw["entries"] = fr_blocks.resolve(entries_raw)
    return raw, entries_raw


def written_at(path: str) -> float | None:
    """When the dump file was last written (seconds since the epoch), None if it cannot be
    told: torch writes a dump in place, so this is the moment its records were taken."""
    try:
        return os.stat(path).st_mtime
    except (OSError, ValueError):
        return None


def dump_of(path: str, rank: int, raw: dict[str, Any], entries: list[FrEntry],
            backend: str | None = None) -> FrDump:
    """The dump, from its decoded form and its converted entries."""
    if backend is None:
        backend = next((e.backend for e in entries if e.backend), "")
    return FrDump(
        rank=rank,
        path=path,
        version=str(raw.get("version", "")),
        backend=backend,
        process_groups=_process_groups(raw.get("pg_config")),
        pg_status=_pg_status(raw.get("pg_status")),
        entries=entries,
        torch_version=None,
    )


def _read_bounded(path: str) -> bytes:
    try:
        size = os.path.getsize(path)
        if size > MAX_DUMP_BYTES:
            raise BadInputError(path, f"{size} bytes is too large for a flight-recorder dump")
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise BadInputError(path, exc.strerror or str(exc)) from None


def _decode(path: str, data: bytes) -> Any:
    if not data:
        raise BadInputError(path, "empty file")
    if data[:1] == b"\x80":
        try:
            return safe_pickle.loads(data)
        except safe_pickle.ForbiddenPickleError as exc:
            raise BadInputError(path, f"unsafe pickle refused ({exc})") from None
        except Exception as exc:  # noqa: BLE001 - hostile input may raise anything
            raise BadInputError(path, f"truncated or corrupt pickle ({type(exc).__name__}: "
                                      f"{_clip(str(exc))})") from None
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInputError(path, f"neither a pickle nor valid JSON ({_clip(str(exc))})") from None


def _clip(text: str, limit: int = 120) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


@functools.lru_cache(maxsize=65536)
def _parse_ranks(text: str) -> tuple[int, ...] | None:
    """``"[0, 1, 2]"`` -> (0, 1, 2) without eval; None when empty or malformed."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return None
    items = [item.strip() for item in body[1:-1].split(",") if item.strip()]
    if not items or not all(item.lstrip("-").isdigit() for item in items):
        return None
    return tuple(sorted(int(item) for item in items))


def _process_groups(pg_config: Any) -> dict[str, ProcessGroupInfo]:
    groups: dict[str, ProcessGroupInfo] = {}
    if not isinstance(pg_config, dict):
        return groups
    for key, cfg in pg_config.items():
        if not isinstance(cfg, dict):
            continue
        name = str(cfg.get("name", key))
        ranks_field = cfg.get("ranks")
        if isinstance(ranks_field, str):
            ranks = _parse_ranks(ranks_field)
        elif isinstance(ranks_field, list) and all(isinstance(r, int) for r in ranks_field):
            ranks = tuple(sorted(ranks_field)) or None
        else:
            ranks = None
        if not name and not ranks:
            continue  # gloo once a sub-group exists: '' with no ranks says nothing
        groups[name] = ProcessGroupInfo(name=name, desc=str(cfg.get("desc", "")), ranks=ranks)
    return groups


def _pg_status(raw: Any) -> dict[str, dict[str, int]]:
    status: dict[str, dict[str, int]] = {}
    if not isinstance(raw, dict):
        return status
    for pg, fields in raw.items():
        if not isinstance(fields, dict):
            continue
        parsed: dict[str, int] = {}
        for name, value in fields.items():
            try:
                parsed[str(name)] = int(value)
            except (TypeError, ValueError):
                continue
        status[str(pg)] = parsed
    return status


def _shape_list(value: Any) -> tuple[tuple[int, ...], ...]:
    """Sizes as nested tuples. Not validated per dimension: a bogus value only makes a
    signature differ, which is what a corrupt entry deserves."""
    if type(value) is not list:
        return ()
    try:
        return tuple(map(tuple, value))
    except TypeError:
        return ()


def _str_list(value: Any) -> tuple[str, ...]:
    if type(value) is str:  # one dtype as a bare string (torch's own analyzer tests write it)
        return (value,) if value else ()
    if type(value) is not list:
        return ()
    return tuple(map(str, value))


def _time_ns(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


# Stack frames are converted only for the newest entries of a dump and for unfinished ones: those
# are what findings cite and the report shows. Converting all 2000 x ~10 frames of 4096 ranks
# would cost more than reading the dumps.
FRAMES_KEPT_PER_DUMP = 64


def _convert_entries(path: str, entries: list[Any], problems: list[str]) -> list[FrEntry]:
    """Normalise raw entries. Hot path at scale: 4096 ranks x 2000 entries."""
    converter = Converter(path, len(entries), problems)
    convert = converter.convert
    out: list[FrEntry] = []
    append = out.append
    for index, raw in enumerate(entries):
        entry = convert(index, raw)
        if entry is not None:
            append(entry)
    return out


class Converter:
    """Turns one dump's raw entries into :class:`FrEntry`, one at a time, sharing what repeats
    (frames, shapes, names) within the dump. ``sources.fr_digest`` uses it for the records it
    keeps whole, so that they are exactly what the full loader makes."""

    def __init__(self, path: str, n_entries: int, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        self.frames_from = n_entries - FRAMES_KEPT_PER_DUMP
        self.frame_cache: dict[tuple[Any, Any, Any], Frame] = {}
        self.frames_cache: dict[tuple[Frame, ...], tuple[Frame, ...]] = {}
        # a record's frames by the identity of its frame dicts: torch shares (and c10 memoizes)
        # one dict per frame, so records of one call site hold the same ones; the raw list is
        # kept with the result, so that its dicts (and their ids) outlive the cache
        self.frames_by_ids: dict[tuple[int, ...], tuple[list[Any], tuple[Frame, ...]]] = {}
        self.name_cache: dict[Any, tuple[str, str, int | None, bool]] = {}
        self.interned: dict[Any, Any] = {}
        self.pg_cache: dict[Any, tuple[str, str]] = {}

    def parse_name(self, profiling_name: Any) -> tuple[str, str, int | None, bool]:
        parsed = self.name_cache.get(profiling_name)
        if parsed is None:
            parsed = self.name_cache[profiling_name] = _parse_profiling_name(str(profiling_name))
        return parsed

    def pg(self, raw: dict[str, Any]) -> tuple[str, str]:
        group = raw.get("process_group")
        pg = self.pg_cache.get(group) if type(group) is tuple else None
        if pg is None:
            pg = _pg_of(raw)
            if type(group) is tuple:
                self.pg_cache[group] = pg
        return pg

    def frames(self, raw: Any) -> tuple[Frame, ...]:
        """``_frames``, looked up by the identity of the frame dicts (a tuple of ints hashes in
        C; a tuple of Frames hashes through each Frame's Python-level ``__hash__``)."""
        if type(raw) is not list or not raw:
            return _frames(raw, self.frame_cache, self.frames_cache)
        ids = tuple(map(id, raw))
        known = self.frames_by_ids.get(ids)
        if known is not None:
            return known[1]
        frames = _frames(raw, self.frame_cache, self.frames_cache)
        self.frames_by_ids[ids] = (raw, frames)
        return frames

    def check(self, index: int, raw: Any) -> bool:
        """Whether the raw entry has the shape of one; if not, its problem is recorded."""
        if type(raw) is not dict:
            self.problems.append(f"{self.path}: entry {index}: not a mapping")
            return False
        if "state" not in raw or "record_id" not in raw or "profiling_name" not in raw \
                or "collective_seq_id" not in raw:
            missing = next(key for key in _REQUIRED if key not in raw)
            self.problems.append(f"{self.path}: entry {index}: missing field '{missing}'")
            return False
        return True

    def convert(self, index: int, raw: Any) -> FrEntry | None:
        if not self.check(index, raw):
            return None
        intern = self.interned.setdefault
        try:
            backend, op, peer, name_says_p2p = self.parse_name(raw["profiling_name"])
            pg = self.pg(raw)
            state = raw["state"]
            completed = completion(state, backend, raw)
            is_p2p = raw.get("is_p2p")
            if type(is_p2p) is not bool:
                is_p2p = name_says_p2p
            frames: tuple[Frame, ...] = ()
            if index >= self.frames_from or completed is not True:
                frames = self.frames(raw.get("frames"))
            duration = raw.get("duration_ms")
            timeout = raw.get("timeout_ms")
            thread_name = raw.get("thread_name")
            in_sizes = _shape_list(raw.get("input_sizes"))
            in_types = _str_list(raw.get("input_dtypes"))
            out_sizes = _shape_list(raw.get("output_sizes"))
            out_types = _str_list(raw.get("output_dtypes"))
            return FrEntry(
                int(raw["record_id"]), pg[0], pg[1], int(raw["collective_seq_id"]),
                int(raw.get("p2p_seq_id") or 0), op, backend, is_p2p, str(state), completed,
                intern(in_sizes, in_sizes), intern(in_types, in_types),
                intern(out_sizes, out_sizes), intern(out_types, out_types),
                _time_ns(raw.get("time_created_ns")),
                _time_ns(raw.get("time_discovered_started_ns")),
                _time_ns(raw.get("time_discovered_completed_ns")),
                float(duration) if isinstance(duration, (int, float)) else None,
                timeout if type(timeout) is int else None,
                peer, frames,
                thread_name if thread_name is None or type(thread_name) is str
                else str(thread_name),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            self.problems.append(f"{self.path}: entry {index}: {_clip(str(exc))}")
            return None


def completion(state: Any, backend: str, raw: dict[str, Any]) -> bool | None:
    """Whether the op completed, as the record says (see ``FrEntry.completed``)."""
    if state == "completed":
        return True
    if backend == "gloo":
        # gloo never moves past "scheduled"; a finished (or failed) op is retired.
        retired = raw.get("retired")
        return retired if type(retired) is bool else None
    return False


def _pg_of(raw: dict[str, Any]) -> tuple[str, str]:
    group = raw.get("process_group")
    if isinstance(group, (list, tuple)) and len(group) == 2:
        return str(group[0]), str(group[1])
    if isinstance(group, str):
        return group, ""
    pg_id = raw.get("pg_id")
    if pg_id is None:
        raise ValueError("no 'process_group' or 'pg_id'")
    return str(pg_id), ""


def _parse_profiling_name(name: str) -> tuple[str, str, int | None, bool]:
    """``nccl:send 0->1`` -> ("nccl", "send", 1, True); ``gloo:all_reduce`` -> (.., None, False).

    The peer is group-local, as torch writes it: for a send the destination, for a recv the source.
    """
    backend, sep, rest = name.partition(":")
    if not sep:
        backend, rest = "", name
    op, _, meta = rest.strip().partition(" ")
    peer: int | None = None
    if op == "send" and "->" in meta:
        peer = _int_or_none(meta.split("->", 1)[1])
    elif op == "recv" and "<-" in meta:
        peer = _int_or_none(meta.split("<-", 1)[1])
    return backend, op, peer, op in ("send", "recv")


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _frames(
    raw: Any,
    frame_cache: dict[tuple[Any, Any, Any], Frame],
    frames_cache: dict[tuple[Frame, ...], tuple[Frame, ...]],
) -> tuple[Frame, ...]:
    if not isinstance(raw, list) or not raw:
        return ()
    frames: list[Frame] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        key = (item.get("name"), item.get("filename"), item.get("line"))
        try:
            frame = frame_cache.get(key)
        except TypeError:  # a hostile dump's unhashable value: keyed by what it reads as
            line = key[2]
            key = (str(key[0]), str(key[1]), line if isinstance(line, int) else None)
            frame = frame_cache.get(key)
        if frame is None:
            line = key[2]
            frame = frame_cache[key] = Frame(
                name=str(key[0]), filename=str(key[1]),
                line=line if isinstance(line, int) else None)
        frames.append(frame)
    as_tuple = tuple(frames)
    return frames_cache.setdefault(as_tuple, as_tuple)


def assign_ranks(paths: Iterable[str], prefix: str | None = None) -> dict[int, str]:
    """Map rank -> dump path from file names; one line of error if names clash or say nothing."""
    by_rank: dict[int, str] = {}
    for path in paths:
        rank = rank_from_name(path, prefix)
        if rank is None:
            hint = "pass --prefix" if prefix is None else f"it does not start with {prefix!r}"
            raise BadInputError(path, f"cannot tell which rank this dump belongs to ({hint})")
        other = by_rank.get(rank)
        if other is not None and os.path.realpath(other) != os.path.realpath(path):
            # torch can write both forms for one rank: keep the pickle, which has stack frames.
            if other.endswith(".json") != path.endswith(".json"):
                if other.endswith(".json"):
                    by_rank[rank] = path
                continue
            raise BadInputError(path, f"claims rank {rank}, as does {other}; pass --prefix to "
                                      "choose one naming scheme")
        by_rank[rank] = path
    return by_rank
