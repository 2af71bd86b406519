"""The C reader of flight-recorder pickles (``hangscope/_frscan.c``), where it was built.

It reads a dump's opcodes into a compact table, computes the columns :func:`fr_columns.scan`
computes, and makes a record an object only when it is indexed: at 2000 records a dump, the
few the digest keeps whole. Where it was not built (no C compiler at install), or declines a
dump (any form it does not read as the unpickler would), the caller unpickles as before:
answers never depend on it. ``HANGSCOPE_NO_NATIVE=1`` turns it off (benchmarks, checks).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from hangscope.sources.fr_columns import Columns

_frscan: ModuleType | None
try:
    from hangscope import _frscan
except ImportError:  # built without a C compiler: the unpickler reads every dump
    _frscan = None
else:
    Sequence.register(_frscan.Entries)  # type: ignore[union-attr]  # indexable and sized, as the readers use it

ENABLED = _frscan is not None and not os.environ.get("HANGSCOPE_NO_NATIVE")


def read(data: bytes) -> tuple[dict[str, Any], Sequence[Any], Columns] | None:
    """The dump's top level (its ``entries`` the lazy records), its records and their columns;
    None where the C reader is off or leaves this dump to the unpickler."""
    if not ENABLED or _frscan is None or data[:1] != b"\x80":
        return None
    got = _frscan.read(data)
    if got is None:
        return None
    top, entries, (record_ids, seqs, p2p_seqs, created, timed, firsts) = got
    top["entries"] = entries
    return top, entries, Columns(record_ids=record_ids, seqs=seqs, p2p_seqs=p2p_seqs,
                                 timed=timed, created=created, firsts=firsts, int_sizes=True)
