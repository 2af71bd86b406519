"""Records a dump says ``completed`` that were not: what the dump itself shows against them.

NCCL's flight recorder calls an op completed when its end CUDA event queries as done. Two cases
seen on an H200 (torch 2.11, NCCL 2.28.9; fixtures/recorded_nccl) where that is wrong, each
told apart by the dump's own fields, so it holds for dumps read postmortem too:

- **Never launched.** torch records the op, then launches it, and only then counts it enqueued
  in ``pg_status``. An unrecorded CUDA event queries as done, so an op whose rank is still inside
  the call (connecting a new group's communicator, blocked on its peers) reads ``completed``. Its
  ``collective_seq_id`` is past its group's ``last_enqueued_collective`` (``pg_status`` is keyed
  by the record's ``pg_id``). Read as ``scheduled``.
- **Ended by the abort.** When the watchdog times an op out it aborts the communicator, and the
  op's kernel ends: its event completes and a later poll marks it completed, never retired. Such
  a record's completion was discovered a whole timeout (its ``timeout_ms``) or more after it was
  created, which no op that finished can show (the watchdog would have timed it out first). Read
  as ``started``: it ran and never finished (two ranks each in a ``recv`` from the other).

Only the newest records can be either, so only the last ``WINDOW`` are looked at; the C reader's
dumps that hold one are unpickled instead (``fr_reduce``), and the records are fixed as dicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WINDOW = 32  # a dump's newest records: the ops still in flight at the dump, one per thread/group


def misread(raw: dict[str, Any], entries: Sequence[Any]) -> list[tuple[int, str, str]]:
    """(index, state to read, why) for each of the newest records that says ``completed``
    against the dump's own fields (see the module docstring)."""
    limits = _launched(raw.get("pg_status"))
    found: list[tuple[int, str, str]] = []
    for index in range(len(entries) - 1, max(len(entries) - WINDOW, 0) - 1, -1):
        record = entries[index]
        if type(record) is not dict or record.get("state") != "completed":
            continue
        name = record.get("profiling_name")
        if type(name) is not str or not name.startswith("nccl:"):
            continue  # gloo never says completed
        is_p2p = record.get("is_p2p") is True or " " in name.strip()
        seq = record.get("collective_seq_id")
        key = _status_key(record)
        if not is_p2p and key in limits and type(seq) is int and seq > limits[key]:
            found.append((index, "scheduled",
                          f"says completed, but pg_status says the group launched nothing past "
                          f"seq {limits[key]}: read as not launched (the rank was still inside "
                          f"that call, e.g. connecting the communicator)"))
            continue
        late = _discovered_after(record)
        timeout = record.get("timeout_ms")
        if record.get("retired") is False and late is not None and type(timeout) is int \
                and timeout > 0 and late >= timeout / 1000:
            found.append((index, "started",
                          f"says completed, {late:.1f} s after it was created, past its "
                          f"{timeout / 1000:g} s timeout, and was never retired: it ended when "
                          f"the watchdog aborted the communicator, read as never finished"))
    return found


def correct(raw: dict[str, Any], entries: list[Any]) -> list[str]:
    """Read the records ``misread`` finds in the state it gives (in place); one note each, for
    the evidence gaps."""
    notes = []
    for index, state, why in misread(raw, entries):
        record = entries[index]
        record["state"] = state
        group = record.get("process_group")
        pg = group[0] if isinstance(group, (list, tuple)) and len(group) == 2 \
            else _status_key(record)
        seq = record.get("p2p_seq_id") if " " in str(record.get("profiling_name")).strip() \
            else record.get("collective_seq_id")
        notes.append(f"record {record.get('record_id')} ({record.get('profiling_name')} seq {seq} "
                     f"of pg {pg}) {why}")
    return notes


def _launched(status: Any) -> dict[str, int]:
    limits: dict[str, int] = {}
    if not isinstance(status, dict):
        return limits
    for pg, fields in status.items():
        if isinstance(fields, dict):
            value = fields.get("last_enqueued_collective")
            if isinstance(value, (int, str)):  # JSON dumps write the counts as strings
                try:
                    limits[str(pg)] = int(value)
                except ValueError:
                    continue
    return limits


def _status_key(record: dict[str, Any]) -> str:
    """The key of a record's group in ``pg_status``: torch keys it by the record's ``pg_id``
    (the group's local id), which need not be the group's name; older dumps lack ``pg_id``."""
    pg_id = record.get("pg_id")
    if type(pg_id) is int or type(pg_id) is str:
        return str(pg_id)
    group = record.get("process_group")
    return str(group[0]) if isinstance(group, (list, tuple)) and len(group) == 2 else ""


def _discovered_after(record: dict[str, Any]) -> float | None:
    """Seconds from the record's creation to the discovery of its completion, if both known."""
    created, done = record.get("time_created_ns"), record.get("time_discovered_completed_ns")
    if type(created) is int and type(done) is int and created > 0 and done > 0:
        return (done - created) / 1e9
    return None
